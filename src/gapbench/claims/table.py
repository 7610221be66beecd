"""Reading a table of claims: Markdown (the first pipe table, through markdown-it, which rich already brings),
CSV, or gapbench's own TOML/JSON layout. Every format becomes one ClaimTable: a label column, one column per
platform, and an optional stated-gap column. A file that is not such a table is one GapbenchError."""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from gapbench.errors import GapbenchError
from gapbench.results import read_bytes

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

FORMATS = {".md": "md", ".markdown": "md", ".csv": "csv", ".toml": "toml", ".json": "json"}
GAP_HEADER = re.compile(r"gap|differen|delta|advantage|lead|\bvs\.?$|ratio|speed-?up", re.I)


@dataclass
class ClaimTable:
    title: str
    platforms: list[str]  # headers of the platform columns
    rows: list[tuple[str, list[str], str]]  # (label, one cell per platform, stated gap text)
    source: str = ""
    date: str = ""
    notes: list[str] = field(default_factory=list)


def read_table(path: str) -> ClaimTable:
    fmt = FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise GapbenchError(f"{path}: unknown table format {Path(path).suffix or '(no extension)'!r} "
                            f"(use {', '.join(FORMATS)})")
    raw = read_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise GapbenchError(f"{path}: not UTF-8 text") from None
    if fmt == "md":
        headers, body, title = _markdown(text, path)
    elif fmt == "csv":
        headers, body, title = _csv(text, path)
    else:
        return _own(text, path, fmt)
    return _from_grid(headers, body, title, path)


def _markdown(text: str, path: str) -> tuple[list[str], list[list[str]], str]:
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    title, rows, row, in_table, done = "", [], None, False, False
    for i, t in enumerate(tokens):
        if done:
            break
        if t.type == "heading_open" and not in_table:
            title = tokens[i + 1].content.strip()
        elif t.type == "table_open":
            in_table = True
            _check_cells(text.splitlines()[t.map[0]:t.map[1]], path, t.map[0])
        elif t.type == "table_close":
            done = True
        elif in_table and t.type == "tr_open":
            row = []
        elif in_table and t.type == "tr_close":
            rows.append(row)
        elif in_table and t.type == "inline" and row is not None:
            row.append(_plain(t.content))
    if not rows:
        raise GapbenchError(f"{path}: no Markdown table found (a header row, a |---| line, then rows)")
    return rows[0], rows[1:], title


def _check_cells(lines: list[str], path: str, first: int) -> None:
    """A row with more or fewer cells than the header is an error (GFM would silently drop or pad them)."""
    def count(line: str) -> int:
        inner = line.strip()
        inner = inner[1:] if inner.startswith("|") else inner
        inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
        return len(re.split(r"(?<!\\)\|", inner))
    width = count(lines[0])
    for i, line in enumerate(lines[2:], start=first + 3):
        if line.strip() and count(line) != width:
            raise GapbenchError(f"{path}: line {i} has {count(line)} cells, the header {width}")


def _plain(cell: str) -> str:
    """A cell's text without Markdown emphasis or code marks."""
    return re.sub(r"(\*\*|__|\*|`)", "", cell).replace("\\|", "|").strip()


def _csv(text: str, path: str) -> tuple[list[str], list[list[str]], str]:
    try:
        rows = [r for r in csv.reader(io.StringIO(text)) if any(c.strip() for c in r)]
    except csv.Error as e:
        raise GapbenchError(f"{path}: not valid CSV ({e})") from None
    if not rows:
        raise GapbenchError(f"{path}: empty CSV")
    return [c.strip() for c in rows[0]], [[c.strip() for c in r] for r in rows[1:]], ""


def _from_grid(headers: list[str], body: list[list[str]], title: str, path: str) -> ClaimTable:
    if len(headers) < 2:
        raise GapbenchError(f"{path}: a claims table needs a label column and at least one platform column")
    for i, r in enumerate(body, start=2):
        if len(r) != len(headers):
            raise GapbenchError(f"{path}: row {i} has {len(r)} cells, the header {len(headers)}")
    if not body:
        raise GapbenchError(f"{path}: the table has a header and no rows")
    gap_cols = [j for j, h in enumerate(headers) if j > 0 and GAP_HEADER.search(h)]
    gap = gap_cols[-1] if gap_cols else None
    plat = [j for j in range(1, len(headers)) if j != gap]
    if not plat:
        raise GapbenchError(f"{path}: no platform column (every column after the label is a gap)")
    rows = [(r[0], [r[j] for j in plat], r[gap] if gap is not None else "") for r in body]
    return ClaimTable(title, [headers[j] for j in plat], rows)


def _own(text: str, path: str, fmt: str) -> ClaimTable:
    """{title, source, date, platforms: [..], row: [{label, values: [..], gap}]} in TOML or JSON."""
    try:
        doc = tomllib.loads(text) if fmt == "toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as e:
        raise GapbenchError(f"{path}: not valid {fmt.upper()} ({e})") from None
    if not isinstance(doc, dict):
        raise GapbenchError(f"{path}: expected a table with 'platforms' and 'row'")
    platforms, rows = doc.get("platforms"), doc.get("row", doc.get("rows"))
    if not isinstance(platforms, list) or not platforms or not all(isinstance(p, str) for p in platforms):
        raise GapbenchError(f"{path}: 'platforms' must be a list of names")
    if not isinstance(rows, list) or not rows:
        raise GapbenchError(f"{path}: 'row' must be a list of rows")
    out = []
    for i, r in enumerate(rows):
        vals = r.get("values") if isinstance(r, dict) else None
        if not isinstance(r.get("label") if isinstance(r, dict) else None, str) or not isinstance(vals, list) \
                or len(vals) != len(platforms):
            raise GapbenchError(f"{path}: row[{i}] needs a 'label' and {len(platforms)} 'values'")
        out.append((r["label"], [str(v) for v in vals], str(r.get("gap", ""))))
    return ClaimTable(str(doc.get("title", "")), list(platforms), out, str(doc.get("source", "")),
                      str(doc.get("date", "")))
