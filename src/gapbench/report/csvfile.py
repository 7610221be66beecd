"""A comparison as CSV: one line per row and platform (long format), for spreadsheets and pandas."""

from __future__ import annotations

import csv
import io
import json

from gapbench.compare import Comparison

CSV_FIELDS = ("workload", "variant", "unit", "higher_is_better", "bound", "arithmetic_intensity", "platform",
              "baseline", "status", "value", "ci95_low", "ci95_high", "gap_pct", "significant", "pct_of_peak",
              "peak_kind", "power_w", "per_watt", "per_dollar", "reason")


def render_csv(comp: Comparison) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for r in comp.rows:
        for i, c in enumerate(r.cells):
            g = r.gaps.get(i)
            ci = c.ci95 or (None, None)
            w.writerow([
                r.workload, json.dumps(r.variant, sort_keys=True), r.unit, r.higher_is_better, r.bound,
                _num(r.intensity), comp.platforms[i].name, i == comp.baseline, c.status, _num(c.value),
                _num(ci[0]), _num(ci[1]), _num(g.pct if g else None),
                "" if g is None or g.significant is None else g.significant, _num(c.pct_peak), c.peak_kind,
                _num(c.power_w), _num(c.per_watt), _num(c.per_dollar), c.reason,
            ])
    return buf.getvalue()


def _num(x) -> str:
    if x is None:
        return ""
    return repr(float(x)) if x == x and abs(x) != float("inf") else ""
