"""gapbench coverage: audit which PyTorch operators a backend runs natively, correctly, and how fast."""

from __future__ import annotations

import os
import re
import sys

from gapbench.cli._args import count, label
from gapbench.cli._output import print_json
from gapbench.errors import GapbenchError
from gapbench.results import check_output

HELP = "audit operator coverage of a device against PyTorch's OpInfo database"

EXTRA_OPS_ENV = "GAPBENCH_COVERAGE_EXTRA_OPS"


def add_arguments(p) -> None:
    p.add_argument("--device", default="auto", help="device to audit: cuda, xpu, npu, mps, cpu (default: best found)")
    p.add_argument("--dtype", default="float32", help="comma-separated dtypes (default float32), e.g. bfloat16,float16")
    p.add_argument("--ops", default=None, metavar="REGEX",
                   help="only OpInfo entries whose name matches, e.g. 'linalg.*|nn.functional.*'")
    p.add_argument("--grad", action="store_true", help="also run and check backward for ops that support autograd")
    p.add_argument("--output", "-o", default=None, metavar="FILE",
                   help="results file (default coverage-DEVICE.json); a journal FILE.journal.jsonl sits beside it")
    p.add_argument("--resume", default=None, metavar="FILE",
                   help="skip (op, dtype) units finished in this journal (or results file) and carry on")
    p.add_argument("--budget", default=None, metavar="TIME", help="overall time budget: seconds, or 30m, 2h")
    p.add_argument("--op-timeout", default="60", metavar="TIME",
                   help="time one (op, dtype) may take before it is recorded as a timeout (default 60 s)")
    p.add_argument("--max-samples", type=count, default=None, metavar="N",
                   help="at most N OpInfo sample inputs per (op, dtype), spread, the largest included (default all)")
    p.add_argument("--extra-ops", default=os.environ.get(EXTRA_OPS_ENV), metavar="MODULE",
                   help=f"module or .py file adding OpInfo entries (extra_ops() or EXTRA_OPS); env {EXTRA_OPS_ENV}")
    p.add_argument("--threads", type=count, default=None, metavar="N",
                   help="torch CPU threads in the worker (default: 1 when auditing the CPU, torch's default otherwise)")
    p.add_argument("--label", type=label, default=None, help="name of this platform in comparisons")
    p.add_argument("--list", action="store_true", help="list the OpInfo entries that would be audited, then stop")
    p.add_argument("--show", default="20", metavar="N|all",
                   help="how many not-native ops to list on the terminal (default 20)")
    p.add_argument("--json", action="store_true", help="print the coverage section as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--force", action="store_true", help="replace an existing results file at --output")


def parse_time(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d{1,9}(?:\.\d{1,9})?)\s*(s|m|min|h)?\s*", str(text))
    if not m:
        raise GapbenchError(f"{what} {text!r}: expected seconds or a number with s, m or h (e.g. 90, 30m)")
    seconds = float(m.group(1)) * {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    if not seconds > 0:
        raise GapbenchError(f"{what} {text!r}: must be more than 0 seconds")
    return seconds


def main(args) -> int:
    from gapbench.coverage import audit, list_ops

    if args.list:
        entries = list_ops(args.ops, args.extra_ops)
        if args.json:
            print_json(entries)
        else:
            for e in entries:
                print(f"{e['op']}{'.' + e['variant'] if e['variant'] else ''}\t{e['family']}")
        return 0
    if args.show != "all" and not args.show.isdigit():
        raise GapbenchError(f"--show {args.show!r}: expected a number or 'all'")
    budget_s, op_timeout_s = parse_time(args.budget, "--budget"), parse_time(args.op_timeout, "--op-timeout")
    from gapbench import devices

    dev = devices.resolve(None if args.device == "auto" else args.device)
    output = args.output
    if output is None and not (args.resume and args.resume.endswith(".journal.jsonl")):
        output = f"coverage-{dev.type}.json"
    if output is not None:
        check_output(output, inputs=[args.extra_ops] if args.extra_ops else [],
                     force=args.force or _resumes_into(args.resume, output), resume_hint=True)
    kwargs = dict(device=str(dev), dtypes=args.dtype, ops=args.ops, grad=args.grad, output=output,
                  budget_s=budget_s, op_timeout_s=op_timeout_s,
                  resume=args.resume, max_samples=args.max_samples, extra_ops=args.extra_ops, label=args.label,
                  threads=args.threads)
    show_progress = not args.quiet and not args.json and sys.stderr.isatty()
    if show_progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                      TextColumn("{task.fields[op]}"), transient=True) as bar:
            task = bar.add_task("coverage", total=None, op="")

            def progress(done, total, row):
                bar.update(task, completed=done, total=total, op=f"{row['op']} {row['dtype']}: {row['status']}")

            rs = audit(**kwargs, progress=progress)
    else:
        rs = audit(**kwargs)
    cov = rs.coverage
    if args.json:
        print_json(cov)
        return 0
    from rich.text import Text

    from gapbench.cli._output import shown
    from gapbench.report.coverage import coverage_tables
    from gapbench.report.kit import rich_table

    console = shown()
    limit = None if args.show == "all" else int(args.show)
    for item in coverage_tables(cov, where=rs.name, show=limit):
        console.print(Text(item, style="bold") if isinstance(item, str) else rich_table(item))
    if cov.get("not_audited"):
        console.print(Text(f"{cov['not_audited']} (op, dtype) units not audited (budget spent); "
                           f"continue with --resume {rs.path}.journal.jsonl", style="yellow"))
    console.print(f"written: {rs.path}", markup=False)
    return 0


def _resumes_into(resume: str | None, output: str) -> bool:
    """Whether --resume continues the audit whose results file (or its journal) is `output`."""
    if not resume:
        return False
    if os.path.abspath(resume) == os.path.abspath(f"{output}.journal.jsonl"):
        return True
    return os.path.exists(resume) and os.path.exists(output) and os.path.samefile(resume, output)
