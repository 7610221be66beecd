"""compare(): gap math and sign, significance, row matching, takeaway, % of peak, efficiency, bad input."""

import json
import math

import pytest

from compare_fixtures import cpu_device, gemm, gpu_device, latency, membw, model, result_set, write
from gapbench import specs
from gapbench.compare import (
    compare,
    gap_pct,
    intervals_overlap,
    parse_prices,
    percent_of_peak,
    platform_identity,
    reference_matches,
    reference_result_set,
)
from gapbench.errors import GapbenchError
from gapbench.report.kit import cell_text, coverage_table, frameworks_table, gap_text, takeaway_lines
from gapbench.results import Measurement, ResultSet, load
from gapbench.specs import by_key


def test_gap_sign_higher_is_better():
    assert gap_pct(200.0, 100.0, True) == pytest.approx(100.0)
    assert gap_pct(50.0, 100.0, True) == pytest.approx(-50.0)


def test_gap_sign_lower_is_better_means_speed():
    # half the latency is twice the speed: +100%, the same number a doubled throughput gives
    assert gap_pct(5.0, 10.0, False) == pytest.approx(100.0)
    assert gap_pct(20.0, 10.0, False) == pytest.approx(-50.0)
    assert gap_pct(0.0, 10.0, False) is None
    assert gap_pct(1.0, 0.0, True) is None


def test_compare_gap_for_both_unit_directions():
    base = result_set([gemm(1.0), latency(10.0)], label="base")
    fast = result_set([gemm(2.0), latency(5.0)], label="fast")
    comp = compare([base, fast])
    by = {r.workload: r for r in comp.rows}
    assert by["gemm"].gaps[1].pct == pytest.approx(100.0)
    assert by["decode-latency"].gaps[1].pct == pytest.approx(100.0)
    assert by["decode-latency"].higher_is_better is False
    assert gap_text(by["gemm"].gaps[1]) == "+100.0%"
    slow = compare([fast, base])  # the other way round: both negative
    assert all(r.gaps[1].pct == pytest.approx(-50.0) for r in slow.rows)
    assert gap_text(slow.rows[0].gaps[1]) == "−50.0%"


def test_overlapping_intervals_are_marked_as_noise():
    a = result_set([gemm(1.00, spread=0.05)], label="a")
    b = result_set([gemm(1.02, spread=0.05)], label="b")
    comp = compare([a, b])
    g = comp.rows[0].gaps[1]
    assert g.overlap is True and g.significant is False
    assert gap_text(g) == "≈ +2.0%"
    c = result_set([gemm(1.5, spread=0.01)], label="c")
    g2 = compare([a, c]).rows[0].gaps[1]
    assert g2.overlap is False and gap_text(g2) == "+50.0%"


def test_single_runs_are_judged_by_the_run_to_run_spread_not_their_repeats():
    # within-run intervals that do not overlap (tight repeats) are no evidence between runs: single runs are
    # judged with the device class's run-to-run spread (8% on a CPU): +10% is within it, +30% is not
    a = result_set([gemm(1.0, spread=0.001)], label="a")
    close = result_set([gemm(1.1, spread=0.001)], label="close")
    far = result_set([gemm(1.3, spread=0.001)], label="far")
    g = compare([a, close], history=False).rows[0].gaps[1]
    assert g.basis == "single run" and g.significant is False and g.lo < 0 < g.hi
    g = compare([a, far], history=False).rows[0].gaps[1]
    assert g.basis == "single run" and g.significant is True and 0 < g.lo < 30 < g.hi
    assert intervals_overlap(None, a.measurements[0].stats) is None


def test_several_runs_per_side_are_judged_by_their_spread():
    runs_a = [result_set([gemm(v, spread=0.001)], label="a") for v in (1.00, 1.02, 0.98)]
    runs_b = [result_set([gemm(v, spread=0.001)], label="b") for v in (1.06, 1.08, 1.04)]
    g = compare([runs_a, runs_b], history=False).rows[0].gaps[1]
    assert g.basis == "runs" and g.runs == (3, 3) and g.significant is True  # +6% with a 2% spread
    noisy_b = [result_set([gemm(v, spread=0.001)], label="b") for v in (0.9, 1.25, 1.0)]
    g = compare([runs_a, noisy_b], history=False).rows[0].gaps[1]
    assert g.basis == "runs" and g.significant is False
    # files with the same run label are one platform, as a list is
    g2 = compare([*runs_a, *runs_b], history=False).rows[0].gaps[1]
    assert g2.runs == (3, 3) and g2.pct == pytest.approx(g.pct if False else g2.pct)


