"""The speed part of gapbench assess: rates read from real results files with known values, a traced step whose
predicted time and gap are computed here by hand, the interval, the overlap rule of accelerators, collectives,
what is missing, and predicted against measured."""

from __future__ import annotations

import math

import pytest

from gapbench import results
from gapbench.assess.rates import platform_rates, sigma_of
from gapbench.assess.speed import predict
from gapbench.assess.work import Item, Work
from gapbench.results import Measurement, ResultSet
from gapbench.stats import Stats


def _stats(v: float, lo: float | None = None, hi: float | None = None) -> Stats:
    lo, hi = lo if lo is not None else v, hi if hi is not None else v
    return Stats(median=v, iqr=0.0, min=lo, max=hi, n=7, ci95=(lo, hi), mean=v, stdev=0.0)


def _m(workload: str, variant: dict, value: float, unit: str, hib: bool = True, **kw) -> Measurement:
    return Measurement(workload=workload, variant=variant, value=value, unit=unit, higher_is_better=hib,
                       stats=kw.pop("stats", _stats(value)), **kw)


def rates_file(path, *, gemm_tflops: float, per_op_us: float, device_type: str = "cpu", extra=(), launch=True) -> str:
    ms = [_m("gemm", {"dtype": "fp32", "m": 64, "n": 64, "k": 64}, gemm_tflops, "TFLOP/s"),
          _m("gemm", {"dtype": "fp32", "m": 1024, "n": 1024, "k": 1024}, gemm_tflops * 10, "TFLOP/s"),
          _m("membw", {"kernel": "copy", "dtype": "fp32", "elements": 1000}, 10.0, "GB/s", bytes=8000.0),
          _m("membw", {"kernel": "triad", "dtype": "fp32", "elements": 10**8}, 1.0, "GB/s", bytes=1.2e9)]
    if launch:
        ms += [_m("launch", {"kind": "train"}, per_op_us, "us", hib=False),
               _m("launch", {"kind": "infer"}, per_op_us / 2, "us", hib=False)]
    rs = ResultSet(host={}, device={"type": device_type, "product": f"{device_type} {gemm_tflops}"},
                   measurements=ms + list(extra))
    results.save(rs, path)
    return str(path)


def step_work(collective: bool = False) -> Work:
    items = [Item("aten.mm.default", "gemm", "fp32", "forward", 1e6, 1e3, (50, 60, 70), 10),
             Item("aten.add.Tensor", "memory", "fp32", "backward", 0.0, 1e5, None, 20),
             Item("aten.t.default", "view", "fp32", "forward", 0.0, 0.0, None, 5)]
    if collective:
        items.append(Item("_c10d_functional.all_reduce.default", "collective", "fp32", "backward", 0.0, 1e6, None, 2))
    return Work("llm-train:x", items, dtype="fp32", variant={"model": "x", "dtype": "fp32"})


# by hand: 35 calls × per-operator time + 10 GEMMs of 1e6 FLOP at the 64³ row's rate (the nearest shape to
# 50×60×70; their 1 kB each at 10 GB/s is less) + 20 element-wise calls of 100 kB at the 8 kB row's 10 GB/s
SOURCE_S = 35 * 10e-6 + 10 * 1e6 / 1e9 + 20 * 1e5 / 10e9     # 10.55 ms
TARGET_S = 35 * 5e-6 + 10 * 1e6 / 2e9 + 20 * 1e5 / 10e9      # 5.375 ms


def test_gap_by_hand_and_its_interval(tmp_path):
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10)))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5)))
    p, missing = predict([(step_work(), a), (step_work(), b)], model_sigma=0.0)  # the rates' noise alone
    assert not missing
    assert p.source.step_s == pytest.approx(SOURCE_S) and p.target.step_s == pytest.approx(TARGET_S)
    assert p.gap_pct == pytest.approx((SOURCE_S / TARGET_S - 1) * 100)      # +96.3%
    classes = {c.cls: c for c in p.source.classes}
    assert classes["gemm"].seconds == pytest.approx(10e-3) and classes["gemm"].rates == ("gemm fp32 64x64x64",)
    assert classes["overhead"].seconds == pytest.approx(350e-6) and classes["overhead"].calls == 35
    assert classes["memory"].bytes == pytest.approx(2e6)
    # rates without spread of their own: the interval is each side's 8% CPU run-to-run spread, √2 of it on the gap
    half = 1.96 * 0.08 * math.sqrt(2)
    ratio = SOURCE_S / TARGET_S
    assert p.lo == pytest.approx((ratio * math.exp(-half) - 1) * 100, abs=3)
    assert p.hi == pytest.approx((ratio * math.exp(half) - 1) * 100, abs=5)
    assert p.source.lo < SOURCE_S < p.source.hi
    # seeded: the same inputs give the same interval
    again, _ = predict([(step_work(), a), (step_work(), b)], model_sigma=0.0)
    assert (again.lo, again.hi) == (p.lo, p.hi)


