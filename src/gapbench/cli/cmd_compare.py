"""gapbench compare: line up results files (and published references) into a gap table."""

from __future__ import annotations

import sys

from rich.markup import escape

from gapbench.cli._inputs import add_label_argument, platform_inputs
from gapbench.cli._output import err, out
from gapbench.compare import compare, history_choice, parse_prices
from gapbench.report import render
from gapbench.report.terminal import terminal_renderables
from gapbench.text import printable

TERMINAL_ROWS = 2000

HELP = "gap table between results files (and published references), with uncertainty and % of peak"


def add_arguments(p) -> None:
    p.add_argument("files", nargs="*", metavar="FILE", help="results files written by `gapbench run`")
    p.add_argument("--baseline", metavar="FILE|NAME", help="the input the gaps are measured against "
                   "(default: the first file, or the reference when --ref is given)")
    add_label_argument(p)
    p.add_argument("--ref", action="append", default=[], metavar="NAME",
                   help="add published reference results as a platform (see `gapbench specs --refs`)")
    p.add_argument("--format", choices=("terminal", "md", "csv", "json"), default="terminal")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--interactivity", action="append", type=float, default=[], metavar="TOKENS_PER_S",
                   help="compare inference curves at this many tokens/s per user (repeatable; default: where "
                   "all curves reach)")
    p.add_argument("--price", action="append", default=[], metavar="NAME=USD_PER_HOUR",
                   help="price per device-hour for throughput per dollar (NAME: label, platform name or file stem)")
    p.add_argument("--db", metavar="FILE", help="the history database whose run-to-run spreads judge single runs "
                   "(default: $GAPBENCH_DB or the XDG data folder's)")
    p.add_argument("--no-history", action="store_true",
                   help="judge single runs by the class default spread only, never the history's")


def main(args) -> int:
    inputs, labels = platform_inputs(args.files, args.label)
    comp = compare(inputs, baseline=args.baseline, labels=labels, refs=args.ref, prices=parse_prices(args.price),
                   allow_flagged=args.allow_flagged, interactivity=args.interactivity or None,
                   history=history_choice(args.db, args.no_history))
    fmt = "json" if args.json else args.format
    if fmt == "terminal":
        if len(comp.rows) > TERMINAL_ROWS:  # a table that long is read in a file, and rich draws it slowly
            comp.warnings.append(f"the terminal shows the first {TERMINAL_ROWS:,} of {len(comp.rows):,} rows; "
                                 "--format md, csv or json, or `gapbench report`, show every row")
            comp.rows = comp.rows[:TERMINAL_ROWS]
        for w in comp.warnings:
            err.print(f"[yellow]warning:[/] {escape(printable(w))}", markup=True, highlight=False)
        comp.warnings = []
        for r in terminal_renderables(comp):
            out.print(r)
        return 0
    for w in comp.warnings:
        print(f"gapbench: warning: {printable(w)}", file=sys.stderr)
    sys.stdout.write(render(None, format=fmt, comparison=comp))
    return 0
