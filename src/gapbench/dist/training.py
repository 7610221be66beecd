"""Data-parallel training measurement: the shared training driver's recipe (build, check steps whose
loss must fall, steady-state timing) on every rank at once, with the model wrapped by DDP or FSDP.

Every rank trains on its own copy of the workload's synthetic batch (the per-device batch); the global
batch is world_size times that. Value: total throughput (all devices); per-device throughput and the
global batch are in the metrics. All decisions (too slow, wrong loss) are agreed across ranks.
"""

from __future__ import annotations

import math

import torch

from gapbench.dist.control import control
from gapbench.dist.parallel import unsupported_reason, wrap_model
from gapbench.dist.timing import time_agreed
from gapbench.measure import TooSlow, time_once


def measure_training_parallel(workload, variant, ctx, job):
    """One Measurement of `job` (a workloads._training.TrainingJob) trained data-parallel on every rank."""
    from gapbench.workloads import _training as tr
    from gapbench.workloads.base import Variant

    mode = ctx.options.get("parallel")
    why = unsupported_reason(mode)
    if why:
        return workload.failed(variant, ctx, "unsupported", why)
    if job.batch_size == "auto":
        return workload.failed(variant, ctx, "unsupported", "--batch-size auto is not supported with --parallel "
                               "(an out-of-memory back-off on one rank would desynchronise the others); give a number")
    ctl = control()
    n = ctx.dist.world_size
    device = ctx.device
    clock = tr.Clock(ctx.budget_s)
    memory = tr.PeakMemory(device)
    memory.reset()
    torch.manual_seed(0)
    model = job.build_model()
    model.train()
    model = wrap_model(model, mode, device)
    run_model = torch.compile(model) if job.compile else model
    batch = int(job.batch_size)
    work = job.work_per_step(batch)
    flops = job.flops_per_step(batch)
    variant = Variant(variant.params, flops=flops * n, bytes=variant.bytes)
    metrics: dict = dict(job.metrics or {})
    metrics.update(parallel=mode, world_size=n, nodes=ctx.dist.node_count, backend=ctx.dist.backend,
                   batch_size_per_device=batch, global_batch_size=batch * n, work_per_step_per_device=work,
                   flops_per_step_per_device=flops, dtype=job.precision.dtype, weights=job.precision.weights)

    step = tr.TrainStep(run_model, job.make_batch(batch), device, job.precision, job.lr, job.sdpa_backends)
    first = ctl.max(time_once(step, device))
    metrics["first_step_s"] = first
    losses = [step.last_loss()]
    min_repeats = 3
    for i in range(tr.CHECK_STEPS - 1):
        if i == 0 and first * (tr.CHECK_STEPS - i + min_repeats) > ctl.min(clock.left()):
            return workload.too_slow(variant, ctx, first, work * n)
        t = ctl.max(time_once(step, device))
        losses.append(step.last_loss())
        if t * (tr.CHECK_STEPS - 1 - i + min_repeats + 1) > ctl.min(clock.left()):
            return workload.too_slow(variant, ctx, t, work * n)
    metrics["check_losses"] = losses
    wrong = [f"rank {r}: {e}" for r, e in enumerate(ctl.all_gather(tr.losses_fall(losses))) if e]
    if wrong:
        return workload.failed(variant, ctx, "wrong_result", "; ".join(wrong), metrics=metrics)
    try:
        timing = time_agreed(step, device, budget_s=max(ctl.min(clock.left()), 0.0),
                             min_time_s=ctx.min_time_s, repeats=ctx.repeats, ctl=ctl)
    except TooSlow as e:
        return workload.too_slow(variant, ctx, e.estimate_s, work * n)
    final = step.last_loss()
    bad = [r for r, x in enumerate(ctl.all_gather(final)) if not math.isfinite(x)]
    if bad:
        return workload.failed(variant, ctx, "wrong_result", f"loss became non-finite on rank(s) {bad} during the "
                               "timed steps", metrics=metrics)
    metrics["final_loss"] = final
    step_s = timing.median_s
    achieved = flops / step_s  # per device
    peak = tr.peak_tflops(device, job.precision.peak_dtype)
    peaks = [p for p in ctl.all_gather(memory.peak()) if p is not None]
    metrics.update(steady_step_s=step_s, per_device_throughput=work / step_s, total_throughput=work * n / step_s,
                   achieved_tflops_per_device=achieved * 1e-12, achieved_tflops=achieved * n * 1e-12,
                   peak_tflops=peak, peak_dtype=job.precision.peak_dtype, mfu=tr.mfu(achieved, peak),
                   peak_memory_source=memory.source, peak_memory_bytes_per_rank=peaks)
    return workload.throughput(variant, ctx, timing, work * n, metrics=metrics,
                               peak_memory_bytes=max(peaks) if peaks else None)


def scaling_efficiency(parallel_total: float, world_size: int, single: float) -> float:
    """Total throughput on n devices over n times the throughput on one device (1.0 = linear scaling)."""
    return parallel_total / (world_size * single)


def scaling_pairs(measurements) -> list[tuple]:
    """(parallel row, single-device row, efficiency) for every parallel training row that has a single-device
    row of the same workload, preset and variant (less `parallel`/`world_size`) among `measurements` — for
    reports over results merged from separate runs."""
    import json

    def key(m, params: dict) -> tuple:
        return (m.workload, m.preset, json.dumps(params, sort_keys=True))

    single = {key(m, m.variant): m for m in measurements if m.ok and "parallel" not in m.variant}
    out = []
    for m in measurements:
        if not (m.ok and m.variant.get("parallel") and m.variant.get("world_size")):
            continue
        plain = {k: v for k, v in m.variant.items() if k not in ("parallel", "world_size")}
        s = single.get(key(m, plain))
        if s is not None and s.value:
            out.append((m, s, scaling_efficiency(m.value, int(m.variant["world_size"]), s.value)))
    return out
