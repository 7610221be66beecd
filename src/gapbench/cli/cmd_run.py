"""gapbench run: run a suite or chosen workloads and write a results file."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gapbench.cli._args import DIST_BACKENDS, count, gib, label, seconds
from gapbench.cli._output import err, out, print_json
from gapbench.errors import GapbenchError
from gapbench.report.kit import one_line, rich_table, variant_text
from gapbench.report.runs import busy_summary, results_table
from gapbench.results import Measurement, check_output
from gapbench.results.files import SQLITE_HEADER

HELP = "run a suite or chosen workloads on a device and write a results file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", help="cuda, cuda:1, xpu, npu, mps, cpu (default: the best device found)")
    p.add_argument("--suite", help="a named suite (see `gapbench list`); default: quick")
    p.add_argument("--workload", "-w", action="append", default=[], metavar="NAME[:PRESET]",
                   help="a workload to run, optionally with its preset (repeatable)")
    p.add_argument("--workload-file", action="append", default=[], metavar="PATH",
                   help="a Python file defining Workload classes (repeatable); with --resume, name again the files "
                        "the interrupted run used (they are never imported on the journal's say-so)")
    p.add_argument("--output", "-o", help="results file (default: gapbench-<device>-<time>.json)")
    p.add_argument("--resume", metavar="RESULTS.json",
                   help="finish an interrupted run (on the same host, device and gapbench) without redoing finished "
                        "work")
    p.add_argument("--budget", type=seconds, metavar="SECONDS", help="wall-time budget for the whole run")
    p.add_argument("--variant-budget", type=seconds, metavar="SECONDS",
                   help="budget per variant (default 10 s for the quick suite, 60 s otherwise)")
    p.add_argument("--timeout", type=seconds, metavar="SECONDS",
                   help="hard time limit per variant before its worker is killed (default 3×budget + 30 s)")
    p.add_argument("--min-time", type=seconds, default=None, metavar="SECONDS",
                   help="minimum measured time per repeat (default 0.1)")
    p.add_argument("--repeats", type=count, default=None, help="repeats per variant (default 7)")
    p.add_argument("--runs", type=count, default=None, metavar="N",
                   help="N independent runs (passes), workloads interleaved across them, each in fresh workers; "
                        "compare then judges gaps by the spread between runs (default 1)")
    p.add_argument("--threads", type=count, help="CPU threads for the workloads (torch.set_num_threads)")
    p.add_argument("--memory-limit", type=gib, metavar="GIB",
                   help="address-space limit of each CPU worker (default 85%% of RAM); exceeding it is `oom`")
    p.add_argument("--nproc", type=int, metavar="N",
                   help="start N ranks on this host through torch's elastic launcher (one per device; on the CPU, "
                        "at most one per core); under torchrun, leave it out: gapbench joins the job "
                        "(docs/distributed.md)")
    p.add_argument("--oversubscribe", action="store_true",
                   help="let --nproc start more CPU ranks than there are cores (at most 4 per core, 256 in all)")
    p.add_argument("--backend", choices=DIST_BACKENDS, metavar="NAME",
                   help=f"torch.distributed backend of --nproc ranks ({', '.join(DIST_BACKENDS)}; default per device)")
    p.add_argument("--label", type=label, help="platform name used by compare/report (default: the device product)")
    p.add_argument("--no-history", action="store_true", help="do not record the run in the history database")
    p.add_argument("--db", metavar="FILE", help="the history database to record the run into (created if absent; "
                                                "default: $GAPBENCH_DB, else the XDG data folder's)")
    p.add_argument("--json", action="store_true", help="print the results file to stdout instead of a table")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--force", action="store_true",
                   help="replace an existing results file (or an interrupted run's journal) at --output; with "
                        "--resume, complete a run begun on another host, device or gapbench (with a warning)")
    _workload_arguments(p)


def _workload_arguments(p: argparse.ArgumentParser) -> None:
    """One flag per option the workloads declare (gapbench.workloads.options), grouped by the family that declares
    it first; the command line's text is read by the declarations (a value none of them accepts is a usage error),
    and the plan checks it again against each workload of the run that takes it."""
    from gapbench.workloads import option_fields

    groups: dict[type, argparse._ArgumentGroup] = {}
    for name, f in option_fields().items():
        if f.owner not in groups:
            groups[f.owner] = p.add_argument_group(f.owner.title)
        g = groups[f.owner]
        extra = f.field.json_schema_extra if isinstance(f.field.json_schema_extra, dict) else {}
        help_ = (f.field.description or "").replace("%", "%%")
        if f.field.annotation is bool:
            action = "store_false" if f.field.default is True else "store_true"
            g.add_argument(f.flag, dest=name, action=action, default=argparse.SUPPRESS, help=help_)
        else:
            g.add_argument(f.flag, dest=name, default=argparse.SUPPRESS, metavar=extra.get("metavar", "VALUE"),
                           type=_reader(f), help=help_)


def _reader(f):
    """argparse's type of a workload option: its declaration reads the text (a usage error when none accepts it);
    whether each workload of the run takes the value is the plan's check."""
    def read(text: str):
        try:
            return f.parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{e}, not {text!r}") from None

    read.__name__ = f.name  # argparse names the type in some messages
    return read


