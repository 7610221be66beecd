"""gapbench history: a workload's results over runs, devices, gapbench versions and software stacks."""

from __future__ import annotations

from gapbench import history
from gapbench.cli._args import count
from gapbench.cli._output import out, print_json
from gapbench.errors import GapbenchError
from gapbench.report.kit import rich_table
from gapbench.report.runs import history_table

HELP = "show how a workload's results moved over runs and versions; --import older results files"


def add_arguments(p) -> None:
    p.add_argument("--workload", "-w", help="workload to show (without it: what the history holds)")
    p.add_argument("--device", help="only devices whose product, type or run label contains this")
    p.add_argument("--variant", action="append", default=[], metavar="KEY=VALUE",
                   help="only variants with this parameter value (repeatable), e.g. dtype=fp32")
    p.add_argument("--import", dest="import_files", nargs="+", metavar="FILE", help="record results files first")
    p.add_argument("--db", help=f"database file (default: $GAPBENCH_DB or {history.default_path()})")
    p.add_argument("--limit", type=count, help="only the last N rows")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _variant_filter(items: list[str]) -> dict:
    out_ = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k:
            raise GapbenchError(f"--variant {it!r}: expected KEY=VALUE, e.g. dtype=fp32")
        out_[k] = v
    return out_


def _check_text(args) -> None:
    """A name from the command line that is not text (bytes of a file name that are not UTF-8) matches nothing
    the history holds: say so, instead of failing in the database."""
    for flag, value in (("--workload", args.workload), ("--device", args.device), *(("--variant", v) for v in
                                                                                  args.variant or [])):
        try:
            (value or "").encode("utf-8")
        except UnicodeEncodeError:
            raise GapbenchError(f"{flag} {value.encode('utf-8', 'backslashreplace').decode()}: not UTF-8 text; "
                                "the history holds only text names") from None


def main(args) -> int:
    _check_text(args)
    db = args.db
    imported = []
    if args.import_files:
        imported = history.import_files(args.import_files, db)
        if not args.json:
            for path, run_id, n in imported:
                out.print(f"imported {path}: run {run_id}, {n} measurement(s)", markup=False)
    if not args.workload:
        held = history.workloads(db)
        if args.json:
            print_json({"db": str(db or history.default_path()), "imported": imported,
                        "workloads": [{"workload": w, "measurements": n} for w, n in held]})
            return 0
        if not args.import_files:
            if not held:
                out.print(f"history {db or history.default_path()} is empty; `gapbench run` records into it, "
                          "`gapbench history --import FILES` loads older results", markup=False)
            for w, n in held:
                out.print(f"{w}: {n} measurement(s) — gapbench history --workload {w}", markup=False)
        return 0
    rows = history.rows(args.workload, device=args.device, variant=_variant_filter(args.variant), db_path=db,
                         limit=args.limit)
    if args.json:
        print_json({"workload": args.workload, "rows": [r.to_dict() for r in rows]})
        return 0
    if not rows:
        raise GapbenchError(f"no history for workload {args.workload!r}"
                            + (f" on devices matching {args.device!r}" if args.device else "")
                            + f" in {db or history.default_path()}")
    t = rich_table(history_table(args.workload, rows))
    out.print(t)
    return 0
