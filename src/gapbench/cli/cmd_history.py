"""gapbench history: a workload's results over runs, devices, gapbench versions and software stacks."""

from __future__ import annotations

import json

from rich.table import Table
from rich.text import Text

from gapbench import store
from gapbench.cli._output import err, out
from gapbench.compare import fmt_num, fmt_pct, gap_pct, variant_text
from gapbench.errors import GapbenchError

HELP = "show how a workload's results moved over runs and versions; --import older results files"


def add_arguments(p) -> None:
    p.add_argument("--workload", "-w", help="workload to show (without it: what the history holds)")
    p.add_argument("--device", help="only devices whose product, type or run label contains this")
    p.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE",
                   help="only variants with this parameter value (repeatable), e.g. dtype=fp32")
    p.add_argument("--import", dest="import_files", nargs="+", metavar="FILE", help="record results files first")
    p.add_argument("--db", help=f"database file (default: $GAPBENCH_DB or {store.default_path()})")
    p.add_argument("--limit", type=int, help="only the last N rows")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _variant_filter(items: list[str]) -> dict:
    out_ = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise GapbenchError(f"--variant {it!r}: expected KEY=VALUE, e.g. dtype=fp32")
        out_[k] = v
    return out_


def main(args) -> int:
    db = args.db
    imported = []
    if args.import_files:
        imported = store.import_files(args.import_files, db)
        if not args.json:
            for path, run_id, n in imported:
                err.print(f"imported {path}: run {run_id}, {n} measurement(s)", markup=False)
    if not args.workload:
        held = store.workloads(db)
        if args.json:
            print(json.dumps({"db": str(db or store.default_path()), "imported": imported,
                              "workloads": [{"workload": w, "measurements": n} for w, n in held]}, indent=1))
            return 0
        if not args.import_files:
            if not held:
                out.print(f"history {db or store.default_path()} is empty; `gapbench run` records into it, "
                          "`gapbench history --import FILES` loads older results", markup=False)
            for w, n in held:
                out.print(f"{w}: {n} measurement(s) — gapbench history --workload {w}", markup=False)
        return 0
    rows = store.history(args.workload, device=args.device, variant=_variant_filter(args.variant), db_path=db,
                         limit=args.limit)
    if args.json:
        print(json.dumps({"workload": args.workload, "rows": [r.to_dict() for r in rows]}, indent=1, default=str))
        return 0
    if not rows:
        raise GapbenchError(f"no history for workload {args.workload!r}"
                            + (f" on devices matching {args.device!r}" if args.device else "")
                            + f" in {db or store.default_path()}")
    t = Table(title=Text(f"history of {args.workload} (change: against the previous run of the same device, "
                         "CPU threads and variant)"), title_justify="left")
    for c in ("started", "device", "threads", "label", "variant", "value ± 95% CI", "unit", "change", "gapbench",
              "torch", "runtime"):
        t.add_column(c, justify="right" if c in ("value ± 95% CI", "change") else "left", overflow="fold")
    last: dict[tuple, float] = {}
    for r in rows:
        key = (r.device_product, r.threads, json.dumps(r.variant, sort_keys=True), r.preset)
        if r.status == "ok" and r.value is not None:
            val = fmt_num(r.value) + (f" ± {fmt_num((r.ci95[1] - r.ci95[0]) / 2, 2)}" if r.ci95 else "")
            prev = last.get(key)
            g = gap_pct(r.value, prev, True) if prev is not None else None
            change = fmt_pct(g) if g is not None else "—"
            last[key] = r.value
        else:
            val, change = f"{r.status}", (r.reason or "")[:60]
        t.add_row(*[Text(str(x)) for x in (
            (r.started_at or "")[:19], r.device_product or r.device_type or "?",
            "" if r.threads is None else r.threads, r.label or "", variant_text(r.variant),
            val, r.unit or "", change, r.gapbench_version or "", r.torch_version or "", r.runtime or "")])
    out.print(t)
    return 0
