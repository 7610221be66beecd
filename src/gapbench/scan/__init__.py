"""CUDA lock-in scanner: find what ties a codebase to NVIDIA, judge it per target (ROCm, Ascend NPU, Intel XPU),
estimate the effort; and `port`, CUDA C++ to HIP with torch.utils.hipify. Rules are data (rules.toml).

    report = gapbench.scan.scan("./repo", targets=("rocm",))
    report.summaries["rocm"].counts, report.findings, report.to_dict()
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from gapbench.errors import GapbenchError
from gapbench.scan.engine import kinds_of, own_packages, scan_entries, with_tree_facts
from gapbench.scan.findings import Finding, Note
from gapbench.scan.rules import TARGETS, VERDICTS, Rule, RuleSet, load_rules
from gapbench.scan.scanreport import ScanReport, check_targets
from gapbench.scan.walker import Skipped, root_status, walk

DEFAULT_MAX_BYTES = 2 * 1024 * 1024
PARALLEL_FROM = 300   # files; below this a pool costs more than it saves

__all__ = ["scan", "ScanReport", "Finding", "Note", "Skipped", "Rule", "RuleSet", "load_rules", "TARGETS",
           "VERDICTS", "DEFAULT_MAX_BYTES"]


def scan(path: str | os.PathLike, targets: Iterable[str] = TARGETS, *, max_bytes: int = DEFAULT_MAX_BYTES,
         respect_gitignore: bool = True, jobs: int | None = None, rules: Iterable[str | os.PathLike] = (),
         ruleset: RuleSet | None = None) -> ScanReport:
    """Scan a folder (or one file) for CUDA lock-in. Reads files only: nothing scanned is imported or run.

    targets: any of rocm, npu, xpu. max_bytes: larger files are skipped (and listed). jobs: worker processes
    (default: 2 for trees of PARALLEL_FROM files or more, else 1). rules: extra rule files (TOML).
    """
    targets = check_targets(targets)
    root = os.fspath(path)
    root_status(root)
    if max_bytes <= 0:
        raise GapbenchError("the size limit must be positive")
    ruleset = ruleset or load_rules(list(rules))
    t0 = time.perf_counter()
    entries, skipped, walk_notes = walk(root, respect_gitignore=respect_gitignore)
    items = [(e, k) for e in entries if (k := kinds_of(e.rel))]
    if jobs is None:
        jobs = min(2, os.cpu_count() or 1) if len(items) >= PARALLEL_FROM else 1
    findings: list[Finding] = []
    notes: list[Note] = list(walk_notes)
    scanned = nbytes = suppressed = 0
    packages = own_packages(items)
    results = list(scan_entries(items, ruleset, max_bytes, max(1, jobs), packages))
    for entry, res in with_tree_facts(results, ruleset, max_bytes, packages):
        if res.skipped:
            skipped.append(Skipped(entry.rel, res.skipped))
            continue
        scanned += res.scanned
        nbytes += res.bytes
        suppressed += res.suppressed
        findings.extend(res.findings)
        notes.extend(res.notes)
    elapsed = time.perf_counter() - t0
    skipped.sort(key=lambda s: s.path)
    return ScanReport(root=os.path.realpath(root), targets=targets, findings=findings, skipped=skipped,
                      notes=notes, ruleset=ruleset, files_seen=len(entries), files_scanned=scanned,
                      bytes_scanned=nbytes, suppressed=suppressed, elapsed_s=elapsed)
