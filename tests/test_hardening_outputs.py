"""Outputs never destroy inputs: every verb that writes checks, before any work, that its output is a
writable file that is neither one of its inputs nor a results file (unless --force), and writes atomically."""

import json
import os

import pytest

from compare_fixtures import gemm, membw, result_set, write
from conftest import FIXTURES, REPO, gapbench
from gapbench.cli import main as cli_main
from gapbench.errors import GapbenchError
from gapbench.results import check_output, load, write_text_atomic

AXPY = (
    "import torch\n"
    "from gapbench.timing import time_fn\n"
    "from gapbench.workloads import Variant, Workload\n"
    "class Axpy(Workload):\n"
    "    name = 'axpy'; unit = 'GB/s'; presets = {'tiny': 'small'}\n"
    "    def variants(self, preset, ctx):\n"
    "        return [Variant({'n': 4096}, bytes=3 * 4096 * 4)]\n"
    "    def run(self, v, ctx):\n"
    "        x = torch.ones(4096); y = torch.ones(4096)\n"
    "        t = time_fn(lambda: y.add_(x, alpha=0.5), ctx.device, budget_s=ctx.budget_s, min_time_s=0.01)\n"
    "        return self.throughput(v, ctx, t, v.bytes, 1e-9)\n")


def cli(capsys, *args):
    capsys.readouterr()
    try:
        rc = cli_main([str(a) for a in args])
    except SystemExit as e:
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def refused(rc, err, *words):
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "internal error" not in err, err
    for w in words:
        assert w in err, err


def files(tmp_path):
    a = write(result_set([gemm(1.0), membw(10.0)], label="one"), tmp_path / "one.json")
    b = write(result_set([gemm(2.0), membw(11.0)], label="two"), tmp_path / "two.json")
    return a, b


@pytest.mark.parametrize("fmt", [None, "html", "md", "json"])
def test_report_never_writes_over_one_of_its_inputs(tmp_path, capsys, fmt):
    a, b = files(tmp_path)
    before = open(a, "rb").read()
    link = tmp_path / "also-one.json"
    os.link(a, link)  # the same file under another name
    for target in (a, link):
        rc, _, err = cli(capsys, "report", a, b, "-o", target, *(["--format", fmt] if fmt else []), "--force")
        refused(rc, err, "is also an input")
        assert open(a, "rb").read() == before


def test_report_refuses_a_results_file_without_force_and_leaves_no_temporary_file(tmp_path, capsys):
    a, b = files(tmp_path)
    other = write(result_set([gemm(3.0)], label="three"), tmp_path / "three.json")
    rc, _, err = cli(capsys, "report", a, b, "-o", other)
    refused(rc, err, "already holds a gapbench results file", "--force")
    assert load(other).label == "three"
    rc, _, err = cli(capsys, "report", a, b, "-o", tmp_path)  # a folder
    refused(rc, err, "is a folder")
    rc, _, err = cli(capsys, "report", a, b, "-o", tmp_path / "sub" / "r.html")
    assert rc == 0, err
    rc, _, err = cli(capsys, "report", a, b, "-o", tmp_path / "sub" / "r.html")  # an older report: replaced
    assert rc == 0, err
    assert sorted(os.listdir(tmp_path / "sub")) == ["r.html"]
    assert sorted(p for p in os.listdir(tmp_path) if p.startswith(".")) == []


def test_an_output_nothing_can_be_written_to_is_refused_before_any_work(tmp_path, capsys):
    a, b = files(tmp_path)
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    a_file = tmp_path / "plain.txt"
    a_file.write_text("x")
    for target, words in (("/proc/gapbench-nowhere/r.html", "cannot write there"),
                          (a_file / "r.html", "is not a folder"), (fifo, "is not a regular file")):
        rc, _, err = cli(capsys, "report", a, b, "-o", target)
        refused(rc, err, words)
    assert not os.path.exists("/proc/gapbench-nowhere")


@pytest.mark.slow
def test_run_refuses_a_finished_results_file_or_a_folder_before_running_anything(tmp_path):
    wf = tmp_path / "axpy.py"
    wf.write_text(AXPY)
    out = tmp_path / "finished.json"
    write(result_set([gemm(1.0), membw(10.0)] * 1, label="finished"), out)
    before = out.read_bytes()
    for target, words in ((out, "already holds a gapbench results file"), (tmp_path, "is a folder"),
                          ("/proc/gapbench-nowhere/y.json", "cannot write there"), (wf, "is also an input")):
        r = gapbench("run", "--device", "cpu", "--workload-file", wf, "-o", target, "--no-history", timeout=120)
        assert r.returncode == 2 and words in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not (tmp_path / "finished.json.journal.jsonl").exists()  # nothing ran
    assert "--resume" in gapbench("run", "--device", "cpu", "--workload-file", wf, "-o", out, timeout=120).stderr
    assert out.read_bytes() == before and wf.read_text() == AXPY
    r = gapbench("run", "--device", "cpu", "--workload-file", wf, "-o", out, "--no-history", "--force", timeout=180)
    assert r.returncode == 0, r.stderr
    assert [m.workload for m in load(out).measurements] == ["axpy"]


