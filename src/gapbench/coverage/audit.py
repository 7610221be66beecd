"""The coverage audit, parent side: which (op, dtype) units to run, workers that run them, journal, budget.

Every unit runs in a worker process; a unit that hangs past its timeout or crashes its worker is recorded
as an error ("timeout" / "crashed") and a fresh worker carries on with the rest.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

import torch

from gapbench import devices, results
from gapbench.coverage import children
from gapbench.coverage.children import ChildFailed, run_simple
from gapbench.coverage.summary import headline, summarize
from gapbench.engine import failures
from gapbench.engine.journal import MAX_JOURNAL_BYTES, Journal
from gapbench.engine.journal import journal_path as _journal_path
from gapbench.errors import GapbenchError, ResultFileError
from gapbench.record import SchemaError
from gapbench.results import ResultSet, now_iso, parse_json, read_bytes, save
from gapbench.results.records import CoverageRow

DEFAULT_DTYPES = ("float32",)
STARTUP_S = 180.0  # importing the OpInfo database takes seconds; a cold disk can take much longer


def unit_key(op: str, variant: str, dtype: str) -> str:
    return f"{op}|{variant}|{dtype}"


def journal_path(output: str | Path) -> Path:
    return Path(_journal_path(output))


def parse_dtypes(spec) -> list[str]:
    names = [d.strip() for d in (spec.split(",") if isinstance(spec, str) else spec) if d.strip()]
    if not names:
        raise GapbenchError("no dtype given")
    out = []
    for n in names:
        n = n.replace("torch.", "")
        if not isinstance(getattr(torch, n, None), torch.dtype):
            raise GapbenchError(f"unknown dtype {n!r}; e.g. float32, bfloat16, float16, float64, int64, complex64")
        out.append(n)
    return list(dict.fromkeys(out))


def check_pattern(pattern: str | None) -> None:
    if pattern:
        try:
            re.compile(pattern)
        except re.error as e:
            raise GapbenchError(f"--ops {pattern!r} is not a valid regular expression: {e}") from None


def list_ops(pattern: str | None = None, extra_ops: str | None = None) -> list[dict]:
    """The OpInfo entries (op, variant, family, autograd) matching `pattern`, read in a worker process."""
    check_pattern(pattern)
    try:
        events = list(run_simple({"mode": "list", "ops": pattern, "extra_ops": extra_ops}, STARTUP_S))
    except ChildFailed as e:
        hint = "; the OpInfo database needs the expecttest package: pip install expecttest" \
            if "expecttest" in str(e) else ""
        raise GapbenchError(f"could not list OpInfo operators ({e}){hint}") from None
    return [e for e in events if e.get("event") == "op"]


def read_journal(path: str | Path) -> tuple[dict, dict[str, dict]]:
    """(header, finished rows by unit key) from a journal; a results file is accepted too (its coverage.ops).
    Rows that break the schema are left out (audited again); a file that is neither is a GapbenchError."""
    p = Path(path)
    try:
        data = read_bytes(p, limit=MAX_JOURNAL_BYTES)
    except ResultFileError as e:
        raise GapbenchError(f"--resume {e}") from None
    if data.lstrip().startswith(b"{") and b'"schema_version"' in data[:2000]:
        cov = results.read(parse_json(data, str(p)), str(p)).coverage or {}
        rows = {unit_key(r["op"], r.get("variant") or "", r["dtype"]): r for r in cov.get("ops") or []}
        header = {"device": (cov.get("device") or {}).get("type"), "torch": cov.get("torch")}
        return header, rows
    contents = Journal(p).read(is_header=lambda o: "journal" in o, what="coverage journal")
    if contents.header is None:
        raise GapbenchError(f"--resume {path}: not a coverage journal (no header line)")
    rows = {str(o["unit"]): o["row"] for o in contents.entries
            if isinstance(o.get("unit"), str) and isinstance(o.get("row"), dict) and _is_coverage_row(o["row"])}
    return contents.header, rows


def _is_coverage_row(doc) -> bool:
    """Whether one row of an operator coverage audit (a journal entry) is valid."""
    try:
        CoverageRow.read(doc)
    except SchemaError:
        return False
    return True


def audit(device: str | None = "cpu", dtypes=DEFAULT_DTYPES, ops: str | None = None, grad: bool = False,
          output: str | Path | None = None, budget_s: float | None = None, op_timeout_s: float = 60.0,
          resume: str | Path | None = None, max_samples: int | None = None, extra_ops: str | None = None,
          label: str | None = None, threads: int | None = None,
          progress: Callable[[int, int, dict], None] | None = None) -> ResultSet:
    """Audit operator coverage of `device`; return (and write to `output`) a results file with `coverage` set.

    ops: a regular expression matched against OpInfo names ('linalg.*|nn.functional.*'); None for all.
    max_samples: at most this many samples per (op, dtype) (spread over OpInfo's list, the largest always
    included); None runs them all.
    extra_ops: a module or .py file defining extra OpInfo entries (extra_ops() or EXTRA_OPS), e.g. for tests.
    threads: torch CPU threads in the worker; default 1 when auditing the host CPU (per-core kernel times that
    other load on the machine cannot turn into OpenMP stalls), torch's default otherwise.
    progress(done, total, row) is called after each finished (op, dtype) unit.
    """
    dev = devices.resolve(device)
    dtype_names = parse_dtypes(dtypes)
    if threads is None and not dev.is_accelerator:
        threads = 1
    if not op_timeout_s > 0:
        raise GapbenchError("--op-timeout must be positive")
    started = now_iso()
    done: dict[str, dict] = {}
    header: dict = {}
    if resume:
        header, done = read_journal(resume)  # before the (slow) listing: a bad file fails at once
    entries = list_ops(ops, extra_ops)
    if not entries:
        raise GapbenchError(f"no OpInfo operator matches --ops {ops!r}")
    units = [(e["op"], e["variant"], d) for e in entries for d in dtype_names]
    jpath = journal_path(output) if output else None
    if resume:
        _check_resumable(resume, header, dev)
        if str(resume).endswith(".journal.jsonl"):
            jpath = Path(resume)
            if output is None:
                output = Path(str(resume)[: -len(".journal.jsonl")])
    keys = {unit_key(*u) for u in units}
    run = _AuditRun(dev, entries, units, {k: v for k, v in done.items() if k in keys}, progress,
                    Journal(jpath) if jpath is not None else None)
    if run.journal is not None:  # fresh, or the resumed rows carried over into a new journal
        run.journal.start({"journal": "coverage", "device": dev.kind, "torch": torch.__version__,
                           "dtypes": dtype_names, "grad": grad, "started_at": started},
                          [{"unit": k, "row": row} for k, row in run.done.items()])
    cfg = {"mode": "audit", "device": str(dev), "grad": grad, "ops": ops, "extra_ops": extra_ops,
           "max_samples": max_samples, "threads": threads}
    run.until_done(cfg, op_timeout_s, time.monotonic() + budget_s if budget_s else float("inf"))
    rows = [run.done[unit_key(*u)] for u in units if unit_key(*u) in run.done]
    rs = build_result_set(dev, dtype_names, grad, rows, started=started, label=label,
                          options={"ops": ops, "dtypes": dtype_names, "grad": grad, "budget_s": budget_s,
                                   "op_timeout_s": op_timeout_s, "max_samples": max_samples,
                                   "extra_ops": extra_ops, "threads": threads},
                          missing=len(units) - len(rows))
    if output:
        save(rs, output)
        rs.path = str(output)
    return rs


def _check_resumable(resume, header: dict, dev) -> None:
    if header.get("device") and header["device"] != dev.kind:
        raise GapbenchError(f"--resume {resume}: that audit ran on {header['device']}, not {dev.kind}")
    if header.get("torch") and header["torch"] != torch.__version__:
        raise GapbenchError(f"--resume {resume}: that audit ran with torch {header['torch']}, "
                            f"this is {torch.__version__}")


class _AuditRun:
    """The units of one audit, the rows done, and the children that work through the rest."""

    def __init__(self, dev, entries: list[dict], units: list[tuple], done: dict[str, dict], progress, journal):
        self.dev, self.entries, self.units, self.done = dev, entries, units, done
        self.progress, self.journal = progress, journal
        self.pending = [u for u in units if unit_key(*u) not in done]
        self.failed_starts = 0

    def record(self, key: str, row: dict) -> None:
        self.done[key] = row
        if self.journal is not None:
            self.journal.append({"unit": key, "row": row})
        if self.progress is not None:
            self.progress(len(self.done), len(self.units), row)

    def until_done(self, cfg: dict, op_timeout_s: float, deadline: float) -> None:
        """Children, one after another, until every unit has a row or the budget is spent."""
        while self.pending and time.monotonic() < deadline:
            if not self.one_child(cfg | {"units": self.pending}, op_timeout_s, deadline):
                break
            self.pending = [u for u in self.pending if unit_key(*u) not in self.done]

    def one_child(self, cfg: dict, op_timeout_s: float, deadline: float) -> bool:
        """Run one child until it ends; False when the audit must stop (budget spent)."""
        child = children.start(cfg, self.dev.backend)
        current: tuple | None = None
        t_unit = time.monotonic()
        try:
            while True:
                limit = min(deadline, (t_unit + op_timeout_s) if current else time.monotonic() + STARTUP_S)
                try:
                    ev = children.next_event(child, limit)
                except children.ChildFailed as e:
                    return self.child_failed(e, current, t_unit, op_timeout_s, deadline)
                if ev is None or ev.get("event") == "end":
                    left = [u for u in self.pending if unit_key(*u) not in self.done]
                    if left and len(left) == len(self.pending):
                        raise GapbenchError(f"the coverage worker stopped without auditing anything "
                                            f"({failures.last_message(child.log_tail()) or 'no message'})")
                    return True
                if ev.get("event") == "start":
                    current = next((u for u in self.pending if unit_key(*u) == ev.get("unit")), None)
                    t_unit = time.monotonic()
                    self.failed_starts = 0
                elif ev.get("event") == "row" and isinstance(ev.get("row"), dict):
                    row = dict(ev["row"])
                    row.setdefault("family", _family(self.entries, row.get("op"), row.get("variant", "")))
                    self.record(str(ev.get("unit")), row)
                    current = None
        finally:
            child.close()

    def child_failed(self, e, current, t_unit: float, op_timeout_s: float, deadline: float) -> bool:
        now = time.monotonic()
        if current is None:
            if now >= deadline:
                return False
            self.failed_starts += 1
            if self.failed_starts >= 2:
                raise GapbenchError(f"the coverage worker fails to start: {e}") from None
            return True
        if e.how == "timeout" and now >= deadline and now - t_unit < op_timeout_s:
            return False  # the budget ran out, not this op's time
        reason = (f"timeout: no result within the op time limit of {op_timeout_s:g} s" if e.how == "timeout"
                  else f"crashed: {e.detail}")
        self.record(unit_key(*current), _failed_row(current, self.entries, reason))
        self.pending = [u for u in self.pending if u != current]
        return True


def _family(entries: list[dict], op: str, variant: str) -> str:
    for e in entries:
        if e["op"] == op and e["variant"] == variant:
            return e["family"]
    return "other"


def _failed_row(unit: tuple, entries: list[dict], reason: str) -> dict:
    op, variant, dtype = unit
    return {"op": op, "variant": variant, "family": _family(entries, op, variant), "dtype": dtype,
            "status": "error", "reason": reason, "max_error": None, "device_time_s": None, "cpu_time_s": None,
            "samples": 0}


def build_result_set(dev, dtype_names: list[str], grad: bool, rows: list[dict], *, started: str,
                     label: str | None, options: dict, missing: int) -> ResultSet:
    summary, families = summarize(rows)
    ident = dev.identity()
    cov = {
        "torch": torch.__version__,
        "device": {k: ident.get(k) for k in ("type", "vendor", "product", "arch", "runtime", "driver", "isa")
                   if ident.get(k) is not None},
        "dtypes": dtype_names,
        "grad": grad,
        "summary": summary,
        "families": families,
        "ops": rows,
        "cpu_threads": options.get("threads"),
        "headline": headline(summary),
        "not_audited": missing,
    }
    rs = ResultSet(host=devices.host_identity(), device=ident, measurements=[], suite="coverage", label=label,
                   started_at=started, coverage=cov, options=options)
    rs.finished_at = now_iso()
    rs.complete = missing == 0
    return rs
