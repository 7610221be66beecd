"""Ratios between the paths of one platform's library workloads (gemm-libs, attention-libs): portable ÷
vendor, tuned ÷ untuned, F.linear ÷ matmul, best ÷ default and the others in RATIOS, per problem (the variant
without its path), each with a 95% interval, and their geometric means per dtype.

A ratio is of speeds: numerator ÷ denominator > 1 means the numerator path is faster (for a lower-is-better
unit the values are inverted first). Where a kind has several paths (portable: a Triton kernel and
Inductor's templates) the numerator is the fastest of them, named in the ratio.

Interval: each value carries the 95% CI of its median. In log space a ratio is a difference, so the
interval's half-widths add in quadrature, each side separately: lower = r·exp(−√(ℓx² + uy²)), upper =
r·exp(√(ux² + ℓy²)), where ℓ and u are the log distances from a median down to its CI's lower end and up to
its upper end (the error propagation hyperfine uses for "1.52 ± 0.04 times faster", kept asymmetric). A
value without an interval gives a ratio without one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from gapbench.compare.model import PlatformRatios, Ratio, RatioSummary
from gapbench.results import Measurement, ResultSet
from gapbench.stats import median
from gapbench.workloads.libs.paths import ATTENTION_WORKLOAD, BLAS_PREFIX, GEMM_WORKLOAD, default_path, path_kind

_BOTH = (GEMM_WORKLOAD, ATTENTION_WORKLOAD)


def _of_kind(kind: str) -> Callable[[str, str], bool]:
    return lambda workload, path: path_kind(workload, path) == kind


# (key, the workloads it applies to, which paths form the numerator); the denominator is the default path
RATIOS: tuple[tuple[str, tuple[str, ...], Callable[[str, str], bool]], ...] = (
    ("portable", _BOTH, _of_kind("portable")),
    ("tuned", (GEMM_WORKLOAD,), _of_kind("tuned")),
    ("linear", (GEMM_WORKLOAD,), lambda w, p: p == "linear"),
    ("blas", (GEMM_WORKLOAD,), lambda w, p: p.startswith(BLAS_PREFIX)),
    ("library", (GEMM_WORKLOAD,), _of_kind("library")),
    ("compiler", (GEMM_WORKLOAD,), _of_kind("compiler")),
    ("vendor", (ATTENTION_WORKLOAD,), _of_kind("vendor")),
    ("fallback", (ATTENTION_WORKLOAD,), _of_kind("fallback")),
    ("best", _BOTH, lambda w, p: True),
)
RATIO_KEYS = tuple(k for k, _, _ in RATIOS)


def ratio_ci(x: Measurement, y: Measurement) -> tuple[float, float] | None:
    """The 95% interval of speed(x) ÷ speed(y) from the two medians' intervals (see the module docstring)."""
    if x.stats is None or y.stats is None or x.stats.n < 2 or y.stats.n < 2:
        return None
    sx, sy = _speed_interval(x), _speed_interval(y)
    if sx is None or sy is None:
        return None
    (xl, xv, xh), (yl, yv, yh) = sx, sy
    r = math.log(xv) - math.log(yv)
    down = math.hypot(math.log(xv / xl), math.log(yh / yv))
    up = math.hypot(math.log(xh / xv), math.log(yv / yl))
    return math.exp(r - down), math.exp(r + up)


def _speed_interval(m: Measurement) -> tuple[float, float, float] | None:
    """(low, median, high) of the measurement as a speed (higher is better), or None if not all positive."""
    lo, hi = m.stats.ci95
    v = m.value
    if not (lo > 0 and v > 0 and hi > 0):
        return None
    if m.higher_is_better:
        return min(lo, v), v, max(hi, v)
    return 1 / max(hi, v), 1 / v, 1 / min(lo, v)


def speed_ratio(x: Measurement, y: Measurement) -> float | None:
    if not (x.value and y.value) or x.value <= 0 or y.value <= 0:
        return None
    return x.value / y.value if x.higher_is_better else y.value / x.value


def _problems(rs: ResultSet) -> dict[tuple[str, str], dict[str, Measurement]]:
    """{(workload, problem key): {path: measurement}} for the library workloads, in order of appearance."""
    out: dict[tuple[str, str], dict[str, Measurement]] = {}
    for m in rs.measurements:
        if m.workload not in _BOTH or "path" not in m.variant:
            continue
        problem = {k: v for k, v in m.variant.items() if k != "path"}
        key = (m.workload, json.dumps(problem, sort_keys=True, default=str))
        paths = out.setdefault(key, {})
        prev = paths.get(m.variant["path"])
        if prev is None or (not prev.ok and m.ok):  # a retried variant: keep the ok result
            paths[m.variant["path"]] = m
    return out


