"""Runs a suite: one worker process per workload, with budgets, timeouts, a journal, resume, progress.

Every finished measurement is appended (and fsynced) to `<output>.journal.jsonl` at once, so an
interrupted run — Ctrl-C or kill -9 — loses nothing finished; `run_suite(resume=output)` completes it.
The results file itself is written atomically at the end (and, marked incomplete, on Ctrl-C).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from gapbench import devices, suites, workloads
from gapbench.errors import GapbenchError
from gapbench.events import log_tail, split_events
from gapbench.results import Measurement, ResultSet, load, now_iso, save

STARTUP_TIMEOUT_S = 300.0  # imports + variants() of one workload (model libraries are slow to import)


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
    variant_budget_s: float = 60.0
    timeout_s: float | None = None  # hard limit per variant; default 3×budget + 30 s
    min_time_s: float = 0.1
    repeats: int = 7
    threads: int | None = None
    memory_limit_bytes: int | None = None
    label: str | None = None
    nproc: int | None = None  # ranks to start on this host through torch's elastic launcher (gapbench.dist)
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


class Reporter:
    """Progress callbacks; the CLI draws a progress bar from them. The base class is silent."""

    def workload_started(self, name: str, preset: str | None) -> None: ...
    def variants_known(self, name: str, todo: int, total: int) -> None: ...
    def variant_started(self, name: str, params: dict) -> None: ...
    def variant_done(self, m: Measurement) -> None: ...
    def note(self, text: str) -> None: ...


def default_output(device: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"gapbench-{device.replace(':', '')}-{stamp}.json"


def journal_path(output: str) -> str:
    return output + ".journal.jsonl"


def build_plan(*, device: str | None = None, suite: str | None = None, workload_specs: list[str] | None = None,
               workload_files: list[str] | None = None, **kw) -> RunPlan:
    """Resolve names into a plan; unknown device/suite/workload/preset -> GapbenchError before anything runs."""
    dev = devices.resolve(device)
    files = [str(Path(f).resolve()) for f in (workload_files or [])]
    file_info = describe_files(files) if files else {}
    entries: list[tuple[str, str | None]] = []
    if suite:
        entries += suites.entries(suite, dev.type)
    for spec in workload_specs or []:
        entries.append(workloads.parse_spec(spec))
    if not entries and file_info:
        entries = [(n, None) for n in file_info]
    if not entries:
        suite = "quick"
        entries = suites.entries("quick", dev.type)
    for name, preset in entries:
        if name in file_info:
            presets = file_info[name]["presets"]
        else:
            presets = list(workloads.get(name).presets)
        if preset is not None and preset not in presets:
            raise GapbenchError(f"unknown preset {preset!r} for workload {name!r}; known: {', '.join(presets)}")
    if kw.get("nproc") is not None:
        from gapbench.dist.launch import check_nproc

        check_nproc(kw["nproc"], dev)
    return RunPlan(device=str(dev), entries=entries, suite=suite, workload_files=files, **kw)


def describe_files(files: list[str]) -> dict:
    """Import workload files in a throwaway worker (a file that crashes on import cannot take us down)."""
    events, _, rc, log = _run_worker({"describe": True, "workload_files": files}, timeout_s=STARTUP_TIMEOUT_S)
    for e in events:
        if e["event"] == "describe":
            return e["workloads"]
        if e["event"] in ("bad_input", "setup_error"):
            raise GapbenchError(e["reason"])
    raise GapbenchError(f"workload file(s) {', '.join(files)} could not be imported: {_exit_reason(rc, log)}")


def run_suite(plan: RunPlan | None = None, *, output: str | None = None, resume: str | None = None,
              reporter: Reporter | None = None, history: bool = True, _rank_scratch: bool = False,
              **plan_kw) -> ResultSet:
    """Run a plan (or build one from keyword arguments) and return the ResultSet written to `output`."""
    reporter = reporter or Reporter()
    rank = _external_rank()
    if rank and not _rank_scratch:  # one rank of an external torchrun job, not rank 0: run along, keep nothing
        import shutil

        scratch = tempfile.mkdtemp(prefix=f"gapbench-rank{rank}-")
        try:
            rs = run_suite(plan, output=os.path.join(scratch, "results.json"), reporter=reporter, history=False,
                           _rank_scratch=True, **plan_kw)
            rs.path = None
            return rs
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    done: dict[str, Measurement] = {}
    header: dict | None = None
    if resume:
        output = resume
        header, done = read_journal(resume)
        plan = RunPlan.from_dict(header["plan"])
        reporter.note(f"resuming {resume}: {len(done)} measurement(s) already done")
    if plan is None:
        plan = build_plan(**plan_kw)
    output = output or default_output(plan.device)
    jpath = journal_path(output)
    host = devices.host_identity()
    if header is None:
        header = {"event": "header", "run_id": ResultSet(host={}, device={}).run_id, "started_at": now_iso(),
                  "plan": plan.to_dict(), "host": host}
        _append(jpath, header, fresh=True)
    rs = ResultSet(host=header.get("host") or host, device={}, suite=plan.suite, label=plan.label,
                   run_id=header["run_id"], started_at=header["started_at"],
                   options={k: v for k, v in plan.to_dict().items() if k != "entries"} | {
                       "workloads": [f"{n}:{p}" if p else n for n, p in plan.entries]})
    rs.measurements = list(done.values())
    identity = header.get("device")

    try:
        t_start = time.monotonic()
        for i, (name, preset) in enumerate(plan.entries):
            workload_budget = None
            if plan.budget_s:
                left = plan.budget_s - (time.monotonic() - t_start)
                workload_budget = max(left, 1.0) / (len(plan.entries) - i)
            reporter.workload_started(name, preset)

            def on_result(m: Measurement) -> None:
                _append(jpath, {"event": "measurement", "measurement": m.to_dict()})
                rs.measurements.append(m)
                reporter.variant_done(m)

            ident = _run_workload(plan, name, preset, workload_budget, set(done), on_result, reporter)
            if ident and not identity:
                identity = ident
                _append(jpath, {"event": "device", "identity": identity})
    except KeyboardInterrupt:
        rs.device = identity or devices.resolve(plan.device).identity()
        rs.finished_at = now_iso()
        save(rs, output)
        raise Interrupted(output) from None

    rs.device = identity or devices.resolve(plan.device).identity()
    if plan.suite == "parity" or plan.options.get("frameworks"):
        from gapbench.frameworks import probe_all  # each framework in its own subprocess, never installs

        reporter.note("probing deep-learning frameworks on the device")
        rs.frameworks = probe_all(plan.device)
    rs.finished_at = now_iso()
    rs.complete = True
    save(rs, output)
    rs.path = output
    try:
        os.unlink(jpath)
    except OSError:
        pass
    if history:
        try:
            from gapbench import store

            store.record(rs)
        except ImportError:
            pass
        except Exception as e:  # history is a convenience; never lose a run over it
            reporter.note(f"warning: could not record the run in the history database: {e}")
    return rs


def read_journal(output: str) -> tuple[dict, dict[str, Measurement]]:
    """The header and finished measurements of an interrupted run (journal, else the partial file)."""
    jpath = journal_path(output)
    header = None
    done: dict[str, Measurement] = {}
    if os.path.exists(jpath):
        with open(jpath, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line torn by kill -9 mid-write: the measurement in it is re-run
                if ev.get("event") == "header":
                    header = ev
                elif ev.get("event") == "device" and header is not None:
                    header["device"] = ev["identity"]
                elif ev.get("event") == "measurement":
                    try:
                        m = Measurement.from_dict(ev["measurement"])
                    except (ValueError, KeyError):
                        continue
                    done[m.key] = m
    if header is None:
        if not os.path.exists(output):
            raise GapbenchError(f"cannot resume {output}: neither it nor its journal {jpath} exists")
        rs = load(output)
        if "plan" not in rs.options and "entries" not in rs.options:
            raise GapbenchError(f"cannot resume {output}: it does not record its run plan")
        plan = dict(rs.options)
        plan["entries"] = [list(workloads.parse_spec(s)) for s in rs.options.get("workloads", [])]
        header = {"event": "header", "run_id": rs.run_id, "started_at": rs.started_at, "plan": plan,
                  "host": rs.host, "device": rs.device}
        for m in rs.measurements:
            done.setdefault(m.key, m)
        _append(jpath, header, fresh=True)
        for m in done.values():
            _append(jpath, {"event": "measurement", "measurement": m.to_dict()})
    return header, done


def _append(path: str, event: dict, fresh: bool = False) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w" if fresh else "a", encoding="utf-8") as f:
        f.write(json.dumps(event, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())


# ---- one workload in worker processes -----------------------------------------------------------

def _job(plan: RunPlan, name: str, preset: str | None, workload_budget: float | None, skip: set[str]) -> dict:
    mem = plan.memory_limit_bytes
    if mem is None and plan.device == "cpu":
        mem = int(devices.host_memory() * 0.85) or None
    job = {"workload": name, "preset": preset, "device": plan.device, "workload_files": plan.workload_files,
           "skip": sorted(skip), "workload_budget_s": workload_budget, "variant_budget_s": plan.variant_budget_s,
           "min_time_s": plan.min_time_s, "repeats": plan.repeats, "options": plan.options,
           "threads": plan.threads, "memory_limit_bytes": mem if plan.device == "cpu" else None}
    if plan.nproc or _external_rank() is not None:
        # the group's own time limit outlasts the runner's, whose hang diagnosis names the rank; on the CPU
        # the ranks measure single-device workloads in turn, so one waits for all the others
        limit = (plan.timeout_s or 3 * plan.variant_budget_s + 30) * ((plan.nproc or 1) if plan.device == "cpu" else 1)
        job.update(nproc=plan.nproc, backend=plan.backend, launcher="gapbench" if plan.nproc else "torchrun",
                   dist_timeout_s=limit + 60)
        if job["memory_limit_bytes"] and plan.nproc:  # the CPU ranks of this host share its memory
            job["memory_limit_bytes"] //= plan.nproc
    return job


def _external_rank() -> int | None:
    """RANK when this process is one rank of an external torchrun job (env vars present), else None."""
    from gapbench.dist.info import env_rank

    return env_rank()


def _run_workload(plan: RunPlan, name: str, preset: str | None, workload_budget: float | None,
                  done: set[str], on_result, reporter: Reporter) -> dict | None:
    """Run all variants of one workload not in `done`; restart the worker after a crash or timeout."""
    skip = set(done)
    identity = None
    t0 = time.monotonic()
    known: dict[str, dict] = {}  # key -> params of variants the worker announced
    unit, hib = "", True
    for _attempt in range(1000):
        left = None if workload_budget is None else max(workload_budget - (time.monotonic() - t0), 1.0)
        job = _job(plan, name, preset, left, skip)
        result = _WorkerRun(job, plan, reporter, on_result)
        result.run()
        identity = identity or result.identity
        known.update(result.announced)
        unit = result.unit or unit
        hib = result.higher_is_better
        skip |= result.finished
        if result.failure is None:
            return identity
        status, reason = result.failure
        if result.current is None:
            # failed outside any variant: before the variants were known, or between them
            if not result.announced and not known:
                on_result(Measurement(workload=name, preset=preset, variant={}, unit=unit or "-", status=status,
                                      reason=f"worker failed before running any variant: {reason}"))
                return identity
            remaining = [k for k in known if k not in skip]
            if not remaining:
                return identity
            # a failure between variants: blame the next one so the restart makes progress
            key = remaining[0]
        else:
            key = result.current
        params = known.get(key, {})
        on_result(Measurement(workload=name, preset=preset or None, variant=params, unit=unit or "-",
                              higher_is_better=hib, status=status, reason=reason))
        skip.add(key)
        if not [k for k in known if k not in skip]:
            return identity
    return identity


class _WorkerRun:
    """One worker process: feed it the job, follow its events, enforce timeouts."""

    def __init__(self, job: dict, plan: RunPlan, reporter: Reporter, on_result):
        self.job, self.plan, self.reporter, self.on_result = job, plan, reporter, on_result
        self.identity: dict | None = None
        self.announced: dict[str, dict] = {}
        self.finished: set[str] = set()
        self.current: str | None = None
        self.failure: tuple[str, str] | None = None
        self.unit = ""
        self.higher_is_better = True

    def _variant_timeout(self, budget: float) -> float:
        if self.plan.timeout_s:
            return self.plan.timeout_s
        return 3 * budget + 30

    def run(self) -> None:
        def handle(ev: dict) -> float | None:
            kind = ev.get("event")
            if kind == "hello":
                self.identity = ev.get("device")
            elif kind == "variants":
                self.announced = dict(zip(ev["keys"], ev["variants"], strict=True))
                self.unit = ev.get("unit", "")
                self.higher_is_better = ev.get("higher_is_better", True)
                self.reporter.variants_known(self.job["workload"], ev["todo"], ev["total"])
            elif kind == "start":
                self.current = ev["key"]
                self.reporter.variant_started(self.job["workload"], ev["variant"])
                return self._variant_timeout(float(ev.get("budget_s") or 60))
            elif kind == "result":
                m = Measurement.from_dict(ev["measurement"])
                self.finished.add(ev["key"])
                self.current = None
                self.on_result(m)
                return STARTUP_TIMEOUT_S  # the next variant's set-up happens before its start event
            elif kind in ("setup_error", "bad_input"):
                reason = ev.get("reason", "")
                status = "oom" if "MemoryError" in reason or "out of memory" in reason.lower() else "error"
                self.failure = (status, reason)
            return None

        events, killed, rc, log = _run_worker(self.job, timeout_s=STARTUP_TIMEOUT_S, on_event=handle)
        if self.failure is not None:
            return
        if any(e.get("event") == "done" for e in events):
            return
        if killed:
            what = "variant" if self.current else "worker start-up"
            self.failure = ("timeout", f"{what} exceeded its time limit and was killed (budget "
                            f"{self.job.get('variant_budget_s')} s per variant)" + _dist_hint(log))
        else:
            status = "oom" if rc == -signal.SIGKILL else "crashed"
            hint = _dist_hint(log)
            self.failure = (status, f"ranks stopped (launcher exit code {rc}){hint}" if hint else _exit_reason(rc, log))


def _dist_hint(log: str) -> str:
    """'; <which rank failed or hung>' from a distributed run's log, '' otherwise."""
    from gapbench.dist.launch import HINT_PREFIX

    lines = [ln for ln in log.splitlines() if ln.startswith(HINT_PREFIX)]
    return "; " + lines[-1][len(HINT_PREFIX):] if lines else ""


