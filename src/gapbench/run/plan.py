"""The plan of a run: what to run and how, every name resolved and every value checked before any worker
starts, and stored in the journal's header so that --resume needs nothing else."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, StringConstraints

from gapbench import devices, suites, workloads
from gapbench.engine.jobs import WorkloadJob
from gapbench.engine.journal import journal_path
from gapbench.errors import GapbenchError
from gapbench.record import INT64_MAX, Json, Name, OptName, Rate, Record
from gapbench.run.workload import Reporter, attempt, launch_worker
from gapbench.timing import DEFAULT_BUDGET


def _pairs(v: Any) -> Any:
    return [tuple(e) if isinstance(e, list) else e for e in v] if isinstance(v, list) else v


class RunPlan(Record):
    """What to run and how; stored in the journal header (and, less the entries, in the results file's options)."""

    device: Name
    entries: Annotated[list[tuple[Name, OptName]], BeforeValidator(_pairs), Field(max_length=10_000)]
    suite: OptName = None
    workload_files: Annotated[list[Annotated[str, StringConstraints(max_length=4096)]], Field(max_length=1000)] = []
    options: dict[str, Json] = {}  # workload options: dtype, compile, batch_size, …
    budget_s: Rate = None  # whole run
    variant_budget_s: Rate = DEFAULT_BUDGET.seconds
    timeout_s: Rate = None  # hard limit per variant; default 3×budget + 30 s
    min_time_s: Rate = DEFAULT_BUDGET.min_time_s
    repeats: Annotated[int, Field(ge=1, le=1_000_000)] | None = DEFAULT_BUDGET.repeats
    threads: Annotated[int, Field(ge=1, le=100_000)] | None = None
    memory_limit_bytes: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = None
    label: OptName = None
    runs: Annotated[int, Field(ge=1, le=1000)] | None = 1  # independent passes, interleaved (A B A B …)
    nproc: Annotated[int, Field(ge=1, le=100_000)] | None = None  # ranks to start on this host (gapbench.distributed)
    backend: OptName = None  # torch.distributed backend; default per device (nccl, gloo, hccl, xccl)


def default_output(device: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name, n = f"gapbench-{device.replace(':', '')}-{stamp}.json", 1
    while os.path.exists(name) or os.path.exists(journal_path(name)):  # two runs in one second keep both
        n += 1
        name = f"gapbench-{device.replace(':', '')}-{stamp}-{n}.json"
    return name


def build_plan(*, device: str | None = None, suite: str | None = None, workload_specs: list[str] | None = None,
               workload_files: list[str] | None = None, **kw) -> RunPlan:
    """Resolve names into a plan; unknown device/suite/workload/preset -> GapbenchError before anything runs."""
    dev = devices.resolve(device)
    files = [str(Path(f).resolve()) for f in (workload_files or [])]
    file_info = describe_files(files, kw.get("timeout_s")) if files else {}
    entries: list[tuple[str, str | None]] = []
    device_class = "accelerator" if dev.is_accelerator else "cpu"
    if suite:
        entries += suites.entries(suite, device_class)
    for spec in workload_specs or []:
        entries.append(workloads.parse_spec(spec))
    if not entries and file_info:
        entries = [(n, None) for n in file_info]
    if not entries:
        suite = "quick"
        entries = suites.entries("quick", device_class)
    for name, preset in entries:
        if name in file_info:
            presets = file_info[name]["presets"]
        else:
            presets = list(workloads.get(name).presets)
        if preset is not None and preset not in presets:
            raise GapbenchError(f"unknown preset {preset!r} for workload {name!r}; known: {', '.join(presets)}")
    if int(kw.get("runs") or 1) < 1:
        raise GapbenchError(f"--runs must be at least 1, not {kw.get('runs')}")
    if kw.get("nproc") is not None:
        from gapbench.distributed.launch import check_nproc

        check_nproc(kw["nproc"], dev)
    return RunPlan(device=str(dev), entries=entries, suite=suite, workload_files=files, **kw)


def describe_files(files: list[str], timeout_s: float | None = None) -> dict:
    """Import workload files in a throwaway worker (a file that crashes on import cannot take us down)."""
    job = WorkloadJob(workload="", device="cpu", workload_files=files, describe=True)
    a = attempt(job, launch_worker, timeout_s, Reporter(), lambda m: None)
    if a.described is not None:
        return a.described
    why = a.failure.reason if a.failure else "no answer"
    raise GapbenchError(f"workload file(s) {', '.join(files)} could not be imported: {why}")


