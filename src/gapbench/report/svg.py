"""Inline SVG plots drawn in plain Python: the gap bar chart and the roofline. No JS, no fonts, no network."""

from __future__ import annotations

import math
from html import escape

from gapbench.compare import Comparison, arithmetic_intensity, flop_rate, measurement_dtype
from gapbench.devices.dtypes import DTYPE_NAMES
from gapbench.report.kit import STYLE_BETTER, STYLE_WORSE, fmt_num, fmt_pct, gap_text, row_label

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
# one colour per dtype in every report, whatever dtypes a report holds or their order in it
DTYPE_COLORS = {"fp64": "#8c564b", "fp32": "#1f77b4", "tf32": "#17becf", "bf16": "#d62728", "fp16": "#ff7f0e",
                "fp8": "#9467bd", "int8": "#2ca02c"}
OTHER_DTYPE_COLOR = "#e377c2"
CHAR_W = 6.6  # px per character of the 11px labels, an upper bound for a sans-serif face: text is sized by it
LINE_H = 14
# gap bars: green for better, red for worse (faint when within noise), grey when significance is unknown
GAP_COLORS = {STYLE_BETTER: "#2ca02c", STYLE_WORSE: "#d62728"}
UNKNOWN_COLOR = "#888888"


def _t(x: float) -> str:
    return f"{x:.1f}"


def dtype_color(dtype: str) -> str:
    return DTYPE_COLORS.get(dtype, OTHER_DTYPE_COLOR)


def text_width(text: str) -> float:
    """The width an 11px label takes at most, in px."""
    return len(text) * CHAR_W


def wrap(text: str, width: float) -> list[str]:
    """Words in lines that fit `width` px (a word longer than that stands alone)."""
    lines: list[str] = []
    for word in text.split():
        if lines and text_width(lines[-1] + " " + word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def gap_bars(comp: Comparison, plot_w: int = 400) -> str:
    """Horizontal bars, one per row and non-baseline platform: green when better, red when worse, faint when
    the gap could be noise, grey when there is no verdict. Sized to its text: no label, value or title is cut."""
    items = []
    for r in comp.rows:
        for i, g in r.gaps.items():
            if g.pct is not None:
                items.append((f"{row_label(r)} · {comp.platforms[i].name}", g))
    if not items:
        return '<p class="muted">No numeric gaps to plot.</p>'
    bar_h, gap_h = 16, 6
    label_w = math.ceil(max(text_width(label) for label, _ in items)) + 12
    val_w = math.ceil(max(text_width(gap_text(g)) for _, g in items)) + 12
    width = label_w + plot_w + val_w
    title = wrap(f"gap against {comp.base.name} (> 0: better; green better, red worse, faint: could be noise, "
                 "grey: no verdict)", width - 8)
    top = 10 + LINE_H * len(title)
    lo = min(0.0, min(g.pct for _, g in items))
    hi = max(0.0, max(g.pct for _, g in items))
    span = (hi - lo) or 1.0
    lo, hi = lo - span * 0.05, hi + span * 0.05
    height = top + len(items) * (bar_h + gap_h) + 30

    def x(v: float) -> float:
        return label_w + (v - lo) / (hi - lo) * plot_w

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="gap per row against {escape(comp.base.name)}">']
    out += [f'<text x="4" y="{14 + LINE_H * k}" class="axis">{escape(line)}</text>' for k, line in enumerate(title)]
    x0 = x(0.0)
    for j, (label, g) in enumerate(items):
        y = top + j * (bar_h + gap_h)
        color = UNKNOWN_COLOR if g.overlap is None else GAP_COLORS[STYLE_BETTER if g.pct >= 0 else STYLE_WORSE]
        xa, xb = sorted((x0, x(g.pct)))
        opacity = "0.3" if g.overlap else "0.9"
        out.append(f'<text x="{label_w - 6}" y="{_t(y + bar_h - 4)}" text-anchor="end" class="lbl">{escape(label)}</text>')
        out.append(f'<rect x="{_t(xa)}" y="{y}" width="{_t(max(xb - xa, 1))}" height="{bar_h}" fill="{color}" '
                   f'fill-opacity="{opacity}"><title>{escape(label)}: {escape(gap_text(g))}</title></rect>')
        out.append(f'<text x="{width - 4}" y="{_t(y + bar_h - 4)}" text-anchor="end" class="val">{escape(gap_text(g))}</text>')
    out.append(f'<line x1="{_t(x0)}" y1="{top - 4}" x2="{_t(x0)}" y2="{height - 24}" stroke="#333" stroke-width="1"/>')
    for v in _nice_ticks(lo, hi):
        out.append(f'<text x="{_t(x(v))}" y="{height - 8}" text-anchor="middle" class="axis">{escape(fmt_pct(v))}</text>')
    out.append("</svg>")
    return "".join(out)


def _nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    span = hi - lo
    if span <= 0:
        return [lo]
    raw = span / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(s * mag for s in (1, 2, 5, 10) if s * mag >= raw)
    start = math.ceil(lo / step) * step
    ticks, v = [], start
    while v <= hi + 1e-9:
        ticks.append(round(v, 10))
        v += step
    return ticks


def _roofline_points(comp: Comparison, index: int) -> list[tuple[float, float, str, str]]:
    """(FLOP/byte, TFLOP/s, label, dtype) of every ok measurement of one platform that has both counts."""
    points = []
    for r in comp.rows:
        c = r.cells[index]
        if c.status != "ok":
            continue
        m = c.measurement
        ai, fr = arithmetic_intensity(m), flop_rate(m)
        if ai and fr and math.isfinite(ai) and ai > 0:
            points.append((ai, fr / 1e12, row_label(r), measurement_dtype(m)))
    return points


def _log_range(lo: float, hi: float) -> bool:
    return 0 < lo < hi and math.isfinite(hi)


class _LogAxes:
    """Log-log plot coordinates and their grid."""

    left, right, top, bottom = 64, 16, 24, 44

    def __init__(self, width: int, height: int, x: tuple[float, float], y: tuple[float, float]):
        self.width, self.height = width, height
        self.lx0, self.lx1, self.ly0, self.ly1 = (math.log10(x[0]), math.log10(x[1]), math.log10(y[0]),
                                                  math.log10(y[1]))
        self.pw, self.ph = width - self.left - self.right, height - self.top - self.bottom

    def X(self, v: float) -> float:
        return self.left + (math.log10(v) - self.lx0) / (self.lx1 - self.lx0) * self.pw

    def Y(self, v: float) -> float:
        return self.top + self.ph - (math.log10(v) - self.ly0) / (self.ly1 - self.ly0) * self.ph

    def frame(self, label: str) -> list[str]:
        left, top, pw, ph, w, h = self.left, self.top, self.pw, self.ph, self.width, self.height
        out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
               f'role="img" aria-label="{escape(label)}">',
               f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
        for e in range(math.ceil(self.lx0), math.floor(self.lx1) + 1):
            x = _t(self.X(10**e))
            out.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{top + ph}" class="grid"/><text x="{x}" '
                       f'y="{top + ph + 16}" text-anchor="middle" class="axis">{escape(fmt_num(10.0**e, 3))}</text>')
        for e in range(math.ceil(self.ly0), math.floor(self.ly1) + 1):
            y = _t(self.Y(10**e))
            out.append(f'<line x1="{left}" y1="{y}" x2="{left + pw}" y2="{y}" class="grid"/><text x="{left - 4}" '
                       f'y="{_t(self.Y(10**e) + 4)}" text-anchor="end" class="axis">{escape(fmt_num(10.0**e, 3))}</text>')
        return out


