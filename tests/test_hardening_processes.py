"""Process discipline, through real subprocesses: nothing a workload starts outlives gapbench or stalls it,
a malformed event is a failure of one variant, import time counts against --timeout, and failure reasons
say what happened (the limit applied, where a crash happened, a SIGKILL that may not be the OOM killer)."""

import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, gapbench
from gapbench.results import load

HOSTILE = FIXTURES / "hostile_workloads.py"


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie waiting for a parent that will never reap it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pids(folder, name) -> list[int]:
    p = folder / f"{name}.pids"
    return [int(x) for x in p.read_text().split()] if p.exists() else []


def wait_until(cond, timeout_s: float) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


@pytest.mark.slow
def test_hostile_variants_are_each_one_finding_and_leave_nothing_behind(tmp_path):
    out = tmp_path / "hostile.json"
    t0 = time.monotonic()
    r = gapbench("run", "--device", "cpu", "--workload-file", HOSTILE, "--workload", "hostile:mixed", "--timeout",
                 "4", "--variant-budget", "1", "--output", out, "--no-history", env={"HOSTILE_DIR": str(tmp_path)},
                 timeout=240)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    # a child holding the worker's files (the event channel too) did not hold the suite: one hang of 4 s, the
    # rest is starting workers
    assert took < 90, took
    rs = load(out)
    assert rs.complete
    got = {m.variant["mode"]: m for m in rs.measurements}
    assert [m for m in got] == ["fd_holder", "daemon", "malformed", "good", "segfault", "sigkill", "hang", "good2"]
    for mode in ("fd_holder", "daemon", "good", "good2"):
        assert got[mode].status == "ok", got[mode].reason
    # one malformed line on the event channel: that variant failed, the run went on and wrote its file
    assert got["malformed"].status == "error" and "malformed event" in got["malformed"].reason
    # the limit applied, not the default
    assert got["hang"].status == "timeout" and "time limit of 4 s" in got["hang"].reason
    # where the crash happened (faulthandler's frame, and the workload's own), not its module list
    seg = got["segfault"]
    assert seg.status == "crashed" and "SIGSEGV at " in seg.reason and "hostile_workloads.py:" in seg.reason
    assert "Extension modules" not in seg.reason
    # a SIGKILL while the cgroup's OOM counter stood still is not blamed on the OOM killer alone
    kill = got["sigkill"]
    assert kill.status == "crashed" and "SIGKILL" in kill.reason and "or an external kill" in kill.reason
    # the forked child and the daemonised (setsid) grandchild were killed when their worker ended
    left = pids(tmp_path, "fd_holder") + pids(tmp_path, "daemon")
    assert len(left) == 2
    assert wait_until(lambda: not any(alive(p) for p in left), 10), [p for p in left if alive(p)]


@pytest.mark.slow
def test_kill_9_of_gapbench_run_kills_its_worker(tmp_path):
    out = tmp_path / "hang.json"
    env = dict(os.environ, HOSTILE_DIR=str(tmp_path))
    cmd = [sys.executable, "-m", "gapbench", "run", "--device", "cpu", "--workload-file", str(HOSTILE),
           "--workload", "hostile:hang", "--output", str(out), "--no-history", "--quiet"]
    runner = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: pids(tmp_path, "worker"), 120), "the worker never started its variant"
        (worker,) = pids(tmp_path, "worker")
        assert alive(worker)
        runner.send_signal(signal.SIGKILL)  # the runner only: no chance to clean up
        runner.wait(timeout=30)
        assert wait_until(lambda: not alive(worker), 10), "the worker outlived gapbench run"
    finally:
        runner.kill()
        for p in pids(tmp_path, "worker"):
            if alive(p):
                os.kill(p, signal.SIGKILL)
    # what it journaled is still there to resume from
    assert (tmp_path / "hang.json.journal.jsonl").exists()


@pytest.mark.slow
def test_a_workload_file_that_hangs_at_import_is_held_to_timeout(tmp_path):
    t0 = time.monotonic()
    r = gapbench("run", "--device", "cpu", "--workload-file", FIXTURES / "hang_at_import.py", "--timeout", "3",
                 "--output", tmp_path / "x.json", "--no-history", timeout=120)
    assert time.monotonic() - t0 < 30
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "hang_at_import.py" in r.stderr and "time limit of 3 s" in r.stderr
    assert "out-of-memory" not in r.stderr and "OOM" not in r.stderr


@pytest.mark.slow
def test_a_workload_whose_set_up_hangs_is_held_to_timeout(tmp_path):
    out = tmp_path / "slow.json"
    t0 = time.monotonic()
    r = gapbench("run", "--device", "cpu", "--workload-file", HOSTILE, "--workload", "hostile:slow_variants",
                 "--timeout", "3", "--output", out, "--no-history", env={"HOSTILE_DIR": str(tmp_path)}, timeout=120)
    assert time.monotonic() - t0 < 40
    assert r.returncode == 0, r.stderr
    (m,) = load(out).measurements
    assert m.status == "timeout" and "start-up exceeded its time limit of 3 s" in m.reason


def test_the_event_folders_of_a_killed_parent_are_swept_by_the_next_one(tmp_path):
    import tempfile

    from gapbench.engine import supervise

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # a pid no process has any more
    stale = tempfile.mkdtemp(prefix=f"{supervise.DIR_PREFIX}{gone.pid}-")
    mine = tempfile.mkdtemp(prefix=f"{supervise.DIR_PREFIX}{os.getpid()}-")
    try:
        supervise._swept = False
        with supervise.Child([sys.executable, "-c", "pass"]) as child:
            child.follow(30)
            assert os.path.isdir(child._dir)
        assert not os.path.exists(stale) and os.path.isdir(mine)
        assert not os.path.exists(child._dir)
    finally:
        for d in (stale, mine):
            if os.path.isdir(d):
                os.rmdir(d)
