"""Command line: one verb per user task. Parses, calls the API, prints; no logic of its own.

Each verb lives in gapbench/cli/cmd_<verb>.py and defines HELP (one line), add_arguments(parser)
and main(args) -> exit code. Errors the user can cause (GapbenchError) become one line and exit 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import signal
import sys

from gapbench import __version__
from gapbench.errors import GapbenchError
from gapbench.text import printable

VERBS = ("run", "list", "env", "compare", "report", "specs", "history", "coverage", "ops", "scan", "port",
         "frameworks", "assess", "claims")


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit code 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _verb_module(verb: str):
    name = f"gapbench.cli.cmd_{verb}"
    if importlib.util.find_spec(name) is None:
        return None
    return importlib.import_module(name)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="gapbench", description="Measure the gap between AI accelerator stacks, and the cost "
                     "of moving a codebase between them.")
    parser.add_argument("--version", action="version", version=f"gapbench {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for verb in VERBS:
        mod = _verb_module(verb)
        if mod is None:
            continue
        p = sub.add_parser(verb, help=mod.HELP.replace("%", "%%"), description=mod.HELP)
        mod.add_arguments(p)
        p.set_defaults(_main=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "_main", None):
        parser.print_help()
        return 0
    try:
        return int(args._main(args) or 0)
    except GapbenchError as e:
        print(f"gapbench: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM/SIGHUP where a verb turned them into one (run)
        signum = int(getattr(e, "signum", signal.SIGINT))
        how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        print(f"gapbench: {how}", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:
        return 0
    except Exception as e:
        if os.environ.get("GAPBENCH_DEBUG"):
            raise
        print(f"gapbench: internal error: {e.__class__.__name__}: {_one_line(e)} (set GAPBENCH_DEBUG=1 for a "
              "traceback)", file=sys.stderr)
        return 1


def _one_line(e: BaseException) -> str:
    """An error's text as one line, its control characters shown, never obeyed: the message may carry what a
    user's file or code said (an exception raised over several lines, an escape sequence)."""
    return printable(" ".join(str(e).split()))
