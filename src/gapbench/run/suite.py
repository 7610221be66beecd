"""Runs a suite: one worker process per workload, with budgets, timeouts, a journal, resume, progress.

Every finished measurement is appended (and fsynced) to `<output>.journal.jsonl` at once, so an
interrupted run — Ctrl-C or kill -9 — loses nothing finished; `run_suite(resume=output)` completes it.
The results file itself is written atomically at the end (and, marked incomplete, on Ctrl-C).
"""

from __future__ import annotations

import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gapbench import devices, suites, workloads
from gapbench.engine.jobs import WorkloadJob
from gapbench.engine.journal import Journal, journal_path
from gapbench.errors import GapbenchError
from gapbench.results import SCHEMA_VERSION, Measurement, ResultSet, check_output, load, merge_runs, now_iso, save
from gapbench.run.workload import Reporter, attempt, launch_worker, run_workload
from gapbench.timing import DEFAULT_BUDGET

__all__ = ["RunPlan", "Reporter", "Interrupted", "build_plan", "run_suite", "read_journal", "journal_path",
           "default_output", "describe_files"]


class Interrupted(Exception):
    """The user interrupted the run; what finished is in the journal and the partial results file."""

    def __init__(self, output: str):
        self.output = output
        super().__init__(f"interrupted; finished results are kept in {output}; continue with: "
                         f"gapbench run --resume {output}")


@dataclass
class RunPlan:
    """What to run and how; stored in the journal header so that --resume needs nothing else."""

    device: str
    entries: list[tuple[str, str | None]]
    suite: str | None = None
    workload_files: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)  # workload options: dtype, compile, batch_size, …
    budget_s: float | None = None  # whole run
    variant_budget_s: float = DEFAULT_BUDGET.seconds
    timeout_s: float | None = None  # hard limit per variant; default 3×budget + 30 s
    min_time_s: float = DEFAULT_BUDGET.min_time_s
    repeats: int = DEFAULT_BUDGET.repeats
    threads: int | None = None
    memory_limit_bytes: int | None = None
    label: str | None = None
    runs: int = 1  # independent passes over the workloads, interleaved (A B A B …), each in fresh workers
    nproc: int | None = None  # ranks to start on this host through torch's elastic launcher (gapbench.distributed)
    backend: str | None = None  # torch.distributed backend; default per device (nccl, gloo, hccl, xccl)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["entries"] = [list(e) for e in self.entries]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> RunPlan:
        d = dict(d)
        d["entries"] = [tuple(e) for e in d.get("entries", [])]
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


