"""The timing engine: probe, warm up, pick an iteration count, repeat, optionally flush the cache.

Device-agnostic: it asks the Device for a timer (device events where the backend has them, the host
clock around a synchronize otherwise) and knows nothing about workloads.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gapbench.devices import Device
from gapbench.power import EnergyMeter


class TooSlow(Exception):
    """One probe iteration says the measurement cannot fit in its budget."""

    def __init__(self, estimate_s: float, budget_s: float):
        self.estimate_s, self.budget_s = estimate_s, budget_s
        super().__init__(f"one iteration takes {estimate_s:.3g} s; the budget is {budget_s:.3g} s")


@dataclass(frozen=True)
class Timing:
    samples: list[float]  # seconds per iteration, one sample per repeat
    iterations: int  # iterations per repeat
    warmup: int  # warm-up calls, probe included
    probe_s: float  # the first call, cold (compile and allocation included)
    timer: str  # "device-events" or "host-sync"
    energy_j_per_iter: float | None = None
    power_w: float | None = None

    @property
    def median_s(self) -> float:
        xs = sorted(self.samples)
        n = len(xs)
        return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


class CacheFlusher:
    """Overwrites a buffer twice the last-level cache so the next call starts cold."""

    def __init__(self, device: Device):
        n = max(2 * device.llc_bytes // 4, 1 << 20)
        self.buf = torch.empty(n, dtype=torch.int32, device=device.torch_device)

    def __call__(self) -> None:
        self.buf.zero_()


def time_fn(
    fn: Callable[[], object],
    device: Device,
    *,
    budget_s: float,
    min_time_s: float = 0.1,
    repeats: int = 7,
    min_repeats: int = 3,
    warmup_s: float | None = None,
    flush_cache: bool = False,
    max_iterations: int = 10_000,
    measure_energy: bool = True,
) -> Timing:
    """Time fn() and return per-iteration seconds for each repeat.

    1. Probe: one cold call. If even `min_repeats` single-iteration repeats would exceed the budget,
       raise TooSlow with the probe time as the estimate.
    2. Warm up for `warmup_s` (default: the min_time), at least one more call.
    3. Iterations per repeat so that a repeat lasts at least `min_time_s`.
    4. Repeats, cut down (never below `min_repeats`) to fit what is left of the budget.
    With flush_cache, the cache is overwritten before every call and only the calls are timed.
    """
    started = time.perf_counter()
    device.synchronize()
    t0 = time.perf_counter()
    fn()
    device.synchronize()
    probe = time.perf_counter() - t0
    if probe * (1 + min_repeats) > budget_s:
        raise TooSlow(probe, budget_s)

    flusher = CacheFlusher(device) if flush_cache else None
    warm_target = min_time_s if warmup_s is None else warmup_s
    warm_calls = 1
    t_warm = time.perf_counter()
    device.synchronize()
    while True:
        fn()
        warm_calls += 1
        device.synchronize()
        elapsed = time.perf_counter() - t_warm
        if elapsed >= warm_target or warm_calls > max_iterations:
            break
    per_call = elapsed / (warm_calls - 1)
    if per_call * min_repeats > budget_s - (time.perf_counter() - started):
        raise TooSlow(per_call, budget_s)

    iterations = max(1, min(max_iterations, math.ceil(min_time_s / max(per_call, 1e-9))))
    left = budget_s - (time.perf_counter() - started)
    repeats = max(min_repeats, min(repeats, int(left / max(per_call * iterations, 1e-9))))
    if per_call * iterations * repeats > left:
        iterations = max(1, int(left / (per_call * repeats)))

    timer = device.new_timer()
    samples: list[float] = []
    meter = EnergyMeter(device) if measure_energy else None
    if meter:
        meter.start()
    wall0 = time.perf_counter()
    for _ in range(repeats):
        if flusher is None:
            timer.start()
            for _ in range(iterations):
                fn()
            samples.append(timer.stop() / iterations)
        else:
            total = 0.0
            for _ in range(iterations):
                flusher()
                timer.start()
                fn()
                total += timer.stop()
            samples.append(total / iterations)
    device.synchronize()
    wall = time.perf_counter() - wall0
    energy = meter.stop() if meter else None
    calls = repeats * iterations
    return Timing(
        samples=samples,
        iterations=iterations,
        warmup=warm_calls,
        probe_s=probe,
        timer=getattr(timer, "kind", "host-sync"),
        energy_j_per_iter=energy / calls if energy is not None else None,
        power_w=energy / wall if energy is not None and wall > 0 else None,
    )


def time_once(fn: Callable[[], object], device: Device) -> float:
    """Wall seconds of one call, synchronised on both ends (first-step and compile costs)."""
    device.synchronize()
    t0 = time.perf_counter()
    fn()
    device.synchronize()
    return time.perf_counter() - t0
