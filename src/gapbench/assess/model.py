"""An assessment as data: the code's lock-in on the target, the operators the model needs there, the predicted
speed, and what was not known. Numbers and statuses only; the words are the renderers' (gapbench.report.assess).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from gapbench.assess.speed import SpeedPrediction
from gapbench.assess.work import Work
from gapbench.scan.stacks import Stack

SCHEMA = "gapbench.assess/1"
NOT_NATIVE = ("unsupported", "cpu_fallback", "wrong_result", "error")  # worst first


@dataclass(frozen=True)
class FindingRow:
    path: str
    line: int
    rule: str
    verdict: str  # on the target: works | auto | manual | blocker
    message: str
    fix: str
    text: str


@dataclass
class CodePart:
    """The scan of the codebase, judged for the target (or for the scanner target that stands in for it)."""

    root: str
    scan_target: str
    counts: dict[str, int]  # verdict -> findings
    effort_days: tuple[float, float]  # low, high: as the scanner rounds them (two significant figures)
    effort_basis: dict  # auto_files, manual_units, blocker_units, weights: the formula's inputs
    blockers: list[dict]  # {rule, findings, files}
    findings: list[FindingRow]  # every finding that is not `works` on the target, worst first
    files_scanned: int
    skipped: int

    def to_dict(self) -> dict:
        d = asdict(self)
        d["effort_days"] = list(self.effort_days)
        return d


@dataclass
class OperatorsPart:
    """The operators the traced step needs, and their status on the target when a coverage file says."""

    traced: str  # MODULE:FUNCTION or WORKLOAD:PRESET
    how: str  # entry | like
    fake: bool
    forward: dict[str, int]  # operator -> calls outside backward
    backward: dict[str, int]  # operator -> calls in backward
    coverage: str | None = None  # the coverage file, when one was given
    where: str = ""  # the platform that coverage file audited
    statuses: dict[str, dict] = field(default_factory=dict)  # operator -> {entry, status, phase, reason}
    warnings: list[str] = field(default_factory=list)

    @property
    def ops(self) -> list[str]:
        return sorted(set(self.forward) | set(self.backward))

    def with_status(self, *statuses: str) -> list[str]:
        """Operators whose status on the target is one of `statuses`, worst status first, then by name."""
        order = {s: i for i, s in enumerate(statuses)}
        found = [o for o in self.ops if self.statuses.get(o, {}).get("status") in order]
        return sorted(found, key=lambda o: (order[self.statuses[o]["status"]], o))

    @property
    def not_native(self) -> list[str]:
        return self.with_status(*NOT_NATIVE)

    @property
    def not_audited(self) -> list[str]:
        """Operators the coverage file says nothing about (all of them without a coverage file)."""
        if self.coverage is None:
            return self.ops
        return [o for o in self.ops if self.statuses.get(o, {}).get("status") in (None, "unknown", "skipped")]

    def to_dict(self) -> dict:
        return {"traced": self.traced, "how": self.how, "fake": self.fake, "coverage": self.coverage,
                "where": self.where, "warnings": self.warnings, "not_native": self.not_native,
                "not_audited": self.not_audited,
                "ops": [{"op": o, "forward": self.forward.get(o, 0), "backward": self.backward.get(o, 0),
                         **({k: v for k, v in self.statuses[o].items()} if o in self.statuses else {})}
                        for o in self.ops]}


@dataclass
class Assessment:
    path: str
    stack: Stack
    code: CodePart
    operators: OperatorsPart | None = None  # None: no step traced (neither --entry nor --like)
    work: Work | None = None
    speed: SpeedPrediction | None = None
    speed_missing: list[str] = field(default_factory=list)  # why there is no prediction
    results: tuple[str, ...] = ()  # the results files: source, target
    mismatches: list[str] = field(default_factory=list)  # files whose device is not the stack they were given for
    allow_flagged: bool = False  # give the speed a verdict even where the host watch flagged its rates

    def fails(self, level: str) -> bool:
        """True when the code has a finding at `level` (manual or blocker) or worse on the target."""
        worse = {"manual": ("manual", "blocker"), "blocker": ("blocker",)}[level]
        return any(self.code.counts.get(v, 0) for v in worse)

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA,
            "path": self.path,
            "target": {"key": self.stack.key, "name": self.stack.name, "scan_target": self.stack.scan_target,
                       "basis": self.stack.basis or None},
            "code": self.code.to_dict(),
            "operators": self.operators.to_dict() if self.operators else None,
            "work": self.work.to_dict() if self.work else None,
            "speed": _speed_dict(self.speed) if self.speed else None,
            "speed_missing": list(self.speed_missing),
            "speed_verdict": _verdict_dict(self.speed.verdict(self.allow_flagged)) if self.speed else None,
            "results": list(self.results),
            "mismatches": list(self.mismatches),
        }


def _verdict_dict(g) -> dict:
    return {"verdict": g.verdict, "why": g.why or None, "gap_pct": g.pct, "interval_pct": [g.lo, g.hi],
            "flagged": g.flagged or None}


def _speed_dict(s: SpeedPrediction) -> dict:
    d = asdict(s)
    if s.measured is not None:
        d["measured"]["step_error_pct"] = list(s.measured.step_error_pct)
    return d
