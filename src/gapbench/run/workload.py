"""The parent's side of one workload: start its worker (or rank group), follow its events, and after a
crash, a hang or an out-of-memory kill record the variant that was running and start a fresh worker for
the rest. Nothing a worker does can stop the others or lose what finished."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from gapbench.engine import failures
from gapbench.engine.events import Describe, Done, EventError, Hello, Result, SetupError, Start, Variants, read_event
from gapbench.engine.jobs import WorkloadJob, worker_env
from gapbench.engine.supervise import Child, Outcome
from gapbench.engine.variant import MIN_VARIANT_BUDGET_S
from gapbench.results import Measurement, variant_key

STARTUP_TIMEOUT_S = 300.0  # imports + variants() of one workload when no --timeout is given
MAX_ATTEMPTS = 1000
STOP_S = 0.001  # the time limit that stops a worker once an event was refused: its deadline kills it at once
MAX_RANKS = 4096  # the ranks of a group started by an outside launcher, which the job does not count

# a launcher runs one job: (job, timeout_s, on_event) -> Outcome
Launcher = Callable[[WorkloadJob, float, Callable[[dict], float | None]], Outcome]


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
    seen: set[str] = field(default_factory=set)  # the kinds of event that may come once
    own_rows: int = 0  # the rows of its own a rank group sent for the variant running


def variant_limit(budget_s: float, timeout_s: float | None, hard_end: float | None = None) -> float:
    """A variant's hard time limit: --timeout, else three times its budget plus 30 s; never past the run's hard
    end (`hard_end`, time.monotonic(): where a run --budget ends, with its grace)."""
    limit = timeout_s if timeout_s else 3 * budget_s + 30
    if hard_end is not None:
        limit = min(limit, max(hard_end - time.monotonic(), STOP_S))
    return limit


def budget_grace(budget_s: float) -> float:
    """How far past its --budget a run may go before what runs is stopped: a variant that started in time is
    given a little to finish (a tenth of the budget, at least 5 s, at most 60 s)."""
    return min(max(0.1 * budget_s, 5.0), 60.0)


def budget_spent(budget_s: float | None) -> str:
    return f"the run's --budget of {budget_s:.4g} s was spent" if budget_s else "the run's --budget was spent"


def startup_limit(timeout_s: float | None) -> float:
    """Import time counts against --timeout; without one, the start-up allowance."""
    return timeout_s if timeout_s else STARTUP_TIMEOUT_S


def budget_allowed(job: WorkloadJob, ranks: int) -> float:
    """The most budget a worker may say a variant of `job` was given: the job's (never below the engine's
    floor), times the ranks of a group that measure in turn."""
    return max(job.variant_budget_s, MIN_VARIANT_BUDGET_S) * ranks * (1 + 1e-9)


class Refused(ValueError):
    """A well-formed event that does not fit the job or comes out of order."""


class EventRules:
    """The parent's reading of one worker's events: each event typed (engine.events), then held to the job: the
    variants are the job's workload and preset and none already measured, a result belongs to the variant that
    was started, once. The first event refused fails the variant running and ends the worker at once."""

    def __init__(self, job: WorkloadJob, a: Attempt, timeout_s: float | None, reporter: Reporter,
                 on_result: Callable[[Measurement], None], hard_end: float | None = None):
        self.job, self.a, self.timeout_s, self.reporter, self.record = job, a, timeout_s, reporter, on_result
        self.hard_end = hard_end
        self.preset: str | None = job.preset or None  # the keys' preset: the job's, else the worker's default
        self.ranks = job.nproc or (MAX_RANKS if job.distributed else 1)

    def __call__(self, raw: dict) -> float | None:
        a = self.a
        if a.failure is not None:
            return STOP_S
        if raw.get("event") == "malformed":
            a.failure = failures.malformed(raw)
            return STOP_S
        try:
            ev = read_event(raw)
            if ev is None:
                return None
            if a.done:
                raise Refused("after 'done'")
            return getattr(self, f"on_{ev.event}")(ev)
        except EventError as e:
            a.failure = failures.Failure("error", f"worker sent {e}")
        except Refused as e:
            a.failure = failures.Failure("error", f"worker sent a {raw.get('event')!r} event {e}")
        return STOP_S

    def once(self, kind: str) -> None:
        if kind in self.a.seen:
            raise Refused("a second time")
        self.a.seen.add(kind)

    def on_hello(self, ev: Hello) -> None:
        self.once("hello")
        self.a.identity = ev.device

    def on_variants(self, ev: Variants) -> None:
        self.once("variants")
        skip = set(self.job.skip)
        for key, params in zip(ev.keys, ev.variants, strict=True):
            self.preset = self.preset if self.preset is not None else preset_of(key, self.job.workload, params)
            if key != variant_key(self.job.workload, self.preset, params):
                raise Refused(f"with key {short(key)}, which is not {self.job.workload}:{self.preset}: with its "
                              f"variant's parameters")
            if key in skip:
                raise Refused(f"announcing {short(key)}, which was measured already")
        self.a.announced = dict(zip(ev.keys, ev.variants, strict=True))
        self.a.unit = ev.unit or ""
        self.a.higher_is_better = ev.higher_is_better
        self.reporter.variants_known(self.job.workload, ev.todo, ev.total)

    def on_start(self, ev: Start) -> float:
        a = self.a
        if ev.key not in a.announced:
            raise Refused(f"for {short(ev.key)}, which was not announced")
        if ev.key in a.finished:
            raise Refused(f"for {short(ev.key)}, which has finished")
        if a.current is not None:
            raise Refused(f"for {short(ev.key)} while {short(a.current)} has no result")
        allowed = budget_allowed(self.job, self.ranks)
        if ev.budget_s > allowed:
            raise Refused(f"with budget_s {ev.budget_s:.4g}, more than the {allowed:.4g} s the job allows")
        a.current, a.own_rows = ev.key, 0
        self.reporter.variant_started(self.job.workload, a.announced[ev.key])
        return variant_limit(ev.budget_s, self.timeout_s, self.hard_end)

    def on_result(self, ev: Result) -> float | None:
        a, m = self.a, ev.measurement
        if a.current is None:
            raise Refused(f"for {short(ev.key)} while no variant was started")
        if m.workload != self.job.workload:
            raise Refused(f"for workload {short(m.workload)} from a worker of {self.job.workload}")
        if ev.key != variant_key(m.workload, m.preset, m.variant) or m.preset != self.preset:
            raise Refused(f"with key {short(ev.key)}, which is not its measurement's ({short(m.workload)}:"
                          f"{short(str(m.preset))}: with its variant) of preset {self.preset}")
        if ev.key in a.finished or ev.key in self.job.skip:
            raise Refused(f"for {short(ev.key)}, which has finished")
        if ev.key != a.current:
            # a rank group reports rows of its own (per rank, a baseline) before the variant's; a single worker not
            if not self.job.distributed or ev.key in a.announced:
                raise Refused(f"for {short(ev.key)} while {short(a.current)} was running")
            a.own_rows += 1
            if a.own_rows > self.ranks + 1:  # one per rank and a baseline
                raise Refused(f"for {short(ev.key)}: more rows of its own than {self.ranks} rank(s) and a baseline")
            a.finished.add(ev.key)
            self.record(m)
            return None
        a.finished.add(ev.key)
        a.current = None
        self.record(m)
        return startup_limit(self.timeout_s)  # the next variant's set-up happens before its start event

    def on_setup_error(self, ev: SetupError) -> float:
        self.a.bad_input = ev.event == "bad_input"
        status = "oom" if "MemoryError" in ev.reason or "out of memory" in ev.reason.lower() else "error"
        self.a.failure = failures.Failure(status, ev.reason)
        return STOP_S

    on_bad_input = on_setup_error

    def on_describe(self, ev: Describe) -> None:
        self.once("describe")
        self.a.described = {name: d.model_dump(mode="json") for name, d in ev.workloads.items()}

    def on_done(self, ev: Done) -> None:
        left = [k for k in self.a.announced if k not in self.a.finished]
        if self.a.current is not None or left:
            raise Refused(f"with {short(self.a.current or left[0])} not finished")
        self.a.done = True


def preset_of(key: str, workload: str, params: dict) -> str:
    """The preset a variant key names, read between the workload's name and the variant's parameters."""
    tail = ":" + variant_key("", None, params)[2:]
    if key.startswith(workload + ":") and key.endswith(tail):
        return key[len(workload) + 1:len(key) - len(tail)]
    raise Refused(f"with key {short(key)}, which is not {workload}:PRESET: with its variant's parameters")


def short(text: str | None, limit: int = 80) -> str:
    text = str(text)
    return repr(text if len(text) <= limit else text[:limit - 1] + "…")


def attempt(job: WorkloadJob, launch: Launcher, timeout_s: float | None, reporter: Reporter,
            on_result: Callable[[Measurement], None], hard_end: float | None = None,
            run_budget_s: float | None = None) -> Attempt:
    """Run one worker for `job` to its end and say what happened (stopped at `hard_end`, where a run's --budget
    and its grace end)."""
    a = Attempt()
    out = launch(job, startup_limit(timeout_s), EventRules(job, a, timeout_s, reporter, on_result, hard_end))
    if a.failure is not None or a.done or a.described is not None:
        return a
    hint = f"; {out.hint}" if out.hint else ""
    if out.timed_out and a.current and hard_end is not None and time.monotonic() >= hard_end - 0.05:
        a.failure = failures.Failure("timeout", f"stopped after {out.limit_s or 0.0:.3g} s: {budget_spent(run_budget_s)}"
                                                f" (the variant had started in time){hint}")
    elif out.timed_out:
        phase = "variant" if a.current else "worker start-up"
        f = failures.timed_out(out.limit_s or 0.0, phase)
        a.failure = replace(f, reason=f.reason + hint)
    else:
        f = failures.exited(out.returncode, out.log, oom_killed=out.oom_killed)
        a.failure = replace(f, reason=f.reason + hint)
    return a


def run_workload(job: WorkloadJob, launch: Launcher, *, timeout_s: float | None, reporter: Reporter,
                 on_result: Callable[[Measurement], None], hard_end: float | None = None,
                 run_budget_s: float | None = None) -> dict | None:
    """Run every variant of job not in job.skip, restarting after failures; returns the device identity.
    Past `hard_end` (time.monotonic(): where the run's --budget and its grace end) the variant running is stopped
    and no worker starts again: each variant not measured gets a `too_slow` row saying the budget was spent."""
    skip = set(job.skip)
    identity = None
    t0 = time.monotonic()
    known: dict[str, dict] = {}
    unit, hib = "", True
    for _ in range(MAX_ATTEMPTS):
        if hard_end is not None and time.monotonic() >= hard_end and known:
            _not_started(job, [known[k] for k in known if k not in skip], unit, hib, run_budget_s, on_result)
            return identity
        left = None if job.workload_budget_s is None else max(job.workload_budget_s - (time.monotonic() - t0), 1.0)
        a = attempt(job.replace(skip=sorted(skip), workload_budget_s=left), launch, timeout_s, reporter, on_result,
                    hard_end, run_budget_s)
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


def _not_started(job: WorkloadJob, variants: list[dict], unit: str, hib: bool, run_budget_s: float | None,
                 on_result: Callable[[Measurement], None]) -> None:
    """A too_slow row for each variant the run's budget left no time for."""
    for params in variants:
        on_result(Measurement(workload=job.workload, preset=job.preset or None, variant=params, unit=unit or "-",
                              higher_is_better=hib, status="too_slow", reason=f"not started: {budget_spent(run_budget_s)}"))


def _line(reason: str) -> str:
    """A failure's reason as a record holds it: one line, cut well below the schema's limit."""
    text = " ".join(str(reason).split()) or "no reason recorded"
    return text if len(text) <= 2000 else text[:1999] + "…"
