"""ScanReport: what a scan found, what it skipped, and the per-target summary; to_dict() is the JSON form."""

from __future__ import annotations

from dataclasses import dataclass, field

from gapbench import __version__
from gapbench.scan.effort import TargetSummary, nice_range, summarize
from gapbench.scan.findings import Finding, Note, shown_path, with_shown_path
from gapbench.scan.rules import TARGETS, VERDICTS, RuleSet
from gapbench.scan.walker import Skipped

SCHEMA = "gapbench.scan/1"


@dataclass
class ScanReport:
    root: str
    targets: tuple[str, ...]
    findings: list[Finding]
    skipped: list[Skipped]
    notes: list[Note]
    ruleset: RuleSet
    files_seen: int = 0
    files_scanned: int = 0
    bytes_scanned: int = 0
    suppressed: int = 0
    elapsed_s: float = 0.0
    summaries: dict[str, TargetSummary] = field(default_factory=dict)

    def __post_init__(self):
        # Paths come from the file system and may not be UTF-8: made showable once, for every format.
        self.root = shown_path(self.root)
        self.findings[:] = [with_shown_path(f) for f in self.findings]
        self.skipped[:] = [with_shown_path(s) for s in self.skipped]
        self.notes[:] = [with_shown_path(n) for n in self.notes]
        self.findings.sort(key=lambda f: (-self.severity(f), f.path, f.line, f.column, f.rule))
        self.summaries = {t: summarize(self.findings, self.ruleset, t) for t in self.targets}

    def verdict(self, f: Finding, target: str) -> str:
        return self.ruleset.rules[f.rule].verdicts[target]

    def worst(self, f: Finding) -> str:
        return self.ruleset.rules[f.rule].worst(self.targets)

    def severity(self, f: Finding) -> int:
        return VERDICTS.index(self.worst(f))

    def fails(self, level: str) -> bool:
        """True when any finding reaches `level` (manual or blocker) on a selected target."""
        need = VERDICTS.index(level)
        return any(self.severity(f) >= need for f in self.findings if not f.ported)

    @property
    def files_per_s(self) -> float:
        return self.files_scanned / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def rules_used(self) -> list[str]:
        return sorted({f.rule for f in self.findings})

    @property
    def ported(self) -> int:
        """Findings inside branches that already are the port (#ifdef USE_ROCM, if torch.version.hip, ...)."""
        return sum(1 for f in self.findings if f.ported)

    def firings(self) -> dict[str, dict[str, int]]:
        """Per rule: how often it fired, how many of those were already ported, in how many files."""
        out: dict[str, dict] = {}
        for f in self.findings:
            c = out.setdefault(f.rule, {"findings": 0, "ported": 0, "files": set()})
            c["findings"] += 1
            c["ported"] += f.ported
            c["files"].add(f.path)
        return {r: {**c, "files": len(c["files"])} for r, c in sorted(out.items(), key=lambda kv: (-kv[1]["findings"], kv[0]))}

    def to_dict(self) -> dict:
        rules = self.ruleset.rules
        return {
            "schema": SCHEMA,
            "gapbench_version": __version__,
            "root": self.root,
            "targets": list(self.targets),
            "ruleset": {"source": self.ruleset.source, "date": self.ruleset.date, "rules": len(rules),
                        "files": list(self.ruleset.files)},
            "stats": {"files_seen": self.files_seen, "files_scanned": self.files_scanned,
                      "files_skipped": len(self.skipped), "bytes_scanned": self.bytes_scanned,
                      "findings": len(self.findings), "already_ported": self.ported, "suppressed": self.suppressed,
                      "elapsed_s": round(self.elapsed_s, 3), "files_per_s": round(self.files_per_s, 1)},
            "summary": {t: _summary_dict(s) for t, s in self.summaries.items()},
            "rules_fired": self.firings(),
            "findings": [{
                "path": f.path, "line": f.line, "column": f.column, "rule": f.rule, "already_ported": f.ported,
                "kind": list(rules[f.rule].kinds), "text": f.text, "message": rules[f.rule].message,
                "verdicts": {t: rules[f.rule].verdicts[t] for t in self.targets},
                "fix": rules[f.rule].fix, "reference": rules[f.rule].reference,
            } for f in self.findings],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "notes": [{"path": n.path, "note": n.note} for n in self.notes],
        }


def _summary_dict(s: TargetSummary) -> dict:
    lo, hi = nice_range(*s.effort_days)
    return {
        "counts": s.counts,
        "effort_person_days": {"low": lo, "high": hi},
        "effort_basis": {"auto_files": s.auto_files, "manual_units": round(s.manual_units, 2),
                         "blocker_units": round(s.blocker_units, 2),
                         "weights": {k: s.weights[k] for k in sorted(s.weights)}},
        "blockers": [{"rule": r.rule, "findings": r.findings, "files": r.files} for r in s.blockers],
        "rules": [{"rule": r.rule, "verdict": r.verdict, "findings": r.findings, "files": r.files}
                  for r in s.rules],
    }


def check_targets(targets) -> tuple[str, ...]:
    from gapbench.errors import GapbenchError
    out: list[str] = []
    for t in targets:
        for part in str(t).split(","):
            part = part.strip().lower()
            if not part:
                continue
            if part == "all":
                out.extend(TARGETS)
            elif part in TARGETS:
                out.append(part)
            else:
                raise GapbenchError(f"unknown target {part!r} (choose from {', '.join(TARGETS)}, or all)")
    return tuple(dict.fromkeys(out)) or TARGETS
