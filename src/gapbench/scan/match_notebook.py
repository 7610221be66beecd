"""Jupyter notebooks: the code cells are scanned as one Python file (imports in one cell count in the others),
`!shell` lines and %%bash cells with the build rules; findings point at the notebook file's own lines."""

from __future__ import annotations

import ast
import json
import warnings

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


def scan_notebook(rel: str, text: str, python: PythonRules, textrules: TextRules,
                  notes: list[Note]) -> list[tuple[str, int, int, str]]:
    """(rule id, line in the .ipynb file, 0-based column, text) for every match in the notebook's code."""
    try:
        nb = json.loads(text)
    except ValueError as e:
        notes.append(Note(rel, f"notebook is not valid JSON ({e.msg} at line {e.lineno}): not scanned"))
        return []
    if not isinstance(nb, dict):
        notes.append(Note(rel, "notebook is not a JSON object: not scanned"))
        return []
    raw_lines = text.split("\n")
    starts = _line_starts(text)
    code: list[str] = []
    shell: list[str] = []
    code_at: list[tuple[int, int]] = []    # for each code line: (file line, column of its first character)
    shell_at: list[tuple[int, int]] = []
    cursor = 0
    for cell in _cells(nb):
        key = text.find('"source"', cursor) if "source" in cell else -1
        if key < 0:
            key = text.find('"input"', cursor)
        cursor = key + 1 if key >= 0 else cursor
        key_line = _line_of(starts, key) if key >= 0 else 1
        src = cell.get("source", "")
        lines = [str(x) for x in src] if isinstance(src, list) else str(src).splitlines(keepends=True)
        # Jupyter writes each source line as one JSON string on its own line, after "source": [
        one_per_line = isinstance(src, list) and raw_lines[key_line - 1].rstrip().endswith("[")
        if cell.get("cell_type", "code") != "code":
            continue
        is_shell = bool(lines) and lines[0].lstrip().startswith(_SHELL_CELL)
        for i, line in enumerate(lines):
            line = line.rstrip("\r\n")
            at = (key_line, 0)
            if one_per_line and key_line + i < len(raw_lines):
                json_line = raw_lines[key_line + i]
                at = (key_line + 1 + i, max(json_line.find('"') + 1, 0))
            stripped = line.lstrip()
            if is_shell or stripped.startswith("!"):
                shell.append(line if is_shell else line.replace("!", " ", 1))
                shell_at.append(at)
                code.append("")
            else:
                code.append("" if stripped.startswith("%") else line)
            code_at.append(at)
        code.append("")
        code_at.append((key_line, 0))
    out: list[tuple[str, int, int, str]] = []

    def place(where: list[tuple[int, int]], line: int, col: int) -> tuple[int, int]:
        file_line, base = where[line - 1] if 0 < line <= len(where) else (1, 0)
        return file_line, base + col

    source = "\n".join(code)
    if source.strip() and python.worth_parsing(source):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                matches = python.match(ast.parse(source, filename=rel), source)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            where = f" (code line {e.lineno})" if isinstance(e, SyntaxError) and e.lineno else ""
            notes.append(Note(rel, f"notebook code does not parse{where}: fell back to a text scan"))
            matches = python.fallback(source)
        for m in matches:
            out.append((m.rule.id, *place(code_at, m.line, m.col), m.text))
    if shell:
        masked = mask_hash_comments("\n".join(shell))
        for m in textrules.match("build", "notebook.sh", masked):
            out.append((m.rule.id, *place(shell_at, m.line, m.col), m.text))
    return out


def _line_of(starts: list[int], offset: int) -> int:
    from bisect import bisect_right
    return bisect_right(starts, offset)
