"""The shared training driver: one optimisation step on a fixed synthetic batch, the check that the loss falls,
the steady-state timing, throughput and MFU (with `--batch-size auto`, at the largest batch that fits)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from gapbench.devices import Device
from gapbench.workloads.models.flops import mfu, peak_tflops, time_at_peak_s, too_slow_at_peak
from gapbench.workloads.models.memory import PeakMemory, is_oom, largest_batch, release_memory
from gapbench.workloads.models.precision import Precision, is_unavailable_kernel, no_kernel_reason, sdpa_context


def train(workload, variant, ctx, job: TrainingJob):
    """measure_training, with an attention backend that has no kernel here reported as `unsupported`."""
    try:
        return measure_training(workload, variant, ctx, job)
    except RuntimeError as e:
        if is_unavailable_kernel(e):
            return workload.failed(variant, ctx, "unsupported",
                                   no_kernel_reason(variant.params["attention"], ctx.device))
        raise


def adamw(params, device: Device, lr: float) -> torch.optim.Optimizer:
    """AdamW as users run it: the fused kernel where the stack has one (CUDA, ROCm), the default (foreach) elsewhere."""
    kwargs = {"fused": True} if device.fused_optimizer else {}
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01, **kwargs)


class TrainStep:
    """One full optimisation step (forward, backward, optimizer) on a fixed synthetic batch.

    `model(**batch)` must return an object with a `.loss`. The loss stays on the device (no sync);
    `last_loss()` reads it.
    """

    def __init__(self, model: torch.nn.Module, batch: dict, device: Device, precision: Precision, lr: float,
                 sdpa_backends: list | None = None):
        self.model, self.batch, self.device, self.precision = model, batch, device, precision
        self.optimizer = adamw([p for p in model.parameters() if p.requires_grad], device, lr)
        self.scaler = torch.amp.GradScaler(device.type) if precision.grad_scaler else None
        self.sdpa_backends = sdpa_backends
        self._loss: torch.Tensor | None = None

    def __call__(self) -> None:
        with self.device.math_mode(self.precision.dtype):  # fp32: forward, backward and optimizer outside TF32
            self._step()

    def _step(self) -> None:
        with sdpa_context(self.sdpa_backends), self.precision.context(self.device):
            loss = self.model(**self.batch).loss
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._loss = loss.detach()

    def last_loss(self) -> float:
        return float(self._loss.float().item()) if self._loss is not None else math.nan

    def subnormal_grads(self) -> float:
        """The share of the step's nonzero gradient values that are subnormal floats of their dtype, from one more
        forward and backward pass (no optimizer step: the weights stay as the timed steps left them). Gradients
        as the backward pass computes them: scaled, where a gradient scaler runs."""
        try:
            with self.device.math_mode(self.precision.dtype), sdpa_context(self.sdpa_backends), \
                    self.precision.context(self.device):
                loss = self.model(**self.batch).loss
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            return subnormal_share(self.model.parameters())
        finally:
            self.optimizer.zero_grad(set_to_none=True)


def subnormal_share(params) -> float:
    """The share of the nonzero gradient values that are subnormal floats of their dtype, over the parameters.
    On most CPUs arithmetic on subnormal fp32 runs far slower than on normal numbers, and bf16 matrix units flush
    them: a step full of them times that, not the stack (see gapbench.results.records.SUBNORMAL_LIMIT)."""
    sub = nonzero = 0
    for p in params:
        g = p.grad
        if g is None or not g.is_floating_point():
            continue
        a = g.detach().abs()
        nz = a != 0
        nonzero += int(nz.sum())
        sub += int((nz & (a < torch.finfo(g.dtype).tiny)).sum())
    return sub / nonzero if nonzero else 0.0


def losses_fall(losses: Sequence[float]) -> str:
    """'' when every loss is finite and the last is below the first; else what is wrong."""
    if not losses:
        return "no loss recorded"
    bad = [i for i, x in enumerate(losses) if not math.isfinite(x)]
    if bad:
        return f"loss is not finite at step {bad[0] + 1}: {[round(x, 4) for x in losses]}"
    if len(losses) > 1 and not losses[-1] < losses[0]:
        return f"loss did not fall over {len(losses)} steps on a learnable batch: {[round(x, 4) for x in losses]}"
    return ""


class Clock:
    """Wall time left of a budget that started when the clock was made."""

    def __init__(self, budget_s: float):
        self.budget_s = budget_s
        self.t0 = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()


CHECK_STEPS = 5  # steps before timing whose losses must be finite and falling (they double as warm-up)


@dataclass
class TrainingJob:
    """What a training workload hands the shared driver: how to build, feed and count one step."""

    build_model: Callable[[], torch.nn.Module]  # on the device, parameters in the precision's weight dtype
    make_batch: Callable[[int], dict]  # batch size -> model(**batch) inputs on the device, labels included
    flops_per_step: Callable[[int], float]  # batch size -> model FLOPs of one step
    work_per_step: Callable[[int], float]  # batch size -> tokens or samples of one step
    batch_size: int | str  # int, or "auto"
    auto_ceiling: Callable[[], int]  # where the OOM back-off starts for "auto"
    precision: Precision
    lr: float
    sdpa_backends: list | None = None
    compile: bool = False
    metrics: dict | None = None  # workload facts added to the result's metrics


AUTO_RETRIES = 4  # with --batch-size auto: smaller batches tried when the measured steps run out of memory


AUTO_SHRINK = 0.875  # each such retry keeps 7/8 of the batch


@dataclass
class _Run:
    """One training measurement in the making: what was built, and what is known so far."""

    workload: object
    variant: object
    ctx: object
    job: TrainingJob
    model: torch.nn.Module
    run_model: torch.nn.Module
    memory: PeakMemory
    metrics: dict
    copies: int
    peak_dtype: str

    def step(self, b: int) -> TrainStep:
        j = self.job
        return TrainStep(self.run_model, j.make_batch(b), self.ctx.device, j.precision, j.lr, j.sdpa_backends)

    def try_batch(self, b: int) -> None:
        """One full step at batch b on a throwaway step, its memory released after (the auto search)."""
        try:
            self.step(b)()
            self.ctx.device.synchronize()
        finally:
            self.model.zero_grad(set_to_none=True)


def _refusal(workload, variant, ctx, job: TrainingJob, peak_dtype: str):
    """The failed Measurement when this job cannot be measured here at all, else None."""
    wrap = ctx.wrap_model
    if wrap is not None:
        why = getattr(wrap, "unsupported", "")
        if why:
            return workload.failed(variant, ctx, "unsupported", why)
        if job.batch_size == "auto":
            return workload.failed(variant, ctx, "unsupported", "--batch-size auto is not supported with --parallel "
                                   "(an out-of-memory back-off on one rank would desynchronise the others); give a number")
    if job.batch_size != "auto":
        floor = time_at_peak_s(job.flops_per_step(job.batch_size), ctx.device, peak_dtype)
        if floor is not None and floor * (CHECK_STEPS + 5) > ctx.budget_s:
            return too_slow_at_peak(workload, variant, ctx, floor, peak_dtype)
    return None


def measure_training(workload, variant, ctx, job: TrainingJob):
    """Build, pick the batch, run the check steps, time the steady state, and count: one Measurement.

    In one process this trains one model. Under torch.distributed with `--parallel ddp|fsdp` (ctx.wrap_model
    set), every rank trains its own copy of the synthetic batch with the model wrapped; every decision is the
    agreed (slowest rank's) one, and the value is the total throughput of all devices. With
    `--batch-size auto` the batch is the largest that runs, and when the measured steps run out of memory
    after all (memory fragments; later steps allocate more), a slightly smaller batch is measured instead.
    """
    device = ctx.device
    peak_dtype = job.precision.peak_dtype(device)
    refused = _refusal(workload, variant, ctx, job, peak_dtype)
    if refused is not None:
        return refused
    clock = Clock(ctx.budget_s)
    memory = PeakMemory(device)
    memory.reset()
    torch.manual_seed(0)
    model = job.build_model()
    model.train()
    if ctx.wrap_model is not None:
        model = ctx.wrap_model(model)
    metrics: dict = dict(job.metrics or {})
    metrics.update(getattr(ctx.wrap_model, "metrics", None) or {})
    copies = ctx.dist.world_size if ctx.wrap_model is not None and ctx.dist is not None else 1
    run = _Run(workload, variant, ctx, job, model, torch.compile(model) if job.compile else model, memory, metrics,
               copies, peak_dtype)
    if job.batch_size != "auto":
        return _measure_at(run, job.batch_size, clock)
    search = largest_batch(run.try_batch, max(1, job.auto_ceiling()), device=device)
    tried = [list(t) for t in search.tried]
    metrics["auto_batch_tried"] = tried
    batch = search.batch_size
    for attempt in range(AUTO_RETRIES + 1):
        release_memory(device)
        memory.reset()  # the failed tries' allocations are not this batch's peak
        try:
            return _measure_at(run, batch, clock)
        except BaseException as e:  # noqa: B036 - MemoryError and torch.OutOfMemoryError included
            if not is_oom(e, device) or batch <= 1 or attempt == AUTO_RETRIES:
                raise
        model.zero_grad(set_to_none=True)  # a step cut short by OOM leaves partial gradients
        tried.append([batch, False])
        batch = max(1, int(batch * AUTO_SHRINK))
    raise AssertionError("unreachable")


def _measure_at(run: _Run, batch: int, clock: Clock):
    """The first step, the check steps and the timing at one batch size: one Measurement."""
    from gapbench.timing import TooSlow, time_fn, time_once
    from gapbench.workloads.base import Variant

    workload, ctx, job, agree, device = run.workload, run.ctx, run.job, run.ctx.agreement, run.ctx.device
    step = run.step(batch)
    first = agree.max(time_once(step, device))
    work, flops = job.work_per_step(batch), job.flops_per_step(batch)
    variant = Variant(run.variant.params, flops=flops * run.copies, bytes=run.variant.bytes)
    metrics = dict(run.metrics)
    if job.batch_size == "auto":
        metrics["auto_batch_tried"] = [*metrics["auto_batch_tried"], [batch, True]]
    metrics.update(batch_size=batch, work_per_step=work, flops_per_step=flops, dtype=job.precision.dtype,
                   weights=job.precision.weights, first_step_s=first)
    if job.compile:
        clock = Clock(ctx.budget_s)  # compilation is a one-off, recorded in first_step_s, not held to the budget
    elif first > agree.min(clock.left()):
        return workload.failed(variant, ctx, "too_slow", f"the first step took {first:.3g} s, more than the "
                               f"{ctx.budget_s:.0f} s budget", metrics={"first_step_s": first})
    losses = [step.last_loss()]
    for i in range(CHECK_STEPS - 1):
        t = agree.max(time_once(step, device))
        losses.append(step.last_loss())
        # what is still to run: the rest of the check, then time_fn's probe, warm-up and 3 repeats
        if t * (CHECK_STEPS - 2 - i + 5) > agree.min(clock.left()):
            return workload.too_slow(variant, ctx, t, work * run.copies)
    metrics["check_losses"] = losses
    wrong = _per_rank(agree.all_gather(losses_fall(losses)), run.copies)
    if wrong:
        return workload.failed(variant, ctx, "wrong_result", wrong, metrics=metrics)
    try:
        timing = time_fn(step, device, ctx.budget(max(agree.min(clock.left()), 0.0)), agreement=agree)
    except TooSlow as e:
        return workload.too_slow(variant, ctx, e.estimate_s, work * run.copies)
    final = step.last_loss()
    metrics["final_loss"] = final
    metrics["subnormal_grads"] = round(max(agree.all_gather(step.subnormal_grads())), 6)
    bad = _per_rank(agree.all_gather("" if math.isfinite(final) else f"loss became {final} during the timed steps"),
                    run.copies)
    if bad:
        return workload.failed(variant, ctx, "wrong_result", bad, metrics=metrics)
    return _throughput(run, variant, timing, batch, work, flops, metrics)


def _throughput(run: _Run, variant, timing, batch: int, work: float, flops: float, metrics: dict):
    achieved = flops / timing.median_s  # per device
    peak = peak_tflops(run.ctx.device, run.peak_dtype)
    metrics.update(steady_step_s=timing.median_s, achieved_tflops=achieved * run.copies * 1e-12, peak_tflops=peak,
                   peak_dtype=run.peak_dtype, mfu=mfu(achieved, peak), peak_memory_source=run.memory.source)
    peaks = [p for p in run.ctx.agreement.all_gather(run.memory.peak()) if p is not None]
    if run.copies > 1:
        metrics.update(batch_size_per_device=batch, global_batch_size=batch * run.copies,
                       work_per_step_per_device=work, flops_per_step_per_device=flops,
                       per_device_throughput=work / timing.median_s,
                       total_throughput=work * run.copies / timing.median_s,
                       achieved_tflops_per_device=achieved * 1e-12, peak_memory_bytes_per_rank=peaks)
    return run.workload.throughput(variant, run.ctx, timing, work * run.copies, metrics=metrics,
                                   peak_memory_bytes=max(peaks) if peaks else None)


def _per_rank(reasons: list[str], copies: int) -> str:
    """The reasons some ranks gave, named by rank when there are several ranks; '' when none did."""
    found = [(r, why) for r, why in enumerate(reasons) if why]
    if not found:
        return ""
    if copies == 1 and len(reasons) == 1:
        return found[0][1]
    return "; ".join(f"rank {r}: {why}" for r, why in found)
