"""Verdicts you can bet on: runs as samples, the host watch, honest maxima, intervals with their real coverage,
model rows end-to-end, the run-to-run spread the history measured."""

import json
import subprocess
import sys
import time

import pytest

from compare_fixtures import cpu_device, gemm, model, result_set
from conftest import gapbench
from gapbench import history
from gapbench.compare import compare
from gapbench.results import Measurement, load, merge_runs
from gapbench.stats import Stats, compare_runs, median_ci_level


def test_intervals_below_six_samples_carry_their_real_coverage():
    s = Stats.from_samples([1.0, 2.0, 3.0])
    assert s.ci95 == (1.0, 3.0) and s.ci_level == pytest.approx(0.75)
    assert median_ci_level(5) == pytest.approx(0.9375) and median_ci_level(6) >= 0.95
    assert Stats.read(s.model_dump(mode="json")).ci_level == pytest.approx(0.75)
    from gapbench.report.kit import stats_text

    assert stats_text(2.0, s) == "2 [1, 3] 75%"
    assert stats_text(2.0, Stats.from_samples([1, 2, 3, 4, 5, 6])) == "2 [1, 6]"


def test_welch_interval_on_log_values():
    g = compare_runs([2.0, 2.2, 1.8], [1.0, 1.1, 0.9])
    assert g.basis == "runs" and g.ratio == pytest.approx(2.0, rel=0.01) and g.significant
    assert compare_runs([1.0, 1.05], [1.02, 0.98]).significant is False
    single = compare_runs([1.5], [1.0], allowance=0.08)
    assert single.basis == "allowance" and single.significant
    assert compare_runs([1.1], [1.0], allowance=0.08).significant is False
    assert compare_runs([1.0], [1.0]) is None  # one run each and no spread: no verdict


def test_merged_runs_keep_every_run_and_their_failures():
    runs = [[gemm(v)] for v in (1.0, 1.2, 0.9)]
    runs.append([Measurement(workload="gemm", variant=gemm(1.0).variant, unit="TFLOP/s", status="crashed",
                             reason="worker killed")])
    (m,) = merge_runs(runs)
    assert m.ok and m.runs == [1.0, 1.2, 0.9] and m.value == 1.0 and m.stats.n == 3
    assert m.metrics["failed_runs"][0]["status"] == "crashed"


