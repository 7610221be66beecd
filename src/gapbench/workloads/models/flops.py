"""Model FLOPs and MFU: the formulas of docs/models.md (PaLM's training count, 2·N for inference), the FLOP
counter, and the device's dense peak they are held against."""

from __future__ import annotations

from collections.abc import Callable

from gapbench.devices import Device


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
