"""A comparison as CSV: one line per row and platform (long format), for spreadsheets and pandas; text cells
are never formulas and never carry control characters."""

from __future__ import annotations

import csv
import io
import json

from gapbench.compare import Comparison
from gapbench.report import attribution, numerics
from gapbench.text import printable

CSV_FIELDS = ("workload", "variant", "unit", "higher_is_better", "bound", "arithmetic_intensity", "platform",
              "baseline", "status", "value", "ci95_low", "ci95_high", "ci_level", "gap_pct", "gap_low", "gap_high",
              "significant", "basis", "flagged", "pct_of_peak", "peak_kind", "power_w", "per_watt", "per_dollar",
              "reason")
NO_VERDICT = "no verdict"  # `significant` of a gap with a number but no verdict (a flagged side, no runs)
FORMULA_START = ("=", "+", "-", "@")  # what makes a spreadsheet read a cell as a formula


def render_csv(comp: Comparison) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    # numerics and attribution lines add their own columns; without them the file is as it was
    extras = [(fields, rows) for fields, rows in ((numerics.CSV_FIELDS, numerics.csv_rows(comp)),
                                                  (attribution.CSV_FIELDS, attribution.csv_rows(comp))) if rows]
    w.writerow(CSV_FIELDS + tuple(f for fields, _ in extras for f in fields))
    pad = [""] * sum(len(fields) for fields, _ in extras)
    for r in comp.rows:
        for i, c in enumerate(r.cells):
            g = r.gaps.get(i)
            ci = c.ci95 or (None, None)
            stats = c.measurement.stats if c.measurement is not None and c.ci95 else None
            w.writerow([
                _text(r.workload), _text(json.dumps(r.variant, sort_keys=True)), _text(r.unit), r.higher_is_better,
                _text(r.bound), _num(r.intensity), _text(comp.platforms[i].name), i == comp.baseline,
                _text(c.status), _num(c.value), _num(ci[0]), _num(ci[1]),
                _num(getattr(stats, "ci_level", 0.95) if stats is not None else None), *_gap_fields(g),
                _num(c.pct_peak), _text(c.peak_kind), _num(c.power_w), _num(c.per_watt), _num(c.per_dollar),
                _text(c.reason), *pad,
            ])
    before = 0
    for fields, rows in extras:
        after = len(pad) - before - len(fields)
        for common, values in rows:
            row = {**common, "variant": json.dumps(common["variant"], sort_keys=True)}
            w.writerow([_text(row[f]) if f in row and f != "baseline" else (row[f] if f in row else "")
                        for f in CSV_FIELDS] + [""] * before + [_cell(v) for v in values] + [""] * after)
        before += len(fields)
    return buf.getvalue()


def _cell(v) -> str:
    return _num(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else _text(v)


def _gap_fields(g) -> list:
    """gap_pct, gap_low, gap_high, significant (True, False or "no verdict"), basis (which spread the interval
    used), flagged (the host watch's reason, and a step on subnormal gradients)."""
    if g is None:
        return ["", "", "", "", "", ""]
    significant = "" if g.pct is None else NO_VERDICT if g.significant is None else g.significant
    basis = getattr(g, "spread_basis", "") or g.basis
    return [_num(g.pct), _num(g.lo), _num(g.hi), significant, _text(basis),
            _text("; ".join(x for x in (g.flagged, g.subnormal) if x))]


def _num(x) -> str:
    if x is None:
        return ""
    return repr(float(x)) if x == x and abs(x) != float("inf") else ""


def _text(x) -> str:
    """A text cell: control characters shown as escapes, and one that a spreadsheet would read as a formula
    (starting with = + - @) quoted with a leading apostrophe. Number cells (_num) stay numbers."""
    s = printable("" if x is None else x)
    return "'" + s if s.startswith(FORMULA_START) else s
