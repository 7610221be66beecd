"""The coverage audit, parent side: which (op, dtype) units to run, workers that run them, journal, budget.

Every unit runs in a worker process; a unit that hangs past its timeout or crashes its worker is recorded
as an error ("timeout" / "crashed") and a fresh worker carries on with the rest.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path

import torch

from gapbench import devices
from gapbench.coverage.pool import Worker, WorkerDied, run_simple
from gapbench.coverage.summary import headline, summarize
from gapbench.errors import GapbenchError
from gapbench.results import ResultSet, now_iso, save

DEFAULT_DTYPES = ("float32",)
STARTUP_S = 180.0  # importing the OpInfo database takes seconds; a cold disk can take much longer


def unit_key(op: str, variant: str, dtype: str) -> str:
    return f"{op}|{variant}|{dtype}"


def journal_path(output: str | Path) -> Path:
    p = Path(output)
    return p.with_name(p.name + ".journal.jsonl")


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
    except WorkerDied as e:
        hint = "; the OpInfo database needs the expecttest package: pip install expecttest" \
            if "expecttest" in str(e) else ""
        raise GapbenchError(f"could not list OpInfo operators ({e}){hint}") from None
    return [e for e in events if e.get("event") == "op"]


def read_journal(path: str | Path) -> tuple[dict, dict[str, dict]]:
    """(header, finished rows by unit key) from a journal; a results file is accepted too (its coverage.ops)."""
    p = Path(path)
    if not p.is_file():
        raise GapbenchError(f"--resume {path}: no such file")
    text = p.read_text(encoding="utf-8", errors="replace")
    if text.lstrip().startswith("{") and '"schema_version"' in text[:2000]:
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            data = None
        if isinstance(data, dict):
            cov = data.get("coverage") or {}
            rows = {unit_key(r["op"], r.get("variant") or "", r["dtype"]): r for r in cov.get("ops", [])}
            header = {"device": (cov.get("device") or {}).get("type"), "torch": cov.get("torch")}
            return header, rows
    header: dict = {}
    rows: dict[str, dict] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            if n == len(text.splitlines()):
                continue  # a line cut short when the audit was killed
            raise GapbenchError(f"--resume {path}: line {n} is not JSON (not a coverage journal?)") from None
        if "journal" in obj:
            header = obj
        elif "unit" in obj and "row" in obj:
            rows[obj["unit"]] = obj["row"]
    if not header:
        raise GapbenchError(f"--resume {path}: not a coverage journal (no header line)")
    return header, rows


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
    threads: torch CPU threads in the worker; default 1 when auditing the CPU (per-core kernel times that
    other load on the machine cannot turn into OpenMP stalls), torch's default otherwise.
    progress(done, total, row) is called after each finished (op, dtype) unit.
    """
    dev = devices.resolve(device)
    dtype_names = parse_dtypes(dtypes)
    if threads is None and dev.is_cpu:
        threads = 1
    if op_timeout_s <= 0:
        raise GapbenchError("--op-timeout must be positive")
    started = now_iso()
    t_start = time.monotonic()
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
        if header.get("device") and header["device"] != dev.type:
            raise GapbenchError(f"--resume {resume}: that audit ran on {header['device']}, not {dev.type}")
        if header.get("torch") and header["torch"] != torch.__version__:
            raise GapbenchError(f"--resume {resume}: that audit ran with torch {header['torch']}, "
                                f"this is {torch.__version__}")
        if str(resume).endswith(".journal.jsonl"):
            jpath = Path(resume)
            if output is None:
                output = Path(str(resume)[: -len(".journal.jsonl")])
    done = {k: v for k, v in done.items() if k in {unit_key(*u) for u in units}}
    journal = None
    if jpath is not None:
        jpath.parent.mkdir(parents=True, exist_ok=True)
        fresh = not (resume and Path(jpath).exists() and Path(jpath).resolve() == Path(resume).resolve())
        journal = open(jpath, "w" if fresh else "a", encoding="utf-8")
        if fresh:
            journal.write(json.dumps({"journal": "coverage", "device": dev.type, "torch": torch.__version__,
                                      "dtypes": dtype_names, "grad": grad, "started_at": started}) + "\n")
            for k, row in done.items():  # carry the resumed rows over into the new journal
                journal.write(json.dumps({"unit": k, "row": row}) + "\n")
            journal.flush()

    def record(key: str, row: dict) -> None:
        done[key] = row
        if journal is not None:
            journal.write(json.dumps({"unit": key, "row": row}, default=str) + "\n")
            journal.flush()
        if progress is not None:
            progress(len(done), len(units), row)

    pending = [u for u in units if unit_key(*u) not in done]
    deadline = t_start + budget_s if budget_s else float("inf")
    out_of_budget = False
    failed_starts = 0
    try:
        while pending and not out_of_budget:
            cfg = {"mode": "audit", "device": str(dev), "units": pending, "grad": grad, "ops": ops,
                   "extra_ops": extra_ops, "max_samples": max_samples, "threads": threads}
            w = Worker(cfg, dev.type)
            current: tuple | None = None
            t_unit = time.monotonic()
            try:
                while True:
                    limit = min(deadline, (t_unit + op_timeout_s) if current else time.monotonic() + STARTUP_S)
                    try:
                        ev = w.next_event(limit)
                    except WorkerDied as e:
                        if current is None:
                            if time.monotonic() >= deadline:
                                out_of_budget = True
                                break
                            failed_starts += 1
                            if failed_starts >= 2:
                                raise GapbenchError(f"the coverage worker fails to start: {e}") from None
                            break
                        if e.how == "timeout" and time.monotonic() >= deadline and \
                                time.monotonic() - t_unit < op_timeout_s:
                            out_of_budget = True  # the budget ran out, not this op's time
                            break
                        reason = (f"timeout: no result within {op_timeout_s:g} s" if e.how == "timeout"
                                  else f"crashed: the worker died ({e.detail})")
                        record(unit_key(*current), _failed_row(current, entries, reason))
                        pending = [u for u in pending if u != current]
                        break
                    if ev is None or ev.get("event") == "end":
                        left = [u for u in pending if unit_key(*u) not in done]
                        if left and len(left) == len(pending):
                            raise GapbenchError(f"the coverage worker stopped without auditing anything "
                                                f"({w.stderr_tail() or 'no message'})")
                        pending = left
                        break
                    kind = ev.get("event")
                    if kind == "start":
                        current = next((u for u in pending if unit_key(*u) == ev["unit"]), None)
                        t_unit = time.monotonic()
                        failed_starts = 0
                    elif kind == "row":
                        row = dict(ev["row"])
                        row.setdefault("family", _family(entries, row["op"], row.get("variant", "")))
                        record(ev["unit"], row)
                        current = None
            finally:
                w.close()
            pending = [u for u in pending if unit_key(*u) not in done]
            if time.monotonic() >= deadline and pending:
                out_of_budget = True
    finally:
        if journal is not None:
            journal.close()

    rows = [done[unit_key(*u)] for u in units if unit_key(*u) in done]
    rs = build_result_set(dev, dtype_names, grad, rows, started=started, label=label,
                          options={"ops": ops, "dtypes": dtype_names, "grad": grad, "budget_s": budget_s,
                                   "op_timeout_s": op_timeout_s, "max_samples": max_samples,
                                   "extra_ops": extra_ops, "threads": threads},
                          missing=len(units) - len(rows))
    if output:
        save(rs, output)
        rs.path = str(output)
    return rs


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
