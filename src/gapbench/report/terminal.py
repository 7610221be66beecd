"""A comparison in the terminal: rich tables drawn from the kit's tables, colours from the data."""

from __future__ import annotations

import io

from rich.console import Console, Group

from gapbench.compare import Comparison
from gapbench.report import attribution, numerics, ratios, tables
from gapbench.report.kit import (
    coverage_table,
    frameworks_table,
    frontier_lines,
    frontier_table,
    rich_table,
    rich_text,
    takeaway_lines,
)


def terminal_renderables(comp: Comparison) -> list:
    """Rich renderables (tables and text), for a verb to print in colour."""
    out: list = [rich_text(f"warning: {w}", style="yellow") for w in comp.warnings]
    gt = tables.gap_table(comp, merge_peak=True)
    gt.title = f"gap against {comp.base.name} (> 0: better)"
    legend = "values: median [95% CI]"
    if any(c.pct_peak is not None for r in comp.rows for c in r.cells):
        legend += " (% of the device's peak, or MFU)"
    out.append(rich_text(legend, style="dim"))
    out.append(rich_table(gt))
    out += [rich_text(line) for line in takeaway_lines(comp)]
    if tables.basis_line(comp):
        out.append(rich_text(tables.basis_line(comp), style="dim"))
    ft = frontier_table(comp)
    if ft is not None:
        out.append(rich_table(ft))
    out += [rich_text(line) for line in frontier_lines(comp)]
    out += ratios.terminal_renderables(comp)
    out += numerics.terminal_renderables(comp)
    out += attribution.terminal_renderables(comp)
    note = tables.efficiency_note(comp)
    if note:
        out.append(rich_text(note, style="dim"))
    eff = tables.efficiency_table(comp)
    if eff:
        out.append(rich_table(eff))
        out.append(rich_text(tables.prices_line(comp), style="dim"))
    for title, t in (("operator coverage", coverage_table(comp)), ("frameworks", frameworks_table(comp))):
        if t is not None:
            t.title = title
            out.append(rich_table(t))
    flagged = tables.flagged_table(comp)
    if flagged is not None:
        out.append(rich_table(flagged))
    fails = tables.failures(comp)
    if fails is not None:
        out.append(rich_table(fails))
    return out


def render_terminal(comp: Comparison, width: int = 160) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False, soft_wrap=False)
    console.print(Group(*terminal_renderables(comp)))
    return console.file.getvalue()
