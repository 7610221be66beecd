"""gapbench run: run a suite or chosen workloads and write a results file."""

from __future__ import annotations

import argparse
import contextlib
import os

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from gapbench.cli._args import count, gib, label, seconds
from gapbench.cli._output import err, out, print_json
from gapbench.errors import GapbenchError
from gapbench.report.kit import one_line, rich_table, variant_text
from gapbench.report.runs import results_table
from gapbench.results import Measurement, check_output

HELP = "run a suite or chosen workloads on a device and write a results file"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", help="cuda, cuda:1, xpu, npu, mps, cpu (default: the best device found)")
    p.add_argument("--suite", help="a named suite (see `gapbench list`); default: quick")
    p.add_argument("--workload", "-w", action="append", default=[], metavar="NAME[:PRESET]",
                   help="a workload to run, optionally with its preset (repeatable)")
    p.add_argument("--workload-file", action="append", default=[], metavar="PATH",
                   help="a Python file defining Workload classes (repeatable)")
    p.add_argument("--output", "-o", help="results file (default: gapbench-<device>-<time>.json)")
    p.add_argument("--resume", metavar="RESULTS.json", help="finish an interrupted run without redoing finished work")
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
    p.add_argument("--dtype", help="precision override: fp32, tf32, bf16, fp16, fp8, int8 (comma list for gemm)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model workloads")
    p.add_argument("--attention", help="attention backend for model workloads: sdpa, eager, flash, efficient, math")
    p.add_argument("--batch-size", help="batch size for model workloads: a number or 'auto' (llm-infer: also a "
                   "comma list; default there: the sweep 1, 2, 4, … up to memory)")
    p.add_argument("--steps", type=count, help="denoising steps for diffusion workloads")
    p.add_argument("--flush-cache", action="store_true", help="flush the last-level cache before each GEMM call")
    _inference_arguments(p)
    p.add_argument("--nproc", type=int, metavar="N",
                   help="start N ranks on this host through torch's elastic launcher (one per device; on the CPU, "
                        "N processes); under torchrun, leave it out: gapbench joins the job (docs/distributed.md)")
    p.add_argument("--backend", help="torch.distributed backend (default per device: nccl, gloo, hccl, xccl)")
    p.add_argument("--parallel", choices=("ddp", "fsdp"),
                   help="train the model workloads data-parallel on every rank: DDP or FSDP2 (fully_shard)")
    p.add_argument("--no-baseline", action="store_true",
                   help="with --parallel: skip the single-device run that scaling efficiency is measured against")
    p.add_argument("--label", type=label, help="platform name used by compare/report (default: the device product)")
    p.add_argument("--no-history", action="store_true", help="do not record the run in the history database")
    p.add_argument("--json", action="store_true", help="print the results file to stdout instead of a table")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.add_argument("--force", action="store_true", help="replace an existing results file at --output")


def _inference_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("LLM inference (llm-infer; docs/inference.md)")
    g.add_argument("--engine", choices=("transformers", "vllm"),
                   help="transformers static batching (default) or vLLM's offline engine")
    g.add_argument("--server", metavar="URL", help="measure a running OpenAI-compatible server (vLLM, SGLang, TGI, "
                   "TensorRT-LLM, llama.cpp) from the client side, concurrency swept")
    g.add_argument("--served-model", metavar="NAME", help="with --server: the model to request (default: the first "
                   "in /v1/models)")
    g.add_argument("--server-devices", type=int, metavar="N", help="with --server: devices the server uses; "
                   "per-device rows divide by N (default 1)")
    g.add_argument("--engine-args", metavar="TEXT", help="vLLM: KEY=VALUE,... passed to vllm.LLM; --server: the "
                   "server's launch arguments, recorded in the results")
    g.add_argument("--lengths", metavar="IN:OUT[,IN:OUT]", help="input/output token lengths (default per preset; "
                   "InferenceMAX's are 1024:1024,1024:8192,8192:1024)")
    g.add_argument("--input-len", type=int, metavar="N", help="input tokens per request (with --output-len)")
    g.add_argument("--output-len", type=int, metavar="N", help="output tokens per request (with --input-len)")
    g.add_argument("--concurrency", metavar="N[,N]", help="with --server: requests in flight per point "
                   "(default 4,8,16,32,64)")
    g.add_argument("--request-rate", metavar="R", help="with --server: Poisson arrivals at R requests/s "
                   "(default: all at once)")
    g.add_argument("--num-prompts", type=int, metavar="N", help="with --server: prompts per round (default 10 × "
                   "concurrency)")
    g.add_argument("--length-range", type=float, metavar="R", help="with --server: lengths uniform in "
                   "[L·(1−R), L·(1+R)] (default 0)")
    g.add_argument("--slo-ttft-ms", type=float, metavar="MS", help="TTFT limit for SLO attainment and goodput "
                   "(MLPerf Llama-2-70B Server: 2000; interactive: 450)")
    g.add_argument("--slo-tpot-ms", type=float, metavar="MS", help="TPOT limit (MLPerf Llama-2-70B Server: 200; "
                   "interactive: 40)")