def _peak_labels(peaks: dict[str, float], ax: _LogAxes) -> list[tuple[float, float, str, str]]:
    """(y of the roof, y of its label, label, colour) per distinct peak: dtypes with the same peak share one
    label, and labels are pushed apart so that none overprints another."""
    by_value: dict[float, list[str]] = {}
    for d, v in peaks.items():
        by_value.setdefault(v, []).append(d)
    out, last = [], 1e9
    for v in sorted(by_value):  # the lowest roof first; a label too close to the one below moves up
        ds = sorted(by_value[v], key=_dtype_order)
        y = min(ax.Y(v) - 4, last - LINE_H)
        last = y
        out.append((ax.Y(v), y, f"{'/'.join(ds)} peak {fmt_num(v, 4)} TFLOP/s", dtype_color(ds[0])))
    return out


def _label_xs(peaks: dict[str, float], starts: dict[str, float]) -> list[float]:
    """Where each _peak_labels label starts: at the left end of its roof (the rightmost start of the dtypes
    that share it), in _peak_labels' order."""
    by_value: dict[float, list[str]] = {}
    for d, v in peaks.items():
        by_value.setdefault(v, []).append(d)
    return [max(starts[d] for d in by_value[v]) for v in sorted(by_value)]


def _dtype_order(d: str) -> int:
    return DTYPE_NAMES.index(d) if d in DTYPE_NAMES else len(DTYPE_NAMES)