def _setup_s(m: Measurement) -> float | None:
    for k in ("tuning_s", "compile_s"):
        v = m.metrics.get(k)
        if isinstance(v, (int, float)):
            return float(v)
    return None


def _ratio(key: str, workload: str, problem: dict, paths: dict[str, Measurement],
           pick: Callable[[str, str], bool]) -> Ratio | None:
    default = default_path(workload)
    candidates = {p: m for p, m in paths.items() if pick(workload, p) and (p != default or key == "best")}
    if not candidates:
        return None
    base = paths.get(default)
    if base is None or not base.ok:
        status = base.status if base is not None else "missing"
        return Ratio(key, workload, problem, None, default, None, None, f"default {status}",
                     base.reason if base is not None else f"no {default} row")
    ok = {p: m for p, m in candidates.items() if m.ok and speed_ratio(m, base) is not None}
    if not ok:  # say why; a path that ran and failed tells more than one the stack lacks
        p, m = min(candidates.items(), key=lambda pm: pm[1].status == "unsupported")
        return Ratio(key, workload, problem, p, default, None, None, m.status, m.reason)
    best_path = max(ok, key=lambda p: speed_ratio(ok[p], base))
    m = ok[best_path]
    ci = (1.0, 1.0) if m is base else ratio_ci(m, base)  # the default against itself: exactly 1
    return Ratio(key, workload, problem, best_path, default, speed_ratio(m, base), ci, setup_s=_setup_s(m))


def platform_ratios(rs: ResultSet, platform: int) -> PlatformRatios | None:
    """Every ratio of one platform's library workloads and their summaries; None without such rows."""
    ratios = []
    for (workload, problem_json), paths in _problems(rs).items():
        problem = json.loads(problem_json)
        for key, workloads, pick in RATIOS:
            if workload in workloads:
                r = _ratio(key, workload, problem, paths, pick)
                if r is not None:
                    ratios.append(r)
    if not ratios:
        return None
    return PlatformRatios(platform, ratios, summarize(ratios))


def summarize(ratios: list[Ratio]) -> list[RatioSummary]:
    """Per (ratio kind, workload, dtype), in that order: a summary of the ratios with a number."""
    groups: dict[tuple[str, str, str], list[Ratio]] = {}
    dtypes = list(dict.fromkeys(str(r.problem.get("dtype", "")) for r in ratios))  # in order of appearance
    for r in ratios:
        if r.value is not None:
            groups.setdefault((r.kind, r.workload, str(r.problem.get("dtype", ""))), []).append(r)
    order = {k: i for i, k in enumerate(RATIO_KEYS)}
    keys = sorted(groups, key=lambda g: (_BOTH.index(g[1]), order[g[0]], dtypes.index(g[2])))
    return [_summary(*key, groups[key]) for key in keys]


def _summary(kind: str, workload: str, dtype: str, rs: list[Ratio]) -> RatioSummary:
    """The geometric mean and range of the ratios, how many are significantly above or below 1 (or have no
    interval), the numerator paths by how often they were the fastest, the median set-up seconds."""
    counts: dict[str, int] = {}
    for r in rs:
        counts[r.numerator] = counts.get(r.numerator, 0) + 1
    setups = [r.setup_s for r in rs if r.setup_s is not None]
    return RatioSummary(
        kind=kind, workload=workload, dtype=dtype, n=len(rs),
        geomean=math.exp(sum(math.log(r.value) for r in rs) / len(rs)),
        lo=min(r.value for r in rs), hi=max(r.value for r in rs),
        above=sum(1 for r in rs if r.significant is True and r.value > 1),
        below=sum(1 for r in rs if r.significant is True and r.value < 1),
        paths=tuple(sorted(counts, key=lambda p: (-counts[p], p))),
        setup_s=median(setups) if setups else None, unknown=sum(1 for r in rs if r.significant is None))


def library_ratios(platforms) -> list[PlatformRatios]:
    """The ratios of every platform that ran a library workload (Platform objects, in order)."""
    out = []
    for i, p in enumerate(platforms):
        pr = platform_ratios(p.result_set, i)
        if pr is not None:
            out.append(pr)
    return out
