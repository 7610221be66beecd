"""Inline SVG plots drawn in plain Python: the gap bar chart and the roofline. No JS, no fonts, no network."""

from __future__ import annotations

import math
from html import escape

from gapbench.compare import Comparison, arithmetic_intensity, flop_rate, fmt_num, fmt_pct, measurement_dtype

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2")


def _t(x: float) -> str:
    return f"{x:.1f}"


def gap_bars(comp: Comparison, width: int = 760) -> str:
    """Horizontal bars, one per row and non-baseline platform; faint when the CIs overlap."""
    items = []
    for r in comp.rows:
        for i, g in r.gaps.items():
            if g.pct is not None:
                items.append((r.label, comp.platforms[i].name, i, g))
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
           'faint: could be noise)</text>']
    x0 = x(0.0)
    for j, (label, pname, i, g) in enumerate(items):
        y = top + j * (bar_h + gap_h)
        color = PALETTE[i % len(PALETTE)]
        xa, xb = sorted((x0, x(g.pct)))
        opacity = "0.35" if g.overlap else "0.9"
        full = f"{label} · {pname}"
        shown = full if len(full) <= 44 else full[:43] + "…"
        out.append(f'<text x="{label_w - 6}" y="{_t(y + bar_h - 4)}" text-anchor="end" class="lbl">'
                   f'<title>{escape(full)}</title>{escape(shown)}</text>')
        out.append(f'<rect x="{_t(xa)}" y="{y}" width="{_t(max(xb - xa, 1))}" height="{bar_h}" fill="{color}" '
                   f'fill-opacity="{opacity}"><title>{escape(full)}: {escape(g.text)}</title></rect>')
        out.append(f'<text x="{width - 4}" y="{_t(y + bar_h - 4)}" text-anchor="end" class="val">{escape(g.text)}</text>')
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


def roofline(comp: Comparison, index: int, width: int = 560, height: int = 380) -> str | None:
    """Log-log roofline of one platform: peaks from its spec, its ok measurements placed by FLOP/byte and FLOP/s."""
    p = comp.platforms[index]
    points = []
    for r in comp.rows:
        c = r.cells[index]
        if c.status != "ok":
            continue
        m = c.measurement
        ai, fr = arithmetic_intensity(m), flop_rate(m)
        if ai and fr and math.isfinite(ai) and ai > 0:
            points.append((ai, fr / 1e12, r.label, measurement_dtype(m)))
    if not points:
        return None
    spec = p.spec
    dtypes = sorted({d for *_, d in points})
    peaks = {d: spec.peak_tflops(d) for d in dtypes} if spec else {}
    peaks = {d: v for d, v in peaks.items() if v}
    bw = spec.bandwidth_tbs if spec else None
    xs = [a for a, *_ in points]
    ys = [f for _, f, *_ in points] + list(peaks.values())
    xmin, xmax = min(xs) / 4, max(xs) * 4
    ymin, ymax = min(ys) / 4, max(ys) * 2
    if bw:
        for v in peaks.values():
            xmin, xmax = min(xmin, v / bw / 4), max(xmax, v / bw * 4)
        ymin = min(ymin, bw * xmin)
    lx0, lx1, ly0, ly1 = math.log10(xmin), math.log10(xmax), math.log10(ymin), math.log10(ymax)
    left, right, top, bottom = 64, 16, 24, 44
    pw, ph = width - left - right, height - top - bottom

    def X(v):
        return left + (math.log10(v) - lx0) / (lx1 - lx0) * pw

    def Y(v):
        return top + ph - (math.log10(v) - ly0) / (ly1 - ly0) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
           f'role="img" aria-label="roofline of {escape(p.name)}">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for e in range(math.ceil(lx0), math.floor(lx1) + 1):
        out.append(f'<line x1="{_t(X(10**e))}" y1="{top}" x2="{_t(X(10**e))}" y2="{top + ph}" class="grid"/>'
                   f'<text x="{_t(X(10**e))}" y="{top + ph + 16}" text-anchor="middle" class="axis">{escape(fmt_num(10.0**e, 3))}</text>')
    for e in range(math.ceil(ly0), math.floor(ly1) + 1):
        out.append(f'<line x1="{left}" y1="{_t(Y(10**e))}" x2="{left + pw}" y2="{_t(Y(10**e))}" class="grid"/>'
                   f'<text x="{left - 4}" y="{_t(Y(10**e) + 4)}" text-anchor="end" class="axis">{escape(fmt_num(10.0**e, 3))}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 6}" text-anchor="middle" class="axis">arithmetic intensity (FLOP/byte)</text>')
    out.append(f'<text x="14" y="{top + ph / 2}" text-anchor="middle" class="axis" '
               f'transform="rotate(-90 14 {top + ph / 2})">achieved TFLOP/s</text>')
    for d, peak in sorted(peaks.items(), key=lambda kv: kv[1]):
        color = PALETTE[dtypes.index(d) % len(PALETTE)]
        ridge = peak / bw if bw else None
        x_start = X(ridge) if ridge and ridge > xmin else left
        out.append(f'<line x1="{_t(x_start)}" y1="{_t(Y(peak))}" x2="{left + pw}" y2="{_t(Y(peak))}" stroke="{color}" '
                   f'stroke-width="2"/><text x="{left + pw - 4}" y="{_t(Y(peak) - 4)}" text-anchor="end" class="axis" '
                   f'style="fill:{color}">'
                   f'{escape(d)} peak {escape(fmt_num(peak, 4))} TFLOP/s</text>')

    if bw and peaks:  # the memory roof, once, up to the highest ridge point
        top_peak = max(peaks.values())
        xa = max(xmin, ymin / bw)
        out.append(f'<line x1="{_t(X(xa))}" y1="{_t(Y(bw * xa))}" x2="{_t(X(top_peak / bw))}" y2="{_t(Y(top_peak))}" '
                   'stroke="#555" stroke-width="2"/>')
    note = (f"memory {fmt_num(bw, 3)} TB/s" if bw else
            "memory bandwidth unknown: no slanted roof" if peaks else "no spec matched: measurements only")
    out.append(f'<text x="{left + pw - 4}" y="{top + ph - 6}" text-anchor="end" class="axis">{escape(note)}</text>')
    for ai, tf, label, d in points:
        color = PALETTE[dtypes.index(d) % len(PALETTE)]
        out.append(f'<circle cx="{_t(X(ai))}" cy="{_t(Y(tf))}" r="4" fill="{color}"><title>{escape(label)}: '
                   f'{escape(fmt_num(tf, 4))} TFLOP/s at {escape(fmt_num(ai, 3))} FLOP/byte</title></circle>')
    out.append("</svg>")
    return "".join(out)
