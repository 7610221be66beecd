"""The workload contract: what every built-in or user workload declares and how it is run.

A workload never prints or writes files; it returns Measurement objects. The worker process calls
`variants()` once, then `run()` for each variant, each under its own budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from gapbench.results import Measurement
from gapbench.stats import Stats

if TYPE_CHECKING:
    from gapbench.devices import Device
    from gapbench.measure import Timing

CATEGORIES = ("micro", "model", "probe", "collective")


@dataclass(frozen=True)
class Variant:
    """One point of a workload: its parameters (the identity stored in results) and its work per iteration."""

    params: dict
    flops: float | None = None  # FLOPs per iteration (one unit of timed work)
    bytes: float | None = None  # bytes moved per iteration, by the convention the workload documents


@dataclass
class Context:
    """What a workload may know about the run: the device, its budget, the user's options."""

    device: Device
    preset: str
    budget_s: float = 60.0  # wall time this variant may take, probe and warm-up included
    min_time_s: float = 0.1  # each repeat runs the body at least this long
    repeats: int = 7
    options: dict = field(default_factory=dict)  # dtype, compile, attention, batch_size, parallel, nproc, …
    dist: object | None = None  # gapbench.dist.DistInfo when running under torch.distributed


class Workload:
    """Base class. Subclasses set the class attributes and implement variants() and run()."""

    name: ClassVar[str] = ""
    category: ClassVar[str] = "micro"
    unit: ClassVar[str] = ""
    unit_help: ClassVar[str] = ""  # how the unit is counted (e.g. "GEMM FLOPs = 2*M*N*K")
    higher_is_better: ClassVar[bool] = True
    description: ClassVar[str] = ""
    presets: ClassVar[dict[str, str]] = {}  # preset name -> one line
    default_preset: ClassVar[str] = "tiny"
    distributed: ClassVar[bool] = False  # True when run() needs every rank (collectives, DDP)

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        raise NotImplementedError

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        """Measure one variant. Must check correctness and return wrong_result on a mismatch."""
        raise NotImplementedError

    # ---- helpers for building measurements -------------------------------------------------
    def result(self, variant: Variant, ctx: Context, *, value: float, stats: Stats | None = None,
               unit: str | None = None, **extra) -> Measurement:
        return Measurement(
            workload=self.name, preset=ctx.preset, variant=variant.params, value=value,
            unit=unit or self.unit, higher_is_better=self.higher_is_better, stats=stats,
            flops=variant.flops, bytes=variant.bytes, status="ok", **extra,
        )

    def failed(self, variant: Variant, ctx: Context, status: str, reason: str, **extra) -> Measurement:
        return Measurement(
            workload=self.name, preset=ctx.preset, variant=variant.params, value=None,
            unit=self.unit, higher_is_better=self.higher_is_better, status=status,
            reason=_one_line(reason), flops=variant.flops, bytes=variant.bytes, **extra,
        )

    def throughput(self, variant: Variant, ctx: Context, timing: Timing, work_per_iter: float,
                   scale: float = 1.0, **extra) -> Measurement:
        """A throughput result (work/second × scale) from a Timing, with stats over the repeats."""
        samples = [work_per_iter / t * scale for t in timing.samples]
        stats = Stats.from_samples(samples)
        metrics = dict(extra.pop("metrics", {}) or {})
        metrics.setdefault("time_per_iter_s", sorted(timing.samples)[len(timing.samples) // 2])
        metrics.setdefault("iterations_per_repeat", timing.iterations)
        metrics.setdefault("timer", timing.timer)
        return self.result(variant, ctx, value=stats.median, stats=stats, metrics=metrics,
                           energy_j=timing.energy_j_per_iter, power_w=timing.power_w, **extra)

    def too_slow(self, variant: Variant, ctx: Context, estimate_s: float, work_per_iter: float | None,
                 scale: float = 1.0) -> Measurement:
        est = work_per_iter / estimate_s * scale if work_per_iter else None
        metrics = {"estimated_time_per_iter_s": estimate_s}
        if est is not None:
            metrics["estimated_value"] = est
        shown = f"≈{est:.4g} {self.unit}" if est is not None else f"≈{estimate_s:.3g} s per iteration"
        return self.failed(variant, ctx, "too_slow",
                           f"one iteration takes {estimate_s:.3g} s; estimate {shown} exceeds the "
                           f"{ctx.budget_s:.0f} s budget", metrics=metrics)


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