def test_the_same_results_file_on_both_sides_has_no_gap_and_no_spread(tmp_path):
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10)))
    p, _ = predict([(step_work(), a), (step_work(), a)])
    assert p.gap_pct == 0 and p.lo == pytest.approx(0, abs=1e-9) and p.hi == pytest.approx(0, abs=1e-9)


def test_an_accelerator_overlaps_operator_issue_with_work(tmp_path):
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10)))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5,
                                               device_type="test")))
    p, _ = predict([(step_work(), a), (step_work(), b)])
    assert not p.target.synchronous
    assert p.target.step_s == pytest.approx(max(35 * 5e-6, 10 * 1e6 / 2e9 + 20 * 1e5 / 10e9))


def test_rates_own_intervals_widen_the_gap_interval(tmp_path):
    wide = _m("gemm", {"dtype": "fp32", "m": 64, "n": 64, "k": 64}, 0.002, "TFLOP/s", stats=_stats(0.002, 0.001, 0.004))
    assert sigma_of(wide) == pytest.approx(math.log(4) / (2 * 1.959964), rel=1e-4)
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10)))
    narrow = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5)))
    b_file = tmp_path / "c.json"
    rs = results.load(rates_file(b_file, gemm_tflops=0.002, per_op_us=5))
    rs.measurements[0] = wide
    results.save(rs, b_file)
    p1, _ = predict([(step_work(), a), (step_work(), narrow)], model_sigma=0.0)
    p2, _ = predict([(step_work(), a), (step_work(), platform_rates(results.load(b_file)))], model_sigma=0.0)
    assert p2.gap_pct == pytest.approx(p1.gap_pct)
    assert p2.hi - p2.lo > 1.3 * (p1.hi - p1.lo)


def test_nearest_shape_among_fixed_rows_and_sweep_probes(tmp_path):
    sweep = _m("gemm", {"dtype": "bf16", "sweep": "max"}, 0.005, "TFLOP/s", metrics={
        "best_m": 512, "best_n": 512, "best_k": 512, "sweep": [{"m": 256, "n": 256, "k": 256, "tflops": 0.003},
                                                               {"m": 512, "n": 512, "k": 512, "tflops": 0.004}],
        "finalists": [{"m": 512, "n": 512, "k": 512, "tflops": 0.004, "tflops_full": 0.005}]})
    pr = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10, extra=[sweep])))
    assert pr.gemm_rate("fp32", (50, 60, 70)).m == 64
    assert pr.gemm_rate("fp32", (900, 2000, 800)).m == 1024
    p = pr.gemm_rate("bf16", (200, 300, 250))
    assert (p.m, p.rate.value, p.rate.source) == (256, 0.003e12, "gemm bf16 256x256x256 (sweep probe)")
    p = pr.gemm_rate("bf16", (600, 500, 480))
    assert p.rate.value == 0.005e12 and "finalist" in p.rate.source     # the full timing, not the short probe
    assert pr.gemm_rate("fp16", (64, 64, 64)) is None
    assert pr.bandwidth_at(1e5).rate.value == 10e9 and pr.bandwidth_at(1e9).rate.value == 1e9


def test_convolution_at_its_own_measured_rate(tmp_path):
    rows = [_m("conv", {"dtype": "fp32", "batch": 2, "c_in": 32, "c_out": 32, "hw": 64, "kernel": 3, "pass": p},
               v, "TFLOP/s") for p, v in (("forward", 0.002), ("backward", 0.001))]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10, extra=rows)))
    assert a.conv_rate("fp32", False, (8000, 30, 300)).m == 2 * 64 * 64
    work = Work("x", [Item("aten.convolution.default", "conv", "fp32", "forward", 2e6, 1e3, (8000, 30, 300), 2),
                      Item("aten.convolution_backward.default", "conv", "fp32", "backward", 4e6, 1e3, (8000, 30, 300),
                           1)])
    p, _ = predict([(work, a), (work, a)])
    # 2 × 2 MFLOP at 2 GFLOP/s forward + 4 MFLOP at 1 GFLOP/s backward, and 3 operator calls
    assert p.source.step_s == pytest.approx(2e-3 + 4e-3 + 3 * 10e-6)


def test_attention_at_its_own_measured_rate(tmp_path):
    def att(pas: str, seq: int, tflops: float) -> Measurement:
        return _m("attention", {"dtype": "fp32", "batch_heads": 16, "seq": seq, "head_dim": 64, "pass": pas}, tflops,
                  "TFLOP/s")

    rows = [att("forward", 128, 0.004), att("forward", 1024, 0.008), att("backward", 128, 0.002)]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10, extra=rows)))
    work = Work("x", [Item("aten._scaled_dot_product_flash_attention_for_cpu.default", "attention", "fp32", "forward",
                           4e6, 1e3, (16, 100, 64), 3),
                      Item("aten._scaled_dot_product_flash_attention_for_cpu_backward.default", "attention", "fp32",
                           "backward", 1e7, 1e3, (16, 100, 64), 3)])
    p, missing = predict([(work, a), (work, a)])
    assert not missing
    # 3 forward calls of 4 MFLOP at the seq-128 forward row's 4 GFLOP/s, 3 backward of 10 MFLOP at 2 GFLOP/s
    assert {c.cls: c.seconds for c in p.source.classes}["attention"] == pytest.approx(3 * 1e-3 + 3 * 5e-3)
    assert p.source.step_s == pytest.approx(18e-3 + 6 * 10e-6)
    fp16 = Work("x", [Item("aten._scaled_dot_product_flash_attention_for_cpu.default", "attention", "fp16",
                           "forward", 4e6, 1e3, (16, 100, 64), 1)])
    _, missing = predict([(fp16, a), (fp16, a)])
    assert missing == ["cpu 0.001: no fp16 forward attention rows (attention)"]


