"""GEMM rows at a model step's own shapes: `gemm:listed --gemm-shapes`, refused without shapes or with a bad
one before anything runs; assess names the step's shapes a side has no row near, and stops naming them once a
listed row is there, and takes a row measured cold over a hot one at the same shape; a cold-cache timing keeps to its
budget however long the flush takes."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from tests.test_assess_speed import _m, rates_file, step_work

from gapbench import results
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import unmeasured_gemm
from gapbench.devices import resolve
from gapbench.timing import Budget, CacheFlusher, time_fn


def _gapbench(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gapbench", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_listed_measures_exactly_the_shapes_given(tmp_path):
    out = tmp_path / "listed.json"
    p = _gapbench("run", "--device", "cpu", "-w", "gemm:listed", "--gemm-shapes", "48x40x32,48×40×32,16x8x24",
                  "--dtype", "fp32", "--no-history", "--variant-budget", "1", "--repeats", "3", "-o", str(out),
                  cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())["measurements"]
    assert [(r["variant"]["m"], r["variant"]["n"], r["variant"]["k"]) for r in rows] == [(48, 40, 32), (16, 8, 24)]
    assert all(r["status"] == "ok" and r["variant"]["dtype"] == "fp32" for r in rows)


def test_listed_without_shapes_or_with_a_bad_one_is_one_line_and_exit_2(tmp_path):
    for extra, said in (((), "none were given"), (("--gemm-shapes", "48x40"), "'48x40' is not a GEMM shape"),
                        (("--gemm-shapes", "0x4x4"), "each of M, N and K must be 1 to")):
        out = tmp_path / "never.json"
        p = _gapbench("run", "--device", "cpu", "-w", "gemm:listed", *extra, "--no-history", "-o", str(out),
                      cwd=tmp_path)
        assert p.returncode == 2 and said in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and not out.exists()


def test_assess_names_the_shapes_a_side_has_no_row_near(tmp_path):
    work = step_work()  # one GEMM shape, 50x60x70, 10 calls
    far = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=1)))
    assert unmeasured_gemm(work, far) == ((("fp32", "50x60x70"),), 1.0)
    listed = [_m("gemm", {"dtype": "fp32", "m": 50, "n": 60, "k": 70}, 0.001, "TFLOP/s")]
    near = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.001, per_op_us=1,
                                                  extra=listed)))
    assert unmeasured_gemm(work, near) == ((), 0.0)


def test_a_row_measured_cold_is_taken_over_a_hot_one_at_the_same_shape(tmp_path):
    hot = _m("gemm", {"dtype": "bf16", "m": 512, "n": 384, "k": 512}, 1.4, "TFLOP/s")
    cold = _m("gemm", {"dtype": "bf16", "m": 512, "n": 384, "k": 512}, 0.6, "TFLOP/s",
              metrics={"cache_flush_bytes": 1 << 28})
    near_hot = _m("gemm", {"dtype": "bf16", "m": 512, "n": 384, "k": 500}, 1.5, "TFLOP/s")
    pr = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=1,
                                                extra=[hot, cold, near_hot])))
    at = pr.gemm_rate("bf16", (512, 384, 512))
    assert at.cold and at.rate.value == pytest.approx(0.6e12)
    assert at.rate.source == "gemm bf16 512x384x512 (cold cache)"
    # the nearest shape first: a hot row at the shape itself before a cold one farther off
    assert pr.gemm_rate("bf16", (512, 384, 500)).rate.value == pytest.approx(1.5e12)
    # without a cold row, the hot one (a file measured before the cold rows prices as it did)
    only_hot = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.001, per_op_us=1,
                                                      extra=[hot])))
    assert not only_hot.gemm_rate("bf16", (512, 384, 512)).cold


def test_a_cold_cache_timing_counts_the_flush_in_its_budget():
    dev = resolve("cpu")
    budget = Budget(seconds=1.0, min_time_s=0.05, repeats=5)
    timing = time_fn(lambda: None, dev, budget, flush_cache=True, measure_energy=False)
    assert timing.cache_flush_bytes and len(timing.samples) >= budget.min_repeats
    # each flush overwrites twice the last-level cache (on a large one, tens of ms): planned for, not ignored.
    # The plan is judged by the flushes it made, each costing at least the fastest flush seen here, not by the
    # test's wall clock (other tests share the cores): an empty call alone would plan thousands of them.
    flusher = CacheFlusher(dev)
    fastest = min(_seconds(flusher) for _ in range(5))
    flushes = timing.iterations * len(timing.samples)
    assert flushes * fastest < 2 * budget.seconds, (flushes, fastest)


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0
