"""The tables every renderer shows, built once from a Comparison with the kit: gap table, efficiency,
failures, environment."""

from __future__ import annotations

import json

from gapbench.compare import Comparison, per_unit
from gapbench.report.kit import (
    STYLE_STATUS,
    Table,
    cell_text,
    fmt_num,
    gap_style,
    gap_text,
    one_line,
    peak_text,
    published_text,
    row_label,
    shared_and_varying,
    unit_text,
)


def gap_table(comp: Comparison, merge_peak: bool = False) -> Table:
    """Workload, unit, bound, one value column per platform (with % of peak beside it, or in it with
    merge_peak), one gap per non-baseline platform, and a published-gap column where one applies."""
    show_peak = any(c.pct_peak is not None for r in comp.rows for c in r.cells) and not merge_peak
    has_published = any(r.published for r in comp.rows)
    headers = ["workload", "unit", "bound"]
    for i, p in enumerate(comp.platforms):
        headers.append(p.name + (" (baseline)" if i == comp.baseline and len(comp.platforms) > 1 else ""))
        if show_peak:
            headers.append("% peak")
    others = [i for i in range(len(comp.platforms)) if i != comp.baseline]
    headers += [f"gap {comp.platforms[i].name}" for i in others]
    if has_published:
        headers.append("published gap")
    rows, styles = [], []
    for r in comp.rows:
        row, style = _gap_row(comp, r, others, merge_peak, show_peak, has_published)
        rows.append(row)
        styles.append(style)
    return Table(headers, rows, text_columns=3, styles=styles)


def _gap_row(comp, r, others, merge_peak: bool, show_peak: bool, has_published: bool) -> tuple[list, list]:
    row = [row_label(r), unit_text(r.unit) + ("" if r.higher_is_better else " (lower is better)"), r.bound]
    style = ["", "", ""]
    for c in r.cells:
        row.append(cell_text(c) + (f" ({merged_peak_text(c)})" if merge_peak and c.pct_peak is not None else ""))
        style.append("" if c.status == "ok" else STYLE_STATUS)
        if show_peak:
            row.append(peak_text(c))
            style.append("")
    for i in others:
        g = r.gaps.get(i)
        row.append(gap_text(g, interval=True) if g is not None else "—")
        style.append(gap_style(g) if g is not None else "")
    if has_published:
        row.append("; ".join(f"{comp.platforms[i].name}: {published_text(pg)}" for i, pg in r.published.items())
                   or "—")
        style.append("")
    return row, style


def merged_peak_text(cell) -> str:
    """% of peak inside a value cell, said as what it is: '66.3% of peak', '12.0% MFU'."""
    text = peak_text(cell)
    return text if cell.peak_kind == "MFU" else f"{text} of peak"


def basis_line(comp: Comparison) -> str:
    """Which spread judged the gaps, and how many each: 'Judged by: history n=5 (9 gaps), cpu default (2 gaps).'"""
    bases = comp.takeaway.spread_bases
    if not bases:
        return ""
    return "Judged by: " + ", ".join(f"{b} ({n} gap{'s' * (n != 1)})" for b, n in bases) + "."


def flagged_table(comp: Comparison) -> Table | None:
    """The rows the host watch flagged, with its reason, and the training steps that ran on subnormal gradients,
    per platform: why their gaps have no verdict."""
    rows = []
    for r in comp.rows:
        for i, c in enumerate(r.cells):
            m = c.measurement
            if m is not None and m.ok and m.flagged:
                reasons = "; ".join(str(x) for x in (m.host_watch or {}).get("reasons", [])) or "flagged"
                rows.append([comp.platforms[i].name, row_label(r), reasons])
            if m is not None and m.subnormal:
                rows.append([comp.platforms[i].name, row_label(r), m.subnormal])
    if not rows:
        return None
    return Table(["platform", "row", "why no verdict"], rows, numeric=(),
                 title="measured on a disturbed host or on subnormal gradients (†: no verdict unless "
                       "--allow-flagged)")