def _legend(dtypes: list[str], roof_note: str, x0: float, width: float) -> tuple[list[str], float]:
    """The legend below the plot: a dot (a measurement) and a line (its dtype's peak) per dtype, then the memory
    roof. Returns its SVG and its height."""
    entries = [(d, d) for d in sorted(dtypes, key=_dtype_order)]
    entries += [("", roof_note), (None, "dot: a measurement; flat line: its dtype's peak")]
    out, x, y = [], x0, 0.0
    for d, label in entries:
        w = (24 if d is not None else 0) + text_width(label) + 16
        if x > x0 and x + w > width:
            x, y = x0, y + LINE_H + 4
        if d:
            c = dtype_color(d)
            out.append(f'<circle cx="{_t(x + 4)}" cy="{_t(y - 4)}" r="4" fill="{c}"/><line x1="{_t(x + 10)}" '
                       f'y1="{_t(y - 4)}" x2="{_t(x + 20)}" y2="{_t(y - 4)}" stroke="{c}" stroke-width="2"/>')
        elif d == "":
            out.append(f'<line x1="{_t(x)}" y1="{_t(y)}" x2="{_t(x + 20)}" y2="{_t(y - 8)}" stroke="#555" '
                       'stroke-width="2"/>')
        tx = x + (24 if d is not None else 0)
        out.append(f'<text x="{_t(tx)}" y="{_t(y)}" class="axis">{escape(label)}</text>')
        x += w
    return out, y + LINE_H


def roofline(comp: Comparison, index: int, width: int = 560, height: int = 380) -> str | None:
    """Log-log roofline of one platform: peaks from its spec, its ok measurements placed by FLOP/byte and FLOP/s,
    a colour per dtype (the same in every report) and a legend."""
    p = comp.platforms[index]
    points = _roofline_points(comp, index)
    if not points:
        return None
    spec = p.spec
    dtypes = sorted({d for *_, d in points}, key=_dtype_order)
    peaks = {d: v for d in dtypes if (v := spec.peak_tflops(d) if spec else None)}
    bw = spec.bandwidth_tbs if spec else None
    xs = [a for a, *_ in points]
    ys = [f for _, f, *_ in points] + list(peaks.values())
    xmin, xmax, ymin, ymax = min(xs) / 4, max(xs) * 4, min(ys) / 4, max(ys) * 2 * 1.6 ** max(len(peaks) - 1, 0)
    if bw:
        for v in peaks.values():
            xmin, xmax = min(xmin, v / bw / 4), max(xmax, v / bw * 4)
        ymin = min(ymin, bw * xmin)
    if not _log_range(xmin, xmax) or not _log_range(ymin, ymax):
        return None  # numbers no log axis can hold (beyond a double, or down to zero): no plot
    note = (f"memory {fmt_num(bw, 3)} TB/s (slanted roof)" if bw else
            "memory bandwidth unknown: no slanted roof" if peaks else "no spec matched: measurements only")
    legend, legend_h = _legend(dtypes, note, 0, width - 32)
    ax = _LogAxes(width, height, (xmin, xmax), (ymin, ymax))
    total_h = height + legend_h + 6
    out = ax.frame(f"roofline of {p.name}")
    out[0] = out[0].replace(f'height="{height}" viewBox="0 0 {width} {height}"',
                            f'height="{_t(total_h)}" viewBox="0 0 {width} {_t(total_h)}"')
    left, top, pw, ph = ax.left, ax.top, ax.pw, ax.ph
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle" class="axis">arithmetic intensity '
               '(FLOP/byte)</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" class="axis" '
               f'transform="rotate(-90 14 {top + ph / 2})">achieved TFLOP/s</text>')
    starts = {d: ax.X(peak / bw) if bw and peak / bw > xmin else left for d, peak in peaks.items()}
    for d, peak in sorted(peaks.items(), key=lambda kv: kv[1]):
        out.append(f'<line x1="{_t(starts[d])}" y1="{_t(ax.Y(peak))}" x2="{left + pw}" y2="{_t(ax.Y(peak))}" '
                   f'stroke="{dtype_color(d)}" stroke-width="2"/>')
    # labels at the roof's left end, where the measurements under a flat roof are rarely (those sit near or past
    # the ridge); moved apart so that none overprints another
    for (_, y, label, color), x in zip(_peak_labels(peaks, ax), _label_xs(peaks, starts), strict=True):
        out.append(f'<text x="{_t(x + 4)}" y="{_t(y)}" class="axis" style="fill:{color}">{escape(label)}</text>')
    if bw and peaks:  # the memory roof, once, up to the highest ridge point
        top_peak = max(peaks.values())
        xa = max(xmin, ymin / bw)
        out.append(f'<line x1="{_t(ax.X(xa))}" y1="{_t(ax.Y(bw * xa))}" x2="{_t(ax.X(top_peak / bw))}" '
                   f'y2="{_t(ax.Y(top_peak))}" stroke="#555" stroke-width="2"/>')
    for ai, tf, label, d in points:
        out.append(f'<circle cx="{_t(ax.X(ai))}" cy="{_t(ax.Y(tf))}" r="4" fill="{dtype_color(d)}"><title>'
                   f'{escape(label)}: {escape(fmt_num(tf, 4))} TFLOP/s at {escape(fmt_num(ai, 3))} FLOP/byte</title>'
                   '</circle>')
    out.append(f'<g transform="translate(16 {height + 12})">' + "".join(legend) + "</g>")
    out.append("</svg>")
    return "".join(out)
