"""The dynamic-shapes workload: the padded stream computes the same thing, recompiles are counted."""

from __future__ import annotations

import pytest
import torch

from gapbench import devices
from gapbench.workloads import Context, get
from gapbench.workloads.probes import dynamic_shapes as ds


@pytest.fixture(autouse=True)
def _one_thread():
    """Behaviour, not speed, is tested: one thread keeps a shared 2-core CI box from stalling OpenMP."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _ctx() -> Context:
    return Context(device=devices.resolve("cpu"), preset="tiny", budget_s=120, min_time_s=0.02, repeats=3)


def test_shape_stream_is_fixed_and_includes_batch_one():
    p = ds.PRESETS["tiny"]
    s1 = ds.shape_stream(p["items"], p["batches"], p["min_len"], p["max_len"], p["seed"])
    s2 = ds.shape_stream(p["items"], p["batches"], p["min_len"], p["max_len"], p["seed"])
    assert s1 == s2 and len(s1) == p["items"]
    assert any(b == 1 for b, _ in s1)
    assert all(p["min_len"] <= t <= p["max_len"] and b in p["batches"] for b, t in s1)


def test_padded_and_masked_block_computes_the_same_tokens_and_a_perturbed_output_is_caught():
    torch.manual_seed(0)
    block = ds.Block(32, 4, 64).eval()
    xs = [torch.randn(b, t, 32) for b, t in [(2, 5), (1, 9), (3, 7)]]
    with torch.no_grad():
        refs = [block(x) for x in xs]
        padded, slices = ds.padded_inputs(xs, 32)
        assert {tuple(x.shape) for x, _ in padded} == {(3, 9, 32)}
        outs = [block(x, m) for x, m in padded]
    assert ds.outputs_mismatch(outs, refs, slices) is None
    outs[1] = outs[1].clone()
    outs[1][0, 4, 0] += 0.05
    assert "call 1" in ds.outputs_mismatch(outs, refs, slices)
    # without the mask the padding leaks into attention: the check must notice
    with torch.no_grad():
        unmasked = [block(x) for x, _ in padded]
    assert ds.outputs_mismatch(unmasked, refs, slices) is not None


def test_eager_variants_report_tokens_per_s_and_the_padding_ratio():
    w = get("dynamic-shapes")
    ctx = _ctx()
    vs = [v for v in w.variants("tiny", ctx) if v.params["mode"] == "eager"]
    padded, varying = (w.run(v, ctx) for v in vs)
    assert padded.ok and varying.ok, (padded.reason, varying.reason)
    assert padded.unit == "tokens/s" and varying.value > 0
    assert 0 < padded.metrics["padding_efficiency"] < 1
    assert varying.metrics["speedup_vs_padded"] == pytest.approx(varying.value / padded.value)


def _compiled_varying(backend: str | None):
    w = get("dynamic-shapes")
    ctx = _ctx()
    if backend:
        ctx.options["compile_backend"] = backend
    v = next(v for v in w.variants("tiny", ctx) if v.params["mode"] == "compile" and v.params["shapes"] == "varying")
    return w.run(v, ctx)


def _check_recompile_accounting(m):
    p = ds.PRESETS["tiny"]
    stream = ds.shape_stream(p["items"], p["batches"], p["min_len"], p["max_len"], p["seed"])
    assert m.ok, m.reason
    assert m.metrics["dynamic"] is True
    assert m.metrics["compile_events"] == m.metrics["recompiles"] + 1
    # torch.compile specialises batch 1: when the stream does not start with it, meeting it recompiles
    if stream[0][0] != 1:
        assert [1, next(t for b, t in stream if b == 1)] in m.metrics["recompile_at_shapes"]
    assert m.metrics["recompiles"] >= 1
    assert len(m.metrics["recompile_s"]) == m.metrics["recompiles"]
    assert m.metrics["first_call_s"] > m.metrics["steady_call_s"][0]
    assert m.metrics["recompiles_during_timing"] == 0


def test_recompiles_are_counted_with_a_cheap_backend():
    m = _compiled_varying("aot_eager")
    assert m.variant["backend"] == "aot_eager"
    _check_recompile_accounting(m)


def test_an_unknown_compile_backend_is_an_error_not_a_crash():
    m = _compiled_varying("no-such-backend")
    assert m.status == "error" and "torch.compile failed" in m.reason


@pytest.mark.slow
def test_compiled_dynamic_variant_with_inductor_counts_the_batch_one_recompile():
    m = _compiled_varying(None)
    if m.status == "unsupported":
        pytest.skip(m.reason)  # no C++ toolchain for inductor here
    assert m.variant["backend"] == "inductor"
    _check_recompile_accounting(m)
    assert m.metrics["compile_first_s"] > 0
