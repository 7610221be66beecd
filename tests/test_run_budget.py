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


def test_the_rows_of_one_point_share_its_budget_and_the_share_is_of_points():
    from gapbench.engine.variant import MIN_VARIANT_BUDGET_S, variant_budgets

    deadline = time.monotonic() + 30.0
    got = list(variant_budgets(["a", "a", "a", "b", "b", "b"], 100.0, deadline))
    assert got[0] == got[1] == got[2] and got[3] == got[4] == got[5]
    assert 14.0 < got[0] <= 15.0 and 14.0 < got[3] <= 30.0  # two points share 30 s, not six rows
    alone = list(variant_budgets([None] * 6, 100.0, time.monotonic() + 30.0))
    assert 4.0 < alone[0] <= 5.0  # variants without a point are a point each
    assert list(variant_budgets(["a", "a"], 3.0, None)) == [3.0, 3.0]  # no deadline: the cap
    assert list(variant_budgets(["a"], 3.0, time.monotonic() - 1)) == [MIN_VARIANT_BUDGET_S]


def test_llm_infer_rows_of_one_generation_are_one_point():
    from gapbench import devices
    from gapbench.workloads import Context
    from gapbench.workloads import get as get_workload

    w = get_workload("llm-infer")
    ctx = Context(device=devices.resolve("cpu"), preset="tiny", budget_s=10.0, min_time_s=0.01, repeats=3,
                  options=w.options())
    vs = w.variants("tiny", ctx)
    points = [w.point_of(v.params) for v in vs]
    assert len(set(points)) < len(vs)  # every metric of a generation is a row of its point
    for a, b in zip(vs, points, strict=True):
        assert b == w.point_of({**a.params, "metric": "ttft_ms"})
