"""The runner isolates misbehaving workloads (real worker processes, no mocks) and resumes after a kill."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, gapbench
from gapbench.results import load


@pytest.mark.slow
def test_segfault_hang_raise_and_unbounded_allocation_are_recorded_and_the_suite_goes_on(tmp_path):
    out = tmp_path / "faulty.json"
    log = tmp_path / "calls.log"
    r = gapbench("run", "--device", "cpu", "--workload-file", FIXTURES / "faulty_workloads.py",
                 "--workload", "faulty:tiny", "--workload", "membw:tiny", "--timeout", "10", "--memory-limit", "3",
                 "--variant-budget", "2", "--min-time", "0.01",  # membw only has to run after the faults, not be precise
                 "--output", out, "--no-history", env={"FAULTY_LOG": str(log)}, timeout=240)
    assert r.returncode == 0, r.stderr
    rs = load(out)
    status = {m.variant.get("mode"): (m.status, m.reason) for m in rs.measurements if m.workload == "faulty"}
    assert status["good"][0] == "ok"
    assert status["segfault"][0] == "crashed" and "SIGSEGV" in status["segfault"][1]
    assert status["hang"][0] == "timeout"
    assert status["raise"][0] == "error" and "deliberate failure" in status["raise"][1]
    assert status["alloc"][0] == "oom"
    assert status["good2"][0] == "ok"
    # the next workload ran after all that
    assert {m.status for m in rs.measurements if m.workload == "membw"} == {"ok"}
    assert rs.complete
    # each faulty variant ran exactly once: the restarted workers skipped what was recorded
    calls = log.read_text().split()
    assert sorted(calls) == sorted(["good", "segfault", "hang", "raise", "alloc", "good2"])


@pytest.mark.slow
def test_resume_after_kill_minus_9_redoes_nothing_finished(tmp_path):
    out = tmp_path / "slow.json"
    log = tmp_path / "calls.log"
    journal = tmp_path / "slow.json.journal.jsonl"
    env = dict(os.environ, FAULTY_LOG=str(log))
    cmd = [sys.executable, "-m", "gapbench", "run", "--device", "cpu", "--workload-file",
           str(FIXTURES / "faulty_workloads.py"), "--workload", "faulty:slow", "--output", str(out), "--no-history",
           "--variant-budget", "2"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.time() + 120
    done_before = 0
    while time.time() < deadline:
        if journal.exists():
            done_before = sum('"event": "measurement"' in ln for ln in journal.read_text().splitlines())
            if done_before >= 2:
                break
        time.sleep(0.2)
    assert done_before >= 2, "the run never recorded two measurements"
    os.killpg(proc.pid, signal.SIGKILL)  # the runner and its worker, without any chance to clean up
    proc.wait()
    assert not out.exists() or not load(out).complete
    finished = [json.loads(ln)["measurement"] for ln in journal.read_text().splitlines()
                if '"event": "measurement"' in ln]

    r = gapbench("run", "--resume", out, "--workload-file", FIXTURES / "faulty_workloads.py", "--no-history",
                 env={"FAULTY_LOG": str(log)}, timeout=180)
    assert r.returncode == 0, r.stderr
    rs = load(out)
    assert rs.complete and len(rs.measurements) == 6
    assert sorted(m.variant["i"] for m in rs.measurements) == list(range(6))
    by_i = {m.variant["i"]: m for m in rs.measurements}
    for m in finished:  # finished work is kept as it was, not re-measured
        assert by_i[m["variant"]["i"]].started_at == m["started_at"]
    calls = log.read_text().split()
    # every variant ran once, except at most the one in flight when the run was killed
    assert len(calls) <= 7 and set(calls) == {f"sleep{i}" for i in range(6)}
    assert not journal.exists()


@pytest.mark.slow
def test_ctrl_c_writes_a_partial_file_and_a_resume_hint(tmp_path):
    out = tmp_path / "int.json"
    journal = tmp_path / "int.json.journal.jsonl"
    cmd = [sys.executable, "-m", "gapbench", "run", "--device", "cpu", "--workload-file",
           str(FIXTURES / "faulty_workloads.py"), "--workload", "faulty:slow", "--output", str(out), "--no-history"]
    # the second variant sleeps a minute: the run is surely still going when the interrupt comes, however busy
    # the machine
    # and it takes Ctrl-C as a terminal's foreground job does, even when these tests run in the background
    # (a shell starts background jobs with SIGINT ignored, and a child inherits that)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FAULTY_HOLD": "1"},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 120
    while time.time() < deadline:
        if journal.exists() and '"event": "measurement"' in journal.read_text():
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "--resume" in err
    rs = load(out)
    assert not rs.complete and len(rs.measurements) >= 1
