"""A run's --budget is a promise: past it (and its grace) the variant running is stopped, nothing starts again,
and every variant left says why it has no number."""

from __future__ import annotations

import os
import time
from pathlib import Path

from conftest import gapbench
from gapbench.results import load
from gapbench.run.workload import budget_grace

FIXTURES = Path(__file__).parent / "fixtures"


def test_grace_is_a_tenth_of_the_budget_within_bounds():
    assert (budget_grace(2), budget_grace(300), budget_grace(3600)) == (5.0, 30.0, 60.0)


def test_a_variant_that_outlasts_the_run_budget_is_stopped_and_the_rest_say_why(tmp_path):
    out = tmp_path / "r.json"
    t0 = time.monotonic()
    # the second variant sleeps a minute; its own hard limit (three times its budget plus 30 s) is far later
    r = gapbench("run", "--device", "cpu", "--workload-file", FIXTURES / "faulty_workloads.py", "-w", "faulty:slow",
                 "-w", "gemm:tiny", "--budget", "2", "--output", out, "--no-history", "-q",
                 env={**os.environ, "FAULTY_HOLD": "1"}, timeout=120)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    rows = {(m.workload, m.variant.get("i")): m for m in load(out).measurements}
    assert rows[("faulty", 0)].status == "ok"
    stopped = rows[("faulty", 1)]
    assert stopped.status == "timeout" and "--budget of 2 s was spent" in stopped.reason, stopped.reason
    for i in range(2, 6):
        assert rows[("faulty", i)].status == "too_slow" and "not started" in rows[("faulty", i)].reason
    gemm = rows[("gemm", None)]
    assert gemm.status == "too_slow" and gemm.reason == "not started: the run's --budget of 2 s was spent"
    # 2 s of budget and 5 s of grace, with start-up on a loaded 2-core host; far below the 60 s sleep
    assert took < 45, took
