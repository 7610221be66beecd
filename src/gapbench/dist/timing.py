"""time_fn for code that runs on every rank at once (collectives, data-parallel training steps).

The recipe is measure.time_fn's — a cold probe, warm-up to the minimum time, iterations per repeat so
that a repeat lasts at least `min_time_s`, repeats cut to the budget, TooSlow from the probe — but every
decision is taken from the slowest rank's clock (a max over ranks), so all ranks run exactly the same
number of calls; with per-rank decisions a collective would deadlock. Each repeat starts after a
barrier; its time is the slowest rank's (a collective is done when the last rank is done). The result
is a measure.Timing, so statistics are computed the same way as for every other workload.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from gapbench.devices import Device
from gapbench.dist.control import Control, control
from gapbench.measure import Timing, TooSlow


def time_agreed(
    fn: Callable[[], object],
    device: Device,
    *,
    budget_s: float,
    min_time_s: float = 0.1,
    repeats: int = 7,
    min_repeats: int = 3,
    max_iterations: int = 10_000,
    ctl: Control | None = None,
) -> Timing:
    """Time fn() on every rank with agreed counts; per-iteration seconds per repeat (slowest rank)."""
    ctl = ctl or control()
    started = time.perf_counter()

    def elapsed() -> float:
        return ctl.max(time.perf_counter() - started)

    ctl.barrier()
    device.synchronize()
    t0 = time.perf_counter()
    fn()
    device.synchronize()
    probe = ctl.max(time.perf_counter() - t0)
    if probe * (1 + min_repeats) > budget_s:
        raise TooSlow(probe, budget_s)

    # warm-up in doubling rounds until the agreed warm-up time is reached
    calls, spent, batch = 0, 0.0, 1
    while True:
        device.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        device.synchronize()
        spent += ctl.max(time.perf_counter() - t0)
        calls += batch
        if spent >= min_time_s or calls >= max_iterations:
            break
        batch = min(batch * 2, max_iterations - calls)
    per_call = spent / calls
    left = budget_s - elapsed()
    if per_call * min_repeats > left:
        raise TooSlow(per_call, budget_s)

    iterations = max(1, min(max_iterations, math.ceil(min_time_s / max(per_call, 1e-9))))
    repeats = max(min_repeats, min(repeats, int(left / max(per_call * iterations, 1e-9))))
    if per_call * iterations * repeats > left:
        iterations = max(1, int(left / (per_call * repeats)))

    timer = device.new_timer()
    samples: list[float] = []
    for _ in range(repeats):
        device.synchronize()
        ctl.barrier()
        timer.start()
        for _ in range(iterations):
            fn()
        samples.append(timer.stop() / iterations)
    device.synchronize()
    samples = ctl.max_each(samples)
    return Timing(samples=samples, iterations=iterations, warmup=calls + 1, probe_s=probe,
                  timer=getattr(timer, "kind", "host-sync"))
