"""Model memory: the out-of-memory back-off of `--batch-size auto`, where it starts, activation and training-state
estimates, and the peak memory of a measurement window (docs/models.md)."""

from __future__ import annotations

import gc
import math
import resource
import sys
from collections.abc import Callable
from dataclasses import dataclass

from gapbench.devices import Device, available_host_memory
from gapbench.workloads.models.precision import Precision


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
    host = device.host_memory_is_device_memory
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
    import psutil

    try:
        return max(soft - psutil.Process().memory_info().vms, 0)
    except (OSError, psutil.Error):
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


def training_state_bytes(params: int, precision: Precision) -> int:
    """Weights, gradients and two AdamW moments in the weight dtype, plus a low-precision copy under autocast."""
    return params * (precision.weight_dtype.itemsize * 4 + (2 if precision.autocast else 0))


class PeakMemory:
    """Peak memory of a measurement window: the device allocator's peak where the device has its own memory;
    where device memory is host memory, the process's peak resident set (VmHWM, reset through
    /proc/self/clear_refs) or, where that reset is not possible, the growth of the process's max RSS.
    `source` says which."""

    def __init__(self, device: Device):
        self.device = device
        self.host = device.host_memory_is_device_memory
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
    # psutil has no peak resident set on Linux (Windows alone reports one), and none it could reset
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
    if not device.host_memory_is_device_memory:
        return ""
    have = available_host_memory()
    if have and need_bytes > 0.9 * have:
        return (f"needs about {need_bytes / 2**30:.1f} GiB (weights, gradients, optimizer states, activations); "
                f"{have / 2**30:.1f} GiB of host memory is available")
    return ""
