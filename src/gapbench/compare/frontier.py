"""The throughput-interactivity curve of each platform, its Pareto frontier, and the gap at equal interactivity.
Numbers only; the words are the renderers' (report.kit, report.curves).

A curve is the points of one inference series (an llm-infer variant without what varies along it: batch size,
concurrency, request rate), each point a pair of measurements of the same variant: tokens/s per user (x, the
interactivity) and tokens/s per device (y). The frontier keeps the points no other point beats on both axes.
Between two frontier points the curve is a straight line. Below its lowest interactivity a curve gives its
highest-throughput point (every user still gets at least that many tokens/s); beyond its highest interactivity it
is not extended ("not reached"). An interpolated value
carries an interval: the two points' 95% intervals of y interpolated alike, widened by the x intervals carried
through the local slope (first order), and kept within the two points' intervals (the frontier falls from one to
the other). The gap at equal interactivity x is y_platform(x) / y_baseline(x) − 1.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from gapbench import specs as specs_mod
from gapbench.compare.gaps import Gap, gap_pct
from gapbench.compare.references import reference_matches

X_METRIC = "tokens_per_s_per_user"
Y_METRIC = "output_tokens_per_s"
Y_METRICS = (Y_METRIC, "total_tokens_per_s")  # per device; the second is what InferenceMAX plots per GPU
POINT_KEYS = ("batch_size", "concurrency", "request_rate")


@dataclass(frozen=True)
class Point:
    x: float
    y: float
    x_ci: tuple[float, float] | None = None
    y_ci: tuple[float, float] | None = None
    label: str = ""  # what makes it this point: "batch_size=8", "concurrency=16", a published note


@dataclass(frozen=True)
class Curve:
    platform: int
    workload: str
    series: dict
    y_metric: str
    points: tuple[Point, ...]
    frontier: tuple[Point, ...]  # by x ascending (y then descends)
    reference: bool = False
    host_bound: bool = False  # a point's measurement says the host bounded it (an eager decode on an accelerator)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.workload, _dump(self.series), self.y_metric


@dataclass(frozen=True)
class Value:
    """y on a frontier at some x, with its interval (None where it has none: a published curve)."""

    y: float
    ci: tuple[float, float] | None


@dataclass(frozen=True)
class FrontierGap:
    """One series compared at one interactivity (level=None: at each curve's highest throughput)."""

    workload: str
    series: dict
    y_metric: str
    level: float | None
    values: dict[int, Value | None]  # platform -> its value there; None: its frontier does not reach x
    gaps: dict[int, Gap]  # non-baseline platform -> gap against the baseline


@dataclass
class Frontiers:
    curves: list[Curve] = field(default_factory=list)
    gaps: list[FrontierGap] = field(default_factory=list)
    levels_given: tuple[float, ...] = ()

    def to_dict(self, names: list[str]) -> dict:
        return {
            "x": X_METRIC, "interpolation": "linear between frontier points, no extrapolation",
            "curves": [{"platform": names[c.platform], "workload": c.workload, "series": c.series,
                        "y": c.y_metric, "reference": c.reference, "host_bound": c.host_bound,
                        "points": [_point_dict(p) for p in c.points],
                        "frontier": [_point_dict(p) for p in c.frontier]} for c in self.curves],
            "gaps": [{"workload": g.workload, "series": g.series, "y": g.y_metric, "at_tokens_per_s_per_user": g.level,
                      "values": {names[i]: None if v is None else {"value": v.y, "ci95": list(v.ci) if v.ci else None}
                                 for i, v in g.values.items()},
                      "gaps": {names[i]: {"gap_pct": gp.pct, "significant": gp.significant, "status": gp.status or None}
                               for i, gp in g.gaps.items()}} for g in self.gaps],
        }


def _point_dict(p: Point) -> dict:
    return {"x": p.x, "y": p.y, "x_ci95": list(p.x_ci) if p.x_ci else None,
            "y_ci95": list(p.y_ci) if p.y_ci else None, "label": p.label}


def _dump(d: dict) -> str:
    return json.dumps(d, sort_keys=True, separators=(",", ":"), default=str)


# ---- the maths ------------------------------------------------------------------------------------------

def pareto(points) -> tuple[Point, ...]:
    """The points no other point beats on both axes (more per user and more per device), by x ascending."""
    best_y = -math.inf
    out: list[Point] = []
    for p in sorted(points, key=lambda p: (-p.x, -p.y)):
        if p.y > best_y:
            out.append(p)
            best_y = p.y
    return tuple(reversed(out))


def interpolate(frontier: tuple[Point, ...], x: float) -> Value | None:
    """The throughput the frontier gives at interactivity x: linear between its points; below its lowest
    interactivity, its highest-throughput point (which gives every user at least x); None beyond its highest."""
    if not frontier or x > frontier[-1].x:
        return None
    if x <= frontier[0].x or len(frontier) == 1:
        p = frontier[0]
        return Value(p.y, p.y_ci)
    for a, b in zip(frontier, frontier[1:], strict=False):
        if a.x <= x <= b.x:
            break
    span = b.x - a.x
    t = 0.0 if span == 0 else (x - a.x) / span
    y = a.y + t * (b.y - a.y)
    if a.y_ci is None or b.y_ci is None:
        return Value(y, None)
    lo = a.y_ci[0] + t * (b.y_ci[0] - a.y_ci[0])
    hi = a.y_ci[1] + t * (b.y_ci[1] - a.y_ci[1])
    if a.x_ci is not None and b.x_ci is not None and span > 0:
        slope = abs((b.y - a.y) / span)
        hx = (1 - t) * (a.x_ci[1] - a.x_ci[0]) / 2 + t * (b.x_ci[1] - b.x_ci[0]) / 2
        lo, hi = lo - slope * hx, hi + slope * hx
        # the frontier falls from a to b, so between them it stays within the two points' intervals
        lo, hi = max(lo, min(a.y_ci[0], b.y_ci[0])), min(hi, max(a.y_ci[1], b.y_ci[1]))
    return Value(y, (lo, hi))


def highest(frontier: tuple[Point, ...]) -> Value | None:
    """The frontier's highest throughput (its lowest-interactivity end)."""
    if not frontier:
        return None
    p = max(frontier, key=lambda p: p.y)
    return Value(p.y, p.y_ci)


def value_gap(v: Value | None, base: Value | None) -> Gap:
    if v is None:
        return Gap(None, None, "not reached")
    if base is None:
        return Gap(None, None, "baseline not reached")
    pct = gap_pct(v.y, base.y, True)
    if pct is None:
        return Gap(None, None, "n/a (zero)")
    if v.ci is None or base.ci is None:
        return Gap(pct, None)
    return Gap(pct, v.ci[0] <= base.ci[1] and base.ci[0] <= v.ci[1])


def default_levels(frontiers: list[tuple[Point, ...]]) -> list[float]:
    """Where the curves of a series are all measured: the lower end, geometric middle and upper end of the range
    their frontiers share; where they do not overlap, the highest interactivity every curve reaches."""
    fs = [f for f in frontiers if f]
    if len(fs) < 2:
        return []
    hi = min(f[-1].x for f in fs)
    lo = min(max(f[0].x for f in fs), hi)
    if hi <= lo * 1.0001:
        return [hi]
    return [lo, math.sqrt(lo * hi), hi]


# ---- curves from result sets ----------------------------------------------------------------------------

def curves_of(rs, platform: int) -> list[Curve]:
    """Every curve a result set holds: measurements paired per point (x row and y row of the same variant)."""
    rows: dict[tuple, dict[str, object]] = {}
    for m in rs.measurements:
        metric = m.variant.get("metric")
        if not m.ok or metric not in (X_METRIC, *Y_METRICS):
            continue
        point = _dump({k: v for k, v in m.variant.items() if k != "metric"})
        rows.setdefault((m.workload, point), {})[metric] = m
    grouped: dict[tuple, list[Point]] = {}
    host: set[tuple] = set()
    for (workload, point), by_metric in rows.items():
        xm = by_metric.get(X_METRIC)
        if xm is None:
            continue
        variant = json.loads(point)
        series = {k: v for k, v in variant.items() if k not in POINT_KEYS}
        label = ", ".join(f"{k}={variant[k]}" for k in POINT_KEYS if k in variant)
        for ym_name in Y_METRICS:
            ym = by_metric.get(ym_name)
            if ym is not None:
                p = Point(xm.value, ym.value, _ci(xm), _ci(ym), label)
                grouped.setdefault((workload, _dump(series), ym_name), []).append(p)
                if any((m.metrics or {}).get("bound") == "host" for m in (xm, ym)):
                    host.add((workload, _dump(series), ym_name))
    return [Curve(platform, w, json.loads(s), y, tuple(sorted(ps, key=lambda p: p.x)), pareto(ps),
                  host_bound=(w, s, y) in host)
            for (w, s, y), ps in grouped.items()]


def _ci(m) -> tuple[float, float] | None:
    return tuple(m.stats.ci95) if m.stats is not None and m.stats.n > 1 else None


def reference_curves(name: str, platform: int, like: list[Curve]) -> list[Curve]:
    """The published points of reference `name` that carry an interactivity, as curves: one per measured series
    they stand in for (each key of the reference's variant but the metric in the series, same value)."""
    out: dict[tuple, list[Point]] = {}
    for ref in specs_mod.load_references():
        if ref.name != name or ref.interactivity is None:
            continue
        y_metric = ref.variant.get("metric", Y_METRIC)
        filt = {k: v for k, v in ref.variant.items() if k != "metric"}
        p = Point(float(ref.interactivity), float(ref.value), None, None, ref.note or ref.source)
        targets = [c for c in like if c.workload == ref.workload and c.y_metric == y_metric
                   and reference_matches(filt, c.series)]
        for series in {_dump(c.series) for c in targets} or {_dump(filt)}:
            out.setdefault((ref.workload, series, y_metric), []).append(p)
    return [Curve(platform, w, json.loads(s), y, tuple(sorted(ps, key=lambda p: p.x)), pareto(ps), reference=True)
            for (w, s, y), ps in out.items()]


def frontiers_side(platforms, baseline: int, levels: list[float] | None = None) -> Frontiers | None:
    """Every platform's curves and, per series, the gaps at equal interactivity against the baseline: at the
    given levels (tokens/s per user), else where all the series' curves are defined, and at the highest
    throughput of each curve. None when no input has a curve."""
    curves: list[Curve] = []
    for i, p in enumerate(platforms):
        if not p.reference:
            curves += curves_of(p.result_set, i)
    if not curves:
        return None
    for i, p in enumerate(platforms):
        if p.reference:
            curves += reference_curves(p.result_set.device.get("spec") or "", i, curves)
    out = Frontiers(curves, [], tuple(levels or ()))
    by_series: dict[tuple, dict[int, Curve]] = {}
    for c in curves:
        by_series.setdefault(c.key, {})[c.platform] = c
    for (workload, series, y_metric), per in by_series.items():
        # total tokens/s is compared only where a published curve is in those terms (InferenceMAX's per GPU)
        if len(per) < 2 or (y_metric != Y_METRIC and not any(c.reference for c in per.values())):
            continue
        xs = list(levels) if levels else default_levels([c.frontier for c in per.values()])
        out.gaps += [_series_gap(workload, json.loads(series), y_metric, x, per, baseline) for x in [*xs, None]]
    return out


def _series_gap(workload: str, series: dict, y_metric: str, x: float | None, per: dict[int, Curve],
                baseline: int) -> FrontierGap:
    values = {i: (highest(c.frontier) if x is None else interpolate(c.frontier, x)) for i, c in per.items()}
    base = values.get(baseline)
    gaps = {i: (value_gap(v, base) if baseline in per else Gap(None, None, "baseline has no curve"))
            for i, v in values.items() if i != baseline}
    return FrontierGap(workload, series, y_metric, x, values, gaps)
