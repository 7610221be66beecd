"""What a measurement says in physical terms: FLOP/s and bytes/s from its unit or its counts, time per
iteration, arithmetic intensity, its dtype, % of a spec's peak, and whether it is compute- or memory-bound."""

from __future__ import annotations

import math

from gapbench import specs as specs_mod
from gapbench.results import Measurement

FLOP_UNITS = {"flop/s": 1.0, "kflop/s": 1e3, "mflop/s": 1e6, "gflop/s": 1e9, "tflop/s": 1e12, "pflop/s": 1e15,
              "gflops": 1e9, "tflops": 1e12, "gops": 1e9, "tops": 1e12, "gop/s": 1e9, "top/s": 1e12}
BYTE_UNITS = {"b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12,
              "kib/s": 2.0**10, "mib/s": 2.0**20, "gib/s": 2.0**30, "tib/s": 2.0**40}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
# a rate of whole iterations (a training step per second): its value, the median over runs, is one over the time
ITERATION_RATE_UNITS = frozenset({"steps/s", "step/s", "it/s", "iter/s", "iters/s", "iterations/s"})

# Ridge point (FLOP/byte) used to split compute- from memory-bound rows when the baseline device's peaks
# are not both known. A server CPU sits near 10 (e.g. 5 TFLOPS fp32 / 0.5 TB/s); data-centre GPUs span
# 20 (H100 fp32 without tensor cores) to 300 (H100 bf16).
DEFAULT_RIDGE = {"cpu": 10.0, "accelerator": 100.0}


def flop_rate(m: Measurement) -> float | None:
    """Achieved FLOP/s of a measurement: from a FLOP-based unit, or its FLOPs per iteration and time."""
    return _rate(m, FLOP_UNITS, m.flops)


def byte_rate(m: Measurement) -> float | None:
    """Achieved bytes/s: from a bandwidth unit, or its bytes per iteration and time."""
    return _rate(m, BYTE_UNITS, m.bytes)


def _rate(m: Measurement, units: dict[str, float], per_iter: float | None) -> float | None:
    if not m.ok or m.value is None:
        return None
    u = m.unit.strip().lower()
    if u in units:
        return m.value * units[u]
    t = time_per_iter(m)
    if per_iter and t:
        return float(per_iter) / t
    return None


def time_per_iter(m: Measurement) -> float | None:
    u = m.unit.strip().lower()
    if m.value and u in TIME_UNITS:
        return m.value * TIME_UNITS[u]
    if m.value and u in ITERATION_RATE_UNITS:
        return 1.0 / m.value    # the row's value (median over its runs), not the first run's time_per_iter_s
    t = (m.metrics or {}).get("time_per_iter_s")
    return float(t) if isinstance(t, (int, float)) and t > 0 else None


def arithmetic_intensity(m: Measurement) -> float | None:
    """FLOPs per byte moved, from the measurement's own counts."""
    if m.flops is None or m.bytes is None:
        return None
    if not m.bytes:
        return math.inf if m.flops else None
    return float(m.flops) / float(m.bytes)


def measurement_dtype(m: Measurement) -> str:
    v = m.variant or {}
    mt = m.metrics or {}
    for candidate in (v.get("dtype"), v.get("precision"), mt.get("peak_dtype"), mt.get("dtype")):
        d = specs_mod.normalize_dtype(candidate)
        if d:
            return d
    return "fp32"


def percent_of_peak(m: Measurement, spec: specs_mod.Spec | None) -> tuple[float | None, str]:
    """(percent, kind): kind is 'MFU' for model workloads reporting metrics['mfu'] (a fraction 0..1),
    'peak FLOP/s' or 'peak BW'; percent None when the peak or the achieved rate is unknown."""
    if not m.ok:
        return None, ""
    mfu = (m.metrics or {}).get("mfu")
    if isinstance(mfu, (int, float)) and math.isfinite(mfu):
        return float(mfu) * 100.0, "MFU"
    if spec is None:
        return None, ""
    u = m.unit.strip().lower()
    if (m.variant or {}).get("kernel") in ("h2d", "d2h"):
        return None, ""  # host<->device transfers are bound by the link, not the device memory
    if u in BYTE_UNITS:
        bw = byte_rate(m)
        return (bw / (spec.bandwidth_tbs * 1e12) * 100.0, "peak BW") if bw and spec.bandwidth_tbs else (None, "")
    fr = flop_rate(m)
    peak = spec.peak_tflops(measurement_dtype(m))
    if fr and peak:
        return fr / (peak * 1e12) * 100.0, "peak FLOP/s"
    return None, ""


def is_end_to_end(m: Measurement) -> bool:
    """A model workload (training, inference, a pipeline): its throughput is end-to-end, whatever its FLOPs."""
    metrics = m.metrics or {}
    return metrics.get("category") == "model" or ("category" not in metrics and "mfu" in metrics)


def classify(m: Measurement | None, ridge: float) -> tuple[str, float | None]:
    """'compute' or 'memory' by arithmetic intensity against the ridge point; by unit when counts are missing;
    'other' (end-to-end) for model workloads."""
    if m is None:
        return "other", None
    ai = arithmetic_intensity(m)
    if is_end_to_end(m):
        return "other", ai
    if ai is not None:
        return ("compute" if ai >= ridge else "memory"), ai
    if m.bytes and not m.flops:
        return "memory", 0.0
    u = m.unit.strip().lower()
    if u in BYTE_UNITS:
        return "memory", None
    if u in FLOP_UNITS or m.flops:
        return "compute", None
    return "other", None


def per_unit(unit: str) -> str | None:
    """'tokens/s' -> 'tokens' (what one dollar or one joule buys); None for units that are not a rate."""
    u = unit.strip()
    return u[:-2].strip() if u.endswith("/s") and len(u) > 2 else None
