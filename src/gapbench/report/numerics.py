"""The words and plots of numerics parity (compare.numerics): a verdict per model, a summary table, the error of
every layer against float64 and against the other side with its bound, and in HTML a plot of error by layer.
Numbers come from the NumericsEntry objects; nothing is recomputed here."""

from __future__ import annotations

import math
from html import escape

from gapbench.compare import Comparison
from gapbench.compare.numerics import LAMBDA, NumericsEntry
from gapbench.report.kit import (
    STYLE_NOISE,
    STYLE_WORSE,
    Table,
    fmt_num,
    html_table,
    md_cell,
    md_table,
    rich_table,
    rich_text,
)
from gapbench.report.svg import PALETTE, _t

LEGEND = (f"Error: ‖x − x₆₄‖/‖x₆₄‖ against the float64 reference each side recorded; between sides, on the seeded "
          f"sample both recorded. Bound: λ·√(max(m,1)·u² + n·u_acc²), λ = {LAMBDA:g}, u the compute dtype's unit "
          "roundoff, u_acc its accumulation's, n the reduction lengths and m the rounding modules along the path "
          "(Higham & Mary 2019). See docs/numerics.md.")
TERMINAL_CONTEXT = 4  # layers shown before the first divergence in the terminal


def entries(comp: Comparison) -> list[NumericsEntry]:
    return list(getattr(comp, "numerics", None) or [])


def _e(x: float | None) -> str:
    return "—" if x is None or not math.isfinite(x) else f"{x:.2g}"


def _pct(x: float | None) -> str:
    if x is None:
        return "—"
    return f"{x * 100:.2g}%"


def side_name(comp: Comparison, e: NumericsEntry, i: int) -> str:
    s = e.sides[i]
    return f"{comp.platforms[s.platform].name} ({s.dtype})"


def knobs_text(knobs: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in knobs.items() if v is not None)


def verdict_line(comp: Comparison, e: NumericsEntry) -> str:
    """'llm-tiny: same within bf16 rounding through all 31 module outputs …' or '… diverges first at …'."""
    if e.status:
        bad = next(s for s in e.sides if not s.ok)
        why = f": {bad.measurement.reason}" if bad.measurement.reason else ""
        return f"{e.model}: no comparison — {comp.platforms[bad.platform].name} {e.status}{why}"
    two = len(e.sides) == 2
    against = "" if two else " from float64"
    loss = (f"loss after {e.steps} steps differs by {_pct(e.loss_diff)}{against} (at most {_pct(e.loss_diff_max)} "
            "over the steps)")
    if e.first is None:
        text = (f"{e.model}: same within {e.worst_dtype} rounding through all {len(e.outputs)} module outputs; {loss}")
    else:
        who = "the two sides" if e.first.side is None else side_name(comp, e, e.first.side)
        text = (f"{e.model}: {who} diverges first at {e.first.name}: error {_e(e.first.err)} against a bound of "
                f"{_e(e.first.bound)}; {loss}")
    if e.first_grad is not None:
        who = "between the sides" if e.first_grad.side is None else f"on {side_name(comp, e, e.first_grad.side)}"
        text += (f"; gradients leave their bound first {who} at {e.first_grad.name} ({_e(e.first_grad.err)} against "
                 f"{_e(e.first_grad.bound)})")
    else:
        text += f"; all {len(e.grads)} gradients within their bounds"
    if e.knobs_differ:
        text += f"; the sides differ in {', '.join(e.knobs_differ)}"
    if e.same_start is False:
        text += "; WARNING: the sides did not start from the same weights and inputs"
    return text


def verdict_lines(comp: Comparison) -> list[str]:
    return [verdict_line(comp, e) for e in entries(comp)]


def summary_table(comp: Comparison) -> Table | None:
    es = entries(comp)
    if not es:
        return None
    rows = []
    for e in es:
        sides = "; ".join(f"{side_name(comp, e, i)} {knobs_text({k: v for k, v in s.knobs.items() if k != 'dtype'})}"
                          for i, s in enumerate(e.sides))
        first = "—" if e.first is None else f"{e.first.name} ({_e(e.first.err)} > {_e(e.first.bound)})"
        probe = " / ".join(fmt_num(s.measurement.value, 3) if s.measurement.value else s.measurement.status
                           for s in e.sides)
        rows.append([e.model, sides, e.status or ("diverges" if e.first else "within bound"), first,
                     str(len(e.outputs)), _pct(e.loss_diff), probe])
    styles = [["", "", STYLE_WORSE if (e.first or e.status) else STYLE_NOISE, "", "", "", ""] for e in es]
    return Table(["model", "sides", "verdict", "first past its bound", "outputs", "loss diff after K", "probe s"],
                 rows, text_columns=4, title="numerics parity against float64", styles=styles)