def test_run_refuses_to_start_over_an_interrupted_runs_journal(tmp_path, capsys):
    out = tmp_path / "interrupted.json"
    journal = tmp_path / "interrupted.json.journal.jsonl"
    journal.write_text(json.dumps({"event": "header", "plan": {"device": "cpu", "entries": []}}) + "\n")
    with pytest.raises(GapbenchError, match="journal of an interrupted run"):
        check_output(out, resume_hint=True)
    rc, _, err = cli(capsys, "frameworks", "--device", "cpu", "-o", write(result_set([gemm(1.0)]), tmp_path / "f.json"))
    refused(rc, err, "already holds a gapbench results file")
    assert journal.exists()


def test_coverage_refuses_an_existing_results_file_unless_it_resumes_into_it(tmp_path, capsys):
    other = write(result_set([gemm(1.0)], label="keep"), tmp_path / "keep.json")
    rc, _, err = cli(capsys, "coverage", "--device", "cpu", "-o", other)
    refused(rc, err, "already holds a gapbench results file")
    assert load(other).label == "keep"


def test_atomic_writes_leave_the_old_file_or_the_new_one(tmp_path):
    p = tmp_path / "r.html"
    write_text_atomic(p, "old")

    class Boom(Exception):
        pass

    class Text(str):
        def encode(self, *a):
            raise Boom

    with pytest.raises(Boom):
        write_text_atomic(p, Text("new"))
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["r.html"]
    write_text_atomic(p, "new \ud800 text")  # a lone surrogate cannot be written as UTF-8: it becomes '?'
    assert p.read_text() == "new ? text"


def test_a_resumed_journal_is_rewritten_atomically(tmp_path):
    from gapbench.engine.journal import Journal

    j = Journal(tmp_path / "r.json.journal.jsonl")
    j.start({"event": "header"}, [{"event": "measurement", "i": i} for i in range(3)])
    before = (tmp_path / "r.json.journal.jsonl").read_text()

    class Unprintable:
        def __str__(self):
            raise RuntimeError("fails half-way through the rewrite")

    with pytest.raises(RuntimeError):
        j.start({"event": "header"}, [{"event": "measurement", "i": 0}, {"event": "measurement", "x": Unprintable()}])
    assert (tmp_path / "r.json.journal.jsonl").read_text() == before
    assert os.listdir(tmp_path) == ["r.json.journal.jsonl"]


def test_a_run_never_writes_a_measurement_it_could_not_read_back(tmp_path):
    out = tmp_path / "bad-values.json"
    r = gapbench("run", "--device", "cpu", "--workload-file", FIXTURES / "hostile_workloads.py", "--workload",
                 "hostile:bad_values", "--variant-budget", "1", "--output", out, "--no-history",
                 env={"HOSTILE_DIR": str(tmp_path)}, timeout=180)
    assert r.returncode == 0, r.stderr
    got = {m.variant["mode"]: m for m in load(out).measurements}  # load validates the whole file
    for mode, words in (("nan", "needs a value above 0"), ("zero", "not 0"), ("negative", "not -1"),
                        ("reversed", "stats.ci95: the interval is reversed")):
        assert got[mode].status == "error" and "breaks the results schema" in got[mode].reason, got[mode]
        assert words in got[mode].reason
    assert got["good"].status == "ok"


# ---- what no output ever replaces: a verb's sources, results files, the history database, journals ----------

def test_assess_never_writes_over_the_code_it_assessed_or_a_results_file(tmp_path, capsys):
    src = tmp_path / "a.py"
    src.write_text("import torch\nx = torch.cuda.is_available()\n")
    rc, _, err = cli(capsys, "assess", src, "--target", "rocm", "-o", src)
    refused(rc, err, "is also an input")
    rc, _, err = cli(capsys, "assess", tmp_path, "--target", "rocm", "-o", tmp_path / "report.md")
    refused(rc, err, "is inside")  # a report inside the scanned folder would be scanned next time
    assert src.read_text().startswith("import torch")
    kept = write(result_set([gemm(1.0)], label="h100"), tmp_path / "h100.json")
    rc, _, err = cli(capsys, "assess", src, "--target", "rocm", "-o", kept)
    refused(rc, err, "already holds a gapbench results file", "--force")
    assert load(kept).label == "h100"
    rc, _, err = cli(capsys, "assess", src, "--target", "rocm", "-o", kept, "--force")
    assert rc == 0 and "wrote" in err, err
    assert "ROCm" in open(kept).read() and sorted(os.listdir(tmp_path)) == ["a.py", "h100.json"]


def _sqlite(path):
    import sqlite3

    conn = sqlite3.connect(path)
    conn.execute("create table t (x)")
    conn.commit()
    conn.close()
    return path


