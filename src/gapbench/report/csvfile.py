"""A comparison as CSV: one line per row and platform (long format), for spreadsheets and pandas; text cells
are never formulas and never carry control characters."""

from __future__ import annotations

import csv
import io
import json

from gapbench.compare import Comparison
from gapbench.report import numerics
from gapbench.text import printable

CSV_FIELDS = ("workload", "variant", "unit", "higher_is_better", "bound", "arithmetic_intensity", "platform",
              "baseline", "status", "value", "ci95_low", "ci95_high", "gap_pct", "significant", "pct_of_peak",
              "peak_kind", "power_w", "per_watt", "per_dollar", "reason")
FORMULA_START = ("=", "+", "-", "@")  # what makes a spreadsheet read a cell as a formula


def render_csv(comp: Comparison) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    extra = numerics.csv_rows(comp)  # numerics lines add their columns; without them the file is as it was
    w.writerow(CSV_FIELDS + (numerics.CSV_FIELDS if extra else ()))
    pad = [""] * (len(numerics.CSV_FIELDS) if extra else 0)
    for r in comp.rows:
        for i, c in enumerate(r.cells):
            g = r.gaps.get(i)
            ci = c.ci95 or (None, None)
            w.writerow([
                _text(r.workload), _text(json.dumps(r.variant, sort_keys=True)), _text(r.unit), r.higher_is_better,
                _text(r.bound), _num(r.intensity), _text(comp.platforms[i].name), i == comp.baseline,
                _text(c.status), _num(c.value), _num(ci[0]), _num(ci[1]), _num(g.pct if g else None),
                "" if g is None or g.significant is None else g.significant, _num(c.pct_peak), _text(c.peak_kind),
                _num(c.power_w), _num(c.per_watt), _num(c.per_dollar), _text(c.reason), *pad,
            ])
    for common, layer in extra:
        row = {**common, "variant": json.dumps(common["variant"], sort_keys=True)}
        w.writerow([_text(row[f]) if f in row and f != "baseline" else (row[f] if f in row else "")
                    for f in CSV_FIELDS] + [_text(layer[0]), _text(layer[1]), *(_num(x) for x in layer[2:])])
    return buf.getvalue()


def _num(x) -> str:
    if x is None:
        return ""
    return repr(float(x)) if x == x and abs(x) != float("inf") else ""


def _text(x) -> str:
    """A text cell: control characters shown as escapes, and one that a spreadsheet would read as a formula
    (starting with = + - @) quoted with a leading apostrophe. Number cells (_num) stay numbers."""
    s = printable("" if x is None else x)
    return "'" + s if s.startswith(FORMULA_START) else s
