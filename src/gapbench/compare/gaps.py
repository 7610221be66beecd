"""The gap between two measurements and whether it could be noise.

Sign convention, everywhere: a gap > 0 means the platform did better than the baseline, whatever the
unit's direction. For higher-is-better units (throughput) gap = value/baseline - 1; for lower-is-better
units (latency, time) gap = baseline/value - 1, i.e. the gap in speed (a 5 ms latency against 10 ms is
+100%, exactly as a throughput twice the baseline's is). A gap is "within noise" when the two 95%
confidence intervals overlap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gapbench.stats import Stats


@dataclass(frozen=True)
class Gap:
    pct: float | None  # None: no number (see status)
    overlap: bool | None  # True: CIs overlap (could be noise); None: no CI on one side
    status: str = ""  # why there is no number: the cell's status, "baseline <status>", "unit differs", …

    @property
    def significant(self) -> bool | None:
        return None if self.overlap is None else not self.overlap

    @property
    def better(self) -> bool | None:
        """True when the platform did better, False worse, None when no number or exactly equal."""
        if self.pct is None or self.pct == 0:
            return None
        return self.pct > 0


def gap_pct(value: float | None, baseline: float | None, higher_is_better: bool = True) -> float | None:
    """Relative gap in %, > 0 when value is better than baseline (see the module docstring)."""
    if value is None or baseline is None or not math.isfinite(value) or not math.isfinite(baseline):
        return None
    if higher_is_better:
        pct = None if baseline == 0 else (value - baseline) / baseline * 100.0
    else:
        pct = None if value == 0 else (baseline / value - 1.0) * 100.0
    return pct if pct is not None and math.isfinite(pct) else None  # a ratio beyond a double is no gap


def intervals_overlap(a: Stats | None, b: Stats | None) -> bool | None:
    """Whether two 95% CIs overlap (the difference could be noise); None when either has no interval."""
    if a is None or b is None or a.n < 2 or b.n < 2:  # one sample has no interval worth the name
        return None
    return a.ci95[0] <= b.ci95[1] and b.ci95[0] <= a.ci95[1]