def test_no_output_replaces_a_history_database_even_with_force(tmp_path, capsys, monkeypatch):
    a, b = files(tmp_path)
    db = _sqlite(tmp_path / "history.sqlite")
    other = _sqlite(tmp_path / "any-name.db")  # a SQLite file under any name: its header says what it is
    before = db.read_bytes(), other.read_bytes()
    for target in (db, other):
        rc, _, err = cli(capsys, "report", a, b, "-o", target, "--force")
        refused(rc, err, "SQLite")
        rc, _, err = cli(capsys, "run", "--device", "cpu", "-w", "gemm:tiny", "-o", target, "--force", "--no-history")
        refused(rc, err, "SQLite")
        rc, _, err = cli(capsys, "frameworks", "--device", "cpu", "-o", target, "--force")
        refused(rc, err, "SQLite")
    assert (db.read_bytes(), other.read_bytes()) == before
    configured = tmp_path / "not-yet" / "h.sqlite"  # the configured history path, before the first run made it
    monkeypatch.setenv("GAPBENCH_DB", str(configured))
    rc, _, err = cli(capsys, "report", a, b, "-o", configured)
    refused(rc, err, "is the history database")
    assert not configured.exists()


def test_no_output_replaces_an_interrupted_runs_journal_and_it_still_resumes(tmp_path, capsys):
    from gapbench.devices import host_identity
    from gapbench.run import read_journal

    journal = tmp_path / "x.json.journal.jsonl"
    journal.write_text(json.dumps({"event": "header", "run_id": "0123456789abcdef", "started_at":
                                   "2026-01-01T00:00:00+00:00", "host": host_identity(),
                                   "plan": {"device": "cpu", "entries": [["gemm", "tiny"]]}}) + "\n"
                       + json.dumps({"event": "measurement", "pass": 0, "measurement": gemm(1.0).model_dump(
                           mode="json")}) + "\n")
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(journal.read_bytes())
    before = journal.read_bytes()
    rc, _, err = cli(capsys, "run", "--device", "cpu", "-w", "gemm:tiny", "-o", journal, "--force", "--no-history")
    refused(rc, err, "journal", "--resume", str(tmp_path / "x.json"))
    rc, _, err = cli(capsys, "report", *files(tmp_path), "-o", copy, "--force")
    refused(rc, err, "holds a journal")
    rc, _, err = cli(capsys, "run", "--device", "cpu", "-w", "gemm:tiny", "-o", tmp_path / "x.json", "--no-history")
    refused(rc, err, "journal of an interrupted run", "--resume")
    assert journal.read_bytes() == before and copy.read_bytes() == before
    _, _, done = read_journal(str(tmp_path / "x.json"))
    assert len(done) == 1


def _limited(max_bytes):
    """A child whose files cannot grow past max_bytes: what a full disk does to a write (EFBIG, not a signal)."""
    def limit():
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))
    return limit


def test_a_write_the_disk_refuses_is_one_line_and_leaves_nothing_half_written(tmp_path):
    import subprocess
    import sys

    a, b = files(tmp_path)
    old = tmp_path / "r.html"
    old.write_text("the old report")
    r = subprocess.run([sys.executable, "-m", "gapbench", "report", a, b, "-o", old], capture_output=True, text=True,
                       preexec_fn=_limited(2000), timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cannot write" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert old.read_text() == "the old report"
    assert sorted(os.listdir(tmp_path)) == ["one.json", "r.html", "two.json"]


def test_a_run_whose_results_file_cannot_be_written_keeps_the_journal_and_says_how_to_resume(tmp_path):
    import subprocess
    import sys

    from gapbench import devices
    from gapbench.results import ResultSet, json_text

    wf = tmp_path / "axpy.py"
    wf.write_text(AXPY)
    out = tmp_path / "r.json"
    # the journal (compact lines) fits, the results file (the same facts, indented) does not
    facts = ResultSet(host=devices.host_identity(), device=devices.resolve("cpu").identity(), measurements=[gemm(1.0)])
    limit = int(len(json_text(facts.model_dump(mode="json"))) * 0.85)
    cmd = [sys.executable, "-m", "gapbench", "run", "--device", "cpu", "--workload-file", str(wf), "-o", str(out),
           "--no-history", "-q", "--min-time", "0.01", "--repeats", "3", "--budget", "0.3"]
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_limited(limit), timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "cannot write" in r.stderr and f"gapbench run --resume {out}" in r.stderr, r.stderr
    journal = tmp_path / "r.json.journal.jsonl"
    assert journal.exists() and '"event": "measurement"' in journal.read_text()
    r = gapbench("run", "--resume", out, "--workload-file", wf, "--no-history", "-q", timeout=120)
    assert r.returncode == 0, r.stderr
    rs = load(out)
    assert rs.complete and [m.workload for m in rs.measurements] == ["axpy"] and not journal.exists()


@pytest.mark.parametrize("name", ["a" * 5000, "b" * 300 + "/x.json"])
def test_an_output_name_the_system_cannot_hold_is_one_line_and_exit_2(tmp_path, capsys, name):
    from gapbench.cli import main

    rc = main(["report", str(REPO / "results" / "cpu-epyc-2core-quick-1thread.json"), "-o", str(tmp_path / name)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "cannot write there (File name too long)" in err[0], err
