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

from gapbench.devices import Device, available_host_memory, has_native_bf16, supports_dtype

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

    @property
    def peak_dtype(self) -> str:
        """The dtype whose dense peak MFU is taken against (fp32 matmuls may run as TF32 if allowed)."""
        if self.dtype == "fp32" and torch.backends.cuda.matmul.allow_tf32:
            return "tf32"
        return self.dtype


def default_dtype(device: Device) -> str:
    """bf16 where the hardware has it (accelerator or CPU with AVX512-BF16/AMX/SVE-BF16);
    fp16 on an accelerator without bf16; fp32 on a CPU without bf16."""
    if has_native_bf16(device) and supports_dtype(device, torch.bfloat16)[0]:
        return "bf16"
    return "fp32" if device.is_cpu else "fp16"


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
    ok, why = supports_dtype(device, precision.torch_dtype)
    return "" if ok else f"{precision.dtype}: {why}"


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
    """AdamW as users run it: the fused kernel on CUDA/ROCm, the default (foreach) elsewhere."""
    kwargs = {"fused": True} if device.type == "cuda" else {}
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

# the last: oneDNN's words when a primitive's scratchpad allocation fails (seen under RLIMIT_AS on the CPU);
# a back-off that meets it for another reason ends at the minimum batch and re-raises it
_OOM_TEXT = ("out of memory", "not enough memory", "can't allocate memory", "cannot allocate memory",
             "failed to allocate", "allocation failed", "could not create a primitive")


def is_oom(exc: BaseException) -> bool:
    """An allocation failure on any backend: torch.OutOfMemoryError, MemoryError, or the allocator's RuntimeError."""
    oom_type = getattr(torch, "OutOfMemoryError", None)
    if isinstance(exc, MemoryError) or (oom_type is not None and isinstance(exc, oom_type)):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in _OOM_TEXT)


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
    while not _fits(try_batch, b, last_chance=b <= minimum):
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
        ok = _fits(try_batch, mid, last_chance=False)
        tried.append((mid, ok))
        if ok:
            fit = mid
        else:
            release_memory(device)
            hi = mid
    return BatchSearch(fit, tuple(tried))


def _fits(try_batch: Callable[[int], object], b: int, last_chance: bool) -> bool:
    """Whether try_batch(b) ran; False on OOM, which is re-raised when this was the last chance."""
    try:
        try_batch(b)
    except BaseException as e:  # noqa: B036 - MemoryError and torch.OutOfMemoryError included
        if last_chance or not is_oom(e):
            raise
        return False
    return True


def auto_batch_ceiling(bytes_per_sample: float, fixed_bytes: float, device: Device, *, cap: int = 4096) -> int:
    """Where the OOM back-off starts: a power of two at or above what free memory should hold.

    On an accelerator the estimate is doubled (the back-off corrects it cheaply). On the CPU an OOM is
    usually the kernel's OOM killer, not an exception, so the ceiling is half the estimate instead.
    """
    free = device.free_memory()
    if device.is_cpu:
        headroom = address_space_headroom()
        free = min(free, headroom) if headroom is not None else free
    free = max(free - fixed_bytes, 0)
    est = free / max(bytes_per_sample, 1.0)
    est = est * 0.5 if device.is_cpu else est * 2
    if est < 1:
        return 1
    return int(min(cap, 2 ** math.ceil(math.log2(est)) if not device.is_cpu else 2 ** math.floor(math.log2(est))))


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
    """Peak memory of a measurement window: the device allocator's peak on accelerators; on the CPU the
    process's peak resident set (VmHWM, reset through /proc/self/clear_refs) or, where that reset is not
    possible, the growth of the process's max RSS. `source` says which."""

    def __init__(self, device: Device):
        self.device = device
        self.source = "device-allocator"
        self._rss0 = 0

    def reset(self) -> None:
        if not self.device.is_cpu:
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
        if not self.device.is_cpu:
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
    """On the CPU, '' when need_bytes fits in available memory, else the reason (a real OOM there is the
    kernel's OOM killer, which would take the worker with it). Accelerators raise a clean OOM instead."""
    if not device.is_cpu:
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


