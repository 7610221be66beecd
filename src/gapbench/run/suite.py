"""Runs a suite: one worker process per workload, with budgets, timeouts, a journal, resume, progress.

Every finished measurement is appended (and fsynced) to `<output>.journal.jsonl` at once, so an
interrupted run — Ctrl-C or kill -9 — loses nothing finished; `run_suite(resume=output)` completes it.
The results file itself is written atomically at the end (and, marked incomplete, on Ctrl-C).
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import threading
import time

from gapbench import __version__, devices
from gapbench.engine.jobs import WorkloadJob
from gapbench.engine.journal import Journal, journal_path
from gapbench.errors import GapbenchError
from gapbench.results import Measurement, ResultSet, check_output, merge_runs, now_iso, save
from gapbench.results.files import OutputError
from gapbench.run.plan import RunPlan, build_plan, default_output
from gapbench.run.resume import check_same_machine, read_journal, resumed_files
from gapbench.run.workload import Reporter, budget_grace, budget_spent, launch_worker, run_workload


class Interrupted(Exception):
    """The run was stopped by a signal (Ctrl-C's SIGINT, a scheduler's SIGTERM, a closed terminal's SIGHUP); what
    finished is in the journal and the partial results file. `signum` gives the conventional exit status."""

    def __init__(self, output: str, signum: int = signal.SIGINT, kept: str | None = None):
        self.output, self.signum = output, int(signum)
        how = "interrupted" if self.signum == signal.SIGINT else f"stopped by {signal.Signals(self.signum).name}"
        where = kept or f"finished results are kept in {output}"
        super().__init__(f"{how}; {where}; continue with: gapbench run --resume {output}")


class Stopped(KeyboardInterrupt):
    """A terminating signal other than SIGINT, raised where the run is, as Ctrl-C's KeyboardInterrupt is."""

    def __init__(self, signum: int):
        self.signum = int(signum)
        super().__init__(signal.Signals(self.signum).name)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stopping_on_signals():
    """Within: SIGTERM and SIGHUP (what `timeout`, batch schedulers and a closed terminal send) end a run the way
    Ctrl-C does, so the partial results file and the resume hint are written. The first signal stops the run;
    more of them are ignored while what finished is written. The handlers before are restored after."""
    def stop(signum, frame):
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        raise Stopped(signum)

    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return
    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    for s, handler in before.items():
        if handler is not signal.SIG_IGN:  # nohup's SIGHUP stays ignored
            signal.signal(s, stop)
    try:
        yield
    finally:
        for s, handler in before.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


def run_suite(plan: RunPlan | None = None, *, output: str | None = None, resume: str | None = None,
              reporter: Reporter | None = None, history: bool | str | os.PathLike = True, force: bool = False,
              _rank_scratch: bool = False, **plan_kw) -> ResultSet:
    """Run a plan (or build one from keyword arguments) and return the ResultSet written to `output`.
    An existing results file at `output` is replaced only with force=True. `history`: record the run into the
    default history database (True: $GAPBENCH_DB, else the XDG data folder's), into this file, or not (False)."""
    reporter = reporter or Reporter()
    rank = _external_rank()
    if rank and not _rank_scratch:  # one rank of an external torchrun job, not rank 0: run along, keep nothing
        return _run_as_follower(rank, plan, reporter, plan_kw)
    done: dict[tuple[int, str], Measurement] = {}
    header: dict | None = None
    host = devices.host_identity()
    if resume:
        output = resume
        header, plan, done = _resumed(resume, plan_kw.get("workload_files") or [], host, force, reporter)
    if plan is None:
        plan = build_plan(**plan_kw)
    output = output or default_output(plan.device)
    check_output(output, inputs=plan.workload_files, force=force or bool(resume), resume_hint=not resume)
    journal = Journal(journal_path(output))
    if header is None:
        header = {"event": "header", "run_id": ResultSet(host={}, device={}).run_id, "started_at": now_iso(),
                  "plan": plan.model_dump(mode="json"), "host": host, "gapbench_version": __version__}
    # a fresh journal, or the resumed one rewritten: a line a kill tore stays out of it
    journal.start(header, [{"event": "measurement", "pass": p, "measurement": m.model_dump(mode="json")}
                           for (p, _), m in done.items()])
    rs = ResultSet(host=header.get("host") or host, device={}, suite=plan.suite, label=plan.label,
                   run_id=header["run_id"], started_at=header["started_at"],
                   options=plan.model_dump(mode="json", exclude={"entries"}) | {
                       "workloads": [f"{n}:{p}" if p else n for n, p in plan.entries]})
    passes: dict[tuple[int, str], Measurement] = dict(done)
    try:
        identity = _run_entries(plan, passes, journal, set(done), reporter) or header.get("device")
    except (KeyboardInterrupt, OutputError) as e:
        _stopped(e, rs, passes, header.get("device") or plan.resolved.identity(), output, journal)
    rs.measurements = _by_variant(passes)
    rs.device = identity or plan.resolved.identity()
    if plan.suite == "parity" or plan.options.get("frameworks"):
        from gapbench.frameworks import probe_all  # each framework in its own subprocess, never installs

        reporter.note("probing deep-learning frameworks on the device")
        rs.frameworks = probe_all(plan.device)
    rs.finished_at = now_iso()
    rs.complete = True
    _save_final(rs, output, journal)
    rs.path = output
    journal.remove()
    if history:
        _record_history(rs, reporter, None if history is True else history)
    return rs


def _resumed(resume: str, files: list[str], host: dict, force: bool,
             reporter: Reporter) -> tuple[dict, RunPlan, dict[tuple[int, str], Measurement]]:
    """What an interrupted run left, checked before anything runs again: the workload files named again on the
    command line, never taken from the journal; this host, device and gapbench, unless `force` (then a warning)."""
    header, plan, done = read_journal(resume)
    plan = plan.replace(workload_files=resumed_files(plan, files, resume))
    warning = check_same_machine(header, host, plan.resolved.identity(), resume, force)
    if warning:
        reporter.note(warning)
    reporter.note(f"resuming {resume}: {len(done)} measurement(s) already done")
    return header, plan, done


def _stopped(e: BaseException, rs: ResultSet, passes: dict, device: dict, output: str, journal: Journal) -> None:
    """A run stopped early — by a signal (a KeyboardInterrupt), or because its journal could not be written (a
    full disk) — writes what finished to its partial results file and raises what to tell the user."""
    if isinstance(e, KeyboardInterrupt):
        for s in STOP_SIGNALS:  # what finished is written whatever else arrives now
            signal.signal(s, signal.SIG_IGN)
    why = _save_partial(rs, passes, device, output)
    if isinstance(e, KeyboardInterrupt):
        kept = f"{why}; finished results are kept in the journal {journal.path}" if why else None
        raise Interrupted(output, getattr(e, "signum", signal.SIGINT), kept=kept) from None
    where = (f"the measurements finished before are in the journal, {output} could not be written either"
             if why else f"the {len(rs.measurements)} measurement(s) finished are kept in {output}")
    raise GapbenchError(f"{e}; {where}; once there is room, continue with: gapbench run --resume {output}") from None


def _save_partial(rs: ResultSet, passes: dict, device: dict, output: str) -> OutputError | None:
    """The partial results file of a run that stops early (marked incomplete); the error if it cannot be written."""
    rs.measurements = _by_variant(passes)
    rs.device = device
    rs.finished_at = now_iso()
    try:
        save(rs, output)
    except OutputError as e:
        return e
    return None


def _journaled(journal: Journal, entry: dict) -> None:
    try:
        journal.append(entry)
    except OSError as e:
        raise OutputError(journal.path, e) from None


def _save_final(rs: ResultSet, output: str, journal: Journal) -> None:
    """The finished results file; when it cannot be written, the journal keeps every measurement and the one
    line says how to finish the file once there is room."""
    try:
        save(rs, output)
    except OutputError as e:
        raise GapbenchError(f"{e}; all {len(rs.measurements)} measurement(s) are kept in the journal {journal.path}; "
                            f"once it can be written, finish the file with: gapbench run --resume {output}") from None


def _by_variant(passes: dict[tuple[int, str], Measurement]) -> list[Measurement]:
    """One measurement per variant: a single pass as it is, several passes merged (results.merge_runs)."""
    n = 1 + max((p for p, _ in passes), default=0)
    groups = [[m for (p, _), m in passes.items() if p == i] for i in range(n)]
    return merge_runs(groups) if n > 1 else groups[0] if groups else []


def _run_entries(plan: RunPlan, passes: dict, journal: Journal, done: set, reporter: Reporter) -> dict | None:
    """Every workload of the plan in turn, pass after pass (A B A B …: a slow drift of the machine affects
    every workload alike), each in fresh workers; each finished measurement journaled at once."""
    identity = None
    launch = _launcher(plan)
    runs = max(1, int(plan.runs or 1))
    t_start = time.monotonic()
    hard_end = t_start + plan.budget_s + budget_grace(plan.budget_s) if plan.budget_s else None
    steps = [(p, name, preset) for p in range(runs) for name, preset in plan.entries]
    for i, (p, name, preset) in enumerate(steps):
        def on_result(m: Measurement, p=p) -> None:
            # kept in memory first: a signal that lands after the journal line is written still finds it there
            passes[(p, m.key)] = m
            _journaled(journal, {"event": "measurement", "pass": p, "measurement": m.model_dump(mode="json")})
            reporter.variant_done(m)

        workload_budget = None
        if plan.budget_s:
            left = plan.budget_s - (time.monotonic() - t_start)
            workload_budget = max(left, 1.0) / (len(steps) - i)
        if hard_end is not None and time.monotonic() >= hard_end:
            if not any(q == p and key.split(":", 1)[0] == name for (q, key) in passes):
                on_result(Measurement(workload=name, preset=preset or None, variant={}, unit="-", status="too_slow",
                                      reason=f"not started: {budget_spent(plan.budget_s)}"))
            continue
        reporter.workload_started(name if runs == 1 else f"{name} (run {p + 1}/{runs})", preset)
        skip = {key for (q, key) in done if q == p}
        ident = run_workload(_job(plan, name, preset, workload_budget, skip), launch,
                             timeout_s=plan.timeout_s, reporter=reporter, on_result=on_result, hard_end=hard_end,
                             run_budget_s=plan.budget_s)
        if ident and not identity:
            identity = ident
            _journaled(journal, {"event": "device", "identity": identity})
    return identity


def _run_as_follower(rank: int, plan, reporter: Reporter, plan_kw: dict) -> ResultSet:
    """One rank (not rank 0) of an external torchrun job runs along and keeps nothing: rank 0 reports."""
    import shutil

    scratch = tempfile.mkdtemp(prefix=f"gapbench-rank{rank}-")
    try:
        rs = run_suite(plan, output=os.path.join(scratch, "results.json"), reporter=reporter, history=False,
                       _rank_scratch=True, **plan_kw)
        rs.path = None
        return rs
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _record_history(rs: ResultSet, reporter: Reporter, db: str | os.PathLike | None = None) -> None:
    try:
        from gapbench import history

        history.record(rs, db)
    except ImportError:
        pass
    except Exception as e:  # history is a convenience; never lose a run over it
        reporter.note(f"warning: could not record the run in the history database: {e}")


# ---- one workload in worker processes -----------------------------------------------------------

def _job(plan: RunPlan, name: str, preset: str | None, workload_budget: float | None, skip: set[str]) -> WorkloadJob:
    shared = plan.resolved.host_memory_is_device_memory  # an allocation past memory is the OOM killer's
    mem = plan.memory_limit_bytes
    if mem is None and shared:
        mem = int(devices.host_memory() * 0.85) or None
    job = WorkloadJob(workload=name, preset=preset, device=plan.device, workload_files=list(plan.workload_files),
                      skip=sorted(skip), workload_budget_s=workload_budget, variant_budget_s=plan.variant_budget_s,
                      min_time_s=plan.min_time_s, repeats=plan.repeats, options=dict(plan.options),
                      threads=plan.threads, memory_limit_bytes=mem if shared else None)
    if plan.nproc or _external_rank() is not None:
        # the group's own time limit outlasts the runner's, whose hang diagnosis names the rank; where ranks
        # share the host's cores they measure single-device workloads in turn, so one waits for all the others
        limit = (plan.timeout_s or 3 * plan.variant_budget_s + 30) * ((plan.nproc or 1) if shared else 1)
        job.nproc, job.backend = plan.nproc, plan.backend
        job.launcher = "gapbench" if plan.nproc else "torchrun"
        job.dist_timeout_s = limit + 60
        if job.memory_limit_bytes and plan.nproc:  # the ranks of this host share its memory
            job.memory_limit_bytes //= plan.nproc
    return job


def _launcher(plan: RunPlan):
    """How this plan's workers start: one process, or a rank group through torch.distributed."""
    if plan.nproc or _external_rank() is not None:
        from gapbench.distributed.launch import launch_ranks

        return launch_ranks
    return launch_worker


def _external_rank() -> int | None:
    """RANK when this process is one rank of an external torchrun job (env vars present), else None."""
    from gapbench.distributed.info import env_rank

    return env_rank()