@pytest.mark.slow
def test_run_with_runs_writes_every_pass_and_compare_judges_by_them(tmp_path):
    out = tmp_path / "r.json"
    p = gapbench("run", "--device", "cpu", "-w", "gemm:tiny", "--dtype", "fp32", "--variant-budget", "1",
                 "--min-time", "0.01", "--repeats", "3",  # short repeats: what counts here is the three runs
                 "--runs", "3", "--no-history", "-q", "-o", out, env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr
    rs = load(out)
    (m,) = rs.measurements
    assert m.ok and len(m.runs) == 3 and m.stats.n == 3 and len(m.metrics["run_stats"]) == 3
    assert rs.options["runs"] == 3
    g = compare([rs, rs.__class__(**{**rs.__dict__, "run_id": "other", "label": "again"})],
                history=False).rows[0].gaps[1]
    assert g.basis == "runs" and g.runs == (3, 3)


@pytest.mark.slow
def test_the_sweep_is_never_below_a_fixed_row_of_its_dtype(tmp_path):
    out = tmp_path / "s.json"
    p = gapbench("run", "--device", "cpu", "-w", "gemm:quick", "--dtype", "fp32", "--variant-budget", "4",
                 "--min-time", "0.01", "--repeats", "3",  # the sweep keeps the better of its best and the fixed row
                 "--no-history", "-q", "-o", out, env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr
    rows = {json.dumps(m.variant, sort_keys=True): m for m in load(out).measurements}
    fixed = rows[json.dumps({"dtype": "fp32", "k": 1024, "m": 1024, "n": 1024}, sort_keys=True)]
    sweep = rows[json.dumps({"dtype": "fp32", "sweep": "max"}, sort_keys=True)]
    assert fixed.ok and sweep.ok
    assert sweep.value >= fixed.value
    assert sweep.metrics["best_from"] in ("sweep", "fixed-shape row of this run")
    assert len(sweep.metrics["finalists"]) >= 2 and all("tflops_full" in f for f in sweep.metrics["finalists"])


@pytest.mark.slow
def test_the_host_watch_flags_a_run_next_to_a_cpu_burner(tmp_path):
    burn = "import time\nt = time.time() + 60\nwhile time.time() < t: pass\n"
    burners = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(2)]
    try:
        time.sleep(0.5)
        out = tmp_path / "busy.json"
        p = gapbench("run", "--device", "cpu", "-w", "gemm:tiny", "--dtype", "fp32", "--variant-budget", "2",
                     "--no-history", "-q", "-o", out, "--threads", "1", env={"OMP_NUM_THREADS": "1"})
    finally:
        for b in burners:
            b.kill()
            b.wait()
    assert p.returncode == 0, p.stderr
    (m,) = load(out).measurements
    assert m.flagged, m.host_watch
    assert any(r.startswith("host busy: other processes took") for r in m.host_watch["reasons"])
    assert m.host_watch["other_cpus"] > 0.5
    # compare calls no gap significant when a side is flagged, unless allowed

    quiet = result_set([m.replace(value=m.value * 3, host_watch=None)], label="quiet")
    busy = result_set([m], label="busy")
    g = compare([busy, quiet], history=False).rows[0].gaps[1]
    assert g.significant is None and "host busy" in g.flagged
    assert compare([busy, quiet], history=False, allow_flagged=True).rows[0].gaps[1].significant is True


@pytest.mark.slow
def test_a_throttled_device_is_flagged(tmp_path):
    out = tmp_path / "t.json"
    p = gapbench("run", "--device", "test", "-w", "gemm:tiny", "--dtype", "fp32", "--variant-budget", "1",
                 "--min-time", "0.01", "--repeats", "3",  # the flag comes from the device's telemetry, not the numbers
                 "--no-history", "-q", "-o", out, env={"GAPBENCH_TEST_ACCELERATOR_THROTTLE": "thermal slowdown"})
    assert p.returncode == 0, p.stderr
    (m,) = load(out).measurements
    assert m.flagged and "device throttled: thermal slowdown" in m.host_watch["reasons"]


def test_model_rows_are_end_to_end_not_compute_bound():
    m = model(100.0, metrics={"category": "model"})
    m2 = Measurement(**{**m.__dict__, "flops": 1e12, "bytes": 1e6})
    comp = compare([result_set([m2], label="a"), result_set([m2], label="b")], history=False)
    assert comp.rows[0].bound == "other"


def test_single_runs_use_the_spread_the_history_measured(tmp_path, monkeypatch):
    db = tmp_path / "h.sqlite"
    monkeypatch.setenv("GAPBENCH_DB", str(db))
    for i, v in enumerate((1.0, 1.01, 0.99, 1.0)):
        history.record(result_set([gemm(v)], label="past", run_id=f"past{i}"), db)
    a = result_set([gemm(1.0)], label="a", run_id="a")
    b = result_set([gemm(1.06)], label="b", run_id="b")
    tight = compare([a, b]).rows[0].gaps[1]
    loose = compare([a, b], history=False).rows[0].gaps[1]
    assert tight.basis == loose.basis == "single run"
    assert tight.significant is True and loose.significant is False  # 1% measured spread against the 8% default
    assert (tight.hi - tight.lo) < (loose.hi - loose.lo)
    assert cpu_device()["threads"] == 2  # the history matched on the thread count too


def test_runs_of_one_file_are_widened_by_the_drift_between_sessions():
    # three tight runs a side, 10% apart: within one session that is far outside the noise, but two files are two
    # sessions, and a CPU's runs move about 8% between sessions (its allowance) — not a verdict to bet on
    assert compare_runs([1.1, 1.12, 1.08], [1.0, 1.02, 0.98]).significant
    assert not compare_runs([1.1, 1.12, 1.08], [1.0, 1.02, 0.98], allowance=0.08).significant
    assert compare_runs([1.1, 1.12, 1.08], [1.0, 1.02, 0.98], allowance=0.08, drift=0.0).significant
    assert compare_runs([2.2, 2.24, 2.16], [1.0, 1.02, 0.98], allowance=0.08).significant  # 2x stays a verdict
    # the ratio is that of the geometric means, (0.5/8.4)^(1/3), not the medians' 0.5: one stalled run moves it,
    # and widens the interval by more than it moves it: no verdict on this 2x gap (a stalled run hides, not invents)
    stalled = compare_runs([1.0, 0.5, 1.0], [2.0, 2.0, 2.1])
    assert stalled.ratio == pytest.approx((0.5 / 8.4) ** (1 / 3)) and not stalled.significant


def test_a_platform_of_several_files_carries_the_drift_in_its_own_spread(tmp_path):
    from compare_fixtures import gemm, result_set
    from gapbench.compare import compare

    one_a = result_set([gemm(1.0, runs=[1.0, 1.02, 0.98])], label="a")
    one_b = result_set([gemm(1.1, runs=[1.1, 1.12, 1.08])], label="b")
    g = compare([one_a, one_b], history=False).rows[0].gaps[1]
    assert g.runs == (3, 3) and g.significant is False  # one file a side: the CPU's drift is added
    files_a = [result_set([gemm(v)], label="a") for v in (1.0, 1.02, 0.98)]
    files_b = [result_set([gemm(v)], label="b") for v in (1.1, 1.12, 1.08)]
    g = compare([files_a, files_b], history=False).rows[0].gaps[1]
    assert g.runs == (3, 3) and g.significant is True  # three sessions a side: their spread is the drift
