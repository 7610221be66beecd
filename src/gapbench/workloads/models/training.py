"""What the model workloads share: optional-dependency check, precision choice, the training step,
OOM back-off for `--batch-size auto`, FLOP formulas, MFU and peak memory.

The formulas are stated in docs/models.md; the tests check them against hand-computed values.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import math
import resource
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from gapbench.devices import Device, available_host_memory

INSTALL_HINT = "pip install 'gapbench[models]'"

DTYPES = ("fp32", "bf16", "fp16")
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
ATTENTION_CHOICES = ("sdpa", "eager", "flash", "efficient", "math", "cudnn")


# ---- optional dependencies --------------------------------------------------------------------------

def missing_dependency(*modules: str) -> str | None:
    """None when every module imports; otherwise the reason, with the install command."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:  # a broken install is as unusable as a missing one
            why = "is not installed" if isinstance(e, ImportError) else f"fails to import ({type(e).__name__}: {e})"
            return f"{name} {why}; install the model extras: {INSTALL_HINT}"
    return None


# ---- precision --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Precision:
    """How a step computes: the matmul dtype, the dtype parameters are stored in, and the loss scaling.

    weights == "fp32" with dtype bf16/fp16 is mixed precision (fp32 master weights, autocast);
    weights == dtype keeps parameters (and AdamW states) in the low-precision type.
    """

    dtype: str  # fp32 | bf16 | fp16
    weights: str  # fp32 | bf16 | fp16
    source: str  # "default" or "option"

    @property
    def torch_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.dtype]

    @property
    def weight_dtype(self) -> torch.dtype:
        return TORCH_DTYPES[self.weights]

    @property
    def autocast(self) -> bool:
        return self.dtype != "fp32" and self.weights == "fp32"

    @property
    def grad_scaler(self) -> bool:
        return self.dtype == "fp16"

    def context(self, device: Device):
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.torch_dtype)

    def peak_dtype(self, device: Device) -> str:
        """The dtype whose dense peak MFU is taken against (fp32 matmuls may run as TF32 if allowed)."""
        if self.dtype == "fp32" and device.backend.tf32_enabled():
            return "tf32"
        return self.dtype


def default_dtype(device: Device) -> str:
    """bf16 where the hardware has it (accelerator or CPU with AVX512-BF16/AMX/SVE-BF16);
    fp16 on an accelerator without bf16; fp32 on a CPU without bf16."""
    if device.has_native_bf16() and not device.dtype_unsupported("bf16"):
        return "bf16"
    return "fp16" if device.is_accelerator else "fp32"


def choose_precision(device: Device, options: dict, *, low_memory_weights: bool = False,
                     training: bool = True) -> Precision:
    """The precision for this run: the user's `dtype` option, else the device default.

    Training keeps fp32 master weights (autocast) unless `low_memory_weights` (the 7B/13B/70B-slice presets,
    whose fp32 weights plus AdamW states would not fit one device), and always for fp16, which needs fp32
    master weights for its grad scaler. Inference stores weights in the compute dtype, as pipelines do.
    """
    asked = options.get("dtype")
    if isinstance(asked, (list, tuple)):
        asked = ",".join(asked)
    dtype = asked or default_dtype(device)
    if dtype not in DTYPES:  # e.g. fp8 meant for gemm: the run reports it unsupported, it does not crash
        return Precision(dtype=dtype, weights=dtype, source="option")
    if not training or (low_memory_weights and dtype == "bf16"):
        weights = dtype
    else:
        weights = "fp32"
    return Precision(dtype=dtype, weights=weights, source="option" if asked else "default")


def precision_unsupported(device: Device, precision: Precision) -> str:
    """'' when the device can compute in this precision at all, else why not."""
    if precision.dtype not in DTYPES:
        return f"dtype {precision.dtype!r}: the model workloads run {', '.join(DTYPES)}"
    why = device.dtype_unsupported(precision.dtype)
    return f"{precision.dtype}: {why}" if why else ""


def batch_option(options: dict, default: int) -> int | str:
    """The `batch_size` option: None -> the preset's, an int, or "auto"."""
    b = options.get("batch_size")
    if b is None:
        return default
    if b == "auto":
        return "auto"
    b = int(b)
    if b < 1:
        raise ValueError(f"batch_size must be a positive integer or 'auto', not {b}")
    return b