def _exit_reason(rc: int | None, log: str) -> str:
    if rc is not None and rc < 0:
        try:
            sig = signal.Signals(-rc).name
        except ValueError:
            sig = f"signal {-rc}"
        base = f"worker killed by {sig}"
        if sig == "SIGKILL":
            base += " (most likely the kernel's out-of-memory killer)"
    else:
        base = f"worker exited with code {rc}"
    tail = [ln.strip() for ln in log.strip().splitlines() if ln.strip()]
    if tail:
        base += f": {tail[-1][:200]}"
    return base


def _run_worker(job: dict, timeout_s: float, on_event=None) -> tuple[list[dict], bool, int | None, str]:
    """Start a worker, stream its events to on_event (which may return a new timeout), and wait.

    Returns (events, killed_for_timeout, returncode, log tail).
    """
    if "dist_timeout_s" in job:  # a distributed run: the ranks, through torch's launcher or an external one
        from gapbench.dist.launch import run_ranks

        return run_ranks(job, timeout_s, on_event, nproc=job.get("nproc"))
    r, w = os.pipe()
    log = tempfile.TemporaryFile(mode="w+b")
    env = dict(os.environ)
    if job.get("threads"):
        env["OMP_NUM_THREADS"] = str(job["threads"])
    env.setdefault("PYTHONFAULTHANDLER", "1")
    proc = subprocess.Popen([sys.executable, "-m", "gapbench.worker", str(w)], stdin=subprocess.PIPE,
                            stdout=log, stderr=subprocess.STDOUT, pass_fds=(w,), env=env, start_new_session=True)
    os.close(w)
    events: list[dict] = []
    killed = False
    try:
        try:
            proc.stdin.write(json.dumps(job).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        deadline = time.monotonic() + timeout_s
        buf = b""
        while True:
            wait = deadline - time.monotonic()
            if wait <= 0:
                _kill(proc)
                killed = True
                break
            ready, _, _ = select.select([r], [], [], min(wait, 1.0))
            if not ready:
                continue
            chunk = os.read(r, 65536)
            if not chunk:
                break
            new_events, buf = split_events(buf + chunk)
            for ev in new_events:
                events.append(ev)
                new_timeout = on_event(ev) if on_event else None
                if new_timeout is not None:
                    deadline = time.monotonic() + new_timeout
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            _kill(proc)
            rc = proc.wait()
    except BaseException:
        _kill(proc)
        proc.wait()
        raise
    finally:
        os.close(r)
    return events, killed, rc, log_tail(log, 4000)


def _kill(proc: subprocess.Popen) -> None:
    """Kill the worker and everything it started (its own session/process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            proc.kill()
        except ProcessLookupError:
            pass
