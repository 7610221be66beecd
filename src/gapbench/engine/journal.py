"""An fsynced JSON-lines journal of finished work: a header line, then one line per finished item.

Each line is flushed and fsynced as it is written, so a `kill -9` loses nothing finished; a line torn by
the kill (or otherwise unreadable) is skipped on reading (its item runs again). Suite runs journal measurements; coverage audits
journal operator rows.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from gapbench.errors import GapbenchError, ResultFileError
from gapbench.results import MAX_FILE_BYTES, json_safe, read_bytes, write_text_atomic

MAX_JOURNAL_BYTES = 4 * MAX_FILE_BYTES  # a journal line carries more than a results file's measurement


def journal_path(output: str | os.PathLike) -> str:
    return str(output) + ".journal.jsonl"


@dataclass
class JournalContents:
    header: dict | None = None
    entries: list[dict] = field(default_factory=list)
    torn: int = 0  # unreadable lines (a kill mid-write)


class Journal:
    """Append-only, fsynced. `start(header)` begins a fresh journal; `append(entry)` adds one line."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)

    def start(self, header: dict, entries: list[dict] | None = None) -> None:
        """A fresh journal, or a resumed one rewritten with what it kept: atomically, so a kill during the
        rewrite leaves the old journal, never a shorter one."""
        write_text_atomic(self.path, "".join(_line(obj) for obj in [header, *(entries or [])]))

    def append(self, entry: dict) -> None:
        with open(self.path, "a", encoding="utf-8", errors="replace") as f:
            f.write(_line(entry))
            f.flush()
            os.fsync(f.fileno())

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def read(self, *, is_header, what: str = "journal") -> JournalContents:
        """Every readable line: the first for which is_header(obj) is true is the header, the rest entries.

        A line that is not a JSON object (torn by a kill, or damaged) is counted in `torn` and skipped: its
        item runs again. A file that is not a regular file, or is larger than MAX_JOURNAL_BYTES, is refused.
        """
        from pydantic_core import from_json  # strict JSON, bounded in depth: a hostile line is just unreadable

        try:
            data = read_bytes(self.path, limit=MAX_JOURNAL_BYTES)
        except ResultFileError as e:
            raise GapbenchError(f"cannot read {what} {e}") from None
        out = JournalContents()
        for line in data.split(b"\n"):
            if not line.strip():
                continue
            try:
                obj = from_json(line, allow_inf_nan=False)
            except ValueError:
                obj = None
            if not isinstance(obj, dict):
                out.torn += 1
                continue
            if out.header is None and is_header(obj):
                out.header = obj
            else:
                out.entries.append(obj)
        return out


def _line(obj: dict) -> str:
    return json.dumps(json_safe(obj), allow_nan=False) + "\n"