class _ProgressReporter:
    """Draws the runner's progress callbacks (gapbench.run.suite.Reporter's methods) as a progress bar."""

    def __init__(self, progress: Progress | None):
        self.p = progress
        self.task = None

    def workload_started(self, name, preset):
        if self.p:
            if self.task is not None:
                self.p.remove_task(self.task)
            self.task = self.p.add_task(f"{name}:{preset or 'default'}", total=None)

    def variants_known(self, name, todo, total):
        if self.p and self.task is not None:
            self.p.update(self.task, total=todo, completed=0)

    def variant_started(self, name, params):
        if self.p and self.task is not None:
            self.p.update(self.task, description=f"{name} {variant_text(params)}"[:60])

    def variant_done(self, m: Measurement):
        if self.p and self.task is not None:
            self.p.advance(self.task)
        if not m.ok and self.p:
            self.p.console.print(f"  [dim]{escape(m.workload)} {escape(variant_text(m.variant))}: {m.status}: "
                                 f"{escape(one_line(m.reason))}[/]")

    def note(self, text):
        err.print(text, markup=False, highlight=False, soft_wrap=True)  # one line each, however narrow


def _options(args) -> dict:
    """The workload options given on the command line, as their declarations read them (JSON values)."""
    from gapbench.workloads import option_fields

    return {name: getattr(args, name) for name in option_fields() if hasattr(args, name)}


def _check(args) -> None:
    """Bad combinations and values of the flags: one line, before anything runs."""
    _check_values(args)
    _check_db(args)
    _check_combinations(args)
    if args.output and not args.resume and not _follower_rank():
        check_output(args.output, inputs=args.workload_file, force=args.force, resume_hint=True)


def _follower_rank() -> bool:
    """A rank other than 0 of an external torchrun job writes nothing (rank 0 does), so it checks no output: rank 0
    may already have begun its journal there."""
    from gapbench.distributed.info import env_rank

    return bool(env_rank())


