"""gapbench ops: the ATen operators a model uses (forward and backward), and their status on a device."""

from __future__ import annotations

import sys

from gapbench.cli._output import print_json
from gapbench.errors import GapbenchError

HELP = "list the ATen operators a model uses, and with --against their coverage status on a device"


def add_arguments(p) -> None:
    p.add_argument("target", nargs="?", default=None, metavar="MODULE:CALLABLE",
                   help="a callable returning (model, example_inputs), e.g. mypkg.models:build")
    p.add_argument("--workload", default=None, metavar="NAME:PRESET",
                   help="trace a built-in workload instead, e.g. llm-train:tiny")
    p.add_argument("--against", default=None, metavar="COVERAGE.json",
                   help="a results file from gapbench coverage: show each operator's status there")
    p.add_argument("--device", default="cpu", help="device the model is built for (fake tensors; default cpu)")
    p.add_argument("--real", action="store_true",
                   help="run on real tensors instead of fake ones (needs the memory; for models fake tensors break)")
    p.add_argument("--rebuild-index", action="store_true",
                   help="rebuild the cached map from ATen operators to OpInfo entries")
    p.add_argument("--strict", action="store_true", help="exit 1 when an operator is not native (with --against)")
    p.add_argument("--json", action="store_true", help="print the trace (and statuses) as JSON")


def main(args) -> int:
    from gapbench.coverage.trace import against, trace_ops

    if args.strict and not args.against:
        raise GapbenchError("--strict needs --against COVERAGE.json")
    trace = trace_ops(args.target, workload=args.workload, device=args.device, fake=not args.real)
    verdict = None
    if args.against:
        from gapbench.coverage.index import index_path, load_index

        if args.rebuild_index or not index_path().is_file():
            print("gapbench: tracing every OpInfo entry once to map ATen operators to them (a minute or two; "
                  f"cached in {index_path()})", file=sys.stderr)
        index = load_index(rebuild=args.rebuild_index)
        verdict = against(trace, args.against, index=index)
        for w in verdict.warnings:
            print(f"gapbench: warning: {w}", file=sys.stderr)
    if args.json:
        data = trace.to_dict()
        if verdict is not None:
            for row in data["ops"]:
                row.update({k: v for k, v in verdict.statuses[row["op"]].items()})
            data["verdict"] = verdict.line
            data["against"] = args.against
        print_json(data)
    else:
        from rich.text import Text

        from gapbench.cli._output import shown
        from gapbench.report.coverage import trace_table
        from gapbench.report.kit import rich_table

        console = shown()
        console.print(rich_table(trace_table(trace, verdict.statuses if verdict else None)))
        n_f = sum(trace.forward.values())
        n_b = sum(trace.backward.values())
        console.print(f"{len(trace.ops())} operators, {n_f} calls in forward, {n_b} in backward"
                      f"{' (fake tensors)' if trace.fake else ''}")
        if verdict is not None:
            console.print(Text(verdict.line, style="bold"))
    if verdict is not None and args.strict and verdict.not_native:
        return 1
    return 0
