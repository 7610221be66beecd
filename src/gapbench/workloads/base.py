"""The workload contract: what every built-in or user workload declares and how it is run.

A workload never prints or writes files; it returns Measurement objects. It declares the options it takes
(`options`, a typed model: gapbench.workloads.options) and the dtypes it measures (`dtypes`); the plan checks the
user's values against them before any worker starts. The worker process calls `variants()` once, then `run()`
for each variant, each under its own budget; a variant in a dtype the workload or the device cannot compute in
is `unsupported` with the reason before `run()` is called (`unsupported()`), the same way for every workload.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from gapbench.devices.dtypes import DTYPES
from gapbench.record import MAX_NAME
from gapbench.results import Measurement
from gapbench.stats import Stats
from gapbench.timing import DEFAULT_BUDGET, LOCAL, Agreement, Budget, CacheFlusher
from gapbench.workloads.options import AnyOptions, Options, asked_dtypes

if TYPE_CHECKING:
    from gapbench.devices import Device
    from gapbench.timing import Timing

CATEGORIES = ("micro", "model", "probe", "collective")


@dataclass(frozen=True)
class Variant:
    """One point of a workload: its parameters (the identity stored in results) and its work per iteration."""

    params: dict
    flops: float | None = None  # FLOPs per iteration (one unit of timed work)
    bytes: float | None = None  # bytes moved per iteration, by the convention the workload documents


@dataclass
class Context:
    """What a workload may know about the run: the device, its budget, the user's options, its ranks.

    Under torch.distributed, `dist` says who this rank is, `agreement` makes every clock-dependent decision
    the slowest rank's (pass it to time_fn), and `wrap_model` wraps a model for data-parallel training
    (DDP or FSDP, from the `parallel` option); in one process they are None, a no-op, and None.
    """

    device: Device
    preset: str
    budget_s: float = DEFAULT_BUDGET.seconds  # wall time this variant may take, probe and warm-up included
    min_time_s: float = DEFAULT_BUDGET.min_time_s  # each repeat runs the body at least this long
    repeats: int = DEFAULT_BUDGET.repeats
    options: Options | dict = field(default_factory=dict)  # the workload's options (a dict is read into them)
    dist: object | None = None  # gapbench.distributed.DistInfo when running under torch.distributed
    agreement: Agreement = LOCAL
    wrap_model: Callable | None = None

    @property
    def asked_dtypes(self) -> list[str]:
        """The dtypes --dtype asked for, in its order ([] when it was not given)."""
        return asked_dtypes(self.options)

    def dtypes(self, known, default=None) -> list[str]:
        """The dtypes to build variants for: those --dtype asked for (those of `known` first, in its order), else
        `default` (all of `known` when None). A variant in an asked dtype outside `known`, or one the device lacks,
        is recorded `unsupported` with the reason before run() (Workload.unsupported): a row that says so, never
        a row silently missing or measured in another dtype."""
        asked = self.asked_dtypes
        if not asked:
            return list(known if default is None else default)
        return [d for d in known if d in asked] + [d for d in asked if d not in known]

    def budget(self, seconds: float | None = None, **changes) -> Budget:
        """The timing budget of this variant (or of `seconds` of it), shaped by the run's options."""
        return Budget(seconds=self.budget_s if seconds is None else seconds, min_time_s=self.min_time_s,
                      repeats=self.repeats, **changes)


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
    options: ClassVar[type[Options]] = AnyOptions  # the options it takes (a workload file that declares none: all)
    dtypes: ClassVar[tuple[str, ...] | None] = None  # the dtypes it can measure (None: it has no dtype)

    def opts(self, ctx: Context) -> Options:
        """The run's options as this workload declares them (a plain dict, as tests and files pass, is checked)."""
        o = ctx.options
        return o if isinstance(o, self.options) else self.options.model_validate(
            o.given() if isinstance(o, Options) else dict(o or {}))

    def check(self, options: Options, preset: str) -> None:
        """Raise ValueError when options that are each valid cannot go together for this preset (the plan calls it
        before any worker starts). Nothing by default."""

    def unsupported(self, variant: Variant, ctx: Context) -> str:
        """'' when this variant can be measured here, else why not: a dtype the workload does not measure, or one
        the device cannot compute in. The engine asks before run(); a workload with a finer test (matmul paths)
        overrides device_unsupported."""
        dtype = variant.params.get("dtype")
        if self.dtypes is None or dtype not in DTYPES:
            return ""
        if dtype not in self.dtypes:
            return f"{self.name} measures {', '.join(self.dtypes)}; {dtype} is not among them"
        return self.device_unsupported(dtype, ctx)

    def device_unsupported(self, dtype: str, ctx: Context) -> str:
        """Why the device cannot compute this workload in `dtype` ('' when it can)."""
        return ctx.device.dtype_unsupported(dtype)


    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        raise NotImplementedError

    def point_of(self, params: dict):
        """The measuring point a variant belongs to: variants of one point (listed one after another) are rows of
        one measurement and share its budget. None (the default): every variant is a point of its own."""
        return None

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
            workload=self.name[:MAX_NAME], preset=ctx.preset, variant=variant.params, value=None,
            unit=self.unit[:MAX_NAME] or "-", higher_is_better=self.higher_is_better, status=status,
            reason=_one_line(reason), flops=variant.flops, bytes=variant.bytes, **extra,
        )

    def throughput(self, variant: Variant, ctx: Context, timing: Timing, work_per_iter: float,
                   scale: float = 1.0, **extra) -> Measurement:
        """A throughput result (work/second × scale) from a Timing, with stats over the repeats."""
        samples = [work_per_iter / t * scale for t in timing.samples]
        stats = Stats.from_samples(samples)
        metrics = dict(extra.pop("metrics", {}) or {})
        metrics.setdefault("time_per_iter_s", timing.median_s)
        metrics.setdefault("iterations_per_repeat", timing.iterations)
        metrics.setdefault("timer", timing.timer)
        if timing.energy_source:
            metrics.setdefault("energy_source", timing.energy_source)
        if timing.cache_flush_bytes:
            metrics.setdefault("cache_flush_bytes", timing.cache_flush_bytes)
            metrics.setdefault("cache_flush", CacheFlusher.KIND)
        extra.setdefault("host_watch", timing.host_watch)
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
