"""Inside a child: the one path from a workload variant to a Measurement, for a single-process worker and
for every rank of a group alike. A workload's exception is a finding (error, or oom when the device says
it ran out of memory), never the end of the worker."""

from __future__ import annotations

import os
import resource
import time
import traceback

from pydantic import ValidationError

from gapbench.record import schema_error
from gapbench.results import Measurement, now_iso, variant_key
from gapbench.workloads import Context, Variant, Workload, load_file, takes
from gapbench.workloads import get as get_workload
from gapbench.workloads.options import Options, read_options

MIN_VARIANT_BUDGET_S = 0.5


def limit_memory(limit_bytes: int | None) -> None:
    """RLIMIT_AS for this process: runaway allocation becomes MemoryError (oom), not the OOM killer."""
    if limit_bytes:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        new = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (new, hard))


def load_workload(job) -> tuple[Workload, str]:
    """The job's workload (built in, entry point or from its workload files) and its preset."""
    extra: dict = {}
    for path in job.workload_files or []:
        extra.update(load_file(path))
    w = get_workload(job.workload, extra)
    return w, job.preset or w.default_preset


def options_of(w: Workload, job) -> Options:
    """The job's options as the workload declares them (those it does not take left out), checked again: a
    journal may have been edited since the plan checked them."""
    return read_options(w.options, {k: v for k, v in (job.options or {}).items() if takes(w, k)}, w.name)


def keys_of(w: Workload, preset: str, variants: list[Variant]) -> list[str]:
    return [variant_key(w.name, preset, v.params) for v in variants]


def variant_budgets(groups: list, cap: float, deadline: float | None):
    """Yields the budget of each variant, one per entry of `groups` (each variant's measuring point, from
    Workload.point_of): the cap, or an equal share of what is left before the workload's deadline (never below
    MIN_VARIANT_BUDGET_S). The rows of one point (consecutive variants with one group) are one measurement and share
    one budget: the share is of the points left, not of the rows."""
    new = [i == 0 or g is None or g != groups[i - 1] for i, g in enumerate(groups)]
    points_left = sum(new)
    budget = cap
    for starts_point in new:
        if starts_point:
            budget = cap
            if deadline is not None:
                budget = min(cap, max(deadline - time.monotonic(), 0.0) / points_left)
            budget = max(budget, MIN_VARIANT_BUDGET_S)
            points_left -= 1
        yield budget


def where(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    return f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""


def run_variant(w: Workload, v: Variant, ctx: Context) -> Measurement:
    """Measure one variant: its Measurement with peak memory, duration, start time and preset filled in."""
    device = ctx.device
    t0, started = time.monotonic(), now_iso()
    try:
        why = w.unsupported(v, ctx)
        if why:
            return w.failed(v, ctx, "unsupported", why).replace(duration_s=time.monotonic() - t0, started_at=started,
                                                                metrics={"category": w.category})
        device.reset_peak_memory()
        m = w.run(v, ctx)
        if not isinstance(m, Measurement):
            raise TypeError(f"{w.name}.run() returned {type(m).__name__}, not a Measurement")
    except ValidationError as e:  # the record it built breaks the results schema: what a run writes, it reads back
        m = w.failed(v, ctx, "error", f"{w.name}.run() returned a measurement that breaks the results schema: "
                                      f"{schema_error(e)}{where(e)}")
    except BaseException as e:  # noqa: BLE001 - a workload's failure is a finding, not our crash
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        status = "oom" if device.is_oom(e) else "error"
        m = w.failed(v, ctx, status, f"{e.__class__.__name__}: {e}{where(e)}")
        try:
            device.empty_cache()
        except Exception:
            pass
    peak = m.peak_memory_bytes
    if peak is None:
        try:
            peak = device.peak_memory()
        except Exception:
            peak = None
    metrics = m.metrics if "category" in m.metrics else {**m.metrics, "category": w.category}
    return m.replace(peak_memory_bytes=peak, duration_s=time.monotonic() - t0, started_at=started, preset=ctx.preset,
                     metrics=metrics)
