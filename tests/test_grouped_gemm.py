"""Grouped GEMMs (torch._grouped_mm, the experts of a mixture-of-experts layer): the workload measures and checks
them on the CPU, a trace counts their FLOPs per group and layout, and assess prices them at the grouped rate of
their layout — never at the dense GEMM's, and not at all (said so) where a results file has no grouped rows."""

from __future__ import annotations

import pytest
import torch
from tests.test_assess_speed import _m, rates_file

from gapbench import results
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import predict
from gapbench.assess.work import Work, WorkRecorder
from gapbench.devices import resolve
from gapbench.engine.variant import run_variant
from gapbench.workloads import get
from gapbench.workloads.base import Context

pytestmark = pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="this torch has no torch._grouped_mm")


def _ctx(preset="tiny"):
    return Context(device=resolve("cpu"), preset=preset, budget_s=5, min_time_s=0.01, repeats=3, options={})


def test_tiny_grouped_gemm_runs_and_is_checked_on_the_cpu():
    w = get("grouped-gemm")
    ctx = _ctx()
    rows = [run_variant(w, v, ctx) for v in w.variants("tiny", ctx)]
    assert {r.variant["dtype"] for r in rows} == {"fp32", "bf16", "fp16"}
    fp32 = next(r for r in rows if r.variant["dtype"] == "fp32")
    assert fp32.ok and fp32.value > 0 and fp32.variant == {"dtype": "fp32", "groups": 2, "m": 32, "n": 32, "k": 32,
                                                           "layout": "rows"}


@pytest.mark.parametrize("layout", ["rows", "k"])
def test_the_check_finds_a_wrong_group(layout):
    from gapbench.workloads.base import Variant

    w = get("grouped-gemm")
    v = Variant({"dtype": "fp32", "groups": 3, "m": 16, "n": 8, "k": 12, "layout": layout})
    op = w.build(v, _ctx())
    assert op.check() == ""
    good = op.fn

    def last_group_off():
        out = good().clone()
        (out[-16:] if layout == "rows" else out[-1]).mul_(1.01)
        return out

    op.fn = last_group_off
    assert "group 2" in op.check()


def _moe_step(tokens=64, groups=4, k=32, n=48):
    """A mixture-of-experts layer's forward and backward through torch._grouped_mm."""
    x = torch.randn(tokens, k, requires_grad=True)
    w = torch.randn(groups, n, k).transpose(-2, -1).requires_grad_(True)
    offs = torch.arange(1, groups + 1, dtype=torch.int32) * (tokens // groups)

    def step():
        out = torch._grouped_mm(x, w, offs=offs)
        out.backward(torch.ones(out.shape))

    return step


def test_a_traced_grouped_matmul_is_a_gemm_per_group_with_its_layout():
    rec = WorkRecorder()
    step = _moe_step()
    with rec:
        step()
    work = rec.work("moe")
    grouped = [i for i in work.items if i.op == "aten._grouped_mm.default"]
    forward = next(i for i in grouped if i.phase == "forward")
    assert forward.cls == "gemm" and forward.groups == 4 and forward.layout == "rows"
    assert forward.shape == (16, 48, 32) and forward.flops == 2 * 64 * 32 * 48
    # the backward's weight gradient splits the shared (token) dimension: one (k, n) product per group
    assert {i.layout for i in grouped if i.phase == "backward"} == {"rows", "k"}
    assert all(i.flops == 2 * 64 * 32 * 48 for i in grouped)


def _grouped_rows(tflops: float) -> list:
    return [_m("grouped-gemm", {"dtype": "fp32", "groups": 4, "m": 16, "n": 48, "k": 32, "layout": layout},
               tflops, "TFLOP/s") for layout in ("rows", "k")]


def test_assess_prices_grouped_calls_at_the_grouped_rate_and_says_when_it_has_none(tmp_path):
    rec = WorkRecorder()
    with rec:
        _moe_step()()
    work = rec.work("moe")
    grouped = [i for i in work.items if i.groups]
    work = Work("moe", grouped, dtype="fp32")  # the grouped calls alone: their time is the prediction's work
    slow = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=1.0, per_op_us=1e-6,
                                                  extra=_grouped_rows(0.001))))
    fast = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=1.0, per_op_us=1e-6,
                                                  extra=_grouped_rows(0.004))))
    pred, missing = predict([(work, slow), (work, fast)])
    assert missing == []
    flops = sum(i.flops * i.count for i in grouped)
    gemm = next(c for c in pred.source.classes if c.cls == "gemm")
    assert gemm.seconds == pytest.approx(flops / 1e9)  # 0.001 TFLOP/s, not the dense 1 TFLOP/s
    assert pred.gap_pct == pytest.approx(300.0, rel=1e-3)
    none = platform_rates(results.load(rates_file(tmp_path / "c.json", gemm_tflops=1.0, per_op_us=1e-6)))
    pred, missing = predict([(work, slow), (work, none)])
    assert pred is None and any("no fp32 grouped GEMM rows (grouped-gemm)" in m for m in missing)
