"""The words and the waterfall of gap attribution (assess.attribution): for each traced model row, what each
class of work contributes to its measured gap, in percentage points, and the residual the step model leaves.
Numbers come from the Attribution objects, computed once per comparison; nothing is recomputed here."""

from __future__ import annotations

from html import escape

from gapbench.assess.attribution import Attribution, attributions
from gapbench.compare import Comparison
from gapbench.report.kit import (
    STYLE_BETTER,
    STYLE_WORSE,
    Table,
    fmt_num,
    gap_text,
    html_table,
    md_cell,
    md_table,
    rich_table,
    rich_text,
)
from gapbench.report.svg import GAP_COLORS, LINE_H, UNKNOWN_COLOR, _nice_ticks, _t, text_width, wrap

LEGEND = ("Each class contributes (modelled seconds on the baseline − on the other side) / the other side's "
          "measured seconds per iteration, in percentage points of the measured gap (> 0: the other side is "
          "faster); the residual is the measured gap minus the explained parts, never put into a class. "
          "Intervals: the rates' draws (the residual's also the measured gap's). See docs/compare.md.")


def of(comp: Comparison) -> tuple[list[Attribution], list[str]]:
    """The comparison's attributions and notes, computed on first use (each traces its models once)."""
    cached = getattr(comp, "_attributions", None)
    if cached is None:
        cached = attributions(comp)
        comp._attributions = cached
    return cached


def pp_text(pp: float | None, lo: float | None = None, hi: float | None = None) -> str:
    if pp is None:
        return "unexplained"
    out = f"{pp:+.1f} pp".replace("-", "−")
    if lo is not None and hi is not None:
        out += f" [{lo:+.1f}, {hi:+.1f}]".replace("-", "−")
    return out


def _ms(s: float | None) -> str:
    return "—" if s is None else fmt_num(s * 1e3)


def title(a: Attribution) -> str:
    return (f"{a.workload} ({a.names[1]} against {a.names[0]}): measured {gap_text(a.gap, interval=True)}, "
            f"{fmt_num(a.measured_s[0] * 1e3)} → {fmt_num(a.measured_s[1] * 1e3)} ms per iteration; modelled "
            f"{_ms(a.modelled_s[0])} → {_ms(a.modelled_s[1])} ms")


def table(a: Attribution) -> Table:
    rows = [[p.name, _ms(p.seconds[0]), _ms(p.seconds[1]), pp_text(p.pp, p.lo, p.hi),
             "; ".join(p.missing) if p.missing else ", ".join(p.rates)] for p in a.parts]
    held = f" (holds the unexplained: {', '.join(a.unexplained)})" if a.unexplained else ""
    rows.append(["residual (measured − modelled)", "", "", pp_text(a.residual, a.residual_lo, a.residual_hi),
                 f"not modelled{held}"])
    rows.append(["measured gap", fmt_num(a.measured_s[0] * 1e3), fmt_num(a.measured_s[1] * 1e3),
                 pp_text(a.measured_pct), ""])
    t = Table(["class", f"{a.names[0]} ms", f"{a.names[1]} ms", "contribution", "rates used / missing"], rows,
              numeric=(1, 2, 3))  # the rates column is text: left-aligned, wrapped
    t.title = title(a)
    return t


def terminal_renderables(comp: Comparison) -> list:
    atts, notes = of(comp)
    if not atts and not notes:
        return []
    out: list = [rich_text("gap attribution (step model over the traced iteration)", style="bold")]
    for a in atts:
        out.append(rich_table(table(a)))
    out += [rich_text(n, style="dim") for n in notes]
    out.append(rich_text(LEGEND, style="dim"))
    return out


def markdown_lines(comp: Comparison) -> list[str]:
    atts, notes = of(comp)
    if not atts and not notes:
        return []
    out = ["", "#### Gap attribution", ""]
    for a in atts:
        t = table(a)
        out += [md_cell(t.title), ""] + md_table(t) + [""]
    out += [f"- {md_cell(n)}" for n in notes]
    return out + ["", md_cell(LEGEND)]


def json_document(comp: Comparison) -> list[dict] | None:
    atts, notes = of(comp)
    if not atts and not notes:
        return None
    return [a.to_dict() | {"measured_gap_text": gap_text(a.gap, interval=True)} for a in atts] + [
        {"note": n} for n in notes]


CSV_FIELDS = ("part", "part_s_baseline", "part_s_other", "contribution_pp", "contribution_low", "contribution_high",
              "part_rates")