def layer_table(comp: Comparison, e: NumericsEntry, kind: str = "output", rows_limit: int | None = None) -> Table:
    """One row per module output (or gradient): each side's error and bound, and the two sides' difference."""
    layers = e.outputs if kind == "output" else e.grads
    if rows_limit is not None and e.first is not None and kind == "output":
        layers = layers[max(0, e.first.index - rows_limit):e.first.index + 1]
    elif rows_limit is not None:
        layers = layers[:rows_limit]
    headers = ["layer" if kind == "output" else "gradient", "n"]
    for i in range(len(e.sides)):
        headers += [f"err {side_name(comp, e, i)}", "bound"]
    if len(e.sides) == 2:
        headers += ["between sides", "bound"]
    rows, styles = [], []
    for le in layers:
        row, style = [le.name, str(le.n) if kind == "output" else ""], ["", ""]
        for i in range(len(e.sides)):
            row += [_e(le.err[i]), _e(le.bounds[i])]
            style += [STYLE_WORSE if le.over(i) else "", ""]
        if len(e.sides) == 2:
            row += [_e(le.cross), _e(le.cross_bound)]
            style += [STYLE_WORSE if le.cross_over else "", ""]
        rows.append(row)
        styles.append(style)
    return Table(headers, rows, text_columns=1, title=f"{e.model}: {'module outputs' if kind == 'output' else 'gradients'}",
                 styles=styles)


# ---- formats --------------------------------------------------------------------------------------------------
def terminal_renderables(comp: Comparison) -> list:
    t = summary_table(comp)
    if t is None:
        return []
    out = [rich_table(t)]
    out += [rich_text(line) for line in verdict_lines(comp)]
    for e in entries(comp):
        if e.first is not None:
            out.append(rich_table(layer_table(comp, e, rows_limit=TERMINAL_CONTEXT)))
    out.append(rich_text(LEGEND + " --format md, json or csv, or `gapbench report`, show every layer.", style="dim"))
    return out


def markdown_lines(comp: Comparison) -> list[str]:
    t = summary_table(comp)
    if t is None:
        return []
    lines = ["", f"#### {md_cell(t.title)}", ""] + md_table(t) + [""]
    lines += [f"- {md_cell(v)}" for v in verdict_lines(comp)]
    lines += ["", md_cell(LEGEND)]
    for e in entries(comp):
        if e.status:
            continue
        for kind in ("output", "grad"):
            lt = layer_table(comp, e, kind)
            lines += ["", f"##### {md_cell(lt.title)}", ""] + md_table(lt)
    return lines


def json_document(comp: Comparison) -> list[dict] | None:
    es = entries(comp)
    if not es:
        return None
    names = [p.name for p in comp.platforms]
    out = []
    for e in es:
        d = e.to_dict(names)
        d["verdict"] = verdict_line(comp, e)
        d["bound_formula"] = f"{LAMBDA:g}*sqrt(max(m,1)*u^2 + n*u_acc^2)"
        out.append(d)
    return out


CSV_FIELDS = ("layer", "layer_kind", "rel_error", "bound", "cross_error", "cross_bound")


def csv_rows(comp: Comparison) -> list[tuple[dict, list]]:
    """(the common fields, the numerics fields) of one line per model, side and layer."""
    out = []
    names = [p.name for p in comp.platforms]
    for e in entries(comp):
        for i, s in enumerate(e.sides):
            common = {"workload": "numerics", "variant": s.measurement.variant, "unit": "rel. error",
                      "platform": names[s.platform], "baseline": s.platform == comp.baseline,
                      "status": s.measurement.status, "reason": verdict_line(comp, e)}
            for le in e.outputs + e.grads:
                out.append((common, [le.name, le.kind, le.err[i], le.bounds[i], le.cross, le.cross_bound]))
            if not e.outputs:
                out.append((common, ["", "", None, None, None, None]))
    return out


