"""gapbench report: one self-contained HTML page (or Markdown/CSV/JSON) from results files."""

from __future__ import annotations

import sys
from pathlib import Path

from gapbench.cli._inputs import add_label_argument, platform_inputs
from gapbench.compare import compare, history_choice, parse_prices
from gapbench.errors import GapbenchError
from gapbench.report import render
from gapbench.results import check_output, write_text_atomic

HELP = "write a self-contained HTML report (gap table, plots, roofline, environments, failures)"


def add_arguments(p) -> None:
    p.add_argument("files", nargs="*", metavar="FILE", help="results files written by `gapbench run`")
    p.add_argument("-o", "--output", default="gapbench-report.html", help="where to write (default: %(default)s; "
                   "'-' for stdout)")
    p.add_argument("--format", choices=("html", "md", "csv", "json"), default=None,
                   help="default: from the output's extension (.md, .csv, .json), else html")
    p.add_argument("--baseline", metavar="FILE|NAME")
    add_label_argument(p)
    p.add_argument("--ref", action="append", default=[], metavar="NAME")
    p.add_argument("--interactivity", action="append", type=float, default=[], metavar="TOKENS_PER_S",
                   help="compare inference curves at this many tokens/s per user (repeatable; default: where "
                   "all curves reach)")
    p.add_argument("--price", action="append", default=[], metavar="NAME=USD_PER_HOUR")
    p.add_argument("--db", metavar="FILE", help="the history database whose run-to-run spreads judge single runs "
                   "(default: $GAPBENCH_DB or the XDG data folder's)")
    p.add_argument("--no-history", action="store_true",
                   help="judge single runs by the class default spread only, never the history's")
    p.add_argument("--title", default="gapbench report")
    p.add_argument("--force", action="store_true", help="replace a results file at --output (never one of the inputs)")


def main(args) -> int:
    fmt = args.format or {".md": "md", ".csv": "csv", ".json": "json"}.get(Path(args.output).suffix.lower(), "html")
    if args.output != "-":
        check_output(args.output, inputs=args.files, force=args.force)
    inputs, labels = platform_inputs(args.files, args.label)
    comp = compare(inputs, baseline=args.baseline, labels=labels, refs=args.ref, prices=parse_prices(args.price),
                   allow_flagged=args.allow_flagged, interactivity=args.interactivity or None,
                   history=history_choice(args.db, args.no_history))
    for w in comp.warnings:
        print(f"gapbench: warning: {w}", file=sys.stderr)
    text = render(None, format=fmt, comparison=comp, title=args.title)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    out = Path(args.output)
    try:
        write_text_atomic(out, text)
    except OSError as e:
        raise GapbenchError(f"cannot write {out}: {e.strerror or e}") from None
    print(f"wrote {out} ({len(text.encode('utf-8')) // 1024 + 1} KiB, {len(comp.rows)} rows, "
          f"{len(comp.platforms)} platforms)", file=sys.stderr)
    return 0
