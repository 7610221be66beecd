"""The gap between two measurements, its interval, and whether it could be noise.

Sign convention, everywhere: a gap > 0 means the platform did better than the baseline, whatever the
unit's direction. For higher-is-better units (throughput) gap = value/baseline - 1; for lower-is-better
units (latency, time) gap = baseline/value - 1, i.e. the gap in speed (a 5 ms latency against 10 ms is
+100%, exactly as a throughput twice the baseline's is).

The verdict comes from independent runs, because a measurement's own confidence interval (over its repeats
inside one run) does not cover what changes between runs. With two or more runs on each side the interval
of the gap is Welch's t interval on the log values of the runs (95%), widened by the drift between two
sessions that the runs of one file cannot see; with a single run on a side it uses the run-to-run spread of
that kind of device alone. The spread is RUN_TO_RUN_SPREAD, or what the history database measured for this row
on this stack (stats.compare_runs). A gap is significant when its interval excludes 0. A side measured on a disturbed host
(the host watch flagged it) gets no verdict unless the user allows it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gapbench.results import Measurement
from gapbench.stats import Stats, compare_runs

# The standard deviation of log values between independent runs of one row on one machine, by device class,
# used when a side has a single run and the history holds no measured spread for it. CPU: the spread
# gapbench measured on a 2-core cloud VM (benchmarks/verdicts.py, results/cpu-epyc-2core-verdicts.md);
# accelerator: the 1-3% run-to-run variation of GPU GEMM and bandwidth runs, at its upper end.
RUN_TO_RUN_SPREAD = {"cpu": 0.08, "accelerator": 0.03}


@dataclass(frozen=True)
class Gap:
    pct: float | None  # None: no number (see status)
    overlap: bool | None  # True: the interval holds 0 (could be noise); None: no verdict (see basis/flagged)
    status: str = ""  # why there is no number: the cell's status, "baseline <status>", "unit differs", …
    lo: float | None = None  # the gap's interval, in %
    hi: float | None = None
    basis: str = ""  # "runs" (n, m runs), "single run" (a run-to-run spread), "within-run" (repeats only), "" none
    runs: tuple[int, int] = (0, 0)  # runs behind each side
    flagged: str = ""  # a side was measured on a disturbed host: the reason, and no verdict

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


def judge(value: Measurement, base: Measurement, higher_is_better: bool, spread: float | None,
          allow_flagged: bool = False, drift: float | None = None) -> Gap:
    """The gap of `value` against `base` from their runs (see the module docstring). spread: the run-to-run
    standard deviation of log values to assume for a single run (None: no verdict for single runs); drift: the
    variance between sessions to add to the runs' own (None: 2·spread², both sides one session each)."""
    a, b = value.run_values, base.run_values
    rg = compare_runs(a, b, allowance=spread, drift=drift)
    if rg is None:
        pct = gap_pct(value.value, base.value, higher_is_better)
        return Gap(pct, None, "" if pct is not None else "n/a (zero)", runs=(len(a), len(b)))
    if higher_is_better:
        pct, lo, hi = (rg.ratio - 1) * 100, (rg.lo - 1) * 100, (rg.hi - 1) * 100
    else:
        pct, lo, hi = (1 / rg.ratio - 1) * 100, (1 / rg.hi - 1) * 100, (1 / rg.lo - 1) * 100
    basis = "runs" if rg.basis == "runs" else "single run"
    flagged = "; ".join(dict.fromkeys(r for m in (value, base) for r in (m.host_watch or {}).get("reasons", [])))
    if flagged and not allow_flagged:
        return Gap(pct, None, "", lo, hi, basis, rg.runs, flagged)
    return Gap(pct, not rg.significant, "", lo, hi, basis, rg.runs, flagged if allow_flagged else "")
