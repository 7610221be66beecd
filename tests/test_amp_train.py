"""The amp-train workload: loss-curve agreement against fp32 on real training runs."""

from __future__ import annotations

import math

import pytest
import torch

from gapbench import devices
from gapbench.workloads import Context, get
from gapbench.workloads.probes import amp_train as amp


@pytest.fixture(autouse=True)
def _one_thread():
    """Behaviour, not speed, is tested: one thread keeps a shared 2-core CI box from stalling OpenMP."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _ctx() -> Context:
    return Context(device=devices.resolve("cpu"), preset="tiny", budget_s=60, min_time_s=0.02, repeats=3)


def _setup(lr: float | None = None):
    p = dict(amp.PRESETS["tiny"], steps=30)
    torch.manual_seed(p["seed"])
    model = amp.build_mlp(p["d_in"], p["hidden"], p["layers"], p["classes"])
    return p, model, amp.teacher_batches(p, torch.device("cpu"))


def test_curve_check_accepts_a_close_curve_and_rejects_divergence():
    ref = [2.0 - 0.02 * i for i in range(50)]
    assert amp.curve_mismatch(list(ref), ref)[0] is None
    close = [v * (1 + 0.003 * (-1) ** i) for i, v in enumerate(ref)]
    err, gaps = amp.curve_mismatch(close, ref)
    assert err is None and 0 < gaps["max_gap_rel_initial"] < amp.CURVE_TOL
    nan = list(ref)
    nan[17] = math.nan
    assert amp.curve_mismatch(nan, ref)[0] == "diverged: loss is nan at step 17"
    drift = [v + 0.2 for v in ref]  # 10% of the initial loss: beyond the 5% tolerance
    err, gaps = amp.curve_mismatch(drift, ref)
    assert err.startswith("loss at step") and gaps["max_gap_rel_initial"] > amp.CURVE_TOL
    assert amp.curve_mismatch(ref[:-1], ref)[0] is not None


def test_real_bf16_and_fp16_curves_agree_with_fp32_and_a_diverging_run_does_not():
    p, model, batches = _setup()
    ref, _ = amp.loss_curve(model, "fp32", batches, "cpu", p["lr"])
    assert ref[-1] < ref[0]
    for prec in ("bf16", "fp16"):
        assert amp.unsupported_reason(prec, devices.resolve("cpu")) == ""
        curve, facts = amp.loss_curve(model, prec, batches, "cpu", p["lr"])
        assert curve != ref  # the mixed precision really ran in lower precision
        assert amp.curve_mismatch(curve, ref)[0] is None
        assert ("final_loss_scale" in facts) == (prec == "fp16")
    blown, _ = amp.loss_curve(model, "bf16", batches, "cpu", 3.0)  # a learning rate that wrecks training
    assert amp.curve_mismatch(blown, ref)[0] is not None


def test_tiny_preset_on_cpu_measures_all_three_precisions():
    w = get("amp-train")
    ctx = _ctx()
    ms = {v.params["precision"]: w.run(v, ctx) for v in w.variants("tiny", ctx)}
    assert set(ms) == {"fp32", "bf16", "fp16"}
    for prec, m in ms.items():
        assert m.ok, (prec, m.reason)
        assert m.unit == "samples/s" and m.value > 0
        assert len(m.metrics["loss_curve"]) == amp.PRESETS["tiny"]["steps"]
    assert ms["fp32"].metrics["final_loss"] < amp.LEARN_RATIO * ms["fp32"].metrics["loss_curve"][0]
    for prec in ("bf16", "fp16"):
        assert ms[prec].metrics["max_gap_rel_initial"] <= amp.CURVE_TOL
        assert ms[prec].metrics["speedup_vs_fp32"] > 0
    assert ms["fp16"].metrics["skipped_steps"] >= 0


def test_a_task_that_cannot_be_learned_fails_the_fp32_reference():
    saved = dict(amp.PRESETS["tiny"])
    amp.PRESETS["tiny"]["lr"] = 0.0  # nothing moves: the fp32 loss cannot fall
    try:
        w = get("amp-train")
        ctx = _ctx()
        m = w.run(w.variants("tiny", ctx)[0], ctx)
    finally:
        amp.PRESETS["tiny"].clear()
        amp.PRESETS["tiny"].update(saved)
    assert m.status == "wrong_result" and "did not learn" in m.reason
