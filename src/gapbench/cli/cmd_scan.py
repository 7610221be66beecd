"""gapbench scan: find what ties a codebase to CUDA, judged per target, with an effort range."""

from __future__ import annotations

import io
import os
import re
import sys

from gapbench.errors import GapbenchError

HELP = "scan a codebase for CUDA lock-in: per-target verdicts (ROCm, Ascend NPU, Intel XPU) and effort"


def add_arguments(p) -> None:
    p.add_argument("path", nargs="?", help="folder (or file) to scan; its code is read, never imported or run")
    p.add_argument("--list-rules", action="store_true",
                   help="print the rules (id, kinds, verdict per target, message) and exit; with --rules, yours too")
    p.add_argument("--target", "-t", action="append", default=[], metavar="TARGET",
                   help="rocm, npu, xpu or all (repeat or comma-separate; default: all)")
    p.add_argument("--format", "-f", default="table", metavar="FMT",
                   help="table (default), json, md, html or sarif")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("--force", action="store_true",
                   help="let --output replace a gapbench results file (never a folder, a device or an input)")
    p.add_argument("--fail-on", choices=("manual", "blocker"), metavar="LEVEL",
                   help="exit 1 when a finding reaches LEVEL (manual or blocker) on a selected target")
    p.add_argument("--max-size", default="2MB", metavar="SIZE",
                   help="skip (and list) files larger than this (default 2MB; e.g. 500KB, 10MB)")
    p.add_argument("--no-gitignore", action="store_true", help="also scan files that .gitignore excludes")
    p.add_argument("--rules", action="append", default=[], metavar="FILE",
                   help="extra rules file (TOML, same format as the packaged rules.toml); repeatable")
    p.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                   help="worker processes (default: 2 for big trees)")
    p.add_argument("--limit", type=int, default=40, metavar="N",
                   help="findings shown in the terminal table (0 = all; other formats list all)")


def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kKmMgG]?)i?[bB]?\s*", text)
    if not m:
        raise GapbenchError(f"--max-size: cannot read {text!r} (use e.g. 500KB, 2MB)")
    scale = {"": 1, "k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[m.group(2).lower()]
    return int(float(m.group(1)) * scale)


def main(args) -> int:
    from gapbench.report.scan import FORMATS, render
    from gapbench.scan import scan
    from gapbench.scan.walker import root_status

    fmt = "json" if args.json else args.format.lower()
    if fmt == "markdown":
        fmt = "md"
    if fmt not in FORMATS:
        raise GapbenchError(f"unknown format {args.format!r} (choose from {', '.join(FORMATS)})")
    if args.list_rules:
        return _list_rules(args, fmt)
    if not args.path:
        raise GapbenchError("scan needs a PATH (or --list-rules)")
    root_status(args.path)     # a folder or a regular file, before anything else
    if args.jobs is not None and args.jobs < 1:
        raise GapbenchError("--jobs must be at least 1")
    if args.output:
        check_output(args.output, args.path, args.rules, args.force)
    report = scan(args.path, targets=args.target or ("all",), max_bytes=parse_size(args.max_size),
                  respect_gitignore=not args.no_gitignore, jobs=args.jobs, rules=args.rules)
    _emit(render(report, fmt, limit=args.limit), fmt, args.output)
    if args.fail_on and report.fails(args.fail_on):
        from gapbench.scan.rules import VERDICTS
        worst = sum(1 for f in report.findings if report.severity(f) >= VERDICTS.index(args.fail_on))
        print(f"gapbench scan: {worst} finding(s) at or above '{args.fail_on}' (--fail-on)", file=sys.stderr)
        return 1
    return 0


def _emit(out, fmt: str, output: str | None) -> None:
    """The rendered report to the terminal (rich for the table) or to the output file."""
    if fmt == "table":
        from gapbench.cli._output import OUTPUT_WIDTH, ShownConsole, shown

        console = (ShownConsole(record=True, width=OUTPUT_WIDTH, file=io.StringIO(), highlight=False) if output
                   else shown())
        for item in out:
            console.print(item)
        if not output:
            return
        out = console.export_text()
    if output:
        from gapbench.results import write_text_atomic

        try:
            write_text_atomic(output, out)
        except OSError as e:
            raise GapbenchError(f"--output {output}: cannot write: {e.strerror or e}") from None
        print(f"wrote {output}", file=sys.stderr)
    else:
        sys.stdout.write(out)


def check_output(output: str, path: str, rules: list[str], force: bool) -> None:
    """Refuse, before any work, an output that would destroy something: the shared guard (a folder, a device, a
    FIFO, an input, a results file without --force, ...), a file inside the scanned folder, and a folder that
    does not exist (a report is not worth a new folder made from a typo)."""
    from gapbench.results import check_output as guard

    guard(output, inputs=[path, *rules], force=force, flag="--output")
    real, src = os.path.realpath(output), os.path.realpath(path)
    if os.path.isdir(src) and real.startswith(src.rstrip(os.sep) + os.sep):
        raise GapbenchError(f"--output {output}: is inside the scanned folder {path}; write the report elsewhere")
    if not os.path.isdir(os.path.dirname(real)):
        raise GapbenchError(f"--output {output}: cannot write: its folder does not exist")


def _list_rules(args, fmt: str) -> int:
    import json

    from gapbench.scan.rules import TARGETS, load_rules

    rs = load_rules(args.rules)
    rows = [{"id": r.id, "kind": list(r.kinds), "verdicts": r.verdicts, "message": r.message, "fix": r.fix,
             "reference": r.reference} for r in rs.rules.values()]
    if fmt == "json":
        sys.stdout.write(json.dumps({"source": rs.source, "date": rs.date, "rules": rows}, indent=2) + "\n")
        return 0
    from rich.table import Table

    from gapbench.cli._output import shown

    t = Table(title=f"{len(rows)} scan rules ({rs.date}; {rs.source})", title_justify="left")
    for col in ("id", "kind", *TARGETS, "message"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r["id"], ",".join(r["kind"]), *(r["verdicts"][x] for x in TARGETS), r["message"])
    shown().print(t)
    return 0
