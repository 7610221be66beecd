"""Summary statistics of repeated samples: median, IQR, a distribution-free confidence interval of the
median with the coverage it really has, a noise flag; and the comparison of two sets of run values
(compare_runs: the ratio of their geometric means with Welch's t interval on their log values, widened by the
drift between sessions; Student's t from scipy, imported only when a comparison needs it).

A Stats object is computed once, where the samples are, and travels with the measurement; renderers
never recompute it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, field_validator, model_validator

from gapbench.record import Record, is_read

NOISE_THRESHOLD = 0.10  # IQR/median above this marks a result noisy


def _pair(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


NonNegative = Annotated[float, Field(ge=0)]


class Stats(Record):
    """Statistics of a measurement's samples (its repeats, or its runs): computed once where the samples are. The
    samples are rates or times, so no figure here is below 0 (a gap or a difference is no sample: it lives in a
    comparison, or in a measurement's open `metrics`)."""

    median: NonNegative
    iqr: NonNegative
    min: NonNegative
    max: NonNegative
    n: Annotated[int, Field(ge=1, le=1_000_000_000)]
    ci95: Annotated[tuple[NonNegative, NonNegative], BeforeValidator(_pair)]  # low, high (a list in the file)
    mean: NonNegative | None = None
    stdev: Annotated[float, Field(ge=0)] | None = None
    noisy: bool | None = None  # IQR/median above NOISE_THRESHOLD; derived when a file leaves it out
    ci_level: Annotated[float, Field(gt=0, le=1)] | None = None  # the interval's coverage (below 0.95 with few samples)

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any, info: ValidationInfo) -> Any:
        """noisy follows from the median and IQR when it is left out; so does the interval's level from n in a
        document read (built in code without one, the interval is taken at its nominal 95%)."""
        if not isinstance(data, dict):
            return data
        extra = {}
        med, iqr, n = data.get("median"), data.get("iqr"), data.get("n")
        if data.get("noisy") is None and _real(med) and _real(iqr):
            extra["noisy"] = med != 0 and abs(iqr / med) > NOISE_THRESHOLD
        if "ci_level" not in data and not is_read(info):
            extra["ci_level"] = 0.95
        elif data.get("ci_level") is None and is_read(info) and type(n) is int and 2 <= n <= 1_000_000_000:
            extra["ci_level"] = median_ci_level(n)
        return {**data, **extra} if extra else data

    @field_validator("ci95")
    @classmethod
    def _interval(cls, v: tuple[float, float]) -> tuple[float, float]:
        if v[0] > v[1]:
            raise ValueError(f"the interval is reversed: low {v[0]:g} is above high {v[1]:g}")
        return v

    @model_validator(mode="after")
    def _range(self) -> Stats:
        if self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self

    @property
    def half_width(self) -> float:
        """Half the width of the 95% CI: the ± figure printed beside a median."""
        return (self.ci95[1] - self.ci95[0]) / 2

    @classmethod
    def from_samples(cls, samples: list[float] | tuple[float, ...]) -> Stats:
        xs = sorted(float(x) for x in samples)
        if not xs:
            raise ValueError("no samples")
        n = len(xs)
        q1, q3 = quantile(xs, 0.25), quantile(xs, 0.75)
        return cls(median=statistics.median(xs), iqr=q3 - q1, min=xs[0], max=xs[-1], n=n, ci95=median_ci95(xs),
                   mean=statistics.fmean(xs), stdev=statistics.stdev(xs) if n > 1 else 0.0,
                   ci_level=median_ci_level(n) if n > 1 else None)


