"""History store: round trip through a real SQLite file, idempotence, crash safety, schema upgrade."""

import json
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from compare_fixtures import gemm, gpu_device, membw, result_set, write
from gapbench import history
from gapbench.errors import GapbenchError
from gapbench.results import Measurement


def test_default_path_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("GAPBENCH_DB", str(tmp_path / "x.sqlite"))
    assert history.default_path() == tmp_path / "x.sqlite"
    monkeypatch.delenv("GAPBENCH_DB")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert history.default_path() == tmp_path / "xdg" / "gapbench" / "history.sqlite"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert history.default_path() == tmp_path / "home" / ".local" / "share" / "gapbench" / "history.sqlite"


def test_round_trip_through_a_real_file(tmp_path):
    db = tmp_path / "h.sqlite"
    rs = result_set([gemm(1.5), gemm(None, dtype="fp16", status="too_slow", reason="2 s per iteration"),
                     membw(20.0)], label="first", run_id="run-a")
    assert history.record(rs, db) == 3
    rows = history.rows("gemm", db_path=db)
    assert [(r.run_id, r.variant["dtype"], r.status, r.value) for r in rows] == [
        ("run-a", "fp32", "ok", 1.5), ("run-a", "fp16", "too_slow", None)]
    ok = rows[0]
    assert ok.ci95 == pytest.approx(rs.measurements[0].stats.ci95)
    assert ok.device_type == "cpu" and ok.torch_version == "2.13.0+cpu" and ok.runtime == "mkl 2024.2"
    assert rows[1].reason == "2 s per iteration"
    # the file is plain SQLite other tools can read
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM measurements").fetchone()[0] == 3
        assert c.execute("SELECT version FROM schema_version").fetchone()[0] == history.SCHEMA_VERSION


def test_record_is_idempotent_per_run_id_and_filters_work(tmp_path):
    db = tmp_path / "h.sqlite"
    rs = result_set([gemm(1.0)], run_id="r1", started_at="2026-01-01T00:00:00+00:00")
    history.record(rs, db)
    history.record(rs, db)
    assert len(history.rows("gemm", db_path=db)) == 1
    rs.measurements.append(gemm(2.0, dtype="bf16"))  # a resumed run recorded again replaces the old record
    history.record(rs, db)
    assert len(history.rows("gemm", db_path=db)) == 2
    gpu = result_set([gemm(500.0, dtype="bf16")], device=gpu_device("NVIDIA H100 80GB HBM3"), run_id="r2",
                     started_at="2026-02-01T00:00:00+00:00")
    history.record(gpu, db)
    assert [r.run_id for r in history.rows("gemm", db_path=db, device="h100")] == ["r2"]
    assert [r.run_id for r in history.rows("gemm", db_path=db, variant={"dtype": "bf16"})] == ["r1", "r2"]
    assert [r.value for r in history.rows("gemm", db_path=db, limit=1)] == [500.0]
    assert history.workloads(db) == [("gemm", 3)]


def test_exception_mid_transaction_leaves_the_previous_state(tmp_path):
    db = tmp_path / "h.sqlite"
    good = result_set([gemm(1.0)], run_id="keep")
    history.record(good, db)
    # a record past validation whose variant is no JSON: writing it fails half-way through the transaction
    bad_m = Measurement.model_construct(workload="gemm", variant={"dtype": "fp32", "weird": object()}, unit="TFLOP/s",
                                        value=1.0, status="ok")
    bad = result_set([gemm(3.0), bad_m], run_id="keep")  # same run id: the delete of the old rows must roll back
    with pytest.raises(TypeError):
        history.record(bad, db)
    rows = history.rows("gemm", db_path=db)
    assert [(r.run_id, r.value) for r in rows] == [("keep", 1.0)]


def test_process_killed_mid_write_leaves_a_consistent_database(tmp_path):
    db = tmp_path / "h.sqlite"
    history.record(result_set([gemm(1.0)], run_id="before"), db)
    child = textwrap.dedent(f"""
        import os, signal, sys
        from gapbench import history
        from gapbench.results import Measurement, ResultSet
        ms = [Measurement(workload="gemm", variant={{"dtype": "fp32", "i": i}}, unit="TFLOP/s", value=float(i + 1))
              for i in range(20000)]
        rs = ResultSet(host={{}}, device={{"type": "cpu", "product": "x"}}, measurements=ms, run_id="killed")
        conn = history.connect({str(db)!r})
        calls = [0]
        def progress():
            calls[0] += 1
            if calls[0] == 3000:  # well inside the insert loop: the transaction is open
                print("killing", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
            return 0
        conn.set_progress_handler(progress, 50)
        history.record(rs, conn=conn)
        print("finished", flush=True)
    """)
    p = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120)
    assert p.returncode == -9, p.stderr
    assert "killing" in p.stdout and "finished" not in p.stdout
    rows = history.rows("gemm", db_path=db)  # opening recovers from the hot journal
    assert [r.run_id for r in rows] == ["before"]
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert c.execute("SELECT COUNT(*) FROM runs WHERE run_id='killed'").fetchone()[0] == 0


def test_v1_database_is_upgraded_in_place(tmp_path):
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as c:
        c.executescript(history.SCHEMA_V1)
        c.execute("INSERT INTO runs VALUES ('old-run', '2025-01-01T00:00:00+00:00', 'cuda', 'NVIDIA H100 80GB HBM3', "
                  "'0.0.9', '2.3.0')")
        c.execute("INSERT INTO measurements VALUES ('old-run', 'gemm', 'quick', ?, 'TFLOP/s', 'ok', 700.0, '')",
                  (json.dumps({"dtype": "bf16", "m": 4096, "n": 4096, "k": 4096}),))
    c.close()
    rows = history.rows("gemm", db_path=db)
    assert [(r.run_id, r.device_product, r.torch_version, r.value, r.variant["dtype"]) for r in rows] == [
        ("old-run", "NVIDIA H100 80GB HBM3", "2.3.0", 700.0, "bf16")]
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT version FROM schema_version").fetchone()[0] == history.SCHEMA_VERSION
        cols = {r[1] for r in c.execute("PRAGMA table_info(measurements)")}
        assert {"ci_low", "variant_key", "power_w"} <= cols
    # and new runs go in beside the upgraded ones
    history.record(result_set([gemm(1.0, dtype="bf16", size=4096)], run_id="new-run"), db)
    assert [r.run_id for r in history.rows("gemm", db_path=db)] == ["old-run", "new-run"]


def test_newer_or_foreign_database_is_refused(tmp_path):
    newer = tmp_path / "newer.sqlite"
    with sqlite3.connect(newer) as c:
        c.execute("CREATE TABLE schema_version (version INTEGER)")
        c.execute("INSERT INTO schema_version VALUES (99)")
    c.close()
    with pytest.raises(GapbenchError, match="newer"):
        history.connect(newer)
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as c:
        c.execute("CREATE TABLE something (x)")
    c.close()
    with pytest.raises(GapbenchError, match="not a gapbench history"):
        history.connect(foreign)
    junk = tmp_path / "junk.sqlite"
    junk.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(GapbenchError, match="junk.sqlite"):
        history.connect(junk)


def test_import_files_validates_all_before_writing(tmp_path):
    db = tmp_path / "h.sqlite"
    a = write(result_set([gemm(1.0)], run_id="a"), tmp_path / "a.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "host": {}}')
    with pytest.raises(GapbenchError, match="bad.json"):
        history.import_files([a, bad], db)
    assert history.workloads(db) == []
    assert history.import_files([a], db) == [(a, "a", 1)]