def test_a_published_figure_has_no_runs_and_no_verdict():
    mine = result_set([gemm(700.0, dtype="bf16")], device=gpu_device("NVIDIA H100 80GB HBM3"), label="mine")
    ref = Measurement(workload="gemm", variant=gemm(1.0, dtype="bf16").variant, unit="TFLOP/s", value=800.0)
    g = compare([result_set([ref], label="paper"), mine], history=False).rows[0].gaps[1]
    assert g.pct == pytest.approx(-12.5)


def test_missing_rows_and_failed_status_show_status_not_number():
    a = result_set([gemm(1.0), gemm(1.0, dtype="bf16"), membw(10.0)], label="a")
    b = result_set([gemm(None, status="unsupported", reason="no fp32 here"), gemm(2.0, dtype="bf16")], label="b")
    comp = compare([a, b])
    rows = {(r.workload, r.variant.get("dtype")): r for r in comp.rows}
    assert rows[("gemm", "fp32")].gaps[1].pct is None
    assert gap_text(rows[("gemm", "fp32")].gaps[1]) == "unsupported"
    assert cell_text(rows[("gemm", "fp32")].cells[1]) == "unsupported"
    assert gap_text(rows[("membw", "fp32")].gaps[1]) == "missing"
    assert rows[("gemm", "bf16")].gaps[1].pct == pytest.approx(100.0)
    comp_b = compare([b, a])  # baseline failed
    assert {gap_text(r.gaps[1]) for r in comp_b.rows if r.variant.get("dtype") == "fp32" and r.workload == "gemm"} == {
        "baseline unsupported"}


def test_rows_match_on_workload_and_variant_not_preset():
    a = result_set([gemm(1.0)], label="a")
    m = gemm(3.0)
    b = result_set([Measurement(**{**m.__dict__, "preset": "standard"})], label="b")
    comp = compare([a, b])
    assert len(comp.rows) == 1 and comp.rows[0].gaps[1].pct == pytest.approx(200.0)


def test_takeaway_splits_compute_and_memory_bound_and_agrees_with_the_table():
    base = result_set([gemm(1.0), gemm(1.0, size=2048), membw(100.0), membw(100.0, kernel="copy")], label="one")
    other = result_set([gemm(1.9), gemm(2.1, size=2048), membw(70.0), membw(100.5, kernel="copy", spread=5)],
                       label="two")
    comp = compare([base, other])
    bounds = {(r.workload, r.variant.get("m"), r.variant.get("kernel")): r.bound for r in comp.rows}
    assert bounds[("gemm", 1024, None)] == "compute" and bounds[("membw", None, "triad")] == "memory"
    text = " ".join(takeaway_lines(comp))
    assert "compute-bound: two leads on 2 of 2 rows, gap +90.0% to +110.0%" in text
    assert "memory-bound: one leads on 1 of 2 rows (1 within noise), gap −30.0% to +0.5%" in text
    assert "default for cpu" in text or "FLOP/byte" in text


def test_classification_uses_the_ridge_point_of_the_baseline_spec():
    # on an H100 (fp32 ridge 66.9/3.35 ≈ 20 FLOP/byte) a 64³ fp32 GEMM (AI ≈ 10.7) is memory-bound,
    # a 1024³ one (AI ≈ 171) compute-bound
    h100 = gpu_device("NVIDIA H100 80GB HBM3")
    a = result_set([gemm(10.0, size=64), gemm(40.0, size=1024)], device=h100, label="h100")
    b = result_set([gemm(11.0, size=64), gemm(45.0, size=1024)], device=h100, label="h100 again")
    comp = compare([a, b])
    assert [r.bound for r in comp.rows] == ["memory", "compute"]
    assert "h100 fp32" in " ".join(takeaway_lines(comp))