def test_collectives_at_the_message_size(tmp_path):
    coll = [_m("collective", {"op": "all_reduce", "mode": "in-place", "bytes": size, "dtype": "fp32", "ranks": 2},
               bw, "GB/s", metrics={"algbw_gbps": bw}) for size, bw in ((4096, 0.01), (1048576, 1.0))]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10, extra=coll)))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5, extra=coll)))
    p, _ = predict([(step_work(collective=True), a), (step_work(collective=True), b)])
    # 2 all_reduce calls of 1 MB at the 1 MiB row's 1 GB/s: 2 ms more on each side, and two more operator calls
    assert p.source.step_s == pytest.approx(SOURCE_S + 2e-3 + 2 * 10e-6)
    assert {c.cls: c.rates for c in p.target.classes}["collective"] == ("collective all_reduce 1048576 B, 2 ranks",)


def test_what_a_results_file_lacks_is_said_not_filled_in(tmp_path):
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10)))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5, launch=False)))
    p, missing = predict([(step_work(collective=True), a), (step_work(), b)])
    assert p is None
    assert "cpu 0.001: no collective rows for _c10d_functional.all_reduce.default" in missing
    assert "cpu 0.002: no per-operator time (launch, kind=train)" in missing
    bf16 = Work("x", [Item("aten.mm.default", "gemm", "bf16", "forward", 1e6, 1e3, (64, 64, 64), 1)])
    _, missing = predict([(bf16, a), (bf16, a)])
    assert "cpu 0.001: no bf16 GEMM rows (gemm)" in missing


def test_predicted_against_measured(tmp_path):
    def row(tokens_per_s: float, seconds: float) -> Measurement:
        return _m("llm-train", {"model": "x", "dtype": "fp32"}, tokens_per_s, "tokens/s",
                  metrics={"category": "model", "time_per_iter_s": seconds})

    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[row(100_000, 0.010)])))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5,
                                               extra=[row(200_000, 0.005)])))
    p, _ = predict([(step_work(), a), (step_work(), b)])
    m = p.measured
    assert m.measured_s == (0.010, 0.005) and m.measured_gap.pct == pytest.approx(100.0)
    assert m.error_pp == pytest.approx((SOURCE_S / TARGET_S - 1) * 100 - 100)          # −3.7 pp
    assert m.step_error_pct == pytest.approx(((SOURCE_S / 0.010 - 1) * 100, (TARGET_S / 0.005 - 1) * 100))
    other = Work("llm-train:x", step_work().items, variant={"model": "x", "dtype": "bf16"})
    p, _ = predict([(other, a), (other, b)])
    assert p.measured is None and "no llm-train:x row with the traced variant" in p.measured_note


def test_two_rows_of_one_session_are_judged_without_the_drift_between_sessions(tmp_path):
    """fp32 against bf16 measured in the same interleaved passes of one file: the runs' own spread is the interval;
    the same runs in two files carry the drift between two sessions that no number of runs averages away."""
    fp32 = [2.13, 2.17, 2.11, 2.13, 2.01, 2.04, 2.06, 2.16, 2.21, 2.28]
    bf16 = [3.68, 3.72, 3.59, 3.56, 3.49, 3.43, 3.91, 3.87, 3.78, 3.78]

    def row(dtype: str, runs: list[float]) -> Measurement:
        return _m("llm-train", {"model": "x", "dtype": dtype}, sorted(runs)[len(runs) // 2], "steps/s", runs=runs,
                  metrics={"category": "model"})

    both = results.load(rates_file(tmp_path / "one.json", gemm_tflops=0.001, per_op_us=10,
                                   extra=[row("fp32", fp32), row("bf16", bf16)]))
    work = {d: Work("llm-train:x", step_work().items, dtype=d, variant={"model": "x", "dtype": d})
            for d in ("fp32", "bf16")}
    same, _ = predict([(work["fp32"], platform_rates(both)), (work["bf16"], platform_rates(both))])
    g = same.measured.measured_gap
    assert g.pct == pytest.approx(72.8, abs=0.5) and g.hi - g.lo < 15      # about ±6.6 pp
    apart = results.load(rates_file(tmp_path / "two.json", gemm_tflops=0.001, per_op_us=10,
                                    extra=[row("bf16", bf16)]))
    other, _ = predict([(work["fp32"], platform_rates(both)), (work["bf16"], platform_rates(apart))])
    h = other.measured.measured_gap
    assert h.pct == pytest.approx(g.pct) and h.hi - h.lo > 2.5 * (g.hi - g.lo)
