"""Resuming checks what it resumes (workload files are named again, never imported from a file's say-so; the
host, device and gapbench must be this one's), every terminating signal keeps what finished as Ctrl-C does,
and --nproc is bounded before anything starts."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from compare_fixtures import gemm, result_set, write
from conftest import FIXTURES, gapbench
from gapbench.cli import main as cli_main
from gapbench.devices import host_identity
from gapbench.results import load

EVIL = "open({marker!r}, 'w').write('imported')\n"


def cli(capsys, *args):
    capsys.readouterr()
    try:
        rc = cli_main([str(a) for a in args])
    except SystemExit as e:
        rc = e.code
    return rc, capsys.readouterr().err


def refused(rc, err, *words):
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "internal error" not in err, err
    for w in words:
        assert w in err, err


def partial(path, *, files=(), host=None, version=None, workloads=("gemm:tiny",)):
    """A partial results file (no journal beside it), as an interrupted run leaves one."""
    rs = result_set([gemm(1.0)], options={"device": "cpu", "workloads": list(workloads), "workload_files": list(files),
                                          "budget_s": 0.2, "min_time_s": 0.01, "repeats": 3})
    from gapbench import devices

    rs = rs.replace(host=host if host is not None else host_identity(), device=devices.resolve("cpu").identity(),
                    complete=False,
                    **({"gapbench_version": version} if version else {}))
    return write(rs, path)


def test_resume_never_imports_a_workload_file_the_partial_file_names(tmp_path, capsys):
    marker = tmp_path / "imported"
    evil = tmp_path / "evil.py"
    evil.write_text(EVIL.format(marker=str(marker)))
    out = partial(tmp_path / "f.json", files=[str(evil)])
    rc, err = cli(capsys, "run", "--resume", out, "--no-history")
    refused(rc, err, "--workload-file", str(evil))
    other = tmp_path / "other.py"
    other.write_text("x = 1\n")
    rc, err = cli(capsys, "run", "--resume", out, "--workload-file", other, "--no-history")
    refused(rc, err, "--workload-file", "name the same file")
    rc, err = cli(capsys, "run", "--resume", partial(tmp_path / "g.json"), "--workload-file", evil, "--no-history")
    refused(rc, err, "used no workload file")
    assert not marker.exists() and load(out).measurements[0].value == 1.0


def test_resume_refuses_a_run_begun_on_another_host_or_gapbench(tmp_path, capsys):
    here = host_identity()
    elsewhere = dict(here, hostname="elsewhere", cpu="Another CPU 1")
    for name, kw, words in (("host.json", {"host": elsewhere}, "'elsewhere'"),
                            ("version.json", {"version": "0.0.1"}, "gapbench 0.0.1")):
        out = partial(tmp_path / name, **kw)
        before = open(out, "rb").read()
        rc, err = cli(capsys, "run", "--resume", out, "--no-history")
        refused(rc, err, "begun elsewhere", words, "--force")
        assert open(out, "rb").read() == before


def test_resume_with_force_completes_a_foreign_run_with_a_warning(tmp_path):
    wf = tmp_path / "axpy.py"
    from test_hardening_outputs import AXPY

    wf.write_text(AXPY)
    out = partial(tmp_path / "f.json", files=[str(wf)], workloads=["axpy"],
                  host=dict(host_identity(), hostname="elsewhere"))
    r = gapbench("run", "--resume", out, "--workload-file", wf, "--force", "--no-history", "-q", timeout=120)
    assert r.returncode == 0, r.stderr
    warning = [ln for ln in r.stderr.splitlines() if "warning" in ln]
    assert len(warning) == 1 and "elsewhere" in warning[0] and "--force" in warning[0], r.stderr
    rs = load(out)
    assert rs.complete and sorted(m.workload for m in rs.measurements) == ["axpy", "gemm"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_term_and_hup_keep_what_finished_as_ctrl_c_does(tmp_path, sig):
    out = tmp_path / "r.json"
    journal = tmp_path / "r.json.journal.jsonl"
    # the second variant sleeps a minute: the run is still going when the signal comes
    cmd = [sys.executable, "-m", "gapbench", "run", "--device", "cpu", "--workload-file",
           str(FIXTURES / "faulty_workloads.py"), "--workload", "faulty:slow", "--output", str(out), "--no-history",
           "-q"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FAULTY_HOLD": "1"},
                            preexec_fn=lambda: signal.signal(sig, signal.SIG_DFL))
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (journal.exists() and '"event": "measurement"' in journal.read_text()):
            time.sleep(0.1)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 128 + sig, err
    assert signal.Signals(sig).name in err and f"gapbench run --resume {out}" in err, err
    rs = load(out)
    assert not rs.complete and len(rs.measurements) >= 1 and journal.exists()
    header = json.loads(journal.read_text().splitlines()[0])
    assert header["plan"]["workload_files"] == [str(FIXTURES / "faulty_workloads.py")]


@pytest.mark.parametrize("argv, words", [
    (["--nproc", "1000000"], "usable core"),
    (["--nproc", "99999999999999999999"], "usable core"),
    (["--nproc", "100000", "--oversubscribe"], "even with --oversubscribe"),
    (["--nproc", str(4 * len(os.sched_getaffinity(0)) + 1), "--oversubscribe"], "even with --oversubscribe"),
    (["--nproc", str(len(os.sched_getaffinity(0)) + 1)], "--oversubscribe"),
    (["--oversubscribe"], "--oversubscribe"),
])
def test_nproc_is_bounded_before_anything_starts(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    t0 = time.monotonic()
    rc, err = cli(capsys, "run", "--device", "cpu", "-w", "gemm:tiny", "--no-history", "-q", *argv)
    refused(rc, err, words)
    assert time.monotonic() - t0 < 10 and os.listdir(tmp_path) == []
