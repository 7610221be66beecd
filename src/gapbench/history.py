"""History in SQLite: one row per run and one per measurement, so results can be followed over time.

Default path: $GAPBENCH_DB, else $XDG_DATA_HOME/gapbench/history.sqlite, else
~/.local/share/gapbench/history.sqlite. Each write is one transaction (a crash leaves the database as it
was before the write); recording a run again replaces it (idempotent per run_id). The layout carries a
version number and is upgraded in place, inside a transaction, when an older file is opened. A measurement the
host watch flagged keeps its reasons (`flag`) and never enters the run-to-run spread (run_spread).
"""

from __future__ import annotations

import json
import math
import os
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gapbench.errors import GapbenchError
from gapbench.results import ResultSet, load, now_iso, variant_key

SCHEMA_VERSION = 3
_MAX_TEXT = 1_000_000  # longer text in a history file is cut when read (gapbench writes far less)

# version 1 (the first layout, kept here because upgrades start from it):
#   runs(run_id PK, started_at, device_type, device_product, gapbench_version, torch_version)
#   measurements(run_id, workload, preset, variant, unit, status, value, reason)
SCHEMA_V1 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE runs (run_id TEXT PRIMARY KEY, started_at TEXT, device_type TEXT, device_product TEXT,
                   gapbench_version TEXT, torch_version TEXT);
CREATE TABLE measurements (run_id TEXT NOT NULL, workload TEXT NOT NULL, preset TEXT, variant TEXT NOT NULL,
                           unit TEXT, status TEXT NOT NULL, value REAL, reason TEXT);
