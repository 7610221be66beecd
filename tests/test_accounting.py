"""FLOP and byte accounting of the micro-benchmarks, against hand-computed values."""

from gapbench.devices import resolve
from gapbench.workloads import get
from gapbench.workloads.base import Context


def _ctx(preset, **opts):
    return Context(device=resolve("cpu"), preset=preset, budget_s=5, min_time_s=0.01, repeats=3, options=opts)


def test_gemm_flops_are_2mnk_and_bytes_count_inputs_and_output():
    w = get("gemm")
    vs = {(v.params["dtype"], v.params.get("m")): v for v in w.variants("tiny", _ctx("tiny"))}
    v = vs[("fp32", 256)]
    assert v.flops == 2 * 256 * 256 * 256
    assert v.bytes == (256 * 256 * 2) * 4 + 256 * 256 * 4
    v = vs[("bf16", 256)]
    assert v.bytes == (256 * 256 * 2) * 2 + 256 * 256 * 2
    v = vs[("int8", 256)]
    assert v.bytes == (256 * 256 * 2) * 1 + 256 * 256 * 4  # int32 output
    v = vs[("fp8", 64)]  # the tiny preset's fp8 shape (torch's CPU scaled matmul is a slow reference loop)
    assert v.flops == 2 * 64 * 64 * 64
    assert v.bytes == (64 * 64 * 2) * 1 + 64 * 64 * 2  # bf16 output


def test_membw_bytes_follow_babelstream_weights():
    w = get("membw")
    vs = {v.params["kernel"]: v for v in w.variants("tiny", _ctx("tiny"))}
    n = vs["copy"].params["elements"]
    assert n == 1 << 20
    weights = {"copy": 2, "scale": 2, "add": 3, "triad": 3, "dot": 2}
    for kernel, arrays in weights.items():
        assert vs[kernel].bytes == arrays * n * 4, kernel
    assert vs["triad"].flops == 2 * n and vs["copy"].flops == 0


def test_membw_array_size_defeats_the_last_level_cache():
    ctx = _ctx("quick")
    w = get("membw")
    n = w.variants("quick", ctx)[0].params["elements"]
    assert n * 4 >= min(4 * ctx.device.llc_bytes, ctx.device.free_memory() // 12) - 4096


def test_gemm_throughput_value_is_flops_over_median_time():
    w = get("gemm")
    ctx = _ctx("tiny", dtype="fp32")
    v = w.variants("tiny", ctx)[0]
    m = w.run(v, ctx)
    assert m.ok, m.reason
    t = m.metrics["time_per_iter_s"]
    assert m.value == m.stats.median
    assert abs(m.value - v.flops / t * 1e-12) / m.value < 0.35  # median of rates vs rate of median time
