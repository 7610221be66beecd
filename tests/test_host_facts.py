"""Host and process facts read through psutil, checked on this machine with real processes: memory, CPU counts
and clocks agree with psutil and with each other, the host watch sees a busy neighbour, the supervisor finds
a daemonised grandchild by its token."""

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from gapbench.devices import host
from gapbench.engine import supervise
from gapbench.hostwatch import OTHER_CPU_SHARE


def test_memory_agrees_with_psutil_and_with_itself():
    total, available = host.host_memory(), host.available_host_memory()
    assert total == psutil.virtual_memory().total
    assert 0 < available <= total
    ident = host.host_identity()
    assert ident["memory_bytes"] == total


def test_cpu_counts_agree_with_psutil_and_with_each_other():
    ident = host.host_identity()
    assert ident["cpu_count"] == psutil.cpu_count()
    cpus = host.usable_cpus()
    if hasattr(psutil.Process, "cpu_affinity"):
        assert cpus == sorted(psutil.Process().cpu_affinity())
    assert ident["cpu_affinity"] == len(cpus) <= ident["cpu_count"]
    physical = ident["physical_cores"]
    assert physical is None or 1 <= physical <= ident["cpu_affinity"]
    assert physical is None or physical <= psutil.cpu_count(logical=False)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2
                    or not os.path.exists("/sys/devices/system/cpu/cpu0/topology/core_id"),
                    reason="needs a settable affinity over two CPUs and the kernel's CPU topology")
def test_physical_cores_count_only_the_cpus_this_process_may_use():
    code = ("import os, json\nos.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
            "from gapbench.devices import host\n"
            "print(json.dumps([len(host.usable_cpus()), host.physical_cores()]))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout) == [1, 1]


def test_clocks_agree_with_psutil():
    clocks = psutil.cpu_freq(percpu=True)
    top, current = host.cpu_max_mhz(), host.cpu_current_mhz()
    for mhz in (top, current):
        assert mhz is None or 100 <= mhz < 20000
    if any(c.max for c in clocks):
        assert top == max(c.max for c in clocks)
    if host.has_cpufreq():
        assert top is not None
    facts = host.clock_facts()
    assert facts["cpu_max_mhz"] == top and facts["cpufreq"] == host.has_cpufreq()


WATCH = r'''
import json, os, resource, subprocess, sys, time
from gapbench.hostwatch import Watch

if hasattr(os, "sched_setaffinity"):  # one CPU: one spinner is a busy host, and this process's work is on it
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def spin(s):
    t = time.monotonic() + s
    while time.monotonic() < t:
        pass


def cpu_seconds():
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


w = Watch()
c0 = cpu_seconds()
w.start()
spin(0.5)
subprocess.run([sys.executable, "-c", "import time\nt = time.monotonic() + 0.5\nwhile time.monotonic() < t: pass"],
               check=True)
own = w.stop()
own["own_seconds"] = cpu_seconds() - c0

SPINNER = "import sys, time\nt = time.monotonic() + 1.5\nwhile time.monotonic() < t: pass\nprint(flush=True)\nsys.stdin.read()"
w = Watch()
w.start()
spinners = [subprocess.Popen([sys.executable, "-c", SPINNER], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            for _ in w.cpus]
for s in spinners:
    s.stdout.readline()
busy = w.stop()  # before the spinners are reaped: a waited-for child's time is this process's own
for s in spinners:
    s.kill()
    s.wait()
print(json.dumps({"own": own, "busy": busy}))
'''


def test_the_watch_tells_this_process_from_a_busy_neighbour():
    p = subprocess.run([sys.executable, "-c", WATCH], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    own, busy = got["own"], got["busy"]
    for w in (own, busy):
        assert 0 <= w["steal_share"] <= 1
        assert w["load_avg_1m"] is None or w["load_avg_1m"] >= 0
        assert all(100 <= mhz < 20000 for mhz in w.get("cpu_mhz", []))
    # the time of this process and of the child it waited for is its own: other processes can only have had
    # what it left of its CPUs (with a margin for the kernel's 10 ms ticks)
    assert own["other_cpus"] <= own["cpus"] - own["own_seconds"] / own["seconds"] + 0.1, own
    assert busy["other_cpus"] > OTHER_CPU_SHARE * busy["cpus"], busy
    assert busy["flagged"]
    assert any(r.startswith("host busy: other processes took") and f"of {busy['cpus']} CPUs" in r
               for r in busy["reasons"]), busy


def test_the_supervisor_finds_a_daemonised_grandchild_by_its_token_and_kills_it(tmp_path):
    pidfile = tmp_path / "daemon.pid"
    code = ("import subprocess, sys\n"
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True)\n"
            f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n")
    decoy = None
    try:
        with supervise.Child([sys.executable, "-c", code]) as child:
            assert child.follow(60).returncode == 0
            daemon = int(pidfile.read_text())
            assert os.getpgid(daemon) != child.proc.pid  # out of the child's group: no group kill reaches it
            # a token that only starts like this one is another child's
            decoy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                                     env={**os.environ, supervise.TOKEN_ENV: child.token + "0"})
            assert supervise.processes_with_token(child.token) == [daemon]
            assert supervise._parent_of(decoy.pid) == os.getpid()
        assert decoy.poll() is None  # close() left the decoy alone
        assert wait_gone(daemon, 10), psutil.Process(daemon).status()
        assert supervise.processes_with_token(child.token) == []
    finally:
        if decoy is not None:
            decoy.kill()
            decoy.wait()


def wait_gone(pid: int, timeout_s: float) -> bool:
    """Whether the process ended (a zombie no parent reaps has ended) within timeout_s."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False