INSERT INTO schema_version VALUES (1);
"""

_RUNS_V2 = """
CREATE TABLE runs (
  run_id TEXT PRIMARY KEY,
  started_at TEXT, finished_at TEXT, recorded_at TEXT NOT NULL,
  label TEXT, suite TEXT, complete INTEGER,
  device_type TEXT, device_product TEXT, device_arch TEXT, device_count INTEGER,
  hostname TEXT, gapbench_version TEXT, torch_version TEXT, runtime TEXT,
  source_path TEXT, device_json TEXT, host_json TEXT
)"""
_MEASUREMENTS_V2 = """
CREATE TABLE measurements (
  id INTEGER PRIMARY KEY,
  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,
  workload TEXT NOT NULL, preset TEXT, variant TEXT NOT NULL, variant_key TEXT NOT NULL,
  unit TEXT, higher_is_better INTEGER, status TEXT NOT NULL, value REAL, reason TEXT,
  ci_low REAL, ci_high REAL, n INTEGER, noisy INTEGER,
  flops REAL, bytes REAL, power_w REAL, energy_j REAL, metrics TEXT, started_at TEXT
)"""
_INDEXES_V2 = (
    "CREATE INDEX measurements_by_workload ON measurements(workload, variant_key)",
    "CREATE INDEX measurements_by_run ON measurements(run_id)",
)

# version 3: measurements.flag, the host watch's reasons for a flagged measurement (NULL: not flagged, or recorded
# before version 3, when the flag was not kept)
_FLAG_V3 = "ALTER TABLE measurements ADD COLUMN flag TEXT"

_RUN_COLS = ("run_id", "started_at", "finished_at", "recorded_at", "label", "suite", "complete", "device_type",
             "device_product", "device_arch", "device_count", "hostname", "gapbench_version", "torch_version",
             "runtime", "source_path", "device_json", "host_json")
_M_COLS = ("run_id", "workload", "preset", "variant", "variant_key", "unit", "higher_is_better", "status", "value",
           "reason", "ci_low", "ci_high", "n", "noisy", "flops", "bytes", "power_w", "energy_j", "metrics",
           "started_at", "flag")


def default_path() -> Path:
    if os.environ.get("GAPBENCH_DB"):
        return Path(os.environ["GAPBENCH_DB"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "gapbench" / "history.sqlite"


# ---- opening, creating, upgrading ------------------------------------------------------------------------

def _version(conn: sqlite3.Connection) -> int | None:
    has = conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='schema_version'").fetchone()
    if not has:
        return None
    row = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()
    return int(row[0]) if row and row[0] is not None else None


def _create_current(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    conn.execute(_RUNS_V2)
    conn.execute(_MEASUREMENTS_V2)
    conn.execute(_FLAG_V3)
    for ix in _INDEXES_V2:
        conn.execute(ix)
    conn.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))


def _upgrade_1_to_2(conn: sqlite3.Connection) -> None:
    """v1 -> v2: richer runs (recorded_at, label, suite, runtime, identities) and measurements (CIs, counts,
    energy, metrics, an id and a variant key). Old rows keep what they had; new fields start empty."""
    conn.execute("ALTER TABLE runs RENAME TO runs_v1")
    conn.execute("ALTER TABLE measurements RENAME TO measurements_v1")
    conn.execute(_RUNS_V2)
    conn.execute(_MEASUREMENTS_V2)
    conn.execute("INSERT INTO runs (run_id, started_at, recorded_at, device_type, device_product, gapbench_version, "
                 "torch_version) SELECT run_id, started_at, COALESCE(started_at, ?), device_type, device_product, "
                 "gapbench_version, torch_version FROM runs_v1", (now_iso(),))
    rows = conn.execute("SELECT run_id, workload, preset, variant, unit, status, value, reason FROM measurements_v1 "
                        "ORDER BY rowid").fetchall()
    for run_id, workload, preset, variant, unit, status, value, reason in rows:
        try:
            vkey = variant_key(workload, preset, json.loads(variant))
        except (TypeError, ValueError):
            vkey = f"{workload}:{preset or ''}:{variant}"
        if not conn.execute("SELECT 1 FROM runs WHERE run_id=?", (run_id,)).fetchone():
            conn.execute("INSERT INTO runs (run_id, recorded_at) VALUES (?, ?)", (run_id, now_iso()))
        conn.execute("INSERT INTO measurements (run_id, workload, preset, variant, variant_key, unit, status, value, "
                     "reason) VALUES (?,?,?,?,?,?,?,?,?)",
                     (run_id, workload, preset, variant, vkey, unit, status, value, reason))
    conn.execute("DROP TABLE measurements_v1")
    conn.execute("DROP TABLE runs_v1")
    for ix in _INDEXES_V2:
        conn.execute(ix)
    conn.execute("DELETE FROM schema_version")
    conn.execute("INSERT INTO schema_version VALUES (2)")


def _upgrade_2_to_3(conn: sqlite3.Connection) -> None:
    """v2 -> v3: the host watch's flag of each measurement. Rows recorded before it have none: `history --import`
    of their results files records them again with it."""
    conn.execute(_FLAG_V3)
    conn.execute("DELETE FROM schema_version")
    conn.execute("INSERT INTO schema_version VALUES (3)")


UPGRADES = {1: _upgrade_1_to_2, 2: _upgrade_2_to_3}


def _db_path(db_path: str | os.PathLike | None) -> Path:
    path = Path(db_path) if db_path is not None else default_path()
    try:
        os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        pass
    except (OSError, ValueError) as e:  # a name too long, a NUL byte
        raise GapbenchError(f"history database {str(path)[:200]}: cannot use it ({getattr(e, 'strerror', None) or e})") \
            from None
    if path.is_dir():
        raise GapbenchError(f"history database {path}: is a folder, not a file")
    if path.exists() and not path.is_file():  # a FIFO would block the open, a device feed it garbage
        raise GapbenchError(f"history database {path}: not a regular file")
    return path


def _expected_objects(version: int) -> set[tuple[str, str]]:
    tables = {("table", "schema_version"), ("table", "runs"), ("table", "measurements")}
    if version == 1:
        return tables
    return tables | {("index", "measurements_by_workload"), ("index", "measurements_by_run")}


def _check_objects(conn: sqlite3.Connection, version: int, path: Path) -> None:
    """A history file holds gapbench's tables and indexes and nothing else: no trigger or view runs when gapbench
    reads or writes it."""
    found = {(t, n) for t, n in conn.execute("SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}
    extra = found - _expected_objects(version)
    missing = {("table", n) for t, n in _expected_objects(version) if t == "table"} - found
    if extra or missing:
        what = ", ".join(f"{t} {n!r}" for t, n in sorted(extra)) or ", ".join(f"no {t} {n!r}" for t, n in sorted(missing))
        raise GapbenchError(f"history database {path}: not a gapbench history file ({what[:200]})")


def _open(path: Path, uri: str | None = None) -> sqlite3.Connection:
    try:
        if uri is None:
            path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(uri or str(path), timeout=30, isolation_level=None, uri=uri is not None)
    except (OSError, sqlite3.Error) as e:
        raise GapbenchError(f"history database {path}: cannot open ({e})") from None
    conn.text_factory = lambda b: b.decode("utf-8", "replace")  # text a hostile file holds reads as text
    try:
        conn.execute("PRAGMA trusted_schema=OFF")
    except sqlite3.Error:
        pass
    return conn


def connect(db_path: str | os.PathLike | None = None) -> sqlite3.Connection:
    """Open (creating or upgrading) the history database; autocommit mode, transactions are explicit."""
    path = _db_path(db_path)
    conn = _open(path)
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = _version(conn)
            if version is None:
                tables = conn.execute("SELECT COUNT(*) FROM sqlite_master WHERE type='table'").fetchone()[0]
                if tables:
                    raise GapbenchError(f"history database {path}: not a gapbench history file (no schema_version)")
                _create_current(conn)
            elif version > SCHEMA_VERSION:
                raise GapbenchError(f"history database {path}: layout version {version} is newer than this gapbench "
                                    f"reads ({SCHEMA_VERSION}); upgrade gapbench or point GAPBENCH_DB elsewhere")
            elif version < 1:
                raise GapbenchError(f"history database {path}: not a gapbench history file (layout version {version})")
            else:
                _check_objects(conn, version, path)
            while version is not None and version < SCHEMA_VERSION:
                UPGRADES[version](conn)
                version = _version(conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    except sqlite3.DatabaseError as e:
        conn.close()
        raise GapbenchError(f"history database {path}: {_db_problem(e)}") from None
    except BaseException:
        conn.close()
        raise
    return conn


def _reader(db_path: str | os.PathLike | None) -> sqlite3.Connection | None:
    """A connection to read from: the usual one (it recovers a crashed write and upgrades an old layout), else,
    where the file cannot be written, a read-only one; None when there is no history file yet."""
    path = _db_path(db_path)
    if not path.exists():
        return None
    try:
        return connect(path)
    except GapbenchError as e:
        if "readonly" not in str(e) and "read-only" not in str(e):
            raise
    conn = _open(path, uri=f"{path.resolve().as_uri()}?mode=ro")
    try:
        version = _version(conn)
        if version != SCHEMA_VERSION:
            raise GapbenchError(f"history database {path}: read-only, and its layout (version {version}) needs an "
                                "upgrade this gapbench cannot write")
        _check_objects(conn, version, path)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise GapbenchError(f"history database {path}: {_db_problem(e)}") from None
    except BaseException:
        conn.close()
        raise
    return conn


def _db_problem(e: sqlite3.Error) -> str:
    text = str(e)
    if "readonly" in text or "read-only" in text:
        return f"cannot write ({text})"
    if "malformed" in text or "not a database" in text or "corrupt" in text:
        return f"damaged ({text}); move it aside and gapbench starts a new one"
    return text


# ---- writing ---------------------------------------------------------------------------------------------

def _runtime_text(device: dict) -> str:
    rt = device.get("runtime") or {}
    parts = [f"{k} {v}" for k, v in rt.items() if v] if isinstance(rt, dict) else [str(rt)]
    if not parts:
        libs = device.get("libraries") or {}
        blas = libs.get("blas") if isinstance(libs, dict) else None
        if isinstance(blas, str) and blas:
            parts.append(f"{blas} {libs.get(blas) or ''}".strip())
    return ", ".join(parts)


def _run_row(rs: ResultSet) -> tuple:
    d, h = rs.device, rs.host
    return (rs.run_id, rs.started_at, rs.finished_at, now_iso(), rs.label, rs.suite, int(bool(rs.complete)),
            d.get("type"), d.get("product"), d.get("arch"), d.get("count"), h.get("hostname"), rs.gapbench_version,
            d.get("torch"), _runtime_text(d), rs.path, json.dumps(d, sort_keys=True, default=str),
            json.dumps(h, sort_keys=True, default=str))


def _measurement_rows(rs: ResultSet) -> Iterable[tuple]:
    for m in rs.measurements:
        s = m.stats
        yield (rs.run_id, m.workload, m.preset, json.dumps(m.variant, sort_keys=True), m.key, m.unit,
               int(m.higher_is_better), m.status, _number(m.value), m.reason, _number(s.ci95[0]) if s else None,
               _number(s.ci95[1]) if s else None, s.n if s else None, int(s.noisy) if s else None,
               _number(m.flops), _number(m.bytes), _number(m.power_w), _number(m.energy_j),
               json.dumps(m.metrics, sort_keys=True, default=str) if m.metrics else None, m.started_at,
               _flag(m))


def _flag(m) -> str | None:
    """The host watch's reasons for a flagged measurement, one line; None when it was not flagged."""
    if not m.flagged:
        return None
    return "; ".join(str(r) for r in (m.host_watch or {}).get("reasons", [])) or "flagged by the host watch"


