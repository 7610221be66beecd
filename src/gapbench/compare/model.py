"""A comparison as data: platforms, rows of cells and gaps, the takeaway's facts. Numbers only; every word
and every formatted number is the renderers' (gapbench.report)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gapbench import specs as specs_mod
from gapbench.compare.frontier import Frontiers
from gapbench.compare.gaps import Gap
from gapbench.results import Measurement, ResultSet

SIGN_CONVENTION = "gap_pct > 0: the platform did better than the baseline (speed, whatever the unit's direction)"


@dataclass
class Platform:
    name: str
    result_set: ResultSet
    spec: specs_mod.Spec | None
    price_usd_per_hour: float | None = None
    price_source: str = ""
    reference: bool = False


@dataclass
class Cell:
    measurement: Measurement | None
    status: str  # 'ok', a measurement status, or 'missing'
    reason: str = ""
    pct_peak: float | None = None
    peak_kind: str = ""
    power_w: float | None = None
    per_watt: float | None = None
    per_dollar: float | None = None

    @property
    def value(self) -> float | None:
        return self.measurement.value if self.measurement is not None and self.status == "ok" else None

    @property
    def ci95(self) -> tuple[float, float] | None:
        m = self.measurement
        return tuple(m.stats.ci95) if self.value is not None and m.stats is not None else None


@dataclass
class Row:
    workload: str
    variant: dict
    unit: str
    higher_is_better: bool
    cells: list[Cell]
    gaps: dict[int, Gap]  # platform index -> gap against the baseline
    intensity: float | None = None
    bound: str = "other"  # compute | memory | host (a side's measurement says the host bounded it) | other
    published: dict[int, specs_mod.PublishedGap] = field(default_factory=dict)


@dataclass(frozen=True)
class ClassLead:
    """How one platform fares against the baseline on the rows of one bound class."""

    bound: str  # compute | memory | host | other
    rows: int  # rows with a number on both sides
    ahead: int  # significantly better
    behind: int  # significantly worse
    noise: int  # within noise (or exactly equal)
    unknown: int  # no runs to judge by on one side (a published figure): significance unknown
    lo: float
    hi: float
    flagged: int = 0  # a side measured on a disturbed host: no verdict


@dataclass(frozen=True)
class PlatformTakeaway:
    platform: int
    classes: tuple[ClassLead, ...]
    not_comparable: int  # rows missing or failed on one side


@dataclass(frozen=True)
class Takeaway:
    """The facts the takeaway sentences are made of."""

    platforms: tuple[PlatformTakeaway, ...] = ()
    ridges: tuple[tuple[tuple[str, ...], float, str], ...] = ()  # (dtypes, FLOP/byte, where it came from)
    over_peak: tuple[int, ...] = ()  # platforms with rows above 100% of their peak
    any_noise: bool = False
    any_unknown: bool = False
    any_published: bool = False
    any_flagged: bool = False
    bases: tuple[str, ...] = ()  # how the gaps were judged: "runs", "single run"
    spreads: tuple[tuple[str, float], ...] = ()  # the default run-to-run spreads that single runs assumed
    spread_bases: tuple[tuple[str, int], ...] = ()  # (a gap's spread basis, e.g. "history n=4", rows judged by it)


@dataclass(frozen=True)
class Ratio:
    """One platform's speed ratio between two paths of a library workload on one problem (the variant
    without its path): the numerator is the fastest path of the ratio's kind, the denominator the default."""

    kind: str  # a key of compare.ratios.RATIOS: portable, tuned, linear, blas, library, compiler, vendor, ...
    workload: str
    problem: dict
    numerator: str | None  # the path; None when the default failed
    denominator: str
    value: float | None  # speed(numerator) / speed(denominator); None when either has no number
    ci95: tuple[float, float] | None
    status: str = "ok"  # ok, the numerator's status, or "default <status>"
    reason: str = ""
    setup_s: float | None = None  # the numerator's tuning or compiling seconds

    @property
    def significant(self) -> bool | None:
        """True when the interval excludes 1, False when it holds it, None without an interval."""
        if self.value is None or self.ci95 is None:
            return None
        return not (self.ci95[0] <= 1.0 <= self.ci95[1])