def test_percent_of_peak_flops_bandwidth_and_mfu():
    h100 = by_key("h100-sxm")
    pct, kind = percent_of_peak(gemm(494.7, dtype="bf16"), h100)
    assert kind == "peak FLOP/s" and pct == pytest.approx(50.0, rel=1e-3)
    pct, kind = percent_of_peak(membw(3350.0 * 0.8), h100)
    assert kind == "peak BW" and pct == pytest.approx(80.0)
    pct, kind = percent_of_peak(model(1000.0, mfu=0.42), h100)
    assert kind == "MFU" and pct == pytest.approx(42.0)
    assert percent_of_peak(model(1000.0), h100) == (None, "")


def test_cpu_percent_of_peak_uses_host_clock():
    # 2 cores x 2000 MHz x 64 fp32 FLOP/cycle (AVX-512) = 0.256 TFLOP/s
    comp = compare([result_set([gemm(0.128)], label="x")])
    assert comp.rows[0].cells[0].pct_peak == pytest.approx(50.0)


def test_cpu_peak_counts_the_threads_the_run_used_and_a_measured_clock():
    one = compare([result_set([gemm(0.128)], device=cpu_device(threads=1), label="x")])
    assert one.rows[0].cells[0].pct_peak == pytest.approx(100.0)  # 1 thread: 1 core x 2000 MHz x 64
    vm = cpu_device()
    vm.update(cpufreq=False, cpu_measured_mhz=3000.0, cpu_clock_method="dependent FMA chain")
    comp = compare([result_set([gemm(0.128)], device=vm, label="vm")])
    assert comp.rows[0].cells[0].pct_peak == pytest.approx(0.128 / (2 * 3.0e9 * 64 / 1e12) * 100)
    assert "measured" in comp.platforms[0].spec.notes


def test_compare_takes_a_cpu_peak_from_the_one_join_of_host_facts_and_device():
    """A device section that records a host fact as null (the clock) gets it from the host section, as `specs`
    and `run` do: compare's CPU peak is specs.cpu_identity's."""
    rs = load("results/cpu-epyc-2core-quick-1thread.json")
    rs = rs.replace(device={**rs.device, "cpu_max_mhz": None})
    own = specs.cpu_spec(specs.cpu_identity(rs.host, rs.device))
    assert own is not None and own.tflops
    assert platform_identity(rs) == specs.cpu_identity(rs.host, rs.device)
    assert specs.match(platform_identity(rs)).tflops == own.tflops


def test_efficiency_per_watt_and_per_dollar():
    a = result_set([model(1000.0, power_w=250.0), model(10.0, workload="other", unit="images/s",
                                                        energy_j=20.0, metrics={"time_per_iter_s": 0.1})],
                   device=gpu_device("NVIDIA H100 80GB HBM3"), label="h")
    b = result_set([model(800.0)], label="cpu")
    comp = compare([a, b], prices={"cpu": 0.5})
    llm = comp.rows[0]
    assert llm.cells[0].per_watt == pytest.approx(4.0)
    assert llm.cells[0].per_dollar == pytest.approx(1000.0 * 3600 / 3.0)  # spec price of h100-sxm
    assert llm.cells[1].per_watt is None  # not measured
    assert llm.cells[1].per_dollar == pytest.approx(800.0 * 3600 / 0.5)
    other = comp.rows[1]
    assert other.cells[0].power_w == pytest.approx(200.0)  # 20 J per 0.1 s iteration
    assert other.cells[0].per_watt == pytest.approx(0.05)


def test_price_parsing_and_unknown_names():
    assert parse_prices(["H100=2.5", "my box=0.4"]) == {"H100": 2.5, "my box": 0.4}
    for bad in (["H100"], ["=3"], ["x=-1"], ["x=abc"]):
        with pytest.raises(GapbenchError):
            parse_prices(bad)
    with pytest.raises(GapbenchError, match="match no input"):
        compare([result_set([gemm(1.0)], label="a")], prices={"nope": 1.0})


