"""Inside the worker process: build one workload, run its variants, report one JSON line per event.

The runner starts `python -m gapbench.worker FD` with a job (JSON) on stdin and reads events from the
pipe FD: hello (device identity), variants (their keys), start (a variant begins, with its budget),
result (a measurement), done. Anything the workload prints goes to the worker's stdout/stderr, which
the runner keeps for crash reasons. Expected failures become measurements; only a crash, a hang or
a kill ends the process early, and the runner records that.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
import traceback
from dataclasses import replace

EVENTS_FD_ENV = "GAPBENCH_EVENTS_FD"


class Events:
    def __init__(self, fd: int):
        self.f = os.fdopen(fd, "w", buffering=1, encoding="utf-8")

    def send(self, kind: str, **data) -> None:
        self.f.write(json.dumps({"event": kind, **data}, allow_nan=False) + "\n")
        self.f.flush()


def _limit_memory(limit_bytes: int | None) -> None:
    if limit_bytes:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        new = limit_bytes if hard == resource.RLIM_INFINITY else min(limit_bytes, hard)
        resource.setrlimit(resource.RLIMIT_AS, (new, hard))


def _is_oom(e: BaseException) -> bool:
    import torch

    if isinstance(e, MemoryError) or isinstance(e, getattr(torch, "OutOfMemoryError", ())):
        return True
    msg = str(e)
    return isinstance(e, RuntimeError) and ("out of memory" in msg.lower() or "can't allocate memory" in msg
                                            or "not enough memory" in msg.lower())


def describe(job: dict) -> dict:
    """Names, presets and units of the workloads a job can see (used to validate a run before it starts)."""
    from gapbench import workloads

    extra = {}
    for path in job.get("workload_files") or []:
        extra.update(workloads.load_file(path))
    out = {}
    for name, w in extra.items():
        out[name] = {"presets": list(w.presets), "default_preset": w.default_preset, "unit": w.unit,
                     "category": w.category, "description": w.description, "file": True}
    return out


def run_job(job: dict, events: Events) -> None:
    import torch  # noqa: F401  (import before any workload so import errors surface here)

    from gapbench import devices, workloads
    from gapbench.results import Measurement, variant_key
    from gapbench.workloads.base import Context

    device = devices.resolve(job["device"])
    device.set_current()
    if job.get("threads"):
        torch.set_num_threads(int(job["threads"]))
    events.send("hello", pid=os.getpid(), device=device.identity())
    extra = {}
    for path in job.get("workload_files") or []:
        extra.update(workloads.load_file(path))
    w = workloads.get(job["workload"], extra)
    preset = job.get("preset") or w.default_preset
    skip = set(job.get("skip") or [])
    base_ctx = Context(device=device, preset=preset, budget_s=job.get("variant_budget_s") or 60.0,
                       min_time_s=job.get("min_time_s") or 0.1, repeats=job.get("repeats") or 7,
                       options=job.get("options") or {})
    all_variants = w.variants(preset, base_ctx)
    todo = [v for v in all_variants if variant_key(w.name, preset, v.params) not in skip]
    events.send("variants", total=len(all_variants), todo=len(todo),
                keys=[variant_key(w.name, preset, v.params) for v in todo],
                variants=[v.params for v in todo], unit=w.unit, higher_is_better=w.higher_is_better)
    deadline = time.monotonic() + job["workload_budget_s"] if job.get("workload_budget_s") else None
    cap = job.get("variant_budget_s") or 60.0
    for i, v in enumerate(todo):
        budget = cap
        if deadline is not None:
            left = max(deadline - time.monotonic(), 0.0)
            budget = min(cap, left / (len(todo) - i))
        budget = max(budget, 0.5)
        ctx = Context(device=device, preset=preset, budget_s=budget, min_time_s=base_ctx.min_time_s,
                      repeats=base_ctx.repeats, options=base_ctx.options)
        key = variant_key(w.name, preset, v.params)
        events.send("start", key=key, variant=v.params, budget_s=budget)
        t0 = time.monotonic()
        started = _now()
        try:
            device.reset_peak_memory()
            m = w.run(v, ctx)
            if not isinstance(m, Measurement):
                raise TypeError(f"{w.name}.run() returned {type(m).__name__}, not a Measurement")
        except BaseException as e:  # noqa: BLE001 - a workload's failure is a finding, not our crash
            if isinstance(e, KeyboardInterrupt):
                raise
            status = "oom" if _is_oom(e) else "error"
            tb = traceback.extract_tb(e.__traceback__)
            where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
            m = w.failed(v, ctx, status, f"{e.__class__.__name__}: {e}{where}")
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
        m = replace(m, peak_memory_bytes=peak, duration_s=time.monotonic() - t0, started_at=started, preset=preset)
        events.send("result", key=key, measurement=m.to_dict())
    events.send("done")


def _now() -> str:
    from gapbench.results import now_iso

    return now_iso()


def main(argv: list[str]) -> int:
    fd = int(argv[1]) if len(argv) > 1 else int(os.environ[EVENTS_FD_ENV])
    events = Events(fd)
    job = json.loads(sys.stdin.read())
    _limit_memory(job.get("memory_limit_bytes"))
    try:
        if job.get("describe"):
            events.send("describe", workloads=describe(job))
            return 0
        run_job(job, events)
    except Exception as e:  # setup failed: unknown device, unimportable workload, variants() raised
        from gapbench.errors import GapbenchError

        kind = "bad_input" if isinstance(e, GapbenchError) else "setup_error"
        tb = traceback.format_exc(limit=-3)
        events.send(kind, reason=f"{e.__class__.__name__}: {e}" if kind == "setup_error" else str(e),
                    traceback=tb)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