def csv_rows(comp: Comparison) -> list[tuple[dict, list]]:
    """(the common fields, the attribution fields) of one line per traced model row and part, the residual and
    the measured gap included: `platform` is the side set against the baseline, `reason` what a side lacks."""
    atts, _ = of(comp)
    out = []
    for a in atts:
        common = {"workload": a.workload, "variant": a.variant, "unit": "pp", "platform": a.names[1],
                  "baseline": False, "status": "ok"}
        for p in a.parts:
            out.append((common | {"reason": "; ".join(p.missing)},
                        [p.name, p.seconds[0], p.seconds[1], p.pp, p.lo, p.hi, "; ".join(p.rates)]))
        held = f"holds the unexplained: {', '.join(a.unexplained)}" if a.unexplained else ""
        out.append((common | {"reason": held}, ["residual", None, None, a.residual, a.residual_lo, a.residual_hi,
                                                 ""]))
        out.append((common, ["measured gap", a.measured_s[0], a.measured_s[1], a.measured_pct, a.gap.lo, a.gap.hi,
                             ""]))
    return out


def html_parts(comp: Comparison) -> list[str]:
    atts, notes = of(comp)
    if not atts and not notes:
        return []
    out = ["<h2>Gap attribution</h2>"]
    for a in atts:
        t = table(a)
        out.append(f"<figure>{waterfall(a)}<figcaption>{escape(t.title)}</figcaption></figure>")
        out.append(html_table(t))
    out += [f'<p class="muted">{escape(n)}</p>' for n in notes]
    out.append(f'<p class="muted">{escape(LEGEND)}</p>')
    return out


def waterfall(a: Attribution, plot_w: int = 420) -> str:
    """One bar per class from where the previous one ended, then the residual, then the measured gap from zero:
    green where the part makes the other side faster, red where slower, grey for the residual; an unexplained
    class is a label without a bar. Sized to its text."""
    steps = [(p.name, p.pp, p.lo, p.hi) for p in a.parts]
    steps.append(("residual", a.residual, a.residual_lo, a.residual_hi))
    labels = [s[0] for s in steps] + ["measured gap"]
    values = [pp_text(pp, lo, hi) for _, pp, lo, hi in steps] + [pp_text(a.measured_pct)]
    label_w = max(text_width(x) for x in labels) + 12
    val_w = max(text_width(x) for x in values) + 12
    width = int(label_w + plot_w + val_w)
    head = wrap(f"{a.workload}: {a.names[1]} against {a.names[0]}, percentage points of the measured gap", width - 8)
    top, bar_h, gap_h = 10 + LINE_H * len(head), 16, 6
    ends, at = [0.0], 0.0
    for _, pp, _, _ in steps:
        at += pp or 0.0
        ends.append(at)
    lo, hi = min(0.0, *ends, a.measured_pct), max(0.0, *ends, a.measured_pct)
    span = (hi - lo) or 1.0
    lo, hi = lo - span * 0.05, hi + span * 0.05
    height = top + len(labels) * (bar_h + gap_h) + 30

    def x(v: float) -> float:
        return label_w + (v - lo) / (hi - lo) * plot_w

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="gap attribution of {escape(a.workload)}">']
    out += [f'<text x="4" y="{14 + LINE_H * k}" class="axis">{escape(line)}</text>' for k, line in enumerate(head)]
    bars = [(ends[j], ends[j + 1], steps[j][1] is None, j == len(steps) - 1) for j in range(len(steps))]
    bars.append((0.0, a.measured_pct, False, False))
    for j, (start, end, unexplained, residual) in enumerate(bars):
        y = top + j * (bar_h + gap_h)
        out.append(f'<text x="{_t(label_w - 6)}" y="{_t(y + bar_h - 4)}" text-anchor="end" class="lbl">'
                   f"{escape(labels[j])}</text>")
        if not unexplained:
            color = UNKNOWN_COLOR if residual else GAP_COLORS[STYLE_BETTER if end >= start else STYLE_WORSE]
            xa, xb = sorted((x(start), x(end)))
            out.append(f'<rect x="{_t(xa)}" y="{y}" width="{_t(max(xb - xa, 1))}" height="{bar_h}" fill="{color}" '
                       f'fill-opacity="0.85"><title>{escape(labels[j])}: {escape(values[j])}</title></rect>')
        out.append(f'<text x="{width - 4}" y="{_t(y + bar_h - 4)}" text-anchor="end" class="val">'
                   f"{escape(values[j])}</text>")
    out.append(f'<line x1="{_t(x(0))}" y1="{top - 4}" x2="{_t(x(0))}" y2="{height - 24}" stroke="#333" '
               'stroke-width="1"/>')
    out += [f'<text x="{_t(x(v))}" y="{height - 8}" text-anchor="middle" class="axis">{escape(f"{v:+g} pp".replace("-", "−"))}</text>'
            for v in _nice_ticks(lo, hi)]
    out.append("</svg>")
    return "".join(out)
