"""The timing engine: probe, warm up, pick an iteration count, repeat, optionally flush the cache.

One engine for one process and for the ranks of a torch.distributed job alike. Every decision that
depends on a clock (too slow, warm-up done, iterations, repeats) goes through an `Agreement`: a no-op in
one process; under torch.distributed the slowest rank's value, so that every rank makes exactly the same
calls (a collective would deadlock otherwise). Device-agnostic: the Device gives the timer (device events
where the backend has them, the host clock around a synchronize otherwise) and the energy counter.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol

from gapbench.hostwatch import Watch
from gapbench.stats import median

if TYPE_CHECKING:
    from gapbench.devices import Device


class TooSlow(Exception):
    """One probe iteration says the measurement cannot fit in its budget."""

    def __init__(self, estimate_s: float, budget_s: float):
        self.estimate_s, self.budget_s = estimate_s, budget_s
        super().__init__(f"one iteration takes {estimate_s:.3g} s; the budget is {budget_s:.3g} s")


@dataclass(frozen=True)
class Budget:
    """How long a measurement may take and how it is shaped.

    seconds: wall time for all of it (probe and warm-up included); min_time_s: each repeat runs the body at
    least this long; repeats: how many repeats, cut down (never below min_repeats) to fit the seconds.
    """

    seconds: float = 60.0
    min_time_s: float = 0.1
    repeats: int = 7
    min_repeats: int = 3
    warmup_s: float | None = None  # default: min_time_s
    max_iterations: int = 10_000

    def fraction(self, f: float, **changes) -> Budget:
        """The same shape with a share of the seconds (a sweep's probe shapes, its final shape)."""
        return replace(self, seconds=self.seconds * f, **changes)


DEFAULT_BUDGET = Budget()


class Agreement(Protocol):
    """How the ranks of a job agree on clock-dependent decisions (see the module docstring)."""

    def max(self, x: float) -> float: ...

    def min(self, x: float) -> float: ...

    def max_each(self, xs: list[float]) -> list[float]: ...

    def barrier(self) -> None: ...

    def all_gather(self, obj) -> list: ...


class LocalAgreement:
    """One process: every value is already agreed."""

    def max(self, x: float) -> float:
        return float(x)

    def min(self, x: float) -> float:
        return float(x)

    def max_each(self, xs: list[float]) -> list[float]:
        return [float(x) for x in xs]

    def barrier(self) -> None:
        pass

    def all_gather(self, obj) -> list:
        return [obj]


LOCAL = LocalAgreement()


@dataclass(frozen=True)
class Timing:
    samples: list[float]  # seconds per iteration, one sample per repeat (the slowest rank's under an agreement)
    iterations: int  # iterations per repeat
    warmup: int  # warm-up calls, probe included
    probe_s: float  # the first call, cold (compile and allocation included)
    timer: str  # "device-events" or "host-sync"
    energy_j_per_iter: float | None = None
    power_w: float | None = None
    energy_source: str | None = None
    cache_flush_bytes: int | None = None  # bytes overwritten before every timed call (None: no flush)
    host_watch: dict | None = None  # what disturbed the repeats (gapbench.hostwatch), flagged with reasons

    @property
    def median_s(self) -> float:
        return median(self.samples)


class CacheFlusher:
    """Reads and writes a buffer twice the last-level cache so the next call starts cold. Reading it too, not only
    writing it: on a CPU, after `zero_()` over twice its 480 MiB cache a bf16 GEMM of 4096×256×256 took 0.44 ms,
    after `add_(1)` 0.55, hot 0.32 (an fp32 multiply of 2^21 elements: 1.00, 1.16, 0.88)."""

    KIND = "read-write"  # recorded with the rows (metrics cache_flush); rows before it carry none: a write alone

    def __init__(self, device: Device):
        import torch

        n = max(2 * device.llc_bytes // 4, 1 << 20)
        self.buf = torch.zeros(n, dtype=torch.int32, device=device.torch_device)
        self.nbytes = n * 4

    def __call__(self) -> None:
        self.buf.add_(1)


def time_fn(fn: Callable[[], object], device: Device, budget: Budget | None = None, *,
            agreement: Agreement = LOCAL, flush_cache: bool = False, measure_energy: bool = True,
            budget_s: float | None = None, min_time_s: float | None = None, repeats: int | None = None) -> Timing:
    """Time fn() and return per-iteration seconds for each repeat.

    1. Probe: one cold call. If even `min_repeats` single-iteration repeats would exceed the budget,
       raise TooSlow with the probe time as the estimate.
    2. Warm up in doubling rounds until `warmup_s` (default: min_time_s) has passed.
    3. Iterations per repeat so that a repeat lasts at least `min_time_s`.
    4. Repeats, cut down (never below `min_repeats`) to fit what is left of the budget; each starts after
       a barrier. With flush_cache, the cache is overwritten before every call and only the calls are timed.

    The budget is a `Budget`, or (as workload files written for earlier versions pass it) the keywords
    budget_s, min_time_s and repeats over the default one.
    """
    budget = budget or DEFAULT_BUDGET
    loose = {k: v for k, v in (("seconds", budget_s), ("min_time_s", min_time_s), ("repeats", repeats)) if v is not None}
    if loose:
        budget = replace(budget, **loose)
    started = time.perf_counter()
    agreement.barrier()
    probe = agreement.max(time_once(fn, device))
    if probe * (1 + budget.min_repeats) > budget.seconds:
        raise TooSlow(probe, budget.seconds)
    calls, per_call = _warm_up(fn, device, budget, agreement)
    left = budget.seconds - agreement.max(time.perf_counter() - started)
    if per_call * budget.min_repeats > left:
        raise TooSlow(per_call, budget.seconds)
    flusher = CacheFlusher(device) if flush_cache else None
    # a flush before every call takes its own time (a large last-level cache: tens of ms): the plan counts it
    flush_s = _flush_time(flusher, device) if flusher is not None else 0.0
    iterations, n_repeats = plan_repeats(per_call + flush_s, left - flush_s, budget)
    counter = device.energy_counter() if measure_energy else None
    timer = device.new_timer()
    watch = Watch(device)
    device.synchronize()
    watch.start()
    wall0, e0 = time.perf_counter(), _read(counter)
    samples = [_one_repeat(fn, device, timer, iterations, flusher, agreement) for _ in range(n_repeats)]
    device.synchronize()
    wall, e1 = time.perf_counter() - wall0, _read(counter)
    watched = watch.stop()
    energy = e1 - e0 if e0 is not None and e1 is not None and e1 >= e0 else None
    return Timing(
        samples=agreement.max_each(samples),
        iterations=iterations,
        warmup=calls + 1,
        probe_s=probe,
        timer=timer.kind,
        energy_j_per_iter=energy / (n_repeats * iterations) if energy is not None else None,
        power_w=energy / wall if energy is not None and wall > 0 else None,
        energy_source=counter.source if counter is not None and energy is not None else None,
        cache_flush_bytes=flusher.nbytes if flusher is not None else None,
        host_watch=watched,
    )


@dataclass(frozen=True)
class Calls:
    """What time_calls saw: the result of every call (a generation and its token times, say) with its timing."""

    first: object  # the cold call's result
    first_s: float  # its seconds (compile and allocation included)
    results: list  # one per repeat, in order
    timing: Timing  # seconds per call, one sample per repeat; energy and the host watch over the repeats


def time_calls(fn: Callable[[], object], device: Device, budget: Budget | None = None, *,
               agreement: Agreement = LOCAL, measure_energy: bool = True, first_counts: bool = True) -> Calls:
    """Time whole calls whose results the caller reads (each repeat is one call of fn, kept): a cold call, one
    warm call, then as many repeats as the budget holds (min_repeats to repeats; TooSlow when even min_repeats
    do not fit); energy and the host watch over the repeats, as time_fn. With first_counts=False the cold call
    (a compilation) is not held to the budget."""
    budget = budget or DEFAULT_BUDGET
    started = time.perf_counter()
    agreement.barrier()
    first, first_s = _call(fn, device)
    if not first_counts:
        started = time.perf_counter()
    _, per_call = _call(fn, device)
    per_call = agreement.max(per_call)
    left = budget.seconds - agreement.max(time.perf_counter() - started)
    if per_call * budget.min_repeats > left:
        raise TooSlow(per_call, budget.seconds)
    repeats = max(budget.min_repeats, min(budget.repeats, int(left / max(per_call, 1e-9))))
    counter = device.energy_counter() if measure_energy else None
    watch = Watch(device)
    watch.start()
    wall0, e0 = time.perf_counter(), _read(counter)
    calls = [_call(fn, device) for _ in range(repeats)]
    wall, e1 = time.perf_counter() - wall0, _read(counter)
    energy = e1 - e0 if e0 is not None and e1 is not None and e1 >= e0 else None
    timing = Timing(samples=agreement.max_each([s for _, s in calls]), iterations=1, warmup=2, probe_s=first_s,
                    timer="host-sync", energy_j_per_iter=energy / repeats if energy is not None else None,
                    power_w=energy / wall if energy is not None and wall > 0 else None,
                    energy_source=counter.source if counter is not None and energy is not None else None,
                    host_watch=watch.stop())
    return Calls(first, first_s, [r for r, _ in calls], timing)


def _call(fn, device: Device) -> tuple[object, float]:
    """fn's result and the wall seconds of the call, synchronised on both ends."""
    device.synchronize()
    t0 = time.perf_counter()
    out = fn()
    device.synchronize()
    return out, time.perf_counter() - t0


def _warm_up(fn, device: Device, budget: Budget, agreement: Agreement) -> tuple[int, float]:
    """Calls in doubling rounds until the warm-up time has passed: (calls made, agreed seconds per call)."""
    target = budget.min_time_s if budget.warmup_s is None else budget.warmup_s
    calls, spent, batch = 0, 0.0, 1
    while True:
        device.synchronize()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        device.synchronize()
        spent += agreement.max(time.perf_counter() - t0)
        calls += batch
        if spent >= target or calls >= budget.max_iterations:
            return calls, spent / calls
        batch = min(batch * 2, budget.max_iterations - calls)


def _flush_time(flusher: CacheFlusher, device: Device) -> float:
    """Seconds of one cache flush (the faster of two)."""
    best = math.inf
    for _ in range(2):
        device.synchronize()
        t0 = time.perf_counter()
        flusher()
        device.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def plan_repeats(per_call: float, left_s: float, budget: Budget) -> tuple[int, int]:
    """(iterations per repeat, repeats): a repeat lasts at least min_time_s; repeats are cut (never below
    min_repeats) to what is left, and iterations cut when even min_repeats would not fit."""
    iterations = max(1, min(budget.max_iterations, math.ceil(budget.min_time_s / max(per_call, 1e-9))))
    repeats = max(budget.min_repeats, min(budget.repeats, int(left_s / max(per_call * iterations, 1e-9))))
    if per_call * iterations * repeats > left_s:
        iterations = max(1, int(left_s / (per_call * repeats)))
    return iterations, repeats


def _one_repeat(fn, device: Device, timer, iterations: int, flusher, agreement: Agreement) -> float:
    """Seconds per call of one repeat (with a flush before every call: only the calls are timed)."""
    device.synchronize()
    agreement.barrier()
    if flusher is None:
        timer.start()
        for _ in range(iterations):
            fn()
        return timer.stop() / iterations
    total = 0.0
    for _ in range(iterations):
        flusher()
        timer.start()
        fn()
        total += timer.stop()
    return total / iterations


def _read(counter) -> float | None:
    if counter is None:
        return None
    try:
        return float(counter.read())
    except Exception:
        return None


def time_once(fn: Callable[[], object], device: Device) -> float:
    """Wall seconds of one call, synchronised on both ends (first-step and compile costs)."""
    device.synchronize()
    t0 = time.perf_counter()
    fn()
    device.synchronize()
    return time.perf_counter() - t0