def _real(x: Any) -> bool:
    """A finite number a double holds (an integer beyond a double's range is not one)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def median(xs) -> float:
    """The median: the middle value, or the mean of the two middle values (the one median gapbench uses)."""
    return statistics.median(float(x) for x in xs)


def quantile(xs, q: float) -> float:
    """The q-quantile (0..1) of the values, interpolated linearly between order statistics (numpy's default)."""
    import numpy as np

    values = [float(x) for x in xs]
    if not values:
        raise ValueError("no values")
    return float(np.quantile(values, q))


def _order_statistic_index(n: int) -> int:
    """j (1-based) of the interval [x_(j), x_(n-j+1)]: the largest j with P(X < j) <= 2.5%, X ~ Binomial(n, 1/2);
    1 (the range) when even that misses 95%."""
    cdf, j = 0.0, 0
    for k in range(n + 1):
        p = math.comb(n, k) / 2**n
        if cdf + p > 0.025:
            break
        cdf += p
        j = k + 1
    return max(j, 1)


def median_ci_level(n: int) -> float:
    """The coverage of median_ci95's interval for n samples: 1 - 2·P(X < j). With fewer than 6 samples the
    interval is the range, whose coverage is 1 - 2^(1-n) (75% at n = 3, 87.5% at n = 4, 93.75% at n = 5)."""
    if n < 2:
        return 0.0
    j = _order_statistic_index(n)
    below = sum(math.comb(n, k) for k in range(j)) / 2**n
    return 1.0 - 2.0 * below


def median_ci95(xs: list[float]) -> tuple[float, float]:
    """Distribution-free 95% CI of the median from order statistics (binomial, p=1/2).

    With fewer than 6 samples no pair of order statistics reaches 95% coverage; the range min..max
    is returned (coverage 1 - 2^(1-n)), which is the honest widest answer.
    """
    xs = sorted(xs)
    n = len(xs)
    if n < 6:
        return (xs[0], xs[-1])
    j = _order_statistic_index(n)
    return (xs[j - 1], xs[n - j])


# ---- the gap between two sets of independent runs --------------------------------------------------------

@dataclass(frozen=True)
class RunGap:
    """value/baseline as a ratio with its interval, from the runs of each side, and how it was judged.

    ratio is the ratio of the geometric means of the two sides' runs (exp of the difference of the means of their
    log values; a side of one run is that run), not the ratio of their median runs; lo and hi bound it."""

    ratio: float
    lo: float
    hi: float
    level: float  # the interval's confidence level
    basis: str  # "runs" (Welch's t on log values) or "allowance" (a known run-to-run spread, single runs)
    runs: tuple[int, int]  # runs on each side

    @property
    def significant(self) -> bool:
        return self.lo > 1.0 or self.hi < 1.0


def compare_runs(values: list[float], baseline: list[float], allowance: float | None = None,
                 level: float = 0.95, drift: float | None = None) -> RunGap | None:
    """The ratio of the geometric means of two sides' runs with a `level` interval (RunGap).

    The run values are taken as logs (run-to-run noise is multiplicative); the centre is the difference of the
    means of the log values, d = mean(log values) - mean(log baseline), and the spread is the variance of that
    same difference, so centre and spread measure one thing and exp(d) is the ratio of the geometric means.

    With two or more positive runs on both sides: Welch's t interval, d ± t·se, with se² = s_a²/n_a + s_b²/n_b
    + drift and Welch–Satterthwaite degrees of freedom. The drift between sessions, 2·allowance² when an
    allowance is given, widens it: the runs of one file are passes minutes apart and cannot see how the machine
    moves between two sessions (memory placement, neighbours on a shared host, clocks), which no number of runs
    in one file averages away; the allowance — the standard deviation of log values between independent runs of
    this kind of device — stands for it as a known variance (infinite degrees of freedom in Welch–Satterthwaite);
    `drift`, a variance of log values, replaces 2·allowance² where the caller knows better (a side whose runs come
    from several files has the drift between sessions in its own spread already: 0 for it). With one run on a
    side (its mean is that run): the other side's run variance stands for both, s²·(1/n_a + 1/n_b), with that
    side's degrees of freedom, widened the same way; with one run on each side, the allowance alone as a known
    spread, se = allowance·√2 (normal interval). The quantiles are scipy's Student's t.

    A mean is not robust, and the interval is no more than this: one stalled run moves the ratio (by 1/n of its log
    distance from the side's other runs) and the ratio is then not that of the values a results file reports (the
    median runs). It widens the interval at least as much: where a side's other runs agree with the other side, the
    shift is the stalled side's own standard error (δ/n both), so the t statistic stays below 1 and a stalled run
    alone does not make a gap significant at any usual level, but it can hide a real gap. None when no interval
    can be given (no positive run on a side; one run each and no allowance).
    """
    a = [math.log(v) for v in values if v > 0]
    b = [math.log(v) for v in baseline if v > 0]
    if not a or not b:
        return None
    d = statistics.fmean(a) - statistics.fmean(b)
    na, nb = len(a), len(b)
    if drift is None:
        drift = 2.0 * allowance ** 2 if allowance is not None else 0.0
    if na >= 2 and nb >= 2:
        va, vb = statistics.variance(a), statistics.variance(b)
        within = va / na + vb / nb
        den = (va / na) ** 2 / (na - 1) + (vb / nb) ** 2 / (nb - 1)
        se = math.sqrt(within + drift)
        df = (within + drift) ** 2 / den if den > 0 else math.inf
        q = t_quantile(0.5 + level / 2, df)
        basis = "runs"
    elif max(na, nb) >= 2:
        many = a if na >= 2 else b
        s2 = statistics.variance(many) * (1 / na + 1 / nb)
        se = math.sqrt(s2 + drift)
        df = (s2 + drift) ** 2 / (s2 ** 2 / (len(many) - 1)) if s2 > 0 else math.inf
        q = t_quantile(0.5 + level / 2, df)
        basis = "runs"
    elif allowance is not None:
        se = allowance * math.sqrt(2.0)
        q = normal_quantile(0.5 + level / 2)
        basis = "allowance"
    else:
        return None
    if se == 0:
        return RunGap(math.exp(d), math.exp(d), math.exp(d), level, basis, (na, nb))
    return RunGap(math.exp(d), math.exp(d - q * se), math.exp(d + q * se), level, basis, (na, nb))


def normal_quantile(p: float) -> float:
    """The standard normal distribution's p-quantile."""
    return statistics.NormalDist().inv_cdf(p)


def t_quantile(p: float, df: float) -> float:
    """Student's t distribution's p-quantile with df degrees of freedom (scipy.stats.t; df may be fractional, as
    Welch–Satterthwaite gives them); infinite df is the normal distribution."""
    if df == math.inf:
        return normal_quantile(p)
    if not df > 0:
        raise ValueError(f"degrees of freedom must be positive, not {df!r}")
    from scipy.stats import t  # here, not at the top: importing gapbench.stats stays cheap

    return float(t.ppf(p, df))