def _check_values(args) -> None:
    for flag, value in (("--output", args.output), ("--resume", args.resume), ("--device", args.device),
                        ("--suite", args.suite), ("--backend", args.backend)):
        if value is not None and not value.strip():
            raise GapbenchError(f"{flag}: empty; give a name")
    for name in ("budget", "variant_budget", "timeout", "min_time", "memory_limit"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise GapbenchError(f"--{name.replace('_', '-')} must be positive")


def _check_db(args) -> None:
    """--db names a file the run may record into: not a folder or a device, not a file of another kind, never the
    results file, and not beside --no-history (which says to record nothing)."""
    if args.db is None:
        return
    if not args.db.strip():
        raise GapbenchError("--db: empty; name the history database file")
    if os.path.isdir(args.db):
        raise GapbenchError(f"--db {args.db}: is a folder; name the history database file")
    if os.path.exists(args.db) and not os.path.isfile(args.db):
        raise GapbenchError(f"--db {args.db}: is not a regular file")
    if os.path.isfile(args.db) and os.path.getsize(args.db) and not _starts_sqlite(args.db):
        raise GapbenchError(f"--db {args.db}: is not a gapbench history database (not SQLite); name another file")
    if args.output and os.path.realpath(args.output) == os.path.realpath(args.db):
        raise GapbenchError(f"--output {args.output}: is the history database --db names; write elsewhere")
    if args.no_history:
        raise GapbenchError("--db names the history to record into and --no-history says to record nothing; give one")


def _starts_sqlite(path: str) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError as e:
        raise GapbenchError(f"--db {path}: cannot read ({e.strerror or e})") from None


def _check_combinations(args) -> None:
    if args.resume and (args.workload or args.suite is not None):
        raise GapbenchError("--resume continues the run recorded in the file; do not combine it with "
                            "--suite/--workload")
    if args.resume and "RANK" in os.environ and not args.nproc:
        raise GapbenchError("--resume is not available under an external launcher (torchrun); start the job again")
    if getattr(args, "parallel", None) and not args.nproc and "RANK" not in os.environ:
        raise GapbenchError("--parallel trains on several ranks: add --nproc N, or run gapbench under torchrun")
    if args.backend and not args.nproc and "RANK" not in os.environ:
        raise GapbenchError("--backend is the torch.distributed backend of a rank group: add --nproc N")
    if args.resume and _options(args):
        raise GapbenchError(f"--resume continues the run with the options it recorded; leave out "
                            f"{', '.join(sorted(_flags_given(args)))}")
    if args.force and not (args.output or args.resume):
        raise GapbenchError("--force replaces the results file --output names (or completes a --resume begun "
                            "elsewhere); give --output")
    if args.oversubscribe and not args.nproc:
        raise GapbenchError("--oversubscribe lets --nproc start more ranks than cores: add --nproc N")


def _flags_given(args) -> list[str]:
    from gapbench.workloads import option_fields

    return [f.flag for name, f in option_fields().items() if hasattr(args, name)]


def _plan(args, runner):
    suite = args.suite
    quick = (suite or "quick") == "quick" and not args.workload
    return runner.build_plan(
        device=args.device, suite=suite, workload_specs=args.workload, workload_files=args.workload_file,
        options=_options(args), budget_s=args.budget, variant_budget_s=args.variant_budget or (10.0 if quick else 60.0),
        timeout_s=args.timeout, min_time_s=args.min_time or 0.1, repeats=args.repeats or 7,
        threads=args.threads, label=args.label,
        memory_limit_bytes=int(args.memory_limit * 2**30) if args.memory_limit else None,
        nproc=args.nproc, oversubscribe=args.oversubscribe, backend=args.backend, runs=args.runs or 1,
    )


def _print(rs, as_json: bool) -> None:
    if as_json:
        print_json(rs.model_dump(mode="json"))
        return
    from gapbench.distributed.summary import headline_lines

    out.print(rich_table(results_table(rs)))
    for line in headline_lines(rs):
        out.print(line, markup=False, highlight=False)
    bad = sum(1 for m in rs.measurements if not m.ok)
    out.print(f"{len(rs.measurements)} measurement(s), {bad} not ok · results: {rs.path}", markup=False)
    busy = busy_summary(rs)
    if busy:
        out.print(busy, markup=False, highlight=False)


def main(args) -> int:
    from gapbench import run as runner  # imports torch: only when the verb runs, so --help stays fast
    from gapbench.engine.lifeline import become_subreaper
    from gapbench.run.suite import stopping_on_signals

    _check(args)
    plan = None if args.resume else _plan(args, runner)
    become_subreaper()  # a worker's daemonised descendants come back here, where they are cleaned up
    show = not args.quiet and not args.json and err.is_terminal and os.environ.get("RANK", "0") == "0"
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True) if show else None
    reporter = _ProgressReporter(progress)
    try:  # SIGTERM and SIGHUP keep what finished, as Ctrl-C does
        with stopping_on_signals(), progress if progress else contextlib.nullcontext():
            rs = runner.run_suite(plan, output=args.output, resume=args.resume, reporter=reporter,
                                  history=False if args.no_history else args.db or True, force=args.force,
                                  **({"workload_files": args.workload_file} if args.resume else {}))
    except runner.Interrupted as e:
        print(f"gapbench: {e}", file=sys.stderr)  # one line, however narrow the terminal
        return 128 + e.signum
    if rs.path is None:  # one rank of an external torchrun job, not rank 0: rank 0 reports
        return 0
    _print(rs, args.json)
    return 0
