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
(the host watch flagged it) gets no verdict unless the user allows it, nor does a training step that ran on
subnormal gradients (more than SUBNORMAL_LIMIT of them: it timed the processor's subnormal arithmetic).

This is the one verdict policy: compare, report, assess, history and the run's summary judge through `row_spread`
(which spread a single run is judged with, and where it came from: the history's, with its n, or the class
default), `pair_spread`, `judge_runs` and `judge`, and read the outcome from `Gap.verdict` and `Gap.why`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from gapbench.compare.keys import spellings
from gapbench.results import Measurement
from gapbench.stats import Stats, compare_runs

# The standard deviation of log values between independent runs of one row on one machine, by device class,
# used when a side has a single run and the history holds no measured spread for it. CPU: the spread
# gapbench measured on a 2-core cloud VM (benchmarks/verdicts.py, results/cpu-epyc-2core-verdicts.md);
# accelerator: the 1-3% run-to-run variation of GPU GEMM and bandwidth runs, at its upper end.
RUN_TO_RUN_SPREAD = {"cpu": 0.08, "accelerator": 0.03}

SIGNIFICANT, WITHIN_NOISE, NO_VERDICT = "significant", "within noise", "no verdict"


@dataclass(frozen=True)
class Spread:
    """The run-to-run spread (standard deviation of log values) a row is judged with, and where it came from."""

    value: float
    source: str  # "history": earlier unflagged runs of the same stack; "class default": RUN_TO_RUN_SPREAD
    n: int = 0  # the history's runs behind it
    device_class: str = ""  # cpu | accelerator, for a class default

    @property
    def label(self) -> str:
        """'history n=4' or 'cpu default'."""
        return f"history n={self.n}" if self.source == "history" else f"{self.device_class} default"

    def to_dict(self) -> dict:
        return {"value": self.value, "source": self.source, "n": self.n or None,
                "device_class": self.device_class or None}


def class_default(device_type: str | None) -> Spread:
    cls = "cpu" if device_type == "cpu" else "accelerator"
    return Spread(RUN_TO_RUN_SPREAD[cls], "class default", 0, cls)


HistoryChoice = bool | str | os.PathLike  # use the history (the default database, or this file) or not


def row_spread(identity: dict, workload: str, variant: dict, history: HistoryChoice = True,
               exclude_runs: tuple[str, ...] = ()) -> Spread:
    """The run-to-run spread of one row on one stack: what the history measured for it (its unflagged runs, three
    or more), else the default of the device class. history: False never reads it; a path reads that file. The
    runs of the row under every variant files have written for it count (compare.keys.spellings)."""
    if history is not False:
        from gapbench.history import run_spread

        db = None if history is True else history
        found = run_spread(identity, workload, variant, same_as=tuple(spellings(workload, variant)[1:]),
                           exclude_runs=exclude_runs, db_path=db)
        if found is not None:
            return Spread(found[0], "history", found[1])
    return class_default(identity.get("type"))


def pair_spread(a: Spread | None, b: Spread | None, a_one_file: bool = True,
                b_one_file: bool = True) -> tuple[float | None, float | None]:
    """(the spread of a single run, pooled over the two sides; the variance between sessions to add to the runs'
    own spread: each side's spread squared, for a side whose runs all come from one file). (None, None) when a side
    has no spread (a published figure)."""
    if a is None or b is None:
        return None, None
    drift = sum(s.value ** 2 for s, one in ((a, a_one_file), (b, b_one_file)) if one)
    return math.sqrt((a.value ** 2 + b.value ** 2) / 2), drift


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
    spreads: tuple[Spread, ...] = ()  # the spreads behind the interval: the platform's, the baseline's
    subnormal: str = ""  # a side's training step ran on subnormal gradients: the reason, and no verdict

    @property
    def withheld(self) -> bool:
        """Whether a reason withholds its verdict (a disturbed host, a step on subnormal gradients), or would."""
        return bool(self.flagged or self.subnormal)

    @property
    def significant(self) -> bool | None:
        return None if self.overlap is None else not self.overlap

    @property
    def verdict(self) -> str:
        """significant, within noise (the interval holds 0), or no verdict (see `why`)."""
        if self.overlap is None:
            return NO_VERDICT
        return WITHIN_NOISE if self.overlap or self.pct == 0 else SIGNIFICANT

    @property
    def why(self) -> str:
        """Why there is no verdict: the host watch's reason, the missing number, or no runs on one side."""
        if self.overlap is not None:
            return ""
        if self.flagged or self.subnormal:
            return "; ".join(x for x in (self.flagged and f"measured on a disturbed host: {self.flagged}",
                                         self.subnormal) if x)
        if self.pct is None:
            return self.status or "no number"
        return "no runs to judge by on one side (a published figure)"

    @property
    def spread_basis(self) -> str:
        """Which spread the interval used: 'runs', or the single runs' spreads ('history n=4', 'cpu default')."""
        labels = list(dict.fromkeys(s.label for s in self.spreads))
        if self.basis == "runs":
            return "runs" + (f" + session drift ({', '.join(labels)})" if labels else "")
        return ", ".join(labels) if self.basis == "single run" else self.basis

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


def host_reasons(*ms: Measurement) -> str:
    """What the host watch flagged on these measurements, once each ("" when nothing)."""
    return "; ".join(dict.fromkeys(r for m in ms for r in (m.host_watch or {}).get("reasons", [])))


def judge_runs(a: list[float], b: list[float], higher_is_better: bool, spread: float | None,
               drift: float | None = None, flagged: str = "", allow_flagged: bool = False,
               spreads: tuple[Spread, ...] = (), subnormal: str = "") -> Gap:
    """The gap of runs `a` against runs `b` (see the module docstring); flagged: the host watch's reasons for
    either side, subnormal: which side's training step ran on subnormal gradients (either: no verdict unless
    allow_flagged)."""
    rg = compare_runs(a, b, allowance=spread, drift=drift)
    if rg is None:
        pct = gap_pct(_gmean(a), _gmean(b), higher_is_better)
        return Gap(pct, None, "" if pct is not None else "n/a (zero)", runs=(len(a), len(b)), flagged=flagged,
                   subnormal=subnormal)
    if higher_is_better:
        pct, lo, hi = (rg.ratio - 1) * 100, (rg.lo - 1) * 100, (rg.hi - 1) * 100
    else:
        pct, lo, hi = (1 / rg.ratio - 1) * 100, (1 / rg.hi - 1) * 100, (1 / rg.lo - 1) * 100
    basis = "runs" if rg.basis == "runs" else "single run"
    used = spreads if (basis == "single run" or drift) else ()
    if (flagged or subnormal) and not allow_flagged:
        return Gap(pct, None, "", lo, hi, basis, rg.runs, flagged, used, subnormal=subnormal)
    return Gap(pct, not rg.significant, "", lo, hi, basis, rg.runs, flagged if allow_flagged else "", used,
               subnormal=subnormal)


def interval_gap(pct: float, lo: float, hi: float, basis: str, flagged: str = "", allow_flagged: bool = False) -> Gap:
    """The verdict on a gap whose interval was made elsewhere (a prediction's): significant when it excludes 0,
    no verdict when a side was flagged and the user does not allow it."""
    if flagged and not allow_flagged:
        return Gap(pct, None, "", lo, hi, basis, flagged=flagged)
    return Gap(pct, lo <= 0 <= hi, "", lo, hi, basis, flagged=flagged if allow_flagged else "")


def _gmean(values: list[float]) -> float | None:
    pos = [v for v in values if v > 0]
    return math.exp(sum(math.log(v) for v in pos) / len(pos)) if pos else None


def judge(value: Measurement, base: Measurement, higher_is_better: bool, spread: float | None,
          allow_flagged: bool = False, drift: float | None = None, spreads: tuple[Spread, ...] = ()) -> Gap:
    """The gap of `value` against `base` from their runs (see the module docstring). spread: the run-to-run
    standard deviation of log values to assume for a single run (None: no verdict for single runs); drift: the
    variance between sessions to add to the runs' own (None: 2·spread², both sides one session each)."""
    a, b = value.run_values, base.run_values
    subnormal = subnormal_reasons(value, base)
    if compare_runs(a, b, allowance=spread, drift=drift) is None:  # no interval: the medians' gap, no verdict
        pct = gap_pct(value.value, base.value, higher_is_better)
        return Gap(pct, None, "" if pct is not None else "n/a (zero)", runs=(len(a), len(b)), subnormal=subnormal)
    return judge_runs(a, b, higher_is_better, spread, drift, host_reasons(value, base), allow_flagged, spreads,
                      subnormal)


def subnormal_reasons(value: Measurement, base: Measurement) -> str:
    """Which side's training step ran on subnormal gradients, and how many ("" when neither)."""
    return "; ".join(f"{side}: {m.subnormal}" for side, m in (("platform", value), ("baseline", base)) if m.subnormal)
