"""A comparison as Markdown: the gap table, the takeaway, efficiency, coverage, frameworks, failures."""

from __future__ import annotations

from gapbench.compare import Comparison
from gapbench.report import attribution, numerics, ratios, tables
from gapbench.report.kit import (
    coverage_table,
    frameworks_table,
    frontier_lines,
    frontier_table,
    md_cell,
    md_table,
    takeaway_lines,
)


def render_markdown(comp: Comparison) -> str:
    lines = [f"### Gap against {md_cell(comp.base.name)} (> 0: better)", ""]
    lines += [f"> warning: {md_cell(w)}" for w in comp.warnings]
    if comp.warnings:
        lines.append("")
    lines += md_table(tables.gap_table(comp))
    lines += ["", "Values: median [95% CI].", ""]
    lines += [f"- {md_cell(t)}" for t in takeaway_lines(comp)]
    if tables.basis_line(comp):
        lines += ["", md_cell(tables.basis_line(comp))]
    flagged = tables.flagged_table(comp)
    if flagged is not None:
        lines += ["", f"#### {md_cell(flagged.title)}", ""] + md_table(flagged)
    ft = frontier_table(comp)
    if ft is not None:
        lines += ["", f"#### {md_cell(ft.title)}", ""] + md_table(ft) + [""]
        lines += [f"- {md_cell(t)}" for t in frontier_lines(comp)]
    lines += ratios.markdown_lines(comp)
    lines += numerics.markdown_lines(comp)
    lines += attribution.markdown_lines(comp)
    note = tables.efficiency_note(comp)
    if note:
        lines += ["", md_cell(note)]
    eff = tables.efficiency_table(comp)
    if eff:
        lines += ["", "#### Efficiency", ""] + md_table(eff) + ["", md_cell(tables.prices_line(comp))]
    for title, t in (("Operator coverage", coverage_table(comp)), ("Frameworks", frameworks_table(comp))):
        if t is not None:
            lines += ["", f"#### {title}", ""] + md_table(t)
    fails = tables.failures(comp)
    if fails is not None:
        lines += ["", "#### Failures", ""] + md_table(fails)
    return "\n".join(lines) + "\n"