def _write(conn: sqlite3.Connection, rs: ResultSet) -> int:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute("DELETE FROM measurements WHERE run_id=?", (rs.run_id,))
        conn.execute("DELETE FROM runs WHERE run_id=?", (rs.run_id,))
        conn.execute(f"INSERT INTO runs ({', '.join(_RUN_COLS)}) VALUES ({', '.join('?' * len(_RUN_COLS))})",
                     _run_row(rs))
        n = 0
        sql = f"INSERT INTO measurements ({', '.join(_M_COLS)}) VALUES ({', '.join('?' * len(_M_COLS))})"
        for row in _measurement_rows(rs):
            conn.execute(sql, row)
            n += 1
        conn.execute("COMMIT")
        return n
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def record(result_set: ResultSet, db_path: str | os.PathLike | None = None, *,
           conn: sqlite3.Connection | None = None) -> int:
    """Record one run (replacing an earlier record of the same run_id); returns the measurements written."""
    own = conn is None
    conn = conn or connect(db_path)
    try:
        return _write(conn, result_set)
    except sqlite3.Error as e:
        raise GapbenchError(f"history database {db_path or default_path()}: {_db_problem(e)}") from None
    finally:
        if own:
            conn.close()


def import_files(paths: Iterable[str | os.PathLike], db_path: str | os.PathLike | None = None) -> list[tuple[str, str, int]]:
    """Load result files and record each; [(path, run_id, measurements)]. A bad file stops with its name."""
    loaded = [load(p) for p in paths]  # all validated before anything is written
    conn = connect(db_path)
    try:
        return [(rs.path or "", rs.run_id, _write(conn, rs)) for rs in loaded]
    except sqlite3.Error as e:
        raise GapbenchError(f"history database {db_path or default_path()}: {_db_problem(e)}") from None
    finally:
        conn.close()