@dataclass(frozen=True)
class RatioSummary:
    """The ratios of one kind, workload and dtype on one platform, over its problems."""

    kind: str
    workload: str
    dtype: str
    n: int  # problems with a ratio
    geomean: float
    lo: float
    hi: float
    above: int  # significantly above 1
    below: int  # significantly below 1
    paths: tuple[str, ...]  # numerator paths, most often the fastest first
    setup_s: float | None = None  # median tuning/compiling seconds of the numerators
    unknown: int = 0  # ratios without an interval (significance unknown)

    @property
    def within_noise(self) -> bool:
        """No ratio differs from 1 beyond its interval (and every one has an interval)."""
        return self.above == 0 and self.below == 0 and self.unknown == 0


@dataclass
class PlatformRatios:
    platform: int
    ratios: list[Ratio]
    summaries: list[RatioSummary]

    def to_dict(self) -> dict:
        return {
            "ratios": [{"kind": r.kind, "workload": r.workload, "problem": r.problem, "numerator": r.numerator,
                        "denominator": r.denominator, "ratio": finite(r.value),
                        "ci95": [finite(x) for x in r.ci95] if r.ci95 else None, "significant": r.significant,
                        "status": r.status, "reason": r.reason, "setup_s": r.setup_s} for r in self.ratios],
            "summaries": [{"kind": s.kind, "workload": s.workload, "dtype": s.dtype, "problems": s.n,
                           "geomean": finite(s.geomean), "min": finite(s.lo), "max": finite(s.hi),
                           "significantly_above_1": s.above, "significantly_below_1": s.below,
                           "no_interval": s.unknown, "paths": list(s.paths), "median_setup_s": s.setup_s}
                          for s in self.summaries],
        }


@dataclass
class Comparison:
    platforms: list[Platform]
    baseline: int
    rows: list[Row]
    takeaway: Takeaway
    warnings: list[str]
    coverage: dict | None = None  # {"families": [...], "summaries": [per platform: {"all": {...}, family: {...}} | None]}
    frameworks: dict | None = None  # {"names": [...], "rows": [per platform: [framework dicts] | None]}
    datasheet_figures: list = field(default_factory=list)  # published "measured" figures equal to a datasheet peak
    frontiers: Frontiers | None = None  # throughput-interactivity curves and gaps at equal interactivity
    library_ratios: list[PlatformRatios] = field(default_factory=list)  # platforms with library-workload rows

    @property
    def base(self) -> Platform:
        return self.platforms[self.baseline]

    def to_dict(self) -> dict:
        """The comparison as JSON-ready numbers (renderers add words)."""
        names = [p.name for p in self.platforms]
        return {
            "sign_convention": SIGN_CONVENTION,
            "baseline": self.base.name,
            "platforms": [
                {"name": p.name, "reference": p.reference, "run_id": p.result_set.run_id, "path": p.result_set.path,
                 "suite": p.result_set.suite, "device": p.result_set.device.get("product"),
                 "spec": p.spec.key if p.spec else None, "price_usd_per_hour": p.price_usd_per_hour}
                for p in self.platforms
            ],
            "rows": [
                {
                    "workload": r.workload, "variant": r.variant, "unit": r.unit, "higher_is_better": r.higher_is_better,
                    "arithmetic_intensity": finite(r.intensity), "bound": r.bound,
                    "cells": {names[i]: {"status": c.status, "reason": c.reason, "value": c.value,
                                         "ci95": list(c.ci95) if c.ci95 else None, "pct_of_peak": c.pct_peak,
                                         "peak_kind": c.peak_kind or None, "power_w": c.power_w,
                                         "per_watt": c.per_watt, "per_dollar": c.per_dollar}
                              for i, c in enumerate(r.cells)},
                    "gaps": {names[i]: {"gap_pct": g.pct, "significant": g.significant, "status": g.status or None,
                                        "interval_pct": [g.lo, g.hi] if g.lo is not None else None,
                                        "basis": g.basis or None, "runs": list(g.runs),
                                        "verdict": g.verdict, "why": g.why or None,
                                        "spread_basis": g.spread_basis or None,
                                        "spreads": [sp.to_dict() for sp in g.spreads],
                                        "flagged": g.flagged or None, "subnormal": g.subnormal or None}
                             for i, g in r.gaps.items()},
                    "published": {names[i]: {"gap_pct": pg.gap_pct, "source": pg.source, "date": pg.date}
                                  for i, pg in r.published.items()},
                }
                for r in self.rows
            ],
            "warnings": self.warnings,
            "frontiers": self.frontiers.to_dict(names) if self.frontiers is not None else None,
            "library_ratios": {names[pr.platform]: pr.to_dict() for pr in self.library_ratios},
        }


def finite(x):
    return x if x is None or math.isfinite(x) else None
