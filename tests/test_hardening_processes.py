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


# a grandchild that leaves the session and clears its environment: no process group, no token reaches it; the
# subreaper does (it comes back to the parent when its own parent ends)
ESCAPE = '''
import os, signal, sys

def escape(note):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            os.execve("/bin/sleep", ["sleep", "300"], {})
        os._exit(0)
    os.waitpid(pid, 0)
    with open(note, "a") as f:
        f.write("%d\\n" % pid)
'''


def sleepers_of_session(sid: int) -> list[int]:
    import psutil

    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.info["cmdline"] == ["sleep", "300"] and os.getsid(p.pid) == sid:
                out.append(p.pid)
        except (OSError, psutil.Error):
            pass
    return out


def escaped(note) -> list[int]:
    """The escaped grandchildren: the sleepers in the sessions whose leaders the note names."""
    return [pid for sid in pids(note.parent, note.stem) for pid in sleepers_of_session(sid)]


def gone(pid: int) -> bool:
    """Not there at all: killed and reaped (a zombie still has its /proc entry)."""
    return not os.path.exists(f"/proc/{pid}")


@pytest.mark.parametrize("then", ["exit", "die"])
def test_a_grandchild_that_left_the_session_and_the_environment_ends_with_its_child(tmp_path, then):
    from gapbench.engine.supervise import Child

    note = tmp_path / "escaped.pids"
    end = "os._exit(0)" if then == "exit" else "os.kill(os.getpid(), signal.SIGKILL)"
    code = ESCAPE + f"escape({str(note)!r})\n{end}\n"
    with Child([sys.executable, "-c", code]) as child:
        out = child.follow(30)
        left = escaped(note)
        assert len(left) == 1, "the grandchild did not start"
    assert out.returncode == (0 if then == "exit" else -signal.SIGKILL)
    # killed, and reaped by this process (its subreaper): no zombie left behind
    assert wait_until(lambda: gone(left[0]), 5), left


def test_what_a_child_left_behind_ends_when_its_parent_exits_without_closing_it(tmp_path):
    note = tmp_path / "escaped.pids"
    child = ESCAPE + f"escape({str(note)!r})\nimport time\ntime.sleep(300)\n"
    parent = ("import sys, time\nfrom gapbench.engine.supervise import Child\n"
              f"c = Child([sys.executable, '-c', {child!r}])\n"
              f"while not open({str(note)!r}, 'a+').seek(0, 2):\n    time.sleep(0.05)\n"
              "time.sleep(0.2)\nsys.exit(0)\n")
    subprocess.run([sys.executable, "-c", parent], timeout=60, check=True)
    (sid,) = pids(tmp_path, "escaped")
    assert wait_until(lambda: not escaped(note) and not alive(sid), 5), escaped(note)


ESCAPING_WORKLOAD = ESCAPE + '''
from gapbench.timing import time_fn
from gapbench.workloads import Variant, Workload

NOTE = os.path.join(os.environ["ESCAPE_DIR"], "escaped.pids")


class Escaping(Workload):
    name = "escaping"
    unit = "calls/s"
    description = "variants that leave a grandchild outside the worker's session, with an empty environment"
    presets = {"tiny": "one that returns, one whose worker dies, a good one"}
    default_preset = "tiny"

    def variants(self, preset, ctx):
        return [Variant({"mode": m}) for m in ("returns", "dies", "good")]

    def run(self, variant, ctx):
        if variant.params["mode"] != "good":
            escape(NOTE)
        if variant.params["mode"] == "dies":
            os.kill(os.getpid(), signal.SIGKILL)
        timing = time_fn(lambda: sum(range(100)), ctx.device, budget_s=ctx.budget_s, min_time_s=0.01, repeats=3)
        return self.throughput(variant, ctx, timing, 1.0)
'''


@pytest.mark.slow
def test_gapbench_run_leaves_no_grandchild_that_escaped_its_worker(tmp_path):
    wl = tmp_path / "escaping.py"
    wl.write_text(ESCAPING_WORKLOAD)
    out = tmp_path / "escaping.json"
    r = gapbench("run", "--device", "cpu", "--workload-file", wl, "--variant-budget", "0.2", "--repeats", "3",
                 "--output", out, "--no-history", "--quiet", env={"ESCAPE_DIR": str(tmp_path)}, timeout=120)
    assert r.returncode == 0, r.stderr
    status = {m.variant["mode"]: m.status for m in load(out).measurements}
    assert status == {"returns": "ok", "dies": "crashed", "good": "ok"}
    assert len(pids(tmp_path, "escaped")) == 2, "the grandchildren did not start"
    assert escaped(tmp_path / "escaped.pids") == []
