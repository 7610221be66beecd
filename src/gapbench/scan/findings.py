"""The records a scan produces: one Finding per match, and what a file could not give (notes, skips)."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, order=True)
class Finding:
    path: str       # relative to the scan root, '/' separators
    line: int       # 1-based
    column: int     # 1-based, in characters
    rule: str
    text: str       # the matched source text, shortened
    ported: bool = False    # in a branch that already is the port: kept by a migration, not counted
    last_line: int = 0      # the last line of the statement the finding stands for (0: the finding's line)


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
    macros: object = None       # C/C++: the portability macros the file defines (branches.PortMacros)
    tested: frozenset = frozenset()     # C/C++: the names its #if conditions test
    extensions: frozenset = frozenset()     # Python: the CUDA extensions it builds (module names)
    header: object = None       # C/C++: its includes, HIP aliases and port guards (branches.HeaderFacts)


def shown_path(path: str) -> str:
    """A path as text every output can carry. File names that are not UTF-8 reach Python as lone surrogates
    (os.fsdecode's surrogateescape); their bytes are shown as \\xNN escapes instead."""
    if path.isascii():
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def with_shown_path(record):
    """The record (Finding, Note, Skipped) with its path made showable; the same object when it already is."""
    shown = shown_path(record.path)
    return record if shown == record.path else replace(record, path=shown)
