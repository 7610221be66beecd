"""gapbench assess: one verdict for moving a codebase to a stack — what breaks, the effort, the operators the
model needs there, and its expected speed."""

from __future__ import annotations

import io
import sys

from gapbench.errors import GapbenchError
from gapbench.results import check_output, write_text_atomic

HELP = ("migration readiness of a codebase on a target stack: lock-in and effort, the model's operators there, "
        "and its predicted speed against the source stack")
FORMATS = ("table", "md", "json", "html")


def add_arguments(p) -> None:
    p.add_argument("path", nargs="?", help="the codebase (folder or file); scanned, never imported or run")
    p.add_argument("--target", "-t", metavar="STACK", help="rocm, npu, xpu, mps or cpu")
    p.add_argument("--entry", metavar="MODULE:FUNCTION",
                   help="your function returning (model, example_inputs) or a step function; importing it RUNS your "
                        "code (opt-in); traced under fake tensors")
    p.add_argument("--like", metavar="WORKLOAD:PRESET",
                   help="a built-in model workload of the same family instead, e.g. llm-train:tiny")
    p.add_argument("--dtype", metavar="DTYPE",
                   help="with --like: the precision to trace at (fp32, bf16, fp16; default: the source results "
                        "file's measured row of that workload, else fp32)")
    p.add_argument("--reference", metavar="WORKLOAD:PRESET",
                   help="a built-in workload both results files measured (e.g. bert-finetune:tiny): its own error on "
                        "the pair corrects the prediction by the calibrated weight of the pair's kind")
    p.add_argument("--coverage", metavar="TARGET.json",
                   help="a gapbench coverage file measured on the target: each operator's status there")
    p.add_argument("--results", action="append", default=[], metavar="FILE",
                   help="give twice: the source stack's results file, then the target's (gapbench run --suite assess)")
    p.add_argument("--format", "-f", default="table", metavar="FMT", help="table (default), md, json or html")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--output", "-o", metavar="FILE", help="write the report to FILE instead of stdout")
    p.add_argument("--force", action="store_true", help="replace a results file at --output (never one of the inputs)")
    p.add_argument("--fail-on", choices=("manual", "blocker"), metavar="LEVEL",
                   help="exit 1 when the code has a finding at LEVEL (manual or blocker) or worse on the target")
    p.add_argument("--rules", action="append", default=[], metavar="FILE", help="extra scan rules file (TOML)")
    p.add_argument("--real", action="store_true", help="trace on real tensors instead of fake ones")
    p.add_argument("--limit", type=int, default=20, metavar="N", help="findings and operators listed (0 = all)")
    p.add_argument("--allow-flagged", action="store_true",
                   help="give the expected speed a verdict even where the host watch flagged rates it uses")
    p.add_argument("--db", metavar="FILE", help="the history database whose run-to-run spreads judge the measured "
                   "check (default: $GAPBENCH_DB or the XDG data folder's)")
    p.add_argument("--no-history", action="store_true", help="judge by the class default spread only")


def main(args) -> int:
    from gapbench.assess import assess
    from gapbench.compare import history_choice

    fmt = _checked_format(args)
    history = history_choice(args.db, args.no_history)
    a = assess(args.path, args.target, entry=args.entry, like=args.like, dtype=args.dtype, coverage=args.coverage,
               results=args.results, rules=args.rules, fake=not args.real, allow_flagged=args.allow_flagged,
               history=history, on_ready=_announce_index if args.coverage else None,  # said once all is checked
               reference=args.reference)
    _print(a, fmt, args)
    if args.fail_on and a.fails(args.fail_on):
        n = sum(a.code.counts.get(v, 0) for v in (("manual", "blocker") if args.fail_on == "manual" else ("blocker",)))
        print(f"gapbench assess: {n} finding(s) at or above '{args.fail_on}' on {a.stack.name} (--fail-on)",
              file=sys.stderr)
        return 1
    return 0


def _checked_format(args) -> str:
    """The output format, once every argument that needs no work to check is checked."""
    fmt = "json" if args.json else args.format.lower()
    fmt = "md" if fmt == "markdown" else fmt
    if fmt not in FORMATS:
        raise GapbenchError(f"unknown format {args.format!r} (choose from {', '.join(FORMATS)})")
    if not args.path:
        raise GapbenchError("assess needs a PATH (the codebase)")
    if not args.target:
        raise GapbenchError("assess needs --target (rocm, npu, xpu, mps or cpu)")
    if args.limit < 0:
        raise GapbenchError("--limit must be 0 (all) or more")
    if args.force and not args.output:
        raise GapbenchError("--force replaces the file --output names; give --output")
    if args.output:
        check_output(args.output, inputs=[args.path, args.coverage, *args.results, *args.rules], force=args.force)
    if args.dtype and not args.like:
        raise GapbenchError("--dtype is the precision a --like workload is traced at; your --entry sets its own")
    if args.coverage and not (args.entry or args.like):
        raise GapbenchError("--coverage needs a step to check: give --entry MODULE:FUNCTION or --like WORKLOAD:PRESET")
    return fmt


def _print(a, fmt: str, args) -> None:
    from gapbench.report.assess import render, verdict_line

    out = render(a, fmt, args.limit)
    if fmt == "table":
        from rich.console import Console

        from gapbench.cli._output import out as terminal

        console = Console(record=True, width=160, file=io.StringIO()) if args.output else terminal
        for item in out:
            console.print(item)
        out = console.export_text() if args.output else None
    if not args.output:
        if out is not None:
            sys.stdout.write(out)
        return
    write_text_atomic(args.output, out)
    print(f"{verdict_line(a)}\nwrote {args.output}", file=sys.stderr)


def _announce_index() -> None:
    from gapbench.coverage.index import index_path

    if not index_path().is_file():
        print("gapbench: tracing every OpInfo entry once to map ATen operators to them (a minute or two; cached in "
              f"{index_path()})", file=sys.stderr)