# ---- reading ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HistoryRow:
    run_id: str
    started_at: str | None
    label: str | None
    device_type: str | None
    device_product: str | None
    gapbench_version: str | None
    torch_version: str | None
    runtime: str | None
    workload: str
    preset: str | None
    variant: dict
    unit: str | None
    status: str
    value: float | None
    ci95: tuple[float, float] | None
    reason: str | None
    threads: int | None = None  # CPU threads the run used (part of the CPU's "software stack")
    flag: str | None = None  # the host watch's reasons when it flagged the measurement

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["ci95"] = list(self.ci95) if self.ci95 else None
        return d


def rows(workload: str, device: str | None = None, variant: dict | None = None,
            db_path: str | os.PathLike | None = None, limit: int | None = None) -> list[HistoryRow]:
    """Measurements of one workload over time, oldest first. device: a substring of the device product,
    type or run label (case-insensitive); variant: keys the measurement's variant must have with these values."""
    sql = ("SELECT r.run_id, r.started_at, r.label, r.device_type, r.device_product, r.gapbench_version, "
           "r.torch_version, r.runtime, m.workload, m.preset, m.variant, m.unit, m.status, m.value, m.ci_low, "
           "m.ci_high, m.reason, r.device_json, m.flag FROM measurements m JOIN runs r ON r.run_id = m.run_id WHERE m.workload = ?")
    args: list = [workload]
    if device:
        sql += (" AND (LOWER(COALESCE(r.device_product,'')) LIKE ? OR LOWER(COALESCE(r.device_type,'')) LIKE ?"
                " OR LOWER(COALESCE(r.label,'')) LIKE ?)")
        pat = f"%{device.lower()}%"
        args += [pat, pat, pat]
    sql += " ORDER BY r.started_at, r.run_id, m.id"
    out = []
    for r in _query(db_path, sql, args):
        row = _history_row(r)
        if variant and any(str(row.variant.get(k)) != str(val) for k, val in variant.items()):
            continue
        out.append(row)
    return out[-limit:] if limit else out