# ---- attention and compile options ------------------------------------------------------------------

def attention_choice(options: dict) -> tuple[str, list | None]:
    """(transformers attn_implementation, SDPA backends to restrict to or None) for the `attention` option."""
    asked = options.get("attention") or "sdpa"
    if asked not in ATTENTION_CHOICES:
        raise ValueError(f"attention {asked!r} is not one of {', '.join(ATTENTION_CHOICES)}")
    if asked in ("sdpa", "eager"):
        return asked, None
    from torch.nn.attention import SDPBackend

    backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION}[asked]
    return "sdpa", [backend]


def sdpa_context(backends: list | None):
    if not backends:
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel(backends)


def is_unavailable_kernel(exc: BaseException) -> bool:
    """The restricted SDPA backend cannot run these inputs on this device."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("No available kernel" in text or "No viable backend" in text)


def no_kernel_reason(attention: str, device: Device) -> str:
    return f"attention backend {attention!r} has no kernel for these inputs on {device}"


# ---- the checks every model workload makes before it builds anything ---------------------------------

@dataclass(frozen=True)
class Prepared:
    precision: Precision
    attn_impl: str  # transformers attn_implementation
    sdpa_backends: list | None


def prepare(workload, variant, ctx, *modules: str):
    """Prepared, or the failed Measurement to return: a missing library or a precision the device lacks
    is `unsupported` with the reason. The precision is read back from the variant (its identity)."""
    missing = missing_dependency(*modules)
    if missing:
        return workload.failed(variant, ctx, "unsupported", missing)
    prm = variant.params
    precision = Precision(prm["dtype"], prm.get("weights", prm["dtype"]), "variant")
    why = precision_unsupported(ctx.device, precision)
    if why:
        return workload.failed(variant, ctx, "unsupported", why)
    attn_impl, backends = attention_choice({"attention": prm["attention"]})
    return Prepared(precision, attn_impl, backends)


def training_state_bytes(params: int, precision: Precision) -> int:
    """Weights, gradients and two AdamW moments in the weight dtype, plus a low-precision copy under autocast."""
    return params * (precision.weight_dtype.itemsize * 4 + (2 if precision.autocast else 0))


def train(workload, variant, ctx, job: TrainingJob):
    """measure_training, with an attention backend that has no kernel here reported as `unsupported`."""
    try:
        return measure_training(workload, variant, ctx, job)
    except RuntimeError as e:
        if is_unavailable_kernel(e):
            return workload.failed(variant, ctx, "unsupported",
                                   no_kernel_reason(variant.params["attention"], ctx.device))
        raise


# ---- the training step ------------------------------------------------------------------------------

def adamw(params, device: Device, lr: float) -> torch.optim.Optimizer:
    """AdamW as users run it: the fused kernel where the stack has one (CUDA, ROCm), the default (foreach) elsewhere."""
    kwargs = {"fused": True} if device.backend.fused_optimizer else {}
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


# ---- out-of-memory back-off -------------------------------------------------------------------------

def is_oom(exc: BaseException, device: Device | None = None) -> bool:
    """An allocation failure: the device's own out-of-memory type, or any allocator's words."""
    from gapbench.devices.host import is_oom_text

    return device.is_oom(exc) if device is not None else is_oom_text(exc)


def release_memory(device: Device | None = None) -> None:
    """Give freed blocks back after an OOM so the next, smaller try starts clean."""
    gc.collect()
    if device is not None:
        device.empty_cache()


@dataclass(frozen=True)
class BatchSearch:
    batch_size: int  # the largest batch that ran
    tried: tuple[tuple[int, bool], ...]  # (batch, fitted) in the order tried


def largest_batch(try_batch: Callable[[int], object], start: int, *, minimum: int = 1, refine: int = 3,
                  device: Device | None = None) -> BatchSearch:
    """The largest batch size in [minimum, start] for which try_batch(b) runs without running out of memory.

    Halves from `start` on each OOM until one fits, then bisects between the largest fit and the smallest
    failure for at most `refine` more tries. Exceptions other than OOM propagate; if even `minimum` does not
    fit, the last OOM propagates (the worker records it as `oom`).
    """
    if start < minimum:
        raise ValueError(f"start {start} is below minimum {minimum}")
    tried: list[tuple[int, bool]] = []
    b = start
    while not _fits(try_batch, b, last_chance=b <= minimum, device=device):
        tried.append((b, False))
        release_memory(device)  # outside the except block: only now is the failed try's memory garbage
        b = max(minimum, b // 2)
    tried.append((b, True))
    fit = b
    failed = [x for x, ok in tried if not ok]
    hi = min(failed) if failed else None
    for _ in range(refine):
        if hi is None or hi - fit <= 1:
            break
        mid = (fit + hi) // 2
        ok = _fits(try_batch, mid, last_chance=False, device=device)
        tried.append((mid, ok))
        if ok:
            fit = mid
        else:
            release_memory(device)
            hi = mid
    return BatchSearch(fit, tuple(tried))


def _fits(try_batch: Callable[[int], object], b: int, last_chance: bool, device: Device | None = None) -> bool:
    """Whether try_batch(b) ran; False on OOM, which is re-raised when this was the last chance."""
    try:
        try_batch(b)
    except BaseException as e:  # noqa: B036 - MemoryError and torch.OutOfMemoryError included
        if last_chance or not is_oom(e, device):
            raise
        return False
    return True


def auto_batch_ceiling(bytes_per_sample: float, fixed_bytes: float, device: Device, *, cap: int = 4096) -> int:
    """Where the OOM back-off starts: a power of two at or above what free memory should hold.

    Where the device has its own memory the estimate is doubled (the back-off corrects it cheaply). Where
    device memory is host memory (the CPU) an OOM is usually the kernel's OOM killer, not an exception, so
    the ceiling is half the estimate instead.
    """
    host = device.backend.host_memory_is_device_memory
    free = device.free_memory()
    if host:
        headroom = address_space_headroom()
        free = min(free, headroom) if headroom is not None else free
    free = max(free - fixed_bytes, 0)
    est = free / max(bytes_per_sample, 1.0)
    est = est * 0.5 if host else est * 2
    if est < 1:
        return 1
    return int(min(cap, 2 ** math.floor(math.log2(est)) if host else 2 ** math.ceil(math.log2(est))))


def address_space_headroom() -> int | None:
    """Bytes this process may still map under RLIMIT_AS (the runner's --memory-limit), None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft == resource.RLIM_INFINITY:
        return None
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return max(soft - int(line.split()[1]) * 1024, 0)
    except (OSError, ValueError, IndexError):
        pass
    return None


def activation_bytes_per_sample(seq: int, hidden: int, layers: int, heads: int, dtype_bytes: int,
                                vocab: int = 0, checkpointing: bool = False, scores: bool = True) -> float:
    """Activation memory of one sequence (Korthikanti et al. 2022, no recompute): s·h·L·(34 + 5·a·s/h)
    bytes at 16-bit, scaled to `dtype_bytes` (the weights' element size: with fp32 master weights the
    residual stream and norms stay fp32 under autocast); the 5·a·s/h term (stored attention scores) only when
    `scores` (eager or math attention; fused kernels keep none). With checkpointing only each layer's input
    is kept (s·h per layer) plus one layer recomputed. Logits and their gradients (s·V, five fp32 copies)
    are added."""
    per_layer = seq * hidden * (34 + (5 * heads * seq / hidden if scores else 0)) * dtype_bytes / 2
    acts = seq * hidden * dtype_bytes * layers + per_layer if checkpointing else per_layer * layers
    return acts + 5 * seq * vocab * 4


# ---- FLOPs and MFU ----------------------------------------------------------------------------------

def train_flops_per_token(matmul_params: float, layers: int, hidden: int, seq: int) -> float:
    """Training FLOPs per token, PaLM form: 6·N + 12·L·H·Q·T with H·Q = hidden and T = seq.

    N counts the weights of the token-wise matrix multiplies (the embedding lookup is not one). The
    attention term counts the full s×s score and value matmuls (forward 4·h·s, backward twice that) per
    layer, as PaLM does, also for causal masks.
    """
    return 6.0 * matmul_params + 12.0 * layers * hidden * seq


def infer_flops_per_token(matmul_params: float, layers: int, hidden: int, seq: int) -> float:
    """Inference (forward only) FLOPs per token: 2·N + 4·L·hidden·seq."""
    return 2.0 * matmul_params + 4.0 * layers * hidden * seq


def count_flops(fn: Callable[[], object]) -> float:
    """FLOPs of matmul/conv/attention ops that fn() runs, by torch.utils.flop_counter (use meta tensors)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return float(counter.get_total_flops())


def peak_tflops(device: Device, dtype: str) -> float | None:
    """The device's dense peak for dtype from gapbench.specs, or None where gapbench does not know it."""
    try:
        from gapbench.specs import peak_tflops as lookup
    except ImportError:
        return None
    try:
        value = lookup(device.identity(), dtype)
    except Exception:  # a spec table problem must not fail a measurement
        return None
    return float(value) if value else None


def time_at_peak_s(flops: float | None, device: Device, dtype: str) -> float | None:
    """A lower bound on the seconds `flops` take: the time at the device's dense peak (None if unknown).
    Lets a workload say `too_slow` before building a model that could never fit its budget."""
    peak = peak_tflops(device, dtype)
    if not flops or not peak:
        return None
    return flops / (peak * 1e12)


def too_slow_at_peak(workload, variant, ctx, floor_s: float, dtype: str):
    """The `too_slow` result for a step that cannot fit the budget even at the device's dense peak."""
    return workload.failed(variant, ctx, "too_slow",
                           f"even at the device's dense {dtype} peak one iteration takes {floor_s:.3g} s; "
                           f"measuring it needs several and the budget is {ctx.budget_s:.0f} s",
                           metrics={"estimated_time_per_iter_s": floor_s, "estimate_basis": "dense peak"})


def mfu(achieved_flops_per_s: float | None, peak: float | None) -> float | None:
    """Model FLOPs utilisation: achieved model FLOP/s over the dense peak (TFLOP/s)."""
    if not achieved_flops_per_s or not peak:
        return None
    return achieved_flops_per_s / (peak * 1e12)


# ---- peak memory ------------------------------------------------------------------------------------

class PeakMemory:
    """Peak memory of a measurement window: the device allocator's peak where the device has its own memory;
    where device memory is host memory, the process's peak resident set (VmHWM, reset through
    /proc/self/clear_refs) or, where that reset is not possible, the growth of the process's max RSS.
    `source` says which."""

    def __init__(self, device: Device):
        self.device = device
        self.host = device.backend.host_memory_is_device_memory
        self.source = "device-allocator"
        self._rss0 = 0

    def reset(self) -> None:
        if not self.host:
            self.device.reset_peak_memory()
            return
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            self.source = "process-peak-rss"
        except OSError:
            self.source = "process-max-rss-growth"
            self._rss0 = _max_rss()

    def peak(self) -> int | None:
        if not self.host:
            return self.device.peak_memory()
        if self.source == "process-peak-rss":
            hwm = _vm_hwm()
            if hwm is not None:
                return hwm
            self.source = "process-max-rss-growth"
        grown = _max_rss() - self._rss0
        return grown if grown > 0 else None


def _max_rss() -> int:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(r if sys.platform == "darwin" else r * 1024)


def _vm_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def host_memory_shortfall(need_bytes: float, device: Device) -> str:
    """Where device memory is host memory, '' when need_bytes fits in available memory, else the reason (a
    real OOM there is the kernel's OOM killer, which would take the worker with it). Accelerators raise a
    clean OOM instead."""
    if not device.backend.host_memory_is_device_memory:
        return ""
    have = available_host_memory()
    if have and need_bytes > 0.9 * have:
        return (f"needs about {need_bytes / 2**30:.1f} GiB (weights, gradients, optimizer states, activations); "
                f"{have / 2**30:.1f} GiB of host memory is available")
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


@contextlib.contextmanager
def creating_dtype(dtype: torch.dtype):
    """Create parameters directly in dtype (a 13B model never exists in fp32 on the way to bf16)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


# ---- the measurement of a training workload ---------------------------------------------------------

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