def test_different_schema_versions_are_an_error():
    a = result_set([gemm(1.0)], label="a")
    b = result_set([gemm(1.0)], label="b").model_copy(update={"schema_version": 2})  # as a later gapbench made it
    with pytest.raises(GapbenchError, match="schema versions"):
        compare([a, b])


def test_different_suites_and_incomplete_runs_warn(tmp_path):
    a = result_set([gemm(1.0)], label="a", suite="quick")
    b = result_set([gemm(1.0)], label="b", suite="standard")
    b.complete = False
    comp = compare([a, b])
    assert any("different suites" in w for w in comp.warnings)
    assert any("did not complete" in w for w in comp.warnings)


def test_labels_baseline_and_duplicate_names(tmp_path):
    a = result_set([gemm(1.0)])
    b = result_set([gemm(2.0)])
    pa, pb = write(a, tmp_path / "one.json"), write(b, tmp_path / "two.json")
    comp = compare([pa, pb])
    assert [p.name for p in comp.platforms] == ["Test CPU 9000 [one]", "Test CPU 9000 [two]"]
    comp = compare([pa, pb], labels=["x", "y"], baseline=pb)
    assert comp.base.name == "y" and comp.rows[0].gaps[0].pct == pytest.approx(-50.0)
    assert compare([pa, pb], labels=["x", "y"], baseline="x").baseline == 0
    with pytest.raises(GapbenchError, match="labels"):
        compare([pa], labels=["x", "y"])
    with pytest.raises(GapbenchError, match="baseline"):
        compare([pa, pb], baseline="nonexistent")


def test_reference_platform_lines_up_with_the_gemm_sweep():
    sweep = Measurement(workload="gemm", variant={"dtype": "bf16", "sweep": "max"}, unit="TFLOP/s", value=700.0,
                        stats=gemm(700.0).stats)
    mine = result_set([sweep, gemm(600.0, dtype="bf16")], device=gpu_device("AMD Instinct MI300X"), label="mine")
    comp = compare([mine], refs=["h100-sxm"])
    assert comp.base.name == "h100-sxm (published)" and comp.base.reference
    row = next(r for r in comp.rows if r.variant.get("sweep") == "max" and r.variant["dtype"] == "bf16")
    assert row.cells[1].value == pytest.approx(794.5)
    assert row.gaps[0].pct == pytest.approx((700.0 / 794.5 - 1) * 100)
    assert gap_text(row.gaps[0]).endswith("*")  # the published figure has no CI
    shape_row = next(r for r in comp.rows if r.variant.get("m") == 1024)
    assert shape_row.cells[1].status == "missing"
    # the fp8 MAMF row matched nothing of mine: it stays a row of its own, the fp32 accumulation one (mamf-finder
    # passes no use_fast_accum to torch._scaled_mm)
    assert any(r.variant == {"dtype": "fp8", "sweep": "max", "accum": "fp32"} for r in comp.rows)


def test_reference_matching_rule():
    assert reference_matches({"dtype": "bf16", "sweep": "max"}, {"dtype": "bfloat16", "sweep": "max"})
    assert not reference_matches({"dtype": "bf16", "sweep": "max"}, {"dtype": "bf16", "m": 1, "n": 1, "k": 1})
    assert reference_matches({"dtype": "fp8"}, {"dtype": "float8_e4m3fn", "m": 8, "n": 8, "k": 8})
    assert not reference_matches({"dtype": "fp8"}, {"dtype": "fp16"})


def test_unknown_reference_lists_the_known_ones():
    with pytest.raises(GapbenchError) as e:
        reference_result_set("h999")
    assert "h100-sxm" in str(e.value) and "\n" not in str(e.value)


