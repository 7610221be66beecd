"""The records a scan produces: one Finding per match, and what a file could not give (notes, skips)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class Finding:
    path: str       # relative to the scan root, '/' separators
    line: int       # 1-based
    column: int     # 1-based, in characters
    rule: str
    text: str       # the matched source text, shortened


@dataclass(frozen=True)
class Note:
    path: str
    note: str       # e.g. "not UTF-8: decoded with replacement characters"


@dataclass
class FileResult:
    findings: list[Finding]
    notes: list[Note]
    suppressed: int = 0
    skipped: str = ""   # reason, when the file was not scanned
    scanned: bool = False
    bytes: int = 0
