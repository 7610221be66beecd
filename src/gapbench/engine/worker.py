"""The single-process workload worker: `python -m gapbench.engine.worker`, a WorkloadJob (JSON) on stdin,
events on the channel (see gapbench.engine.channel):

  hello (device identity), variants (their keys), start (a variant begins, with its budget),
  result (a measurement), done; or describe (the workloads of some workload files); or, when set-up fails,
  setup_error / bad_input with the reason. Each is a typed record the parent reads strictly
  (gapbench.engine.events) and holds to the job (gapbench.run.workload).

Anything a workload prints goes to the worker's stdout/stderr, which the parent keeps for crash reasons.
"""

from __future__ import annotations

import os
import sys
import time
import traceback

from gapbench.engine.channel import EventWriter
from gapbench.engine.jobs import WorkloadJob
from gapbench.engine.lifeline import tie_to_parent
from gapbench.engine.variant import keys_of, limit_memory, load_workload, options_of, run_variant, variant_budgets


def describe(job: WorkloadJob) -> dict:
    """Names, presets, units and options of the workloads in the job's workload files, with the job's options
    checked against what each declares (a bad value is bad input: the run does not start)."""
    from gapbench import workloads

    out = {}
    for path in job.workload_files or []:
        for name, w in workloads.load_file(path).items():
            options_of(w, job)
            out[name] = {"presets": list(w.presets), "default_preset": w.default_preset, "unit": w.unit,
                         "category": w.category, "description": w.description, "file": True,
                         "options": list(w.options.model_fields),
                         "any_options": w.options.model_config.get("extra") == "allow"}
    return out


def run_job(job: WorkloadJob, events: EventWriter) -> None:
    import torch

    from gapbench import devices
    from gapbench.workloads import Context

    device = devices.resolve(job.device)
    device.set_current()
    if job.threads:
        torch.set_num_threads(int(job.threads))
    events.send("hello", pid=os.getpid(), device=device.identity())
    w, preset = load_workload(job)
    base = Context(device=device, preset=preset, budget_s=job.variant_budget_s, min_time_s=job.min_time_s,
                   repeats=job.repeats, options=options_of(w, job))
    chosen = w.variants(preset, base)
    skip = set(job.skip or [])
    todo = [v for v in chosen if keys_of(w, preset, [v])[0] not in skip]
    events.send("variants", total=len(chosen), todo=len(todo), keys=keys_of(w, preset, todo),
                variants=[v.params for v in todo], unit=w.unit, higher_is_better=w.higher_is_better)
    deadline = time.monotonic() + job.workload_budget_s if job.workload_budget_s else None
    points = [w.point_of(v.params) for v in todo]
    for v, budget in zip(todo, variant_budgets(points, job.variant_budget_s, deadline), strict=True):
        key = keys_of(w, preset, [v])[0]
        events.send("start", key=key, variant=v.params, budget_s=budget)
        ctx = Context(device=device, preset=preset, budget_s=budget, min_time_s=base.min_time_s,
                      repeats=base.repeats, options=base.options)
        m = run_variant(w, v, ctx)
        events.send("result", key=key, measurement=m.model_dump(mode="json"))
    events.send("done")


def main() -> int:
    tie_to_parent()
    events = EventWriter()
    try:
        job = WorkloadJob.model_validate_json(sys.stdin.read())
    except (ValueError, TypeError) as e:
        events.send("setup_error", reason=f"unreadable job: {e}")
        return 3
    limit_memory(job.memory_limit_bytes)
    try:
        if job.describe:
            events.send("describe", workloads=describe(job))
            return 0
        run_job(job, events)
    except Exception as e:  # set-up failed: unknown device, unimportable workload, variants() raised
        from gapbench.errors import GapbenchError

        kind = "bad_input" if isinstance(e, GapbenchError) else "setup_error"
        events.send(kind, reason=f"{e.__class__.__name__}: {e}" if kind == "setup_error" else str(e),
                    traceback=traceback.format_exc(limit=-3))
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