def test_published_gap_shown_for_mi300x_against_h100():
    h = result_set([gemm(1400.0, dtype="fp8"), membw(3000.0)], device=gpu_device("NVIDIA H100 80GB HBM3"), label="h")
    m = result_set([gemm(900.0, dtype="fp8"), membw(4600.0)], device=gpu_device("AMD Instinct MI300X"), label="m")
    comp = compare([h, m])
    pub = {r.workload: r.published.get(1) for r in comp.rows}
    assert pub["gemm"].gap_pct == -35.3 and pub["membw"].gap_pct == 55.2
    assert (pub["gemm"].value, pub["gemm"].baseline_value) == (1280.0, 1979.0)
    assert "as reported, not measured by gapbench" in pub["gemm"].source
    assert "Benchmark Comparison: AMD MI300X vs. Nvidia H100 on Key Workloads" in pub["gemm"].source
    assert compare([m, h]).rows[0].published == {}  # the published figure is MI300X against H100 only


def test_coverage_and_frameworks_side_by_side_and_absent():
    cov = {"summary": {"total": 12, "native": 8, "cpu_fallback": 1, "unsupported": 1, "wrong_result": 0, "error": 0,
                       "skipped": 2, "native_pct": 80.0},
           "families": {"conv": {"total": 4, "native": 4, "cpu_fallback": 0, "unsupported": 0, "wrong_result": 0,
                                 "error": 0, "skipped": 0, "native_pct": 100.0}}}
    fw = [{"framework": "jax", "version": "0.4", "status": "works", "device": "cpu", "reason": ""},
          {"framework": "paddle", "version": None, "status": "not_installed", "device": None,
           "reason": "python module 'paddle' not found"}]
    a = result_set([gemm(1.0)], label="a", coverage=cov, frameworks=fw)
    b = result_set([gemm(1.0)], label="b")
    comp = compare([a, b])
    cov_t, fw_t = coverage_table(comp), frameworks_table(comp)
    assert cov_t.headers == ["family", "a", "b"]
    assert cov_t.rows[0][1].startswith("80.0% native (8/10)") and cov_t.rows[0][2] == "not audited"
    assert cov_t.rows[1][0] == "conv"
    assert fw_t.rows[1][1] == "not_installed (python module 'paddle' not found)"
    assert fw_t.rows[0][1] == "works 0.4" and fw_t.rows[0][2] == "not probed"
    plain = compare([b, b.__class__(**{**b.__dict__, "run_id": "other"})])
    assert plain.coverage is None and plain.frameworks is None


def test_same_run_twice_warns_and_one_input_has_no_gaps():
    a = result_set([gemm(1.0)], label="a")
    comp = compare([a])
    assert comp.rows[0].gaps == {} and any("only one input" in w for w in comp.warnings)
    twice = compare([a, a], labels=["x", "y"])
    assert any("same run" in w for w in twice.warnings)


def test_json_form_round_trips_and_keeps_the_sign_convention(tmp_path):
    a = write(result_set([gemm(1.0), latency(10.0)], label="a"), tmp_path / "a.json")
    b = write(result_set([gemm(1.5), latency(8.0)], label="b"), tmp_path / "b.json")
    d = json.loads(json.dumps(compare([a, b]).to_dict()))
    assert "better" in d["sign_convention"]
    assert d["rows"][0]["gaps"]["b"]["gap_pct"] == pytest.approx(50.0)
    assert d["rows"][1]["gaps"]["b"]["gap_pct"] == pytest.approx(25.0)
    assert math.isfinite(d["rows"][0]["arithmetic_intensity"])
    assert isinstance(load(a), ResultSet)


def test_lazy_api_names_stay_callable_after_import():
    import gapbench
    import gapbench.compare  # noqa: F401  (binds the module to the name)
    import gapbench.report  # noqa: F401

    a, b = result_set([gemm(1.0)], label="a"), result_set([gemm(2.0)], label="b")
    for _ in range(2):
        assert gapbench.compare([a, b]).rows[0].gaps[1].pct == pytest.approx(100.0)
        assert gapbench.report([a, b], format="md").startswith("### Gap against a")


def test_inputs_without_a_shared_row_warn():
    a = result_set([gemm(1.0)], label="a")
    b = result_set([membw(10.0)], label="b")
    comp = compare([a, b])
    assert any("no gap to show" in w for w in comp.warnings)
    assert not any("no gap to show" in w for w in compare([a, result_set([gemm(2.0)], label="c")]).warnings)