def workloads(db_path: str | os.PathLike | None = None) -> list[tuple[str, int]]:
    """(workload, number of measurements) recorded, for a history without --workload."""
    rows = _query(db_path, "SELECT workload, COUNT(*) FROM measurements GROUP BY workload ORDER BY workload", [])
    return [(_text(w) or "?", n if isinstance(n, int) else 0) for w, n in rows]


def _query(db_path, sql: str, args: list) -> list[tuple]:
    """Every row of one query on the history (none when there is no history yet); a damaged or foreign
    file is a GapbenchError."""
    conn = _reader(db_path)
    if conn is None:
        return []
    try:
        return conn.execute(sql, args).fetchall()
    except sqlite3.Error as e:
        raise GapbenchError(f"history database {db_path or default_path()}: {_db_problem(e)}") from None
    finally:
        conn.close()


def run_spread(device: dict, workload: str, variant: dict, *, same_as: tuple[dict, ...] = (),
               exclude_runs: tuple[str, ...] = (), db_path: str | os.PathLike | None = None, limit: int = 20,
               minimum: int = 3) -> tuple[float, int] | None:
    """How much this row moved between earlier runs of the same stack: (standard deviation of the log values,
    runs) over the last `limit` ok runs of the same workload and variant on the same device product, type,
    torch version and (on the CPU) thread count that the host watch did not flag (a run on a busy host measures
    the neighbours, not the stack); None with fewer than `minimum` runs or no database. same_as: other variants
    that are this row (as older files wrote it; the caller says which): their runs count too."""
    import math
    import statistics

    path = Path(db_path) if db_path is not None else default_path()
    if not path.is_file():
        return None
    try:
        conn = connect(path)
    except GapbenchError:
        return None
    variants = list(dict.fromkeys(json.dumps(v, sort_keys=True) for v in (variant, *same_as)))
    try:
        rows = conn.execute(
            "SELECT m.value, r.run_id, r.device_json FROM measurements m JOIN runs r ON r.run_id = m.run_id "
            f"WHERE m.workload = ? AND m.variant IN ({', '.join('?' * len(variants))}) AND m.status = 'ok' "
            "AND m.value > 0 AND m.flag IS NULL AND r.device_type IS ? "
            "AND r.device_product IS ? AND r.torch_version IS ? ORDER BY r.started_at DESC, m.id DESC",
            (workload, *variants, device.get("type"), device.get("product"), device.get("torch"))).fetchall()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    values = []
    for value, run_id, device_json in rows:
        if run_id in exclude_runs:
            continue
        try:
            threads = json.loads(device_json or "{}").get("threads")
        except (TypeError, ValueError, AttributeError):
            threads = None
        if threads != device.get("threads"):
            continue
        values.append(math.log(value))
        if len(values) >= limit:
            break
    if len(values) < minimum:
        return None
    return statistics.stdev(values), len(values)


def _history_row(r: tuple) -> HistoryRow:
    """A row as gapbench wrote it; a value of the wrong type (SQLite keeps whatever it is given) reads as
    missing, never as a crash."""
    v = _json_object(r[10])
    if v is None:
        v = {"variant": _text(r[10])}
    lo, hi = _number(r[14]), _number(r[15])
    ci = (lo, hi) if lo is not None and hi is not None else None
    threads = None
    if r[3] == "cpu":
        dev = _json_object(r[17]) or {}
        threads = dev.get("threads") if type(dev.get("threads")) is int else None
    t = [_text(x) for x in r]
    return HistoryRow(t[0] or "?", t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8] or "?", t[9], v, t[11],
                      t[12] or "?", _number(r[13]), ci, t[16], threads, t[18])


def _text(x) -> str | None:
    if x is None:
        return None
    if isinstance(x, bytes):
        x = x.decode("utf-8", "replace")
    return str(x)[:_MAX_TEXT]


def _number(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    try:
        x = float(x)
    except OverflowError:
        return None
    return x if math.isfinite(x) else None


def _json_object(text) -> dict | None:
    from pydantic_core import from_json  # strict and bounded in depth, unlike json.loads

    if not isinstance(text, (str, bytes)) or len(text) > _MAX_TEXT:
        return None
    try:
        obj = from_json(text.encode() if isinstance(text, str) else text, allow_inf_nan=False)
    except (ValueError, UnicodeEncodeError):
        return None
    return obj if isinstance(obj, dict) else None