def efficiency_table(comp: Comparison) -> Table | None:
    """Throughput per watt and per dollar, per platform; None when no row is a rate."""
    rate_rows = [r for r in comp.rows if r.higher_is_better and per_unit(r.unit)]
    if not rate_rows or efficiency_note(comp):
        return None
    shown = [i for i, p in enumerate(comp.platforms) if not p.reference]
    headers = ["workload"]
    for i in shown:
        headers += [f"{comp.platforms[i].name} per W", f"{comp.platforms[i].name} per $"]
    rows = []
    for r in rate_rows:
        row = [row_label(r)]
        for i in shown:
            c, p = r.cells[i], comp.platforms[i]
            if c.status != "ok":
                row += [c.status, c.status]
                continue
            row.append(f"{fmt_num(c.per_watt)} {r.unit}/W" if c.per_watt is not None else "not measured")
            row.append(f"{fmt_num(c.per_dollar)} {per_unit(r.unit)}/$" if c.per_dollar is not None
                       else ("no price (--price)" if p.price_usd_per_hour is None else "n/a"))
        rows.append(row)
    return Table(headers, rows, title="efficiency")


def efficiency_note(comp: Comparison) -> str | None:
    """One line instead of an empty efficiency table: no power measured anywhere and no price known."""
    any_power = any(c.per_watt is not None for r in comp.rows for c in r.cells)
    any_price = any(p.price_usd_per_hour for p in comp.platforms if not p.reference)
    if any_power or any_price:
        return None
    return ("Efficiency: throughput per watt not measured (no energy counter was readable on any input); "
            "throughput per dollar needs a price: --price NAME=USD_PER_HOUR.")


def prices_line(comp: Comparison) -> str:
    parts = []
    for p in comp.platforms:
        if p.reference:
            continue
        if p.price_usd_per_hour:
            parts.append(f"{p.name}: ${p.price_usd_per_hour:.2f}/h ({p.price_source})")
        else:
            parts.append(f"{p.name}: no price")
    return "Prices: " + "; ".join(parts)


def failures(comp: Comparison) -> Table | None:
    """Platform, row, status and reason of every non-ok measurement, including those only one side ran. Rows of
    one workload that failed with one status and one reason (the metrics of a failed inference point) are one
    line, with what varies among them, so that a reason is never repeated row after row."""
    rows, styles = [], []
    for p in comp.platforms:
        groups: dict[tuple, list] = {}
        for m in p.result_set.measurements:
            if not m.ok:
                groups.setdefault((m.workload, m.status, one_line(m.reason)), []).append(m.variant or {})
        for (workload, status, reason), variants in groups.items():
            rows.append([p.name, _failed_rows_label(workload, variants), status, reason])
            styles.append(["", "", status, ""])
    return Table(["platform", "row", "status", "reason"], rows, text_columns=4, title="failures",
                 styles=styles) if rows else None


def _failed_rows_label(workload: str, variants: list[dict]) -> str:
    """'gemm dtype=tf32 m=1024': one row; 'llm-infer batch_size=8 … (12 rows: metric=ttft_ms, …)' for several."""
    same, what = shared_and_varying(variants)
    label = workload + (" " + " ".join(f"{k}={v}" for k, v in same.items()) if same else "")
    if len(variants) == 1:
        return label
    return f"{label} ({len(variants)} rows{': ' + what if what else ''})"


def _flat(d, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(_flat(v, key))
            else:
                out[key] = _scalar(v)
    return out


def _scalar(v) -> str:
    if v is None:
        return "—"
    if isinstance(v, (list, tuple)):
        return ", ".join(_scalar(x) for x in v) if all(not isinstance(x, (dict, list)) for x in v) else json.dumps(v)
    if isinstance(v, dict):
        return json.dumps(v) if v else "—"
    return one_line(str(v))


def environment_table(comp: Comparison) -> Table:
    """Host and device identity side by side; keys where the platforms differ come first."""
    flats = []
    for p in comp.platforms:
        rs = p.result_set
        f = {"run.run_id": rs.run_id, "run.started_at": rs.started_at or "—", "run.suite": rs.suite or "—",
             "run.gapbench": rs.gapbench_version, "run.complete": str(rs.complete),
             "spec.matched": (f"{p.spec.key} ({p.spec.name}, confidence {p.spec.confidence})" if p.spec else "none")}
        f.update(_flat(rs.host, "host"))
        f.update(_flat(rs.device, "device"))
        flats.append(f)
    keys: list[str] = []
    for f in flats:
        for k in f:
            if k not in keys:
                keys.append(k)
    differ = [k for k in keys if len({f.get(k, "—") for f in flats}) > 1]
    same = [k for k in keys if k not in differ]
    headers = ["field"] + [p.name for p in comp.platforms]
    rows = [[k] + [f.get(k, "—") for f in flats] for k in differ + same]
    return Table(headers, rows, text_columns=len(headers), styles=[["differs"] * len(headers)] * len(differ))
