"""Inline SVG plots drawn in plain Python: the gap bar chart and the roofline. No JS, no fonts, no network."""

from __future__ import annotations

import math
from html import escape

from gapbench.compare import Comparison, arithmetic_intensity, flop_rate, measurement_dtype
from gapbench.report.kit import STYLE_BETTER, STYLE_WORSE, fmt_num, fmt_pct, gap_text, row_label

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")
# gap bars: green for better, red for worse (faint when within noise), grey when significance is unknown
GAP_COLORS = {STYLE_BETTER: "#2ca02c", STYLE_WORSE: "#d62728"}
UNKNOWN_COLOR = "#888888"


def _t(x: float) -> str:
    return f"{x:.1f}"


def gap_bars(comp: Comparison, width: int = 760) -> str:
    """Horizontal bars, one per row and non-baseline platform: green when better, red when worse, faint when
    the CIs overlap (could be noise), grey when one side has no interval."""
    items = []
    for r in comp.rows:
        for i, g in r.gaps.items():
            if g.pct is not None:
                items.append((row_label(r), comp.platforms[i].name, i, g))
    if not items:
        return '<p class="muted">No numeric gaps to plot.</p>'
    label_w, bar_h, gap_h, top, val_w = 330, 16, 6, 28, 80
    plot_w = width - label_w - val_w - 10
    lo = min(0.0, min(g.pct for *_, g in items))
    hi = max(0.0, max(g.pct for *_, g in items))
    span = (hi - lo) or 1.0
    lo, hi = lo - span * 0.05, hi + span * 0.05
    height = top + len(items) * (bar_h + gap_h) + 30

    def x(v: float) -> float:
        return label_w + (v - lo) / (hi - lo) * plot_w

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="gap per row against {escape(comp.base.name)}">',
           f'<text x="{label_w}" y="16" class="axis">gap against {escape(comp.base.name)} (&gt; 0: better; '
           'green better, red worse, faint: could be noise, grey: significance unknown)</text>']
    x0 = x(0.0)
    for j, (label, pname, _i, g) in enumerate(items):
        y = top + j * (bar_h + gap_h)
        color = UNKNOWN_COLOR if g.overlap is None else GAP_COLORS[STYLE_BETTER if g.pct >= 0 else STYLE_WORSE]
        xa, xb = sorted((x0, x(g.pct)))
        opacity = "0.3" if g.overlap else "0.9"
        full = f"{label} · {pname}"
        shown = full if len(full) <= 44 else full[:43] + "…"
        out.append(f'<text x="{label_w - 6}" y="{_t(y + bar_h - 4)}" text-anchor="end" class="lbl">'
                   f'<title>{escape(full)}</title>{escape(shown)}</text>')
        out.append(f'<rect x="{_t(xa)}" y="{y}" width="{_t(max(xb - xa, 1))}" height="{bar_h}" fill="{color}" '
                   f'fill-opacity="{opacity}"><title>{escape(full)}: {escape(gap_text(g))}</title></rect>')
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


def roofline(comp: Comparison, index: int, width: int = 560, height: int = 380) -> str | None:
    """Log-log roofline of one platform: peaks from its spec, its ok measurements placed by FLOP/byte and FLOP/s."""
    p = comp.platforms[index]
    points = _roofline_points(comp, index)
    if not points:
        return None
    spec = p.spec
    dtypes = sorted({d for *_, d in points})
    peaks = {d: v for d in dtypes if (v := spec.peak_tflops(d) if spec else None)}
    bw = spec.bandwidth_tbs if spec else None
    xs = [a for a, *_ in points]
    ys = [f for _, f, *_ in points] + list(peaks.values())
    xmin, xmax, ymin, ymax = min(xs) / 4, max(xs) * 4, min(ys) / 4, max(ys) * 2
    if bw:
        for v in peaks.values():
            xmin, xmax = min(xmin, v / bw / 4), max(xmax, v / bw * 4)
        ymin = min(ymin, bw * xmin)
    if not _log_range(xmin, xmax) or not _log_range(ymin, ymax):
        return None  # numbers no log axis can hold (beyond a double, or down to zero): no plot
    ax = _LogAxes(width, height, (xmin, xmax), (ymin, ymax))
    out = ax.frame(f"roofline of {p.name}")
    left, top, pw, ph = ax.left, ax.top, ax.pw, ax.ph
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle" class="axis">arithmetic intensity '
               '(FLOP/byte)</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" class="axis" '
               f'transform="rotate(-90 14 {top + ph / 2})">achieved TFLOP/s</text>')
    for d, peak in sorted(peaks.items(), key=lambda kv: kv[1]):
        color = PALETTE[dtypes.index(d) % len(PALETTE)]
        x_start = ax.X(peak / bw) if bw and peak / bw > xmin else left
        out.append(f'<line x1="{_t(x_start)}" y1="{_t(ax.Y(peak))}" x2="{left + pw}" y2="{_t(ax.Y(peak))}" '
                   f'stroke="{color}" stroke-width="2"/><text x="{left + pw - 4}" y="{_t(ax.Y(peak) - 4)}" '
                   f'text-anchor="end" class="axis" style="fill:{color}">'
                   f'{escape(d)} peak {escape(fmt_num(peak, 4))} TFLOP/s</text>')
    if bw and peaks:  # the memory roof, once, up to the highest ridge point
        top_peak = max(peaks.values())
        xa = max(xmin, ymin / bw)
        out.append(f'<line x1="{_t(ax.X(xa))}" y1="{_t(ax.Y(bw * xa))}" x2="{_t(ax.X(top_peak / bw))}" '
                   f'y2="{_t(ax.Y(top_peak))}" stroke="#555" stroke-width="2"/>')
    note = (f"memory {fmt_num(bw, 3)} TB/s" if bw else
            "memory bandwidth unknown: no slanted roof" if peaks else "no spec matched: measurements only")
    out.append(f'<text x="{left + pw - 4}" y="{top + ph - 6}" text-anchor="end" class="axis">{escape(note)}</text>')
    for ai, tf, label, d in points:
        color = PALETTE[dtypes.index(d) % len(PALETTE)]
        out.append(f'<circle cx="{_t(ax.X(ai))}" cy="{_t(ax.Y(tf))}" r="4" fill="{color}"><title>{escape(label)}: '
                   f'{escape(fmt_num(tf, 4))} TFLOP/s at {escape(fmt_num(ai, 3))} FLOP/byte</title></circle>')
    out.append("</svg>")
    return "".join(out)
