"""gapbench claims: check a published benchmark table — datasheet figures quoted as results, numbers above the
physical peak, the stated gaps' arithmetic, like for unlike — before anyone buys on it."""

from __future__ import annotations

import io
import sys

from gapbench.errors import GapbenchError
from gapbench.results import check_output, write_text_atomic

HELP = ("check a published benchmark table (Markdown, CSV, TOML/JSON) against datasheet peaks, published "
        "measurements and your own results")
FORMATS = ("table", "md", "json", "html")

def add_arguments(p) -> None:
    p.add_argument("file", metavar="FILE", help="the table: .md (the first pipe table), .csv, .toml or .json")
    p.add_argument("--results", action="append", default=[], metavar="FILE",
                   help="a gapbench results file measured on one of the table's platforms (repeatable), matched to "
                        "the column its run label names (gapbench run --label) or else to its device's spec row; "
                        "files of one column are its runs: your measurement of each matched row, and the gap "
                        "with its interval, are set beside the claim")
    p.add_argument("--format", "-f", default="table", metavar="FMT", help="table (default), md, json or html")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("--force", action="store_true", help="replace a results file at --output")
    p.add_argument("--fail-on", choices=("implausible", "unlike"), metavar="LEVEL",
                   help="exit 1 when any number or row is at LEVEL or worse: implausible, or unlike (like for "
                        "unlike, which includes implausible)")

def main(args) -> int:
    from gapbench.claims import claims
    from gapbench.report.claims import render, verdict_line

    fmt = "json" if args.json else args.format.lower()
    fmt = "md" if fmt == "markdown" else fmt
    if fmt not in FORMATS:
        raise GapbenchError(f"unknown format {args.format!r} (choose from {', '.join(FORMATS)})")
    if args.force and not args.output:
        raise GapbenchError("--force replaces the file --output names; give --output")
    if args.output:
        check_output(args.output, inputs=[args.file, *args.results], force=args.force)
    report = claims(args.file, results=args.results)
    text = render(report, fmt)
    if fmt == "table":
        from gapbench.cli._output import ShownConsole
        from gapbench.cli._output import out as terminal

        console = ShownConsole(record=True, width=160, file=io.StringIO()) if args.output else terminal
        for item in text:
            console.print(item)
        text = console.export_text() if args.output else None
    if args.output:
        write_text_atomic(args.output, text)
        print(f"{verdict_line(report)}\nwrote {args.output}", file=sys.stderr)
    elif text is not None:
        sys.stdout.write(text)
    if args.fail_on and report.fails(args.fail_on):
        print(f"gapbench claims: numbers at or above '{args.fail_on}' in {args.file} (--fail-on)", file=sys.stderr)
        return 1
    return 0
