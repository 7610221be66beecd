"""A comparison in the terminal: rich tables drawn from the kit's tables, colours from the data."""

from __future__ import annotations

import io

from rich.console import Console, Group

from gapbench.compare import Comparison
from gapbench.report import numerics, ratios, tables
from gapbench.report.kit import (
    Table,
    coverage_table,
    frameworks_table,
    frontier_lines,
    frontier_table,
    rich_table,
    rich_text,
    row_label,
    takeaway_lines,
)


def basis_line(comp: Comparison) -> str:
    """Which spread judged the gaps, and how many each: 'Judged by: history n=5 (9 gaps), cpu default (2 gaps).'"""
    bases = comp.takeaway.spread_bases
    if not bases:
        return ""
    return "Judged by: " + ", ".join(f"{b} ({n} gap{'s' * (n != 1)})" for b, n in bases) + "."


def flagged_table(comp: Comparison) -> Table | None:
    """The rows the host watch flagged, with its reason, per platform: why their gaps have no verdict."""
    rows = []
    for r in comp.rows:
        for i, c in enumerate(r.cells):
            m = c.measurement
            if m is not None and m.ok and m.flagged:
                reasons = "; ".join(str(x) for x in (m.host_watch or {}).get("reasons", [])) or "flagged"
                rows.append([comp.platforms[i].name, row_label(r), reasons])
    if not rows:
        return None
    return Table(["platform", "row", "host watch (why no verdict)"], rows, numeric=(),
                 title="measured on a disturbed host (†: no verdict unless --allow-flagged)")


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
    if basis_line(comp):
        out.append(rich_text(basis_line(comp), style="dim"))
    ft = frontier_table(comp)
    if ft is not None:
        out.append(rich_table(ft))
    out += [rich_text(line) for line in frontier_lines(comp)]
    out += ratios.terminal_renderables(comp)
    out += numerics.terminal_renderables(comp)
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
    flagged = flagged_table(comp)
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
