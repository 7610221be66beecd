"""The parent's side of one workload: start its worker (or rank group), follow its events, and after a
crash, a hang or an out-of-memory kill record the variant that was running and start a fresh worker for
the rest. Nothing a worker does can stop the others or lose what finished."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gapbench.engine import failures
from gapbench.engine.jobs import WorkloadJob
from gapbench.engine.supervise import Child, Outcome
from gapbench.results import Measurement

STARTUP_TIMEOUT_S = 300.0  # imports + variants() of one workload when no --timeout is given
MAX_ATTEMPTS = 1000

# a launcher runs one job: (job, timeout_s, on_event) -> Outcome
Launcher = Callable[[WorkloadJob, float, Callable[[dict], float | None]], Outcome]


def worker_env(job: WorkloadJob) -> dict:
    env = dict(os.environ)
    if job.threads:
        env["OMP_NUM_THREADS"] = str(job.threads)
    return env


def launch_worker(job: WorkloadJob, timeout_s: float, on_event) -> Outcome:
    """One single-process worker: python -m gapbench.engine.worker with the job on stdin."""
    child = Child([sys.executable, "-m", "gapbench.engine.worker"], payload=job.model_dump_json(), env=worker_env(job))
    try:
        return child.follow(timeout_s, on_event)
    finally:
        child.close()


class Reporter:
    """Progress callbacks; the CLI draws a progress bar from them. The base class is silent."""

    def workload_started(self, name: str, preset: str | None) -> None: ...
    def variants_known(self, name: str, todo: int, total: int) -> None: ...
    def variant_started(self, name: str, params: dict) -> None: ...
    def variant_done(self, m: Measurement) -> None: ...
    def note(self, text: str) -> None: ...


@dataclass
class Attempt:
    """What one worker did before it ended."""

    identity: dict | None = None
    announced: dict[str, dict] = field(default_factory=dict)  # key -> params of the variants it will run
    finished: set[str] = field(default_factory=set)
    current: str | None = None  # the variant running when it ended
    failure: failures.Failure | None = None
    unit: str = ""
    higher_is_better: bool = True
    done: bool = False
    described: dict | None = None
    bad_input: bool = False  # the failure is the user's input (GapbenchError in the child), not the workload's


def variant_limit(budget_s: float, timeout_s: float | None) -> float:
    """A variant's hard time limit: --timeout, else three times its budget plus 30 s."""
    return timeout_s if timeout_s else 3 * budget_s + 30


def startup_limit(timeout_s: float | None) -> float:
    """Import time counts against --timeout; without one, the start-up allowance."""
    return timeout_s if timeout_s else STARTUP_TIMEOUT_S


def attempt(job: WorkloadJob, launch: Launcher, timeout_s: float | None, reporter: Reporter,
            on_result: Callable[[Measurement], None]) -> Attempt:
    """Run one worker for `job` to its end and say what happened."""
    a = Attempt()

    def handle(ev: dict) -> float | None:
        kind = ev.get("event")
        if a.failure is not None:
            return None
        try:
            if kind == "hello":
                a.identity = ev.get("device") if isinstance(ev.get("device"), dict) else None
            elif kind == "variants":
                a.announced = dict(zip(ev["keys"], ev["variants"], strict=True))
                a.unit = str(ev.get("unit", ""))
                a.higher_is_better = bool(ev.get("higher_is_better", True))
                reporter.variants_known(job.workload, int(ev["todo"]), int(ev["total"]))
            elif kind == "start":
                a.current = str(ev["key"])
                reporter.variant_started(job.workload, ev.get("variant") or {})
                return variant_limit(float(ev.get("budget_s") or job.variant_budget_s), timeout_s)
            elif kind == "result":
                m = Measurement.read(ev["measurement"])
                a.finished.add(str(ev["key"]))
                a.current = None
                on_result(m)
                return startup_limit(timeout_s)  # the next variant's set-up happens before its start event
            elif kind in ("setup_error", "bad_input"):
                reason = str(ev.get("reason", ""))
                a.bad_input = kind == "bad_input"
                status = "oom" if "MemoryError" in reason or "out of memory" in reason.lower() else "error"
                a.failure = failures.Failure(status, reason)
            elif kind == "describe":
                a.described = ev.get("workloads") if isinstance(ev.get("workloads"), dict) else {}
            elif kind == "done":
                a.done = True
            elif kind == "malformed":
                a.failure = failures.malformed(ev)
        except (KeyError, TypeError, ValueError) as e:  # a well-formed line with the wrong content
            a.failure = failures.Failure("error", f"worker sent an unreadable {kind!r} event ({e.__class__.__name__}: "
                                                  f"{str(e)[:120]})")
        return None

    out = launch(job, startup_limit(timeout_s), handle)
    if a.failure is not None or a.done or a.described is not None:
        return a
    hint = f"; {out.hint}" if out.hint else ""
    if out.timed_out:
        phase = "variant" if a.current else "worker start-up"
        f = failures.timed_out(out.limit_s or 0.0, phase)
        a.failure = replace(f, reason=f.reason + hint)
    else:
        f = failures.exited(out.returncode, out.log, oom_killed=out.oom_killed)
        a.failure = replace(f, reason=f.reason + hint)
    return a


def run_workload(job: WorkloadJob, launch: Launcher, *, timeout_s: float | None, reporter: Reporter,
                 on_result: Callable[[Measurement], None]) -> dict | None:
    """Run every variant of job not in job.skip, restarting after failures; returns the device identity."""
    skip = set(job.skip)
    identity = None
    t0 = time.monotonic()
    known: dict[str, dict] = {}
    unit, hib = "", True
    for _ in range(MAX_ATTEMPTS):
        left = None if job.workload_budget_s is None else max(job.workload_budget_s - (time.monotonic() - t0), 1.0)
        a = attempt(job.replace(skip=sorted(skip), workload_budget_s=left), launch, timeout_s, reporter, on_result)
        identity = identity or a.identity
        known.update(a.announced)
        unit = a.unit or unit
        hib = a.higher_is_better
        skip |= a.finished
        if a.failure is None:
            return identity
        if a.current is None:
            if not known:  # failed before the variants were known
                on_result(Measurement(workload=job.workload, preset=job.preset, variant={}, unit=unit or "-",
                                      status=a.failure.status,
                                      reason=_line(f"worker failed before running any variant: {a.failure.reason}")))
                return identity
            remaining = [k for k in known if k not in skip]
            if not remaining:
                return identity
            key = remaining[0]  # a failure between variants: blame the next one so the restart makes progress
        else:
            key = a.current
        on_result(Measurement(workload=job.workload, preset=job.preset or None, variant=known.get(key, {}),
                              unit=unit or "-", higher_is_better=hib, status=a.failure.status,
                              reason=_line(a.failure.reason)))
        skip.add(key)
        if not [k for k in known if k not in skip]:
            return identity
    return identity


def _line(reason: str) -> str:
    """A failure's reason as a record holds it: one line, cut well below the schema's limit."""
    text = " ".join(str(reason).split()) or "no reason recorded"
    return text if len(text) <= 2000 else text[:1999] + "…"
