"""Text renderers of a Comparison: terminal (rich), Markdown, CSV and JSON."""

from __future__ import annotations

import csv
import io
import json

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from gapbench.compare import Comparison
from gapbench.report import tables


def _gap_style(text: str) -> str:
    if text.startswith("≈"):
        return "dim"
    if text.startswith("+"):
        return "green"
    if text.startswith("−"):
        return "red"
    return "yellow"


def terminal_renderables(comp: Comparison) -> list:
    """Rich renderables (tables and text), for a verb to print in colour."""
    out: list = []
    for w in comp.warnings:
        out.append(Text(f"warning: {w}", style="yellow"))
    headers, rows = tables.gap_table(comp, merge_peak=True)
    if any(c.pct_peak is not None for r in comp.rows for c in r.cells):
        out.append(Text("values: median ± half the 95% CI (% of the device's peak, or MFU)", style="dim"))
    t = Table(title=Text(f"gap against {comp.base.name} (> 0: better)"), title_justify="left")
    gap_cols = {j for j, h in enumerate(headers) if h.startswith("gap ")}
    for j, h in enumerate(headers):
        t.add_column(Text(h), justify="left" if j < 3 else "right", overflow="fold")
    for row in rows:
        t.add_row(*[Text(c, style=_gap_style(c)) if j in gap_cols else Text(c) for j, c in enumerate(row)])
    out.append(t)
    for line in comp.takeaway:
        out.append(Text(line))
    eff = tables.efficiency_table(comp)
    if tables.efficiency_note(comp):
        out.append(Text(tables.efficiency_note(comp), style="dim"))
    if eff:
        et = Table(title="efficiency", title_justify="left")
        for j, h in enumerate(eff[0]):
            et.add_column(Text(h), justify="left" if j == 0 else "right", overflow="fold")
        for row in eff[1]:
            et.add_row(*[Text(c) for c in row])
        out.append(et)
        out.append(Text(tables.prices_line(comp), style="dim"))
    for title, data in (("operator coverage", comp.coverage), ("frameworks", comp.frameworks)):
        if data:
            ct = Table(title=title, title_justify="left")
            for h in data["columns"]:
                ct.add_column(Text(h), overflow="fold")
            for row in data["rows"]:
                ct.add_row(*[Text(str(c)) for c in row])
            out.append(ct)
    fails = tables.failures(comp)
    if fails:
        ft = Table(title="failures", title_justify="left")
        for h in ("platform", "row", "status", "reason"):
            ft.add_column(h, overflow="fold")
        for f in fails:
            ft.add_row(*[Text(x) for x in f])
        out.append(ft)
    return out


def render_terminal(comp: Comparison, width: int = 160) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False, soft_wrap=False)
    console.print(Group(*terminal_renderables(comp)))
    return console.file.getvalue()


def _md_cell(s: str) -> str:
    return str(s).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("<", "&lt;").replace(">", "&gt;")


def _md_table(headers: list[str], rows: list[list[str]], text_columns: int = 1) -> list[str]:
    out = ["| " + " | ".join(_md_cell(h) for h in headers) + " |",
           "|" + "|".join(":---" if j < text_columns else "---:" for j in range(len(headers))) + "|"]
    out += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
    return out


def render_markdown(comp: Comparison) -> str:
    lines = [f"### Gap against {_md_cell(comp.base.name)} (> 0: better)", ""]
    lines += [f"> warning: {_md_cell(w)}" for w in comp.warnings]
    if comp.warnings:
        lines.append("")
    lines += _md_table(*tables.gap_table(comp), text_columns=3)
    lines.append("")
    lines += [f"- {_md_cell(t)}" for t in comp.takeaway]
    eff = tables.efficiency_table(comp)
    if tables.efficiency_note(comp):
        lines += ["", _md_cell(tables.efficiency_note(comp))]
    if eff:
        lines += ["", "#### Efficiency", ""] + _md_table(*eff) + ["", _md_cell(tables.prices_line(comp))]
    for title, data in (("Operator coverage", comp.coverage), ("Frameworks", comp.frameworks)):
        if data:
            lines += ["", f"#### {title}", ""] + _md_table(data["columns"], data["rows"], text_columns=len(data["columns"]))
    fails = tables.failures(comp)
    if fails:
        lines += ["", "#### Failures", ""] + _md_table(["platform", "row", "status", "reason"], [list(f) for f in fails], text_columns=4)
    return "\n".join(lines) + "\n"


CSV_FIELDS = ("workload", "variant", "unit", "higher_is_better", "bound", "arithmetic_intensity", "platform",
              "baseline", "status", "value", "ci95_low", "ci95_high", "gap_pct", "significant", "pct_of_peak",
              "peak_kind", "power_w", "per_watt", "per_dollar", "reason")


def render_csv(comp: Comparison) -> str:
    """One line per row and platform (long format), for spreadsheets and pandas."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for r in comp.rows:
        for i, c in enumerate(r.cells):
            g = r.gaps.get(i)
            ci = c.measurement.stats.ci95 if c.value is not None and c.measurement.stats else (None, None)
            w.writerow([
                r.workload, json.dumps(r.variant, sort_keys=True), r.unit, r.higher_is_better, r.bound,
                _csv_num(r.intensity), comp.platforms[i].name, i == comp.baseline, c.status, _csv_num(c.value),
                _csv_num(ci[0]), _csv_num(ci[1]), _csv_num(g.pct if g else None),
                "" if g is None or g.significant is None else g.significant, _csv_num(c.pct_peak), c.peak_kind,
                _csv_num(c.power_w), _csv_num(c.per_watt), _csv_num(c.per_dollar), c.reason,
            ])
    return buf.getvalue()


def _csv_num(x) -> str:
    if x is None:
        return ""
    return repr(float(x)) if x == x and abs(x) != float("inf") else ""


def render_json(comp: Comparison) -> str:
    return json.dumps(comp.to_dict(), indent=1, default=str) + "\n"
