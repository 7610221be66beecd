"""Throughput-interactivity curves as inline SVG: every platform's points and frontier for one inference series on
one plot, tokens/s per user across, tokens/s per device up (as InferenceMAX draws them). No JS, no fonts."""

from __future__ import annotations

from html import escape

from gapbench.compare import Comparison
from gapbench.report.kit import X_TITLE, Y_TITLES, fmt_num, series_text, series_title
from gapbench.report.svg import PALETTE, _nice_ticks, _t


class _Axes:
    left, right, top, bottom = 72, 16, 30, 46

    def __init__(self, width: int, height: int, xmax: float, ymax: float):
        self.width, self.height = width, height
        self.xmax, self.ymax = xmax, ymax
        self.pw, self.ph = width - self.left - self.right, height - self.top - self.bottom

    def X(self, v: float) -> float:
        return self.left + v / self.xmax * self.pw

    def Y(self, v: float) -> float:
        return self.top + self.ph - v / self.ymax * self.ph


def _extent(curves) -> tuple[float, float]:
    xs = [max(p.x_ci[1] if p.x_ci else p.x, p.x) for c in curves for p in c.points]
    ys = [max(p.y_ci[1] if p.y_ci else p.y, p.y) for c in curves for p in c.points]
    return max(xs) * 1.08 or 1.0, max(ys) * 1.08 or 1.0


def plot(comp: Comparison, curves, title: str, width: int = 640, height: int = 400) -> str:
    """One series: each platform's points (faint), its frontier (a line, with 95% whiskers on both axes), and
    published points (diamonds, dashed)."""
    xmax, ymax = _extent(curves)
    ax = _Axes(width, height, xmax, ymax)
    y_title = Y_TITLES.get(curves[0].y_metric, curves[0].y_metric)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{ax.left}" y="16" class="lbl">{escape(title)}</text>',
           f'<rect x="{ax.left}" y="{ax.top}" width="{ax.pw}" height="{ax.ph}" fill="none" stroke="#999"/>']
    for v in _nice_ticks(0.0, xmax):
        x = _t(ax.X(v))
        out.append(f'<line x1="{x}" y1="{ax.top}" x2="{x}" y2="{ax.top + ax.ph}" class="grid"/><text x="{x}" '
                   f'y="{ax.top + ax.ph + 16}" text-anchor="middle" class="axis">{escape(fmt_num(v, 3))}</text>')
    for v in _nice_ticks(0.0, ymax):
        y = _t(ax.Y(v))
        out.append(f'<line x1="{ax.left}" y1="{y}" x2="{ax.left + ax.pw}" y2="{y}" class="grid"/><text '
                   f'x="{ax.left - 4}" y="{_t(ax.Y(v) + 4)}" text-anchor="end" class="axis">'
                   f'{escape(fmt_num(v, 3))}</text>')
    out.append(f'<text x="{ax.left + ax.pw / 2}" y="{height - 8}" text-anchor="middle" class="axis">'
               f'{escape(X_TITLE)} (interactivity)</text>')
    mid = ax.top + ax.ph / 2
    out.append(f'<text x="14" y="{mid}" text-anchor="middle" class="axis" transform="rotate(-90 14 {mid})">'
               f'{escape(y_title)}</text>')
    for c in curves:
        out += _curve(comp, c, ax)
    out += _legend(comp, curves, ax)
    out.append("</svg>")
    return "".join(out)


def _curve(comp: Comparison, c, ax: _Axes) -> list[str]:
    color = PALETTE[c.platform % len(PALETTE)]
    name = comp.platforms[c.platform].name
    out = []
    for p in c.points:
        shape = (f'<rect x="{_t(ax.X(p.x) - 4)}" y="{_t(ax.Y(p.y) - 4)}" width="8" height="8" fill="{color}" '
                 f'transform="rotate(45 {_t(ax.X(p.x))} {_t(ax.Y(p.y))})">' if c.reference else
                 f'<circle cx="{_t(ax.X(p.x))}" cy="{_t(ax.Y(p.y))}" r="3" fill="{color}" fill-opacity="0.35">')
        tip = f"{name}: {p.label}: {fmt_num(p.x)} {X_TITLE}, {fmt_num(p.y)}"
        out.append(f"{shape}<title>{escape(tip)}</title>{'</rect>' if c.reference else '</circle>'}")
    pts = " ".join(f"{_t(ax.X(p.x))},{_t(ax.Y(p.y))}" for p in c.frontier)
    dash = ' stroke-dasharray="5 4"' if c.reference else ""
    out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{dash}/>')
    for p in c.frontier:
        if p.y_ci:
            out.append(f'<line x1="{_t(ax.X(p.x))}" y1="{_t(ax.Y(p.y_ci[0]))}" x2="{_t(ax.X(p.x))}" '
                       f'y2="{_t(ax.Y(p.y_ci[1]))}" stroke="{color}" stroke-width="1"/>')
        if p.x_ci:
            out.append(f'<line x1="{_t(ax.X(p.x_ci[0]))}" y1="{_t(ax.Y(p.y))}" x2="{_t(ax.X(p.x_ci[1]))}" '
                       f'y2="{_t(ax.Y(p.y))}" stroke="{color}" stroke-width="1"/>')
        if not c.reference:
            out.append(f'<circle cx="{_t(ax.X(p.x))}" cy="{_t(ax.Y(p.y))}" r="3.5" fill="{color}"/>')
    return out


def _legend(comp: Comparison, curves, ax: _Axes) -> list[str]:
    out, y = [], ax.top + 14
    for c in curves:
        color = PALETTE[c.platform % len(PALETTE)]
        label = comp.platforms[c.platform].name + (" (published)" if c.reference and "published" not in
                                                   comp.platforms[c.platform].name else "")
        x = ax.left + ax.pw - 8
        dash = ' stroke-dasharray="5 4"' if c.reference else ""
        out.append(f'<line x1="{x - 150}" y1="{y - 4}" x2="{x - 132}" y2="{y - 4}" stroke="{color}" '
                   f'stroke-width="2"{dash}/><text x="{x - 128}" y="{y}" class="lbl">{escape(label[:28])}</text>')
        y += 15
    return out


def curve_plots(comp: Comparison) -> list[tuple[str, str]]:
    """(caption, SVG) per inference series with a curve: output tokens/s per device, and total tokens/s where a
    published curve is drawn against it."""
    f = comp.frontiers
    if f is None:
        return []
    groups: dict[tuple, list] = {}
    for c in f.curves:
        groups.setdefault(c.key, []).append(c)
    out = []
    for (workload, _s, y_metric), curves in groups.items():
        if y_metric != "output_tokens_per_s" and not any(c.reference for c in curves):
            continue
        full = series_text(workload, curves[0].series)
        out.append((f"{full} — {Y_TITLES.get(y_metric, y_metric)} against {X_TITLE}",
                    plot(comp, curves, series_title(workload, curves[0].series))))
    return out
