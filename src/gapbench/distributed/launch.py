"""Starting the ranks of one workload and following them: PyTorch's elastic launcher for `--nproc N`,
or one rank of an external torchrun job; through the engine's supervisor, with a time limit, and the
failing rank named.

The runner uses `launch_ranks(job, timeout_s, on_event)` where it would start a single worker; it returns
the engine's Outcome, whose `hint` names the rank that failed or hung when that could be found:

- a rank that dies: the launcher's failure summary (rank, local rank, exit code or signal) and the rank
  status files tell which rank died first (ranks that lost a peer fail after it, by exception);
- a rank that hangs: at the time limit every rank is asked for its Python stack (faulthandler on
  SIGUSR1); a rank outside torch.distributed while the others wait inside it, or a rank whose heartbeat
  stopped, is named.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time

from gapbench.distributed.info import under_launcher
from gapbench.engine.jobs import WorkloadJob, worker_env
from gapbench.engine.supervise import Child, Outcome

HEARTBEAT_STALE_S = 5.0
_join_count = 0
_store = None  # the TCPStore rank 0 hosts when an external launcher provides none


def launcher_command(nproc: int, log_dir: str) -> list[str]:
    """PyTorch's own elastic launcher (torchrun), one node, a private rendezvous, no restarts; its error
    files go to log_dir (removed with the run) instead of a new folder in the system temp dir."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
            "--nproc-per-node", str(nproc), "--max-restarts", "0", "--monitor-interval", "0.2",
            "--log-dir", log_dir, "-m", "gapbench.distributed.rank_worker"]


def launch_ranks(job: WorkloadJob, timeout_s: float, on_event=None) -> Outcome:
    """Run one workload on every rank; stream rank 0's events to on_event (which may return a new timeout)."""
    folder = tempfile.mkdtemp(prefix="gapbench-dist-")
    try:
        return _run(job, timeout_s, on_event, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run(job: WorkloadJob, timeout_s: float, on_event, folder: str) -> Outcome:
    job_file = os.path.join(folder, "job.json")
    with open(job_file, "w", encoding="utf-8") as f:
        f.write(job.model_dump_json())
    env = worker_env(job)
    env.update(GAPBENCH_JOB_FILE=job_file, GAPBENCH_DIST_DIR=folder)
    if job.nproc:
        for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                  "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE"):
            env.pop(k, None)  # a fresh group of our own, even when this gapbench runs inside another job
        # the launcher is not gapbench's code: tie it to this process before it becomes torch's launcher
        cmd = [sys.executable, "-m", "gapbench.engine.lifeline", str(os.getpid()), "--",
               *launcher_command(job.nproc, os.path.join(folder, "torchelastic"))]
    else:
        cmd = [sys.executable, "-m", "gapbench.distributed.rank_worker"]
        env.update(GAPBENCH_EVENTS_EVERY_RANK="1", GAPBENCH_STORE_PREFIX=_join_prefix(job))
    held: list[dict] = []  # a rank's set-up failure: told after the launcher says who failed first

    def handle(ev: dict):
        if ev.get("event") in ("setup_error", "bad_input"):
            held.append(ev)
            return None
        return on_event(ev) if on_event else None

    child = Child(cmd, env=env, what="rank group")
    try:
        out = child.follow(timeout_s, handle, on_deadline=lambda: diagnose_hang(folder))
    finally:
        child.close()
    hint, died = out.hint, False
    if not out.timed_out and out.returncode != 0:
        hint, died = first_failure(out.log, folder)
    for ev in held if not died else []:  # a rank that died is the story, not its peers' lost connections
        if hint and ev.get("event") == "setup_error":
            ev = ev | {"reason": f"{hint}; then {ev.get('reason', '')}"}
        out.events.append(ev)
        if on_event:
            on_event(ev)
    out.hint = hint
    return out


def _join_prefix(job: dict) -> str:
    """A store prefix every rank's runner computes alike: the job id and how many workloads came before."""
    global _join_count, _store
    _join_count += 1
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True" and os.environ.get("RANK") == "0" and _store is None:
        import torch.distributed as dist

        _store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=True,
                               wait_for_workers=False)
    run_id = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("SLURM_JOB_ID") or "job"
    return f"gapbench/{run_id}/{_join_count}/{job.workload}/"


# ---- stopping and naming ----------------------------------------------------------------------

def rank_status(folder: str) -> dict[int, dict]:
    out = {}
    for name in os.listdir(folder):
        m = re.fullmatch(r"rank(\d+)\.json", name)
        if m:
            try:
                with open(os.path.join(folder, name)) as f:
                    out[int(m.group(1))] = json.load(f)
            except (OSError, ValueError):
                pass
    return dict(sorted(out.items()))


_FAILURE = re.compile(r"host\s*:\s*(?P<host>\S+)\s*\n\s*rank\s*:\s*(?P<rank>\d+)\s*\(local_rank:\s*(?P<local>\d+)\)"
                      r"\s*\n\s*exitcode\s*:\s*(?P<code>-?\d+)")