def html_parts(comp: Comparison) -> list[str]:
    t = summary_table(comp)
    if t is None:
        return []
    parts = ["<h2>Numerics parity</h2>", html_table(t),
             "<ul>" + "".join(f"<li>{escape(v)}</li>" for v in verdict_lines(comp)) + "</ul>",
             f'<p class="muted">{escape(LEGEND)}</p>']
    for e in entries(comp):
        if e.status:
            continue
        parts.append(f"<figure>{error_plot(comp, e)}<figcaption>{escape(e.model)}: error by layer against float64 "
                     "(solid), each side's bound (dashed), the two sides against each other (dotted)</figcaption>"
                     "</figure>")
        for kind in ("output", "grad"):
            lt = layer_table(comp, e, kind)
            parts.append(f"<details><summary>{escape(lt.title)}</summary>{html_table(lt)}</details>")
    return parts


def _series(comp: Comparison, e: NumericsEntry) -> list[tuple[str, str, str, list]]:
    """(label, colour, dash, values by layer) of each line of the plot."""
    out = []
    for i in range(len(e.sides)):
        colour = PALETTE[i % len(PALETTE)]
        out.append((f"{side_name(comp, e, i)} vs float64", colour, "", [le.err[i] for le in e.outputs]))
        out.append((f"bound {e.sides[i].dtype}", colour, "6 4", [le.bounds[i] for le in e.outputs]))
    if len(e.sides) == 2:
        out.append(("between sides", PALETTE[2], "2 3", [le.cross for le in e.outputs]))
    return out


def error_plot(comp: Comparison, e: NumericsEntry, width: int = 760, height: int = 340) -> str:
    """Error by layer (execution order across, log error up), with the bounds and the first divergence marked."""
    series = _series(comp, e)
    values = [v for _, _, _, vs in series for v in vs if v is not None and v > 0 and math.isfinite(v)]
    lo, hi = (min(values), max(values)) if values else (1e-8, 1.0)
    e0, e1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + (1 if lo == hi else 0)
    left, right, top, bottom = 64, 16, 24, 60
    pw, ph, n = width - left - right, height - top - bottom, max(len(e.outputs) - 1, 1)

    def X(i: int) -> float:
        return left + i / n * pw

    def Y(v: float) -> float:
        return top + ph - (math.log10(v) - e0) / max(e1 - e0, 1) * ph

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} '
           f'{height}" role="img" aria-label="{escape(e.model)} error by layer">',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#999"/>']
    for k in range(e0, e1 + 1):
        y = _t(Y(10.0**k))
        out.append(f'<line x1="{left}" y1="{y}" x2="{left + pw}" y2="{y}" class="grid"/><text x="{left - 4}" '
                   f'y="{_t(Y(10.0**k) + 4)}" text-anchor="end" class="axis">1e{k}</text>')
    out.append(f'<text x="{left + pw / 2}" y="{height - 30}" text-anchor="middle" class="axis">module outputs in '
               f'execution order ({len(e.outputs)})</text>')
    for label, colour, dash, vs in series:
        pts = " ".join(f"{_t(X(i))},{_t(Y(v))}" for i, v in enumerate(vs) if v is not None and v > 0
                       and math.isfinite(v))
        if pts:
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colour}" stroke-width="1.5"'
                       + (f' stroke-dasharray="{dash}"' if dash else "") + f"><title>{escape(label)}</title></polyline>")
    if e.first is not None:
        x = _t(X(e.first.index))
        out.append(f'<line x1="{x}" y1="{top}" x2="{x}" y2="{top + ph}" stroke="#a4161a" stroke-width="1"/>'
                   f'<text x="{x}" y="{top - 6}" text-anchor="middle" class="lbl">{escape(e.first.name)}</text>')
    for j, (label, colour, dash, _) in enumerate(series):
        lx, ly = left + (j % 3) * (pw / 3), height - 14 + (j // 3) * 0 - (8 if j < 3 else -4)
        out.append(f'<line x1="{_t(lx)}" y1="{_t(ly)}" x2="{_t(lx + 18)}" y2="{_t(ly)}" stroke="{colour}" '
                   f'stroke-width="1.5"' + (f' stroke-dasharray="{dash}"' if dash else "") + "/>"
                   f'<text x="{_t(lx + 22)}" y="{_t(ly + 4)}" class="axis">{escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)