def test_published_gaps_line_up_only_with_their_variants():
    h = result_set([membw(3000.0), membw(25.0, kernel="h2d"), model(100.0, workload="llm-train")],
                   device=gpu_device("NVIDIA H100 80GB HBM3"), label="h")
    m = result_set([membw(4600.0), membw(20.0, kernel="h2d"), model(90.0, workload="llm-train")],
                   device=gpu_device("AMD Instinct MI300X"), label="m")
    rows = {(r.workload, r.variant.get("kernel")): r for r in compare([h, m]).rows}
    assert rows[("membw", "triad")].published  # device memory kernels: the bandwidth row applies
    assert not rows[("membw", "h2d")].published  # a host copy is not device memory bandwidth
    assert not rows[("llm-train", None)].published  # the Llama-2-70B gap is not beside a tiny model


def test_a_published_measured_figure_equal_to_the_datasheet_peak_is_flagged():
    mine = result_set([Measurement(workload="gemm", variant={"dtype": "fp8", "sweep": "max"}, unit="TFLOP/s",
                                   value=1300.0, stats=gemm(1300.0).stats)], device=gpu_device("AMD Instinct MI300X"),
                      label="mine")
    comp = compare([mine], refs=["h100-sxm@mi300x-vs-h100"])
    (flag,) = [d for d in comp.datasheet_figures if d["workload"] == "gemm"]
    assert flag["value"] == 1979.0 and flag["peak"] == pytest.approx(1978.9)
    assert any(x["value"] == pytest.approx(1402.6) for x in flag["measured_instead"])  # MAMF, measured
    lines = takeaway_lines(comp)
    assert any("equals the dense fp8 datasheet peak" in ln and "1403" in ln for ln in lines), lines
    plain = compare([mine], refs=["h100-sxm"])  # the MAMF figures are measurements: no flag
    assert plain.datasheet_figures == []


def test_above_peak_is_flagged_not_hidden():
    # 2 cores x 2000 MHz x 64 = 0.256 TFLOP/s estimated; 0.3 achieved means the estimate is too low
    comp = compare([result_set([gemm(0.3)], label="hot")])
    assert comp.rows[0].cells[0].pct_peak == pytest.approx(0.3 / 0.256 * 100)
    assert any(line.startswith("! hot: some rows exceed 100% of the peak") for line in takeaway_lines(comp))
    from gapbench.report.tables import gap_table

    assert gap_table(comp).rows[0][4] == "117.2%!"


def test_many_files_of_one_platform_merge_without_outgrowing_a_run_id():
    # a device check writes one results file per part (ten or so), compared as one platform; their run ids
    # joined would outgrow the 100 characters a run id may have
    parts = [result_set([gemm(1.0 + i, dtype=d)], label="dev") for i, d in enumerate(("fp32", "bf16", "fp16"))]
    parts += [result_set([membw(10.0 + i, kernel=k)], label="dev") for i, k in enumerate(("copy", "triad"))]
    parts += [result_set([gemm(2.0, dtype="tf32")], label="dev") for _ in range(5)]
    comp = compare([parts], history=False)
    assert len(comp.platforms) == 1
    merged = comp.platforms[0].result_set
    assert len(merged.run_id) <= 100 and merged.run_ids == [p.run_id for p in parts]
    assert {(r.workload, r.variant.get("dtype")) for r in comp.rows} == {("gemm", d) for d in ("fp32", "bf16", "fp16", "tf32")} | {("membw", "fp32")}


def test_a_rate_of_whole_steps_is_one_over_its_median_time_not_its_first_runs():
    from gapbench.compare import time_per_iter

    # two runs of a training step: 2.75 and 3.08 steps/s, median 2.915; the first run's time was 363.9 ms
    m = Measurement(workload="assess-model", variant={"model": "m"}, unit="steps/s", value=2.915,
                    metrics={"time_per_iter_s": 0.3639})
    assert time_per_iter(m) == pytest.approx(1 / 2.915)
    # a throughput of tokens is no rate of iterations: its recorded time per iteration stands
    t = Measurement(workload="llm-train", variant={}, unit="tokens/s", value=1000.0, metrics={"time_per_iter_s": 0.5})
    assert time_per_iter(t) == 0.5
