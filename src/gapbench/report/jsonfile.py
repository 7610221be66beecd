"""A comparison as JSON: its numbers (Comparison.to_dict) with the kit's words beside them (gap texts,
the takeaway, the side tables). Strict JSON: no NaN or Infinity."""

from __future__ import annotations

from gapbench.compare import Comparison
from gapbench.report import attribution, numerics, ratios
from gapbench.report.kit import coverage_table, frameworks_table, frontier_lines, gap_text, takeaway_lines
from gapbench.results import json_text
from gapbench.text import json_printable


def comparison_document(comp: Comparison) -> dict:
    d = comp.to_dict()
    names = [p.name for p in comp.platforms]
    for r, row in zip(comp.rows, d["rows"], strict=True):
        for i, g in r.gaps.items():
            row["gaps"][names[i]]["text"] = gap_text(g, interval=True)
    d["takeaway"] = takeaway_lines(comp)
    if d.get("frontiers") is not None:
        d["frontiers"]["takeaway"] = frontier_lines(comp)
        for g, row in zip(comp.frontiers.gaps, d["frontiers"]["gaps"], strict=True):
            for i, gap in g.gaps.items():
                row["gaps"][names[i]]["text"] = gap_text(gap)
    d["library_ratios"] = ratios.json_document(comp)
    d["numerics"] = numerics.json_document(comp)
    d["attribution"] = attribution.json_document(comp)
    for key, t in (("coverage", coverage_table(comp)), ("frameworks", frameworks_table(comp))):
        d[key] = {"columns": t.headers, "rows": t.rows} if t is not None else None
    return d


def render_json(comp: Comparison) -> str:
    return json_printable(json_text(comparison_document(comp))) + "\n"
