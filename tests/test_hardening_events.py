"""The event channel is read like a results file: every event a worker sends its parent is typed and bounded, and
held to the job it was started for. A bad event fails the variant that was running, in one line, and the run
goes on. Real child processes write the events (a few lines of Python, or a workload file under `gapbench run`)."""

import json
import sys
import textwrap
import time

import pytest

from conftest import gapbench
from gapbench.engine.channel import split_events
from gapbench.engine.jobs import WorkloadJob
from gapbench.engine.supervise import Child
from gapbench.results import load, variant_key
from gapbench.run.workload import Reporter, run_workload

W, P = "evil", "p"
A, B = {"mode": "a"}, {"mode": "b"}
KA, KB = variant_key(W, P, A), variant_key(W, P, B)


def row(variant, value=2.0, workload=W, preset=P):
    return {"workload": workload, "preset": preset, "variant": variant, "status": "ok", "value": value,
            "unit": "calls/s"}


HELLO = {"event": "hello", "pid": 1, "device": {"type": "cpu"}}
VARIANTS = {"event": "variants", "total": 2, "todo": 2, "keys": [KA, KB], "variants": [A, B], "unit": "calls/s"}
START_A = {"event": "start", "key": KA, "variant": A, "budget_s": 0.5}
START_B = {"event": "start", "key": KB, "variant": B, "budget_s": 0.5}
RESULT_A = {"event": "result", "key": KA, "measurement": row(A)}
RESULT_B = {"event": "result", "key": KB, "measurement": row(B)}
DONE = {"event": "done"}


def worker_writing(lines, linger_s=0.0):
    """A launcher whose worker writes these events (dicts, or raw bytes) on its channel, then lingers."""
    data = b"".join(x if isinstance(x, bytes) else json.dumps(x).encode() + b"\n" for x in lines)
    code = textwrap.dedent(f"""
        import os, sys, time
        fd = os.open(os.environ["GAPBENCH_EVENTS"], os.O_WRONLY | os.O_APPEND)
        data = sys.stdin.buffer.read()
        for i in range(0, len(data), 1 << 16):
            os.write(fd, data[i:i + (1 << 16)])
        time.sleep({linger_s})
    """)

    def launch(job, timeout_s, on_event):
        with Child([sys.executable, "-c", code], payload=data) as child:
            return child.follow(timeout_s, on_event)

    return launch


def rows_of(lines, *, linger_s=0.0, timeout_s=None, **job):
    """The rows run_workload records for one worker that writes `lines` (a restart writes nothing and exits), by
    their variant's mode and their workload."""
    return {(m.variant.get("mode"), m.workload): m for m in rows_in_order(lines, linger_s, timeout_s, **job)}


def rows_in_order(lines, linger_s=0.0, timeout_s=None, **job):
    got = []
    first = [True]
    script = worker_writing(lines, linger_s)
    quiet = worker_writing([])

    def launch(j, t, on_event):
        if first[0]:
            first[0] = False
            return script(j, t, on_event)
        return quiet(j, t, on_event)

    j = WorkloadJob(workload=W, device="cpu", preset=P, variant_budget_s=0.5, **job)
    run_workload(j, launch, timeout_s=timeout_s, reporter=Reporter(), on_result=got.append)
    return got


def test_a_well_behaved_worker_is_read_as_it_was_written():
    got = rows_of([HELLO, VARIANTS, START_A, RESULT_A, START_B, RESULT_B, DONE])
    assert {k: (m.status, m.value) for k, m in got.items()} == {("a", W): ("ok", 2.0), ("b", W): ("ok", 2.0)}


