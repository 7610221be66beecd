"""A history database that is damaged, read-only, hostile or not a file is answered in one line (exit 2), or
read as far as it can be; never an internal error. Real SQLite files throughout."""

import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import tempfile
import time

import pytest

from compare_fixtures import gemm, membw, result_set, write
from conftest import REPO
from gapbench import history
from gapbench.cli import main as cli_main
from gapbench.errors import GapbenchError


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


def history_with_runs(tmp_path, n=40):
    db = tmp_path / "h.sqlite"
    for i in range(n):
        history.record(result_set([gemm(1.0 + i), membw(10.0 + i)], run_id=f"run{i:03d}",
                                started_at=f"2026-01-{1 + i % 28:02d}T00:00:00+00:00"), db)
    return db


def test_a_damaged_data_page_is_one_line(tmp_path, capsys):
    db = history_with_runs(tmp_path)
    with sqlite3.connect(db) as c:
        page = c.execute("PRAGMA page_size").fetchone()[0]
        root = c.execute("SELECT rootpage FROM sqlite_master WHERE name='measurements'").fetchone()[0]
    c.close()
    data = bytearray(db.read_bytes())
    data[(root - 1) * page: root * page] = os.urandom(page)  # the measurements' pages; the rest reads
    db.write_bytes(bytes(data))
    a = write(result_set([gemm(5.0)], run_id="new"), tmp_path / "a.json")
    for argv in (["history", "--db", db, "--workload", "gemm"], ["history", "--db", db, "--import", a]):
        rc, _, err = cli(capsys, *argv)
        refused(rc, err, str(db), "damaged")
    rc, out, err = cli(capsys, "history", "--db", db)  # the counts come from an index that is intact
    assert rc == 0 and "gemm: 40 measurement(s)" in out, err


def test_a_hostile_database_is_refused_and_odd_values_in_a_real_one_read_as_missing(tmp_path, capsys):
    db = history_with_runs(tmp_path, 2)
    with sqlite3.connect(db) as c:
        c.execute("CREATE TRIGGER spy AFTER INSERT ON runs BEGIN DELETE FROM measurements; END")
    c.close()
    rc, _, err = cli(capsys, "history", "--db", db, "--workload", "gemm")
    refused(rc, err, "not a gapbench history file", "trigger 'spy'")
    with sqlite3.connect(db) as c:
        c.execute("DROP TRIGGER spy")
        c.execute("UPDATE measurements SET value='fast', ci_low=x'00ff', variant='[1, 2]', unit=7 WHERE run_id='run000'")
        c.execute("UPDATE measurements SET variant=?, reason=? WHERE run_id='run001'",
                  ('{"a":' * 500 + "1" + "}" * 500, b"\xff\xfe not utf-8"))
        c.execute("UPDATE runs SET device_json='{\"threads\": \"many\"}', device_product=x'c3' WHERE run_id='run001'")
    c.close()
    rc, out, err = cli(capsys, "history", "--db", db, "--workload", "gemm")
    assert rc == 0, err
    rc, out, err = cli(capsys, "history", "--db", db, "--workload", "membw", "--json")
    assert rc == 0, err
    rows = json.loads(out)["rows"]
    assert [r["value"] for r in rows][:1] == [None] and rows[0]["variant"] == {"variant": "[1, 2]"}
    assert rows[1]["threads"] is None and rows[1]["device_product"] == "\ufffd"


def test_a_folder_or_a_fifo_as_the_database_is_refused_at_once(tmp_path, capsys):
    fifo = tmp_path / "h.fifo"
    os.mkfifo(fifo)
    for db, words in ((tmp_path, "is a folder"), (fifo, "not a regular file")):
        t0 = time.monotonic()
        rc, _, err = cli(capsys, "history", "--db", db, "--workload", "gemm")
        refused(rc, err, words)
        assert time.monotonic() - t0 < 5


def test_reading_a_history_that_does_not_exist_creates_nothing(tmp_path, capsys):
    db = tmp_path / "none" / "h.sqlite"
    rc, out, err = cli(capsys, "history", "--db", db)
    assert rc == 0 and "is empty" in out, err
    assert not db.exists() and not db.parent.exists()
    assert history.rows("gemm", db_path=db) == []


AS_NOBODY = """
import io, os, sys
import gapbench.cli, gapbench.report.kit, gapbench.report.runs, gapbench.results.records, gapbench.history, pydantic_core
from rich.console import Console
Console(file=io.StringIO()).print(gapbench.report.kit.rich_table(gapbench.report.kit.Table(["a"], [["b"]])))
gapbench.cli.build_parser()
if os.geteuid() == 0:  # what gapbench imports is read above; from here on file permissions apply
    os.setgid(65534)
    os.setuid(65534)
sys.exit(gapbench.cli.main(sys.argv[1:]))
"""


@pytest.fixture
def shared_dir():
    """A folder an unprivileged user can reach (pytest's own tmp folders are private to root)."""
    d = tempfile.mkdtemp(prefix="gapbench-ro-")
    os.chmod(d, 0o755)
    yield d
    os.chmod(d, 0o755)
    shutil.rmtree(d, ignore_errors=True)


def test_a_read_only_history_is_read_and_writing_to_it_is_one_line(shared_dir):
    db = os.path.join(shared_dir, "h.sqlite")
    history.record(result_set([gemm(1.0)], run_id="kept"), db)
    new = write(result_set([gemm(2.0)], run_id="new"), os.path.join(shared_dir, "new.json"))
    os.chmod(db, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    os.chmod(shared_dir, 0o555)

    def run(*args):
        return subprocess.run([sys.executable, "-c", AS_NOBODY, *args], capture_output=True, text=True, timeout=60,
                              env=dict(os.environ, PYTHONPATH=str(REPO / "src")))

    r = run("history", "--db", db, "--workload", "gemm", "--json")
    assert r.returncode == 0, r.stderr
    assert [row["run_id"] for row in json.loads(r.stdout)["rows"]] == ["kept"]
    r = run("history", "--db", db, "--import", new)
    assert r.returncode == 2 and "cannot write" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    os.chmod(shared_dir, 0o755)
    os.chmod(db, 0o644)
    assert [row.run_id for row in history.rows("gemm", db_path=db)] == ["kept"]


def test_store_errors_are_gapbench_errors(tmp_path):
    db = history_with_runs(tmp_path, 1)
    with sqlite3.connect(db) as c:
        c.execute("DROP TABLE measurements")
        c.execute("CREATE TABLE measurements (x)")
    c.close()
    with pytest.raises(GapbenchError, match="h.sqlite"):
        history.rows("gemm", db_path=db)
    with pytest.raises(GapbenchError, match="h.sqlite"):
        history.record(result_set([gemm(1.0)], run_id="again"), db)
