"""Effort per target, as a range of person-days, from weights per verdict class (see docs/scan.md).

    auto     minutes per file touched            files_auto   x auto_minutes_per_file
    manual   hours per rule, growing with repeats  sum over rules of (1 + log2(findings)) x manual_hours
    blocker  days per problem, growing with spread  sum over blocker rules or groups of (1 + log2(files)) x blocker_days

The log2 terms say: the first instance of a problem costs the most; doubling the instances adds one more unit.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from gapbench.scan.findings import Finding
from gapbench.scan.rules import VERDICTS, RuleSet

DEFAULT_WEIGHTS = {"hours_per_day": 8, "auto_minutes_per_file": [5, 20], "manual_hours": [1, 4],
                   "blocker_days": [3, 10]}


@dataclass(frozen=True)
class RuleCount:
    rule: str
    verdict: str
    findings: int
    files: int


@dataclass(frozen=True)
class TargetSummary:
    target: str
    counts: dict[str, int]                 # verdict -> findings
    rules: list[RuleCount]                 # worst verdict first, then most findings
    effort_days: tuple[float, float]       # low, high (unrounded; render with nice_range)
    auto_files: int
    manual_units: float
    blocker_units: float
    weights: dict = field(default_factory=dict)

    @property
    def blockers(self) -> list[RuleCount]:
        return [r for r in self.rules if r.verdict == "blocker"]


def _pair(weights: dict, key: str) -> tuple[float, float]:
    v = weights.get(key, DEFAULT_WEIGHTS[key])
    return float(v[0]), float(v[1])


def summarize(findings: list[Finding], ruleset: RuleSet, target: str) -> TargetSummary:
    weights = {**DEFAULT_WEIGHTS, **ruleset.effort}
    counts = Counter({v: 0 for v in VERDICTS})
    per_rule: Counter[str] = Counter()
    files_per_rule: dict[str, set[str]] = defaultdict(set)
    auto_files: set[str] = set()
    for f in findings:
        if f.ported:
            continue    # code a migration keeps: not counted against the target, not in the effort
        v = ruleset.rules[f.rule].verdicts[target]
        counts[v] += 1
        per_rule[f.rule] += 1
        files_per_rule[f.rule].add(f.path)
        if v == "auto":
            auto_files.add(f.path)
    rules = [RuleCount(r, ruleset.rules[r].verdicts[target], n, len(files_per_rule[r])) for r, n in per_rule.items()]
    rules.sort(key=lambda rc: (-VERDICTS.index(rc.verdict), -rc.findings, rc.rule))
    manual_units = sum(1 + math.log2(rc.findings) for rc in rules if rc.verdict == "manual")
    # Blocker rules of one group (e.g. all CUDA device code on Ascend) are one problem over the union of files.
    blocker_files: dict[str, set[str]] = defaultdict(set)
    for rc in rules:
        if rc.verdict == "blocker":
            blocker_files[ruleset.rules[rc.rule].group or rc.rule] |= files_per_rule[rc.rule]
    blocker_units = sum(1 + math.log2(len(fs)) for fs in blocker_files.values())
    amin, amax = _pair(weights, "auto_minutes_per_file")
    mlo, mhi = _pair(weights, "manual_hours")
    blo, bhi = _pair(weights, "blocker_days")
    hpd = float(weights.get("hours_per_day", 8))
    lo = len(auto_files) * amin / 60 / hpd + manual_units * mlo / hpd + blocker_units * blo
    hi = len(auto_files) * amax / 60 / hpd + manual_units * mhi / hpd + blocker_units * bhi
    return TargetSummary(target, dict(counts), rules, (lo, hi), len(auto_files), manual_units, blocker_units,
                         weights)


def _nice(x: float, up: bool) -> float:
    """x rounded to two significant figures, down for a low bound and up for a high one."""
    if x <= 0:
        return 0.0
    step = 10 ** (math.floor(math.log10(x)) - 1)
    n = x / step
    n = math.ceil(n - 1e-9) if up else math.floor(n + 1e-9)
    return round(n * step, 10)


def nice_range(lo: float, hi: float) -> tuple[float, float]:
    return _nice(lo, up=False), _nice(hi, up=True)


def format_days(lo: float, hi: float) -> str:
    if hi <= 0:
        return "none"
    a, b = nice_range(lo, hi)
    fmt = lambda v: f"{v:g}"  # noqa: E731
    return f"{fmt(a)}–{fmt(b)} person-days"
