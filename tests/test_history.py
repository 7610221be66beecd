"""The history verb through a real subprocess and a real SQLite file."""

import json

from compare_fixtures import gemm, result_set, write
from conftest import REPO, gapbench
from test_compare_cli import inproc


def test_import_then_show_history(tmp_path, capsys, monkeypatch):
    db = tmp_path / "h.sqlite"
    a = write(result_set([gemm(1.0)], run_id="r1", label="before", started_at="2026-01-01T00:00:00+00:00"),
              tmp_path / "a.json")
    b = write(result_set([gemm(1.5)], run_id="r2", label="after", started_at="2026-01-02T00:00:00+00:00"),
              tmp_path / "b.json")
    env = {"GAPBENCH_DB": str(db)}
    p = gapbench("history", "--import", a, b, env=env)
    assert p.returncode == 0, p.stderr
    assert "imported" in p.stdout and db.exists()
    monkeypatch.setenv("GAPBENCH_DB", str(db))
    p = inproc(capsys, "history", "--workload", "gemm")
    assert p.returncode == 0, p.stderr
    assert "+50.0%" in p.stdout and "before" in p.stdout and "after" in p.stdout
    p = inproc(capsys, "history", "--workload", "gemm", "--json", "--variant", "dtype=fp32")
    rows = json.loads(p.stdout)["rows"]
    assert [r["value"] for r in rows] == [1.0, 1.5]
    p = inproc(capsys, "history", "--import", a)  # idempotent
    p = inproc(capsys, "history", "--json")
    assert json.loads(p.stdout)["workloads"] == [{"workload": "gemm", "measurements": 2}]


def test_history_bad_input_exit_2(tmp_path, capsys, monkeypatch):
    env = {"GAPBENCH_DB": str(tmp_path / "h.sqlite")}
    p = gapbench("history", "--workload", "gemm", env=env)
    assert p.returncode == 2 and "no history" in p.stderr
    monkeypatch.setenv("GAPBENCH_DB", env["GAPBENCH_DB"])
    p = inproc(capsys, "history", "--import", tmp_path / "nope.json")
    assert p.returncode == 2 and "nope.json" in p.stderr
    p = inproc(capsys, "history", "--workload", "gemm", "--variant", "oops")
    assert p.returncode == 2
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"x" * 4096)
    p = inproc(capsys, "history", "--db", junk)
    assert p.returncode == 2 and "junk.sqlite" in p.stderr and "Traceback" not in p.stderr


def test_change_is_against_the_same_thread_count(tmp_path, capsys, monkeypatch):
    from compare_fixtures import cpu_device

    monkeypatch.setenv("GAPBENCH_DB", str(tmp_path / "h.sqlite"))
    files = []
    for i, (threads, value) in enumerate(((1, 1.0), (2, 1.8), (1, 1.1), (2, 2.0))):
        rs = result_set([gemm(value)], device=cpu_device(threads=threads), run_id=f"r{i}",
                        started_at=f"2026-01-0{i + 1}T00:00:00+00:00")
        files.append(write(rs, tmp_path / f"r{i}.json"))
    assert inproc(capsys, "history", "--import", *files).returncode == 0
    p = inproc(capsys, "history", "--workload", "gemm")
    assert "+10.0%" in p.stdout and "+11.1%" in p.stdout  # 1.0 -> 1.1 and 1.8 -> 2.0, not 1.8 -> 1.1
    assert "−38.9%" not in p.stdout


def test_history_names_that_are_not_text_are_one_line_and_what_an_import_did_is_output(tmp_path, capsys):
    from gapbench.cli import main

    db = str(tmp_path / "h.sqlite")
    rc = main(["history", "--import", str(REPO / "results" / "cpu-epyc-2core-quick-1thread.json"), "--db", db,
               "-w", "no-such-workload"])
    cap = capsys.readouterr()
    assert rc == 2 and "imported " in cap.out and len(cap.err.strip().splitlines()) == 1, cap
    rc = main(["history", "-w", "bad\udcffname", "--db", db])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "not UTF-8 text" in err[0], err


def test_a_history_path_the_system_cannot_hold_is_one_line(tmp_path, capsys):
    from gapbench.cli import main

    rc = main(["history", "-w", "gemm", "--db", str(tmp_path / ("a" * 5000))])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "File name too long" in err[0], err
