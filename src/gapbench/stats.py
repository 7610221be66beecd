"""Summary statistics of repeated samples: median, IQR, a distribution-free 95% CI and a noise flag.

A Stats object is computed once, where the samples are, and travels with the measurement; renderers
never recompute it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass

NOISE_THRESHOLD = 0.10  # IQR/median above this marks a result noisy


@dataclass(frozen=True)
class Stats:
    median: float
    iqr: float
    min: float
    max: float
    n: int
    ci95: tuple[float, float]
    mean: float
    stdev: float

    @property
    def noisy(self) -> bool:
        return self.median != 0 and abs(self.iqr / self.median) > NOISE_THRESHOLD

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
        return cls(
            median=statistics.median(xs),
            iqr=_quantile(xs, 0.75) - _quantile(xs, 0.25),
            min=xs[0],
            max=xs[-1],
            n=n,
            ci95=median_ci95(xs),
            mean=statistics.fmean(xs),
            stdev=statistics.stdev(xs) if n > 1 else 0.0,
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ci95"] = list(self.ci95)
        d["noisy"] = self.noisy
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Stats:
        return cls(
            median=float(d["median"]),
            iqr=float(d["iqr"]),
            min=float(d["min"]),
            max=float(d["max"]),
            n=int(d["n"]),
            ci95=(float(d["ci95"][0]), float(d["ci95"][1])),
            mean=float(d.get("mean", d["median"])),
            stdev=float(d.get("stdev", 0.0)),
        )


def median(xs) -> float:
    """The median: the middle value, or the mean of the two middle values (the one median gapbench uses)."""
    return statistics.median(float(x) for x in xs)


def _quantile(xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted data (numpy's default 'linear' method)."""
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median_ci95(xs: list[float]) -> tuple[float, float]:
    """Distribution-free 95% CI of the median from order statistics (binomial, p=1/2).

    With fewer than 6 samples no pair of order statistics reaches 95% coverage; the range min..max
    is returned (coverage 1 - 2^(1-n)), which is the honest widest answer.
    """
    xs = sorted(xs)
    n = len(xs)
    if n < 6:
        return (xs[0], xs[-1])
    # largest j (1-based) such that P(X < j) <= 2.5%, X ~ Binomial(n, 1/2); interval [x_(j), x_(n-j+1)]
    cdf = 0.0
    j = 0
    for k in range(n + 1):
        p = math.comb(n, k) / 2**n
        if cdf + p > 0.025:
            break
        cdf += p
        j = k + 1
    j = max(j, 1)
    return (xs[j - 1], xs[n - j])
