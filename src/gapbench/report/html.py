"""The HTML report: one self-contained file, no script, no network (a Content-Security-Policy forbids both).

Every string that comes from a results file goes through html.escape.
"""

from __future__ import annotations

from html import escape

from gapbench import __version__
from gapbench.compare import Comparison
from gapbench.report import attribution, curves, numerics, ratios, svg, tables
from gapbench.report.kit import (
    coverage_table,
    frameworks_table,
    frontier_lines,
    frontier_table,
    html_table,
    mark_line,
    marks_used,
    takeaway_lines,
    verdict_lines,
)
from gapbench.results import now_iso

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"

STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:24px auto;max-width:1400px;
 padding:0 16px;color:#222;background:#fff}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:6px 0 10px;font-size:13px}th,td{border:1px solid #ddd;padding:3px 7px;
 vertical-align:top}th{background:#f4f4f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums;
 white-space:nowrap}.better{color:#17692b;font-weight:600}.worse{color:#a4161a;font-weight:600}.noise{color:#777}
.unknown{color:#555}.status{color:#8a5a00}.muted{color:#777}.warn{background:#fff6d6;border:1px solid #e6c200;padding:6px 10px;margin:4px 0}
.env td{max-width:420px;word-break:break-all}.env td.differs:first-child{font-weight:600}
svg{background:#fff;max-width:100%;height:auto}svg .axis{font-size:11px;fill:#444}svg .lbl{font-size:11px;fill:#222}
svg .val{font-size:11px;fill:#222}svg .grid{stroke:#eee;stroke-width:1}.plots{display:flex;flex-wrap:wrap;gap:18px}
figure{margin:0}figcaption{font-size:12px;color:#555;max-width:720px}
.verdict{background:#f6f8fb;border:1px solid #c9d3e0;padding:4px 14px 8px;margin:12px 0}.verdict h2{border:0;margin:8px 0 4px}
.verdict ul{margin:4px 0 6px;padding-left:20px}.verdict li{margin:2px 0}p.marks{margin:8px 0 0}ul.marks{font-size:13px;color:#333}
"""


def render_html(comp: Comparison, title: str = "gapbench report") -> str:
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">gapbench {escape(__version__)} · generated {escape(now_iso())} · baseline '
        f"<b>{escape(comp.base.name)}</b> · values: median [95% CI] · gap &gt; 0 means better than the baseline (in "
        "speed, whatever the unit's direction).</p>",
    ]
    parts += _verdict(comp)
    parts += [f'<div class="warn">warning: {escape(w)}</div>' for w in comp.warnings]
    parts.append("<h2>Inputs</h2>")
    parts.append(html_table(tables.Table(
        ["platform", "file", "device", "spec matched", "suite", "run"],
        [[p.name, p.result_set.path or ("published reference" if p.reference else "—"),
          str(p.result_set.device.get("product") or p.result_set.device.get("type") or "?"),
          f"{p.spec.key} (confidence {p.spec.confidence}; {p.spec.source})" if p.spec else "none",
          p.result_set.suite or "—", p.result_set.run_id] for p in comp.platforms], text_columns=6)))
    parts.append("<h2>Gap table</h2>")
    parts.append(html_table(tables.gap_table(comp), "gaps"))
    verdict = set(verdict_lines(comp))  # said at the top already
    parts.append("<ul>" + "".join(f"<li>{escape(t)}</li>" for t in takeaway_lines(comp, marks=False)
                                  if t not in verdict) + "</ul>")
    if tables.basis_line(comp):
        parts.append(f'<p class="muted">{escape(tables.basis_line(comp))}</p>')
    flagged = tables.flagged_table(comp)
    if flagged is not None:
        parts.append(f"<h3>{escape(flagged.title)}</h3>")
        parts.append(html_table(flagged))
    if len(comp.platforms) > 1:
        parts.append("<h2>Gaps</h2>")
        parts.append(svg.gap_bars(comp))
    parts += _curves(comp)
    parts += ratios.html_parts(comp)
    parts += numerics.html_parts(comp)
    parts += attribution.html_parts(comp)
    parts += _rooflines(comp)
    parts += _efficiency(comp)
    for title_, t in (("Operator coverage", coverage_table(comp)), ("Frameworks", frameworks_table(comp))):
        if t is not None:
            parts.append(f"<h2>{title_}</h2>")
            parts.append(html_table(t))
    parts.append("<h2>Failures</h2>")
    fails = tables.failures(comp)
    parts.append(html_table(fails) if fails is not None else '<p class="muted">No failures.</p>')
    parts.append("<h2>Environment</h2>")
    parts.append(html_table(tables.environment_table(comp), "env"))
    parts.append('<p class="muted">Fields that differ between the inputs come first, in bold.</p>')
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _verdict(comp: Comparison) -> list[str]:
    """The answer first: who leads on what, by how much, and what every mark on the page means (defined here once)."""
    lines = verdict_lines(comp)
    out = ['<section class="verdict"><h2>Verdict</h2>']
    out.append("<ul>" + "".join(f"<li>{escape(t)}</li>" for t in lines) + "</ul>" if lines else
               '<p class="muted">One input: values only, no gaps.</p>')
    marks = marks_used(comp)
    if marks:
        out.append('<p class="marks"><b>Marks</b></p><ul class="marks">'
                   + "".join(f"<li>{escape(mark_line(m))}</li>" for m in marks) + "</ul>")
    out.append("</section>")
    return out


def _curves(comp: Comparison) -> list[str]:
    plots = curves.curve_plots(comp)
    if not plots:
        return []
    out = ["<h2>Throughput and interactivity</h2>",
           '<div class="plots">' + "".join(f"<figure>{s}<figcaption>{escape(cap)}</figcaption></figure>"
                                           for cap, s in plots) + "</div>"]
    t = frontier_table(comp)
    if t is not None:
        out.append(html_table(t))
    out.append("<ul>" + "".join(f"<li>{escape(line)}</li>" for line in frontier_lines(comp)) + "</ul>")
    return out


def _rooflines(comp: Comparison) -> list[str]:
    plots = []
    for i, p in enumerate(comp.platforms):
        if p.reference:
            continue
        s = svg.roofline(comp, i)
        if s:
            cap = (f"{p.spec.name}: peaks: {p.spec.notes if p.spec.estimate else p.spec.source}"
                   if p.spec else "no spec matched this device")
            plots.append(f"<figure>{s}<figcaption><b>{escape(p.name)}</b> — {escape(cap)}</figcaption></figure>")
    return ["<h2>Roofline</h2>", f'<div class="plots">{"".join(plots)}</div>' if plots
            else '<p class="muted">No measurement carries both FLOP and byte counts.</p>']


def _efficiency(comp: Comparison) -> list[str]:
    out = []
    note = tables.efficiency_note(comp)
    if note:
        out.append(f'<h2>Efficiency</h2><p class="muted">{escape(note)}</p>')
    eff = tables.efficiency_table(comp)
    if eff is not None:
        out.append("<h2>Efficiency</h2>")
        out.append(html_table(eff))
        out.append(f'<p class="muted">{escape(tables.prices_line(comp))}. Per watt needs energy measured during '
                   "the workload (an energy counter of the device's stack); \"not measured\" where none was "
                   "readable.</p>")
    return out
