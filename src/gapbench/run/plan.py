"""The plan of a run: what to run and how, every name resolved and every value checked before any worker
starts, and stored in the journal's header so that --resume needs nothing else."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, PrivateAttr, StringConstraints

from gapbench import devices, suites, workloads
from gapbench.devices import Device
from gapbench.engine.jobs import WorkloadJob
from gapbench.engine.journal import journal_path
from gapbench.errors import GapbenchError
from gapbench.record import INT64_MAX, Json, Name, OptName, Rate, Record
from gapbench.run.workload import Reporter, attempt, launch_worker
from gapbench.timing import DEFAULT_BUDGET
from gapbench.workloads.options import read_options


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
    oversubscribe: bool = False  # --nproc may start more CPU ranks than cores (up to a hard limit)
    backend: OptName = None  # torch.distributed backend; default per device (nccl, gloo, hccl, xccl)

    _device: Device | None = PrivateAttr(default=None)

    @property
    def resolved(self) -> Device:
        """The plan's device, resolved once in this process (its spec is what the journal keeps)."""
        if self._device is None:
            self._device = devices.resolve(self.device)
        return self._device



def default_output(device: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name, n = f"gapbench-{device.replace(':', '')}-{stamp}.json", 1
    while os.path.exists(name) or os.path.exists(journal_path(name)):  # two runs in one second keep both
        n += 1
        name = f"gapbench-{device.replace(':', '')}-{stamp}-{n}.json"
    return name


def build_plan(*, device: str | None = None, suite: str | None = None, workload_specs: list[str] | None = None,
               workload_files: list[str] | None = None, options: dict | None = None, **kw) -> RunPlan:
    """Resolve names into a plan; an unknown device, suite, workload or preset, and a bad option value, are a
    GapbenchError before anything runs."""
    dev = devices.resolve(device)
    _check_rank_group(dev, kw)
    files = [str(Path(f).resolve()) for f in (workload_files or [])]
    file_info = describe_files(files, kw.get("timeout_s"), options) if files else {}
    entries: list[tuple[str, str | None]] = []
    device_class = "accelerator" if dev.is_accelerator else "cpu"
    if suite is not None:
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
            try:
                presets = list(workloads.get(name).presets)
            except GapbenchError as e:
                raise GapbenchError(f"--workload {name}: {e}") from None
        if preset is not None and preset not in presets:
            raise GapbenchError(f"--workload {name}:{preset}: unknown preset {preset!r} for workload {name!r}; "
                                f"known: {', '.join(presets)}")
    if int(kw.get("runs") or 1) < 1:
        raise GapbenchError(f"--runs must be at least 1, not {kw.get('runs')}")
    options = checked_options(dict(options or {}), entries, file_info)
    plan = RunPlan(device=str(dev), entries=entries, suite=suite, workload_files=files, options=options, **kw)
    plan._device = dev  # resolved once, here
    return plan


def _check_rank_group(dev: Device, kw: dict) -> None:
    """--nproc within bounds, and a rank group's backend one its ranks can use."""
    if kw.get("nproc") is not None:
        from gapbench.distributed.launch import check_nproc

        check_nproc(kw["nproc"], dev, bool(kw.get("oversubscribe")))
    if kw.get("backend") or kw.get("nproc") is not None or "RANK" in os.environ:  # a rank group: its backend
        check_dist_backend(kw.get("backend") or dev.dist_backend, dev)


def check_dist_backend(name: str, dev: Device) -> None:
    """gloo, or the device's own torch.distributed backend (xccl where this torch has it), or one this torch
    build was compiled with (mpi, ucc)."""
    import torch.distributed as dist

    if name in ("gloo", dev.dist_backend):
        why = dev.dist_backend_missing() if name != "gloo" else ""
        if why:
            raise GapbenchError(why)
        return
    if name in ("mpi", "ucc") and dist.is_available() and dist.is_backend_available(name):
        return
    own = "gloo" if dev.dist_backend == "gloo" else f"gloo or {dev.dist_backend}"
    raise GapbenchError(f"--backend {name}: ranks on {dev} talk through {own}"
                        + ("" if name not in ("mpi", "ucc") else f"; this torch has no {name} backend"))


def checked_options(given: dict, entries: list[tuple[str, str | None]], file_info: dict) -> dict:
    """The workload options of a run, each checked against every workload of the run that takes it (a bad value,
    or an option none of them takes, is a GapbenchError naming the flag), as JSON values ('4' becomes 4, 'a,b' a
    list). What workload files declare was checked by describe_files."""
    fields = workloads.option_fields()
    built_in = {name: workloads.get(name) for name, _ in entries if name not in file_info}

    def takes(name: str, key: str) -> bool:
        if name in file_info:
            return bool(file_info[name].get("any_options")) or key in (file_info[name].get("options") or [])
        return workloads.takes(built_in[name], key)

    names = list(dict.fromkeys(n for n, _ in entries))
    for key in given:
        if not any(takes(n, key) for n in names):
            raise GapbenchError(_nobody_takes(key, names, fields))
    canonical: dict = {}
    for key in given:  # a flag means one thing: taken by no built-in workload here, its type is its declaration's
        if key in fields and not any(n in built_in and takes(n, key) for n in names):
            canonical[key] = _parsed(fields[key], given[key])
    for name, preset in dict.fromkeys(entries):
        if name in built_in:
            mine = {k: canonical.get(k, v) for k, v in given.items() if takes(name, k)}
            for k, v in _checked_by(built_in[name], preset, mine).items():
                canonical.setdefault(k, v)
    return canonical | {k: v for k, v in given.items() if k not in canonical}


def _nobody_takes(key: str, names: list[str], fields: dict) -> str:
    if key not in fields:
        return f"unknown workload option {key!r}; known: {', '.join(fields)}"
    others = [n for n in workloads.names() if workloads.takes(workloads.get(n), key)]
    return (f"{fields[key].flag}: none of this run's workloads ({', '.join(names)}) takes it"
            + (f"; {', '.join(others)} take{'s' if len(others) == 1 else ''} it" if others else ""))


def _parsed(flag, value):
    try:
        return flag.parse(value)
    except ValueError as e:
        raise GapbenchError(f"{flag.flag} {value!r}: {e}") from None


def _checked_by(w, preset: str | None, given: dict) -> dict:
    """The options a workload takes as it reads them (JSON values), checked for its preset too."""
    opts = read_options(w.options, given, w.name)
    try:
        w.check(opts, preset or w.default_preset)
    except ValueError as e:
        raise GapbenchError(f"{w.name}:{preset or w.default_preset}: {e}") from None
    dumped = opts.given()
    return {k: dumped.get(k, v) for k, v in given.items()}


def describe_files(files: list[str], timeout_s: float | None = None, options: dict | None = None) -> dict:
    """Import workload files in a throwaway worker (a file that crashes on import cannot take us down); it also
    checks `options` against what each of their workloads declares."""
    job = WorkloadJob(workload="", device="cpu", workload_files=files, describe=True, options=dict(options or {}))
    a = attempt(job, launch_worker, timeout_s, Reporter(), lambda m: None)
    if a.described is not None:
        return a.described
    if a.failure is not None and a.bad_input:
        raise GapbenchError(a.failure.reason)
    why = a.failure.reason if a.failure else "no answer"
    raise GapbenchError(f"--workload-file {', '.join(files)}: could not be imported: {why}")


