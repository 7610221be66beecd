"""gapbench port: translate CUDA C/C++ to HIP into a new folder and report what could not be mapped."""

from __future__ import annotations

import json
import sys

from gapbench.errors import GapbenchError

HELP = "translate CUDA C/C++ to HIP (torch.utils.hipify) into a new folder; report what stays unmapped"


def add_arguments(p) -> None:
    p.add_argument("path", help="input folder (read only; never written)")
    p.add_argument("--output", "-o", required=True, metavar="DIR",
                   help="new output folder (must not exist, or be empty; not inside the input)")
    p.add_argument("--target", "-t", default="rocm", metavar="TARGET", help="rocm (the only target hipify serves)")
    p.add_argument("--format", "-f", default="table", metavar="FMT", help="table (default), json or md")
    p.add_argument("--json", action="store_true", help="same as --format json")
    p.add_argument("--rename", action="store_true", help="rename .cu files to .hip (hipify's convention)")
    p.add_argument("--keep-launch-syntax", action="store_true",
                   help="keep <<<...>>> kernel launches (hip-clang accepts them) instead of hipLaunchKernelGGL")
    p.add_argument("--no-gitignore", action="store_true", help="also copy files that .gitignore excludes")
    p.add_argument("--fail-on-unmapped", action="store_true", help="exit 1 when identifiers stay unmapped")


def main(args) -> int:
    from gapbench.report.scan import port_terminal, render_port_markdown
    from gapbench.scan.port import port

    fmt = "json" if args.json else args.format.lower()
    if fmt not in ("table", "json", "md"):
        raise GapbenchError(f"unknown format {args.format!r} for port (choose from table, json, md)")
    report = port(args.path, args.output, target=args.target.lower(), respect_gitignore=not args.no_gitignore,
                  rename=args.rename, keep_launch_syntax=args.keep_launch_syntax)
    if fmt == "json":
        sys.stdout.write(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n")
    elif fmt == "md":
        sys.stdout.write(render_port_markdown(report))
    else:
        from gapbench.cli._output import shown

        console = shown()
        for item in port_terminal(report):
            console.print(item)
    if args.fail_on_unmapped and report.unmapped:
        return 1
    return 0