def first_failure(log: str, folder: str) -> tuple[str, bool]:
    """Which rank failed first, and whether it died (rather than failing by an exception it reported),
    from the launcher's failure summary and the ranks' status files.

    A rank that lost a peer fails after it by exception (its status says 'failed: …'), and the launcher
    stops the survivors with SIGTERM; the rank that died by another signal, or exited without recording
    a failure, is the cause.
    """
    status = rank_status(folder)
    found = [m.groupdict() for m in _FAILURE.finditer(log)]
    if not found:
        dead = [r for r, st in status.items() if not str(st.get("phase", "")).startswith(("failed", "done"))]
        if not dead:
            return "", False
        return f"rank {dead[0]} stopped unexpectedly (phase: {status[dead[0]].get('phase')})", True
    teardown = (-signal.SIGTERM, -signal.SIGINT)

    def cause_rank(f: dict) -> tuple:
        """Signal deaths first, then exits nobody explained, then reported failures (earliest first), then
        the survivors the launcher stopped."""
        code = int(f["code"])
        st = status.get(int(f["rank"]), {})
        failed = str(st.get("phase", "")).startswith("failed")
        if code < 0 and code not in teardown:
            order = 0
        elif failed:
            order = 2
        elif code in teardown:
            order = 3
        else:
            order = 1
        return (order, float(st.get("failed_at") or 0), int(f["rank"]))

    f = min(found, key=cause_rank)
    code = int(f["code"])
    if code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
        if code == -signal.SIGKILL:
            how += " (an external kill or the out-of-memory killer)"
    else:
        phase = status.get(int(f["rank"]), {}).get("phase", "")
        how = f"exited with code {code}" + (f" ({phase})" if phase else "")
    others = sorted({int(x["rank"]) for x in found} - {int(f["rank"])})
    text = f"rank {f['rank']} (local rank {f['local']}, host {f['host']}) {how}"
    if others:
        text += f"; rank(s) {', '.join(map(str, others))} stopped after it"
    return text, cause_rank(f)[0] < 2


def diagnose_hang(folder: str, wait_s: float = 1.0) -> str:
    """Name the rank(s) holding the others up: ask each for its stack and look at its heartbeat."""
    status = rank_status(folder)
    if not status:
        return "no rank reported in before the time limit (stuck in start-up or rendezvous)"
    now = time.time()
    for st in status.values():
        try:
            os.kill(int(st["pid"]), signal.SIGUSR1)
        except (ProcessLookupError, PermissionError, KeyError, ValueError):
            pass
    time.sleep(wait_s)
    stale, outside, inside = [], [], []
    for r, st in status.items():
        where = _top_frames(os.path.join(folder, f"rank{r}.stack"), st.get("thread"))
        if now - float(st.get("t", 0)) > HEARTBEAT_STALE_S:
            stale.append(f"rank {r} (pid {st.get('pid')}) stopped responding {now - st.get('t', now):.0f} s ago "
                         f"(phase: {st.get('phase')})")
        elif where and not any("torch/distributed" in fr for fr in where):
            outside.append(f"rank {r} is busy outside any collective, at {where[0]}")
        elif where:
            inside.append(r)
    parts = stale + outside
    if parts and inside:
        parts.append(f"rank(s) {', '.join(map(str, inside))} wait for it inside torch.distributed")
    if not parts:
        phases = {r: st.get("phase") for r, st in status.items()}
        parts = [f"no single rank stands out; phases: {phases}"]
    return "; ".join(parts)


def _top_frames(path: str, thread: str | None = None) -> list[str]:
    """Frames of `thread` (default: the first) in the last faulthandler dump in path, innermost first,
    as 'function (file:line)'."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return []
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        head = re.match(r"(?:Current thread|Thread) (0x[0-9a-f]+)", line)
        if head:
            blocks.append((head.group(1), []))
            continue
        m = re.match(r'\s*File "(.+)", line (\d+) in (\S+)', line)
        if m and blocks:
            blocks[-1][1].append(f"{m.group(3)} ({m.group(1)}:{m.group(2)})")
    if thread:
        mine = [frames for tid, frames in blocks if int(tid, 16) == int(thread, 16)]
        return mine[-1] if mine else []
    return blocks[-1][1] if blocks else []


def external_rank() -> int | None:
    """RANK when this gapbench process is one rank of an external launcher's job, else None."""
    return int(os.environ["RANK"]) if under_launcher() else None


MAX_RANKS = 256  # the most ranks --oversubscribe starts on one host, however many cores it has
RANKS_PER_CORE = 4  # and at most this many per usable core


def check_nproc(nproc: int, device, oversubscribe: bool = False) -> None:
    """--nproc N: at least 1 and at most the devices of this host (one rank per device) or, where ranks share
    the CPU, its usable cores; with `oversubscribe`, CPU ranks up to RANKS_PER_CORE per core and MAX_RANKS in all.
    A GapbenchError before any process starts: a launcher asked for a million ranks would never come back."""
    import torch.distributed

    from gapbench.devices.host import usable_cpus
    from gapbench.errors import GapbenchError

    if nproc < 1:
        raise GapbenchError(f"--nproc must be at least 1, not {nproc}")
    most = device.max_ranks_per_host()
    if most is not None and nproc > most:
        raise GapbenchError(f"--nproc {nproc}: only {most} {device.kind} device(s) on this host "
                            "(one rank per device); for more, run on several nodes under torchrun")
    if most is None:
        cores = max(1, len(usable_cpus()))
        hard = min(MAX_RANKS, RANKS_PER_CORE * cores)
        if nproc > hard:
            raise GapbenchError(f"--nproc {nproc}: at most {hard} ranks on this host's {cores} usable core(s), even "
                                f"with --oversubscribe ({RANKS_PER_CORE} per core, {MAX_RANKS} in all)")
        if nproc > cores and not oversubscribe:
            raise GapbenchError(f"--nproc {nproc}: this host has {cores} usable core(s), one rank each; add "
                                "--oversubscribe to start more ranks than cores")
    if not torch.distributed.is_available():
        raise GapbenchError("this torch build has no torch.distributed; --nproc needs it")