def default_output(device: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name, n = f"gapbench-{device.replace(':', '')}-{stamp}.json", 1
    while os.path.exists(name) or os.path.exists(journal_path(name)):  # two runs in one second keep both
        n += 1
        name = f"gapbench-{device.replace(':', '')}-{stamp}-{n}.json"
    return name


def build_plan(*, device: str | None = None, suite: str | None = None, workload_specs: list[str] | None = None,
               workload_files: list[str] | None = None, **kw) -> RunPlan:
    """Resolve names into a plan; unknown device/suite/workload/preset -> GapbenchError before anything runs."""
    dev = devices.resolve(device)
    files = [str(Path(f).resolve()) for f in (workload_files or [])]
    file_info = describe_files(files, kw.get("timeout_s")) if files else {}
    entries: list[tuple[str, str | None]] = []
    device_class = "accelerator" if dev.is_accelerator else "cpu"
    if suite:
        entries += suites.entries(suite, device_class)
    for spec in workload_specs or []:
        entries.append(workloads.parse_spec(spec))
    if not entries and file_info:
        entries = [(n, None) for n in file_info]
    if not entries:
        suite = "quick"
        entries = suites.entries("quick", device_class)
    for name, preset in entries:
        if name in file_info:
            presets = file_info[name]["presets"]
        else:
            presets = list(workloads.get(name).presets)
        if preset is not None and preset not in presets:
            raise GapbenchError(f"unknown preset {preset!r} for workload {name!r}; known: {', '.join(presets)}")
    if int(kw.get("runs") or 1) < 1:
        raise GapbenchError(f"--runs must be at least 1, not {kw.get('runs')}")
    if kw.get("nproc") is not None:
        from gapbench.distributed.launch import check_nproc

        check_nproc(kw["nproc"], dev)
    return RunPlan(device=str(dev), entries=entries, suite=suite, workload_files=files, **kw)


def describe_files(files: list[str], timeout_s: float | None = None) -> dict:
    """Import workload files in a throwaway worker (a file that crashes on import cannot take us down)."""
    job = WorkloadJob(workload="", device="cpu", workload_files=files, describe=True)
    a = attempt(job, launch_worker, timeout_s, Reporter(), lambda m: None)
    if a.described is not None:
        return a.described
    why = a.failure.reason if a.failure else "no answer"
    raise GapbenchError(f"workload file(s) {', '.join(files)} could not be imported: {why}")


def run_suite(plan: RunPlan | None = None, *, output: str | None = None, resume: str | None = None,
              reporter: Reporter | None = None, history: bool = True, force: bool = False,
              _rank_scratch: bool = False, **plan_kw) -> ResultSet:
    """Run a plan (or build one from keyword arguments) and return the ResultSet written to `output`.
    An existing results file at `output` is replaced only with force=True."""
    reporter = reporter or Reporter()
    rank = _external_rank()
    if rank and not _rank_scratch:  # one rank of an external torchrun job, not rank 0: run along, keep nothing
        return _run_as_follower(rank, plan, reporter, plan_kw)
    done: dict[tuple[int, str], Measurement] = {}
    header: dict | None = None
    if resume:
        output = resume
        header, done = read_journal(resume)
        plan = RunPlan.from_dict(header["plan"])
        reporter.note(f"resuming {resume}: {len(done)} measurement(s) already done")
    if plan is None:
        plan = build_plan(**plan_kw)
    output = output or default_output(plan.device)
    check_output(output, inputs=plan.workload_files, force=force or bool(resume), resume_hint=not resume)
    journal = Journal(journal_path(output))
    host = devices.host_identity()
    if header is None:
        header = {"event": "header", "run_id": ResultSet(host={}, device={}).run_id, "started_at": now_iso(),
                  "plan": plan.to_dict(), "host": host}
    # a fresh journal, or the resumed one rewritten: a line a kill tore stays out of it
    journal.start(header, [{"event": "measurement", "pass": p, "measurement": m.to_dict()}
                           for (p, _), m in done.items()])
    rs = ResultSet(host=header.get("host") or host, device={}, suite=plan.suite, label=plan.label,
                   run_id=header["run_id"], started_at=header["started_at"],
                   options={k: v for k, v in plan.to_dict().items() if k != "entries"} | {
                       "workloads": [f"{n}:{p}" if p else n for n, p in plan.entries]})
    passes: dict[tuple[int, str], Measurement] = dict(done)
    try:
        identity = _run_entries(plan, passes, journal, set(done), reporter) or header.get("device")
    except KeyboardInterrupt:
        rs.measurements = _by_variant(passes)
        rs.device = header.get("device") or devices.resolve(plan.device).identity()
        rs.finished_at = now_iso()
        save(rs, output)
        raise Interrupted(output) from None
    rs.measurements = _by_variant(passes)
    rs.device = identity or devices.resolve(plan.device).identity()
    if plan.suite == "parity" or plan.options.get("frameworks"):
        from gapbench.frameworks import probe_all  # each framework in its own subprocess, never installs

        reporter.note("probing deep-learning frameworks on the device")
        rs.frameworks = probe_all(plan.device)
    rs.finished_at = now_iso()
    rs.complete = True
    save(rs, output)
    rs.path = output
    journal.remove()
    if history:
        _record_history(rs, reporter)
    return rs


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
    steps = [(p, name, preset) for p in range(runs) for name, preset in plan.entries]
    for i, (p, name, preset) in enumerate(steps):
        def on_result(m: Measurement, p=p) -> None:
            journal.append({"event": "measurement", "pass": p, "measurement": m.to_dict()})
            passes[(p, m.key)] = m
            reporter.variant_done(m)

        workload_budget = None
        if plan.budget_s:
            left = plan.budget_s - (time.monotonic() - t_start)
            workload_budget = max(left, 1.0) / (len(steps) - i)
        reporter.workload_started(name if runs == 1 else f"{name} (run {p + 1}/{runs})", preset)
        skip = {key for (q, key) in done if q == p}
        ident = run_workload(_job(plan, name, preset, workload_budget, skip), launch,
                             timeout_s=plan.timeout_s, reporter=reporter, on_result=on_result)
        if ident and not identity:
            identity = ident
            journal.append({"event": "device", "identity": identity})
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


def _record_history(rs: ResultSet, reporter: Reporter) -> None:
    try:
        from gapbench import history

        history.record(rs)
    except ImportError:
        pass
    except Exception as e:  # history is a convenience; never lose a run over it
        reporter.note(f"warning: could not record the run in the history database: {e}")


def read_journal(output: str) -> tuple[dict, dict[tuple[int, str], Measurement]]:
    """The header and finished measurements, by (pass, variant key), of an interrupted run (journal, else the
    partial file); a journal or file that cannot be resumed is a GapbenchError naming what is wrong."""
    journal = Journal(journal_path(output))
    done: dict[tuple[int, str], Measurement] = {}
    if journal.exists():
        contents = journal.read(is_header=lambda o: o.get("event") == "header", what="run journal")
        header = contents.header
        if header is None or not isinstance(header.get("plan"), dict):
            raise GapbenchError(f"cannot resume {output}: its journal {journal.path} has no run plan")
        for ev in contents.entries:
            if ev.get("event") == "device" and isinstance(ev.get("identity"), dict):
                header["device"] = ev["identity"]
            elif ev.get("event") == "measurement":
                try:
                    m = Measurement.from_dict(ev["measurement"])
                    p = int(ev.get("pass") or 0)
                except (ValueError, KeyError, TypeError):
                    continue  # an entry that does not read is measured again
                done[(p, m.key)] = m
    elif not os.path.exists(output):
        raise GapbenchError(f"cannot resume {output}: neither it nor its journal {journal.path} exists")
    else:
        rs = load(output)
        workloads_ = rs.options.get("workloads")
        if not isinstance(workloads_, list) or "device" not in rs.options:
            raise GapbenchError(f"cannot resume {output}: it does not record its run plan")
        if rs.options.get("runs") not in (None, 1):
            raise GapbenchError(f"cannot resume {output} without its journal: its {rs.options['runs']} runs are "
                                "merged in the file")
        plan = dict(rs.options)
        plan["entries"] = [list(workloads.parse_spec(s)) if isinstance(s, str) else s for s in workloads_]
        header = {"event": "header", "run_id": rs.run_id, "started_at": rs.started_at, "plan": plan,
                  "host": rs.host, "device": rs.device}
        for m in rs.measurements:
            done.setdefault((0, m.key), m)
    _check_header(header, output)
    return header, done


def _check_header(header: dict, output: str) -> None:
    """The plan, run id, host and device a resumed run is built from must make a valid results file."""
    from gapbench import schema

    try:
        schema.check_run_plan(header["plan"])
    except schema.SchemaError as e:
        raise GapbenchError(f"cannot resume {output}: its run plan is damaged: plan.{e}") from None
    head = {"schema_version": SCHEMA_VERSION, "run_id": header.get("run_id"), "started_at": header.get("started_at"),
            "host": header.get("host") or {}, "device": header.get("device") or {}, "measurements": []}
    try:
        schema.check_results_file(head)
    except schema.SchemaError as e:
        raise GapbenchError(f"cannot resume {output}: its journal header is damaged: {e}") from None


# ---- one workload in worker processes -----------------------------------------------------------

def _job(plan: RunPlan, name: str, preset: str | None, workload_budget: float | None, skip: set[str]) -> WorkloadJob:
    backend = devices.resolve(plan.device).backend
    mem = plan.memory_limit_bytes
    if mem is None and backend.host_memory_is_device_memory:
        mem = int(devices.host_memory() * 0.85) or None
    job = WorkloadJob(workload=name, preset=preset, device=plan.device, workload_files=list(plan.workload_files),
                      skip=sorted(skip), workload_budget_s=workload_budget, variant_budget_s=plan.variant_budget_s,
                      min_time_s=plan.min_time_s, repeats=plan.repeats, options=dict(plan.options),
                      threads=plan.threads, memory_limit_bytes=mem if backend.host_memory_is_device_memory else None)
    if plan.nproc or _external_rank() is not None:
        # the group's own time limit outlasts the runner's, whose hang diagnosis names the rank; where ranks
        # share the host's cores they measure single-device workloads in turn, so one waits for all the others
        limit = (plan.timeout_s or 3 * plan.variant_budget_s + 30) * (
            (plan.nproc or 1) if backend.host_memory_is_device_memory else 1)
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
