"""A comparison as JSON: its numbers (Comparison.to_dict) with the kit's words beside them (gap texts,
the takeaway, the side tables). Strict JSON: no NaN or Infinity."""

from __future__ import annotations

import json

from gapbench.compare import Comparison
from gapbench.report import ratios
from gapbench.report.kit import coverage_table, frameworks_table, gap_text, takeaway_lines


def comparison_document(comp: Comparison) -> dict:
    d = comp.to_dict()
    names = [p.name for p in comp.platforms]
    for r, row in zip(comp.rows, d["rows"], strict=True):
        for i, g in r.gaps.items():
            row["gaps"][names[i]]["text"] = gap_text(g)
    d["takeaway"] = takeaway_lines(comp)
    d["library_ratios"] = ratios.json_document(comp)
    for key, t in (("coverage", coverage_table(comp)), ("frameworks", frameworks_table(comp))):
        d[key] = {"columns": t.headers, "rows": t.rows} if t is not None else None
    return d


def render_json(comp: Comparison) -> str:
    return json.dumps(_finite(comparison_document(comp)), indent=1, default=str, allow_nan=False) + "\n"


def _finite(obj):
    if isinstance(obj, float):
        return obj if obj == obj and abs(obj) != float("inf") else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