BAD = {
    # a NaN timeout would reach select(): the budget is a positive finite number within the job's
    "budget a string NaN": ([START_A | {"budget_s": "NaN"}], "'start' event (budget_s: input should be a valid number"),
    "budget a NaN": ([b'{"event": "start", "key": "x", "budget_s": NaN}\n'], "malformed event"),
    "budget negative": ([START_A | {"budget_s": -1}], "budget_s: input should be greater than 0"),
    "budget infinite": ([b'{"event": "start", "key": "x", "budget_s": 1e400}\n'], "budget_s: input should be a finite"),
    "budget beyond the job's": ([START_A | {"budget_s": 1e6}], "more than the 0.5 s the job allows"),
    "start not announced": ([START_A | {"key": "x"}], "'start' event for 'x', which was not announced"),
    "start twice": ([START_A, START_A], "while 'evil:p:{\"mode\":\"a\"}' has no result"),
    "result before any start": ([RESULT_A], "'result' event for 'evil:p:{\"mode\":\"a\"}' while no variant was started"),
    "result for another workload": ([START_A, {"event": "result", "key": variant_key("gemm", "tiny", {"m": 1}),
                                               "measurement": row({"m": 1}, 1e30, "gemm", "tiny")}],
                                    "for workload 'gemm' from a worker of evil"),
    "result for the variant not running": ([START_A, RESULT_B], "while 'evil:p:{\"mode\":\"a\"}' was running"),
    "result whose key is not its row's": ([START_A, RESULT_A | {"measurement": row(B)}], "which is not its measurement"),
    "result for another preset": ([START_A, RESULT_A | {"measurement": row(A, preset="q")}],
                                  "which is not its measurement"),
    "result that breaks the schema": ([START_A, RESULT_A | {"measurement": row(A, -1.0)}],
                                      "'result' event (measurement.value: an ok measurement needs a value above 0"),
    # between variants, the next one is blamed (and a restarted worker goes on after it)
    "result with a number no double holds": ([START_A, RESULT_A | {"measurement": row(A) | {"stats": {
        "median": 10**400, "iqr": 0, "min": 1, "max": 1, "n": 3}}}], "'result' event ("),
    "result repeated": ([START_A, RESULT_A, RESULT_A], "while no variant was started", "b"),
    "done too early": ([START_A, RESULT_A, DONE], "'done' event with 'evil:p:{\"mode\":\"b\"}' not finished", "b"),
    "a second variants": ([VARIANTS], "'variants' event a second time"),
    "setup_error without a reason": ([{"event": "setup_error"}], "'setup_error' event (reason: missing)"),
    "hello with a device no results file holds": ([{"event": "hello", "device": {"type": "x" * 300}}],
                                                   "'hello' event (device.type: string should have at most 200"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_event_fails_the_variant_running_with_one_line_and_the_next_variant_runs(case):
    lines, why, failed = (*BAD[case], "a")[:3]
    t0 = time.monotonic()
    # the worker lingers after its bad event: it is stopped at once, not waited for
    got = rows_of([HELLO, VARIANTS, *lines], linger_s=60)
    assert time.monotonic() - t0 < 20
    bad = got.get((failed, W))
    assert bad is not None and bad.status == "error", got
    assert why in bad.reason and "\n" not in bad.reason, bad.reason
    assert bad.reason.startswith("worker sent ") or "malformed" in bad.reason
    assert set(got) == {("a", W), ("b", W)}, got  # nothing of another workload; the run went on after the failure
    if failed == "b":
        assert got["a", W].status == "ok"


VARIANTS_BAD = {
    "todo negative": (VARIANTS | {"todo": -1}, "todo: input should be greater than or equal to 0"),
    "todo not the keys": (VARIANTS | {"todo": 1}, "todo is 1 with 2 key(s)"),
    "todo over total": (VARIANTS | {"total": 1}, "todo (2) is more than total (1)"),
    "keys twice": (VARIANTS | {"keys": [KA, KA]}, "a key is announced twice"),
    "ten million keys": ({"event": "variants", "total": 10**7, "todo": 10**7, "keys": [], "variants": []},
                         "total: input should be less than or equal to 10000"),
    "too many keys": ({"event": "variants", "total": 1, "todo": 1, "keys": [""] * 20_000, "variants": []},
                      "keys: list should have at most 10000 items"),
    "another workload's keys": (VARIANTS | {"keys": [variant_key("gemm", P, A), KB]}, "which is not evil:p:"),
    "a key that is not its variant's": (VARIANTS | {"keys": [KB, KA]}, "which is not evil:p: with its variant"),
    "a measured key": (VARIANTS, "which was measured already"),
}


@pytest.mark.parametrize("case", list(VARIANTS_BAD))
def test_a_bad_variants_event_fails_the_workload_before_any_variant(case):
    ev, why = VARIANTS_BAD[case]
    job = {"skip": [KA]} if case == "a measured key" else {}
    got = rows_of([HELLO, ev], linger_s=60, **job)
    assert len(got) == 1, got
    (m,) = got.values()
    assert m.status == "error" and m.variant == {} and m.workload == W
    assert "worker failed before running any variant: worker sent" in m.reason and why in m.reason, m.reason


def test_the_preset_of_the_keys_is_the_job_s():
    ka = variant_key(W, "q", A)
    got = rows_of([HELLO, VARIANTS | {"keys": [ka, variant_key(W, "q", B)]}], linger_s=60)
    (m,) = got.values()
    assert m.status == "error" and "which is not evil:p:" in m.reason


def test_without_a_preset_in_the_job_the_keys_name_one_preset():
    got = []
    keys = [variant_key(W, "x:y", A), variant_key(W, "z", B)]
    j = WorkloadJob(workload=W, device="cpu", variant_budget_s=0.5)
    run_workload(j, worker_writing([HELLO, VARIANTS | {"keys": keys}], 60), timeout_s=None, reporter=Reporter(),
                 on_result=got.append)
    (m,) = got
    assert m.status == "error" and "which is not evil:x:y:" in m.reason, m.reason


def test_a_rank_group_may_send_rows_of_its_own_before_the_variant_s():
    per_rank = A | {"rank": 0}
    side = {"event": "result", "key": variant_key(W, P, per_rank), "measurement": row(per_rank)}
    got = rows_in_order([HELLO, VARIANTS, START_A, side, RESULT_A, START_B, RESULT_B, DONE], dist_timeout_s=30,
                        nproc=2)
    assert [(m.variant, m.status) for m in got] == [(per_rank, "ok"), (A, "ok"), (B, "ok")]
    # but never a row of a variant it announced, out of turn
    got = rows_of([HELLO, VARIANTS, START_A, RESULT_B], dist_timeout_s=30, nproc=2)
    assert got[("a", W)].status == "error" and "was running" in got[("a", W)].reason
    # nor more rows than its ranks and a baseline
    sides = [side | {"key": variant_key(W, P, A | {"rank": r}), "measurement": row(A | {"rank": r})} for r in range(4)]
    got = rows_in_order([HELLO, VARIANTS, START_A, *sides], dist_timeout_s=30, nproc=2)
    assert [m.status for m in got if m.variant == A] == ["error"]
    assert "more rows of its own than 2 rank(s) and a baseline" in next(m.reason for m in got if m.variant == A)


def test_an_event_line_too_long_is_malformed_and_nan_never_parses():
    from gapbench.engine import channel

    events, rest = split_events(b'{"event": "start", "budget_s": NaN}\n' + b"x" * (channel.MAX_LINE + 1) + b"\n")
    assert [e["event"] for e in events] == ["malformed", "malformed"] and rest == b""
    assert "longer than" in events[1]["why"]


EVIL = '''
import json, os
from gapbench.timing import time_fn
from gapbench.workloads import Variant, Workload


def emit(obj):
    fd = os.open(os.environ["GAPBENCH_EVENTS"], os.O_WRONLY | os.O_APPEND)
    os.write(fd, (json.dumps(obj) + "\\n").encode())
    os.close(fd)


class Evil(Workload):
    name = "evil"
    unit = "calls/s"
    description = "writes events of its own on the worker's channel"
    presets = {"nan_budget": "a start event with a NaN budget", "other_workload": "an ok result for gemm"}
    default_preset = "nan_budget"

    def variants(self, preset, ctx):
        return [Variant({"mode": "attack"}), Variant({"mode": "good"})]

    def run(self, variant, ctx):
        if variant.params["mode"] == "attack":
            if ctx.preset == "nan_budget":
                emit({"event": "start", "key": "x", "budget_s": "NaN"})
            else:
                m = {"workload": "gemm", "preset": "tiny", "variant": {"m": 1}, "status": "ok", "value": 1e30,
                     "unit": "TFLOP/s"}
                emit({"event": "result", "key": 'gemm:tiny:{"m":1}', "measurement": m})
        timing = time_fn(lambda: sum(range(100)), ctx.device, budget_s=ctx.budget_s, min_time_s=0.01, repeats=3)
        return self.throughput(variant, ctx, timing, 1.0)
'''


@pytest.mark.slow
def test_gapbench_run_records_a_bad_event_as_its_variant_s_error_and_goes_on(tmp_path):
    wl = tmp_path / "evil.py"
    wl.write_text(EVIL)
    out = tmp_path / "evil.json"
    r = gapbench("run", "--device", "cpu", "--workload-file", wl, "--workload", "evil:nan_budget", "--workload",
                 "evil:other_workload", "--variant-budget", "0.2", "--repeats", "3", "--output", out,
                 "--no-history", "--quiet", timeout=120)
    assert r.returncode == 0, r.stderr
    rs = load(out)
    assert rs.complete
    got = {(m.preset, m.variant.get("mode")): m for m in rs.measurements}
    assert set(got) == {("nan_budget", "attack"), ("nan_budget", "good"), ("other_workload", "attack"),
                        ("other_workload", "good")}, got  # no gemm row
    nan = got["nan_budget", "attack"]
    assert nan.status == "error" and "'start' event (budget_s:" in nan.reason, nan.reason
    other = got["other_workload", "attack"]
    assert other.status == "error" and "for workload 'gemm'" in other.reason, other.reason
    assert got["nan_budget", "good"].status == "ok" and got["other_workload", "good"].status == "ok"