INFERENCE_OPTIONS = ("engine", "server", "served_model", "server_devices", "engine_args", "lengths", "input_len",
                     "output_len", "concurrency", "request_rate", "num_prompts", "length_range", "slo_ttft_ms",
                     "slo_tpot_ms")


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
        err.print(text)


def _options(args) -> dict:
    opts = {}
    if args.dtype:
        from gapbench.devices.base import DTYPE_NAMES

        names = [d.strip() for d in args.dtype.split(",")]
        unknown = [d for d in names if d not in DTYPE_NAMES]
        if unknown:
            raise GapbenchError(f"unknown dtype {', '.join(map(repr, unknown))} in --dtype; known: "
                                f"{', '.join(DTYPE_NAMES)}")
        opts["dtype"] = names if "," in args.dtype else names[0]
    if args.compile:
        opts["compile"] = True
    if args.attention:
        opts["attention"] = args.attention
    if args.batch_size:
        opts["batch_size"] = _batch_size(args.batch_size)
    if args.steps:
        opts["steps"] = args.steps
    if args.flush_cache:
        opts["flush_cache"] = True
    opts.update({k: getattr(args, k) for k in INFERENCE_OPTIONS if getattr(args, k, None) not in (None, "")})
    if args.parallel:
        opts["parallel"] = args.parallel
        if args.no_baseline:
            opts["scaling_baseline"] = False
    return opts


def _batch_size(text: str):
    """'auto', a number, or a comma list of numbers (llm-infer's batch sizes)."""
    if text == "auto":
        return text
    try:
        sizes = [int(x) for x in text.split(",")]
        if min(sizes) < 1:
            raise ValueError
    except ValueError:
        raise GapbenchError(f"--batch-size must be a whole number of at least 1, a comma list of them or 'auto', not {text!r}") from None
    return sizes[0] if len(sizes) == 1 else sizes


def _check(args) -> None:
    """Bad combinations and values of the flags: one line, before anything runs."""
    if args.resume and (args.workload or args.suite or args.workload_file):
        raise GapbenchError("--resume continues the run recorded in the file; do not combine it with "
                            "--suite/--workload/--workload-file")
    for name in ("budget", "variant_budget", "timeout", "min_time", "memory_limit"):
        v = getattr(args, name)
        if v is not None and not v > 0:
            raise GapbenchError(f"--{name.replace('_', '-')} must be positive")
    if args.resume and "RANK" in os.environ and not args.nproc:
        raise GapbenchError("--resume is not available under an external launcher (torchrun); start the job again")
    if args.parallel and not args.nproc and "RANK" not in os.environ:
        raise GapbenchError("--parallel trains on several ranks: add --nproc N, or run gapbench under torchrun")
    if args.output and not args.resume:
        check_output(args.output, inputs=args.workload_file, force=args.force, resume_hint=True)


def _plan(args, runner):
    suite = args.suite
    quick = (suite or "quick") == "quick" and not args.workload
    return runner.build_plan(
        device=args.device, suite=suite, workload_specs=args.workload, workload_files=args.workload_file,
        options=_options(args), budget_s=args.budget, variant_budget_s=args.variant_budget or (10.0 if quick else 60.0),
        timeout_s=args.timeout, min_time_s=args.min_time or 0.1, repeats=args.repeats or 7,
        threads=args.threads, label=args.label,
        memory_limit_bytes=int(args.memory_limit * 2**30) if args.memory_limit else None,
        nproc=args.nproc, backend=args.backend, runs=args.runs or 1,
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


def main(args) -> int:
    from gapbench import run as runner  # imports torch: only when the verb runs, so --help stays fast
    from gapbench.engine.lifeline import become_subreaper

    _check(args)
    plan = None if args.resume else _plan(args, runner)
    become_subreaper()  # a worker's daemonised descendants come back here, where they are cleaned up
    show = not args.quiet and not args.json and err.is_terminal and os.environ.get("RANK", "0") == "0"
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                        console=err, transient=True) if show else None
    reporter = _ProgressReporter(progress)
    try:
        with progress if progress else contextlib.nullcontext():
            rs = runner.run_suite(plan, output=args.output, resume=args.resume, reporter=reporter,
                                  history=not args.no_history, force=args.force)
    except runner.Interrupted as e:
        err.print(f"gapbench: {e}", markup=False)
        return 130
    if rs.path is None:  # one rank of an external torchrun job, not rank 0: rank 0 reports
        return 0
    _print(rs, args.json)
    return 0