def measure_training(workload, variant, ctx, job: TrainingJob):
    """Build, pick the batch, run the check steps, time the steady state, and count: one Measurement."""
    if ctx.dist is not None and ctx.options.get("parallel"):  # DDP/FSDP over torch.distributed ranks
        from gapbench.dist.training import measure_training_parallel

        return measure_training_parallel(workload, variant, ctx, job)
    from gapbench.measure import TooSlow, time_fn, time_once
    from gapbench.workloads.base import Variant

    device = ctx.device
    clock = Clock(ctx.budget_s)
    if job.batch_size != "auto":
        floor = time_at_peak_s(job.flops_per_step(job.batch_size), device, job.precision.peak_dtype)
        if floor is not None and floor * (CHECK_STEPS + 5) > ctx.budget_s:
            return too_slow_at_peak(workload, variant, ctx, floor, job.precision.peak_dtype)
    memory = PeakMemory(device)
    memory.reset()
    torch.manual_seed(0)
    model = job.build_model()
    model.train()
    run_model = torch.compile(model) if job.compile else model
    metrics: dict = dict(job.metrics or {})

    def new_step(b: int) -> TrainStep:
        return TrainStep(run_model, job.make_batch(b), device, job.precision, job.lr, job.sdpa_backends)

    batch = job.batch_size
    held: dict = {}

    def first_step(b: int) -> None:
        """Build the measured step at batch b and run its first, cold step (kept on success)."""
        held.clear()
        try:
            s = new_step(b)
            held.update(step=s, first=time_once(s, device), batch=b)
        except BaseException:
            held.clear()
            model.zero_grad(set_to_none=True)  # a step cut short by OOM leaves partial gradients
            raise

    if batch == "auto":
        def try_batch(b: int) -> None:
            try:
                trial = new_step(b)
                trial()
                device.synchronize()
            finally:
                model.zero_grad(set_to_none=True)

        search = largest_batch(try_batch, max(1, job.auto_ceiling()), device=device)
        release_memory(device)
        memory.reset()  # the failed tries' allocations are not this batch's peak
        # a batch that fitted can stop fitting once memory is fragmented: keep backing off for the real step
        again = largest_batch(first_step, search.batch_size, refine=0, device=device)
        metrics["auto_batch_tried"] = [list(t) for t in search.tried + again.tried]
    else:
        first_step(batch)
    step, first, batch = held["step"], held["first"], held["batch"]
    work = job.work_per_step(batch)
    flops = job.flops_per_step(batch)
    variant = Variant(variant.params, flops=flops, bytes=variant.bytes)
    metrics.update(batch_size=batch, work_per_step=work, flops_per_step=flops,
                   dtype=job.precision.dtype, weights=job.precision.weights)
    metrics["first_step_s"] = first
    losses = [step.last_loss()]
    if job.compile:
        clock = Clock(ctx.budget_s)  # compilation is a one-off, recorded in first_step_s, not held to the budget
    elif first > clock.left():
        return workload.failed(variant, ctx, "too_slow", f"the first step took {first:.3g} s, more than the "
                               f"{ctx.budget_s:.0f} s budget", metrics={"first_step_s": first})
    for i in range(CHECK_STEPS - 1):
        t = time_once(step, device)
        losses.append(step.last_loss())
        # what is still to run: the rest of the check, then time_fn's probe, warm-up and 3 repeats
        if t * (CHECK_STEPS - 2 - i + 5) > clock.left():
            return workload.too_slow(variant, ctx, t, work)
    metrics["check_losses"] = losses
    wrong = losses_fall(losses)
    if wrong:
        return workload.failed(variant, ctx, "wrong_result", wrong, metrics=metrics)

    try:
        timing = time_fn(step, device, budget_s=clock.left(), min_time_s=ctx.min_time_s, repeats=ctx.repeats)
    except TooSlow as e:
        return workload.too_slow(variant, ctx, e.estimate_s, work)
    final = step.last_loss()
    metrics["final_loss"] = final
    if not math.isfinite(final):
        return workload.failed(variant, ctx, "wrong_result", f"loss became {final} during the timed steps",
                               metrics=metrics)
    achieved = flops / timing.median_s
    peak = peak_tflops(device, job.precision.peak_dtype)
    metrics.update(steady_step_s=timing.median_s, achieved_tflops=achieved * 1e-12, peak_tflops=peak,
                   peak_dtype=job.precision.peak_dtype, mfu=mfu(achieved, peak),
                   peak_memory_source=memory.source)
    return workload.throughput(variant, ctx, timing, work, metrics=metrics, peak_memory_bytes=memory.peak())
