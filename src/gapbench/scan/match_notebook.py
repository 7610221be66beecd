"""Jupyter notebooks: the code cells are scanned as one Python file (imports in one cell count in the others),
`!shell` lines and %%bash cells with the build rules; findings point at the notebook file's own lines."""

from __future__ import annotations

import ast
import json
import warnings
from bisect import bisect_right
from dataclasses import dataclass, field

from gapbench.scan.findings import Note
from gapbench.scan.match_python import PythonRules, _line_starts
from gapbench.scan.match_text import TextRules, mask_hash_comments

_SHELL_CELL = ("%%bash", "%%sh", "%%script bash", "%%script sh", "%%shell")


def _cells(nb: dict) -> list[dict]:
    if isinstance(nb.get("cells"), list):
        return nb["cells"]
    cells = []   # nbformat 3
    for ws in nb.get("worksheets") or []:
        for c in ws.get("cells") or []:
            cells.append({**c, "source": c.get("input", c.get("source", ""))})
    return cells


@dataclass
class _Sources:
    """A notebook's code as one Python text and one shell text, with where each of their lines sits in the
    .ipynb file: (file line, column of the line's first character)."""
    code: list[str] = field(default_factory=list)
    code_at: list[tuple[int, int]] = field(default_factory=list)
    shell: list[str] = field(default_factory=list)
    shell_at: list[tuple[int, int]] = field(default_factory=list)

    def add_cell(self, lines: list[str], places: list[tuple[int, int]], end: tuple[int, int]) -> None:
        is_shell = bool(lines) and lines[0].lstrip().startswith(_SHELL_CELL)
        for line, at in zip(lines, places, strict=True):
            line = line.rstrip("\r\n")
            stripped = line.lstrip()
            if is_shell or stripped.startswith("!"):
                self.shell.append(line if is_shell else line.replace("!", " ", 1))
                self.shell_at.append(at)
                self.code.append("")
            else:
                self.code.append("" if stripped.startswith("%") else line)
            self.code_at.append(at)
        self.code.append("")
        self.code_at.append(end)


def _load(rel: str, text: str, notes: list[Note]) -> dict | None:
    try:
        nb = json.loads(text)
    except ValueError as e:
        notes.append(Note(rel, f"notebook is not valid JSON ({e.msg} at line {e.lineno}): not scanned"))
        return None
    if not isinstance(nb, dict):
        notes.append(Note(rel, "notebook is not a JSON object: not scanned"))
        return None
    return nb


def _sources(nb: dict, text: str) -> _Sources:
    raw_lines = text.split("\n")
    starts = _line_starts(text)
    out = _Sources()
    cursor = 0
    for cell in _cells(nb):
        key = text.find('"source"', cursor) if "source" in cell else -1
        if key < 0:
            key = text.find('"input"', cursor)
        cursor = key + 1 if key >= 0 else cursor
        key_line = _line_of(starts, key) if key >= 0 else 1
        if cell.get("cell_type", "code") != "code":
            continue
        src = cell.get("source", "")
        lines = [str(x) for x in src] if isinstance(src, list) else str(src).splitlines(keepends=True)
        # Jupyter writes each source line as one JSON string on its own line, after "source": [
        one_per_line = isinstance(src, list) and raw_lines[key_line - 1].rstrip().endswith("[")
        places = [_place_of(raw_lines, key_line, i) if one_per_line else (key_line, 0) for i in range(len(lines))]
        out.add_cell(lines, places, (key_line, 0))
    return out


def _place_of(raw_lines: list[str], key_line: int, i: int) -> tuple[int, int]:
    if key_line + i < len(raw_lines):
        return key_line + 1 + i, max(raw_lines[key_line + i].find('"') + 1, 0)
    return key_line, 0


def _place(where: list[tuple[int, int]], line: int, col: int) -> tuple[int, int]:
    file_line, base = where[line - 1] if 0 < line <= len(where) else (1, 0)
    return file_line, base + col


def _python_matches(rel: str, source: str, python: PythonRules, notes: list[Note]):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return python.match(ast.parse(source, filename=rel), source)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        where = f" (code line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
        notes.append(Note(rel, f"notebook code does not parse{where}: fell back to a text scan"))
        return python.fallback(source)


def scan_notebook(rel: str, text: str, python: PythonRules, textrules: TextRules,
                  notes: list[Note]) -> list[tuple[str, int, int, str, bool, int]]:
    """(rule id, line in the .ipynb file, 0-based column, text, ported) for every match in the notebook's code."""
    nb = _load(rel, text, notes)
    if nb is None:
        return []
    src = _sources(nb, text)
    out: list[tuple[str, int, int, str, bool, int]] = []
    source = "\n".join(src.code)
    if source.strip() and python.worth_parsing(source):
        for m in _python_matches(rel, source, python, notes):
            out.append((m.rule.id, *_place(src.code_at, m.line, m.col), m.text, m.ported, 0))
    if src.shell:
        masked = mask_hash_comments("\n".join(src.shell))
        for m in textrules.match("build", "notebook.sh", masked):
            out.append((m.rule.id, *_place(src.shell_at, m.line, m.col), m.text, False, 0))
    return out


def _line_of(starts: list[int], offset: int) -> int:
    return bisect_right(starts, offset)
