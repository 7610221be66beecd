"""A claims check in words: the whole table's verdict first, then one table of every number's verdict, and per
row its evidence with sources — for the terminal (rich renderables), Markdown, JSON and one self-contained HTML
page. Every string from the checked table goes through the kit's Table or its escapes."""

from __future__ import annotations

from html import escape

from gapbench import __version__
from gapbench.claims.records import ClaimReport, RowVerdict
from gapbench.report.kit import Table, fmt_num, fmt_pct, html_table, interval_text, md_cell, one_line
from gapbench.text import json_printable, printable

FORMATS = ("table", "md", "json", "html")
VERDICT_WORDS = {"datasheet": "datasheet figure", "above_peak": "above one device's peak",
                 "above_bound": "above the plausible share of the peak", "unit_mismatch": "unit does not fit the row",
                 "within_measured": "within published measurements", "above_measured": "above published measurements",
                 "below_measured": "below published measurements", "plausible": "plausible (no measured reference)",
                 "no_reference": "no reference known", "unreadable": "unreadable", "no_platform": "platform unknown",
                 "no_row": "workload unknown"}
GAP_WORDS = {"agrees": "agrees with the values", "sign_reversed": "sign reversed",
             "other_baseline": "computed against the other platform", "disagrees": "does not follow from the values",
             "not_stated": "not stated", "no_values": "no two values to check it against"}
STYLE = {"implausible": "worse", "unlike": "unknown", "note": "noise", "ok": "better", "unknown": "noise"}


def verdict_line(r: ClaimReport) -> str:
    return f"{r.title or r.file}: {r.summary}"


def _pct(x: float | None) -> str:
    return "—" if x is None else fmt_pct(x)


def overview(r: ClaimReport) -> Table:
    mine = bool(r.results)
    heads = ["row", *[p.header for p in r.platforms], "stated gap", "gap from the values",
             *(["your measured gap"] if mine else []), "row verdict"]
    rows, styles = [], []
    for row in r.rows:
        cells = [f"{n.text} — {VERDICT_WORDS.get(n.verdict, n.verdict)}" for n in row.numbers]
        cells += [""] * (len(r.platforms) - len(cells))
        yours = "; ".join((f"{_variant(m.variant)}: " if len(row.measured) > 1 else "") + measured_gap_text(m, short=True)
                          for m in row.measured) or "—"
        rows.append([row.label, *cells, row.gap.stated_text or "—",
                     f"{_pct(row.gap.computed_pct)} ({GAP_WORDS.get(row.gap.verdict, row.gap.verdict)})",
                     *([yours] if mine else []), row.verdict])
        styles.append([""] + [STYLE.get(n.severity, "") for n in row.numbers] + [""] * (
            len(r.platforms) - len(row.numbers)) + ["", ""] + ([""] if mine else []) + [STYLE.get(row.verdict, "")])
    return Table(heads, rows, text_columns=len(heads), title="every number and row", styles=styles)


def _evidence_table(row: RowVerdict) -> Table | None:
    rows = []
    for n in row.numbers:
        for e in n.evidence:
            src = "; ".join(x for x in (e.source, e.date, f"run by {e.run_by}" if e.run_by else "") if x)
            rows.append([n.platform, one_line(e.text, 400), one_line(src, 300) or "—"])
    return Table(["platform", "evidence", "source"], rows, text_columns=3, title="evidence") if rows else None


def _gap_text(row: RowVerdict) -> str:
    g = row.gap
    return (f"Stated gap {g.stated_text or '—'}: the values give {_pct(g.computed_pct)} — "
            f"{GAP_WORDS.get(g.verdict, g.verdict)} ({g.convention})"
            + (f"; the text {g.direction}" if g.direction else "") + ".")


def _like_for_like(row: RowVerdict) -> list:
    if row.like_for_like:
        lf = [[_variant(x.variant), _pct(x.pct), f"{x.value:,g} against {x.baseline_value:,g} {x.unit}",
               "yes" if x.same_source else "no", one_line(x.source, 160), one_line(x.baseline_source, 160)]
              for x in row.like_for_like]
        return [Table(["variant", "gap", "values", "one source", "first platform's source",
                       "second platform's source"], lf, text_columns=6,
                      title="like-for-like gaps from measured references (same convention)")]
    if row.workload and len(row.numbers) >= 2:
        return ["Like for like: gapbench knows no measured reference of this row on both platforms."]
    return []


def _mine_cell(m, i: int) -> str:
    v = m.values[i] if i < len(m.values) else None
    if v is None:
        return (m.status[i] if i < len(m.status) else "") or "—"
    ci = m.intervals[i] if i < len(m.intervals) else None
    runs = m.runs[i] if i < len(m.runs) else 0
    share = m.share_of_claim[i] if i < len(m.share_of_claim) else None
    return (f"{fmt_num(v)} {interval_text(ci)} {m.unit}".replace("  ", " ") + f", {runs} run{'s' * (runs != 1)}"
            + (f"; {share:.0%} of the table's figure" if share is not None else ""))


def measured_gap_text(m, short: bool = False) -> str:
    """'+12.0% [+3.1%, +21.7%] (single run); significant' — the words for a measured gap and its interval; short:
    a disturbed host named, not its reasons."""
    if m.pct is None:
        return m.note or "no gap"
    text = fmt_pct(m.pct)
    if m.lo is not None and m.hi is not None:
        text += f" [{fmt_pct(m.lo)}, {fmt_pct(m.hi)}]" + (" (single run)" if m.basis == "single run" else "")
    if m.flagged:
        return text + ("; no verdict: measured on a disturbed host" if short else f"; no verdict: {m.flagged}")
    if m.significant is None:
        return text + "; no verdict (no interval)"
    return text + ("; significant" if m.significant else "; within noise")


def _measured_table(r: ClaimReport, row: RowVerdict) -> Table:
    names = [p.header for p in r.platforms[:2]]
    rows, styles = [], []
    for m in row.measured:
        within = {True: "inside it", False: "outside it", None: "—"}[m.stated_within]
        rows.append([_variant(m.variant), _mine_cell(m, 0), _mine_cell(m, 1), measured_gap_text(m), within])
        styles.append(["", "", "", "noise" if m.significant is False else "unknown" if m.significant is None
                       else "better" if (m.pct or 0) > 0 else "worse", ""])
    return Table(["variant", f"{names[0]} (yours)", f"{names[1]} (yours)", "measured gap [95% interval]",
                  "the stated gap"], rows, text_columns=5, styles=styles,
                 title="your measurements (gapbench.compare; gap = first / second − 1)")


def _row_blocks(r: ClaimReport, row: RowVerdict) -> list:
    what = f"{row.workload} {_variant(row.variant)}" if row.workload else "no gapbench workload"
    out: list = [f"Matched to: {what}."]
    ev = _evidence_table(row)
    out += [ev] if ev else []
    if row.gap.verdict != "not_stated" or row.gap.computed_pct is not None:
        out.append(_gap_text(row))
    out += [f"Like for unlike: {u}." for u in row.unlike]
    out += _like_for_like(row)
    out += [_measured_table(r, row)] if row.measured else []
    out += [f"{x}." for x in row.notes]
    return out


def _results_table(r: ClaimReport) -> Table:
    rows = [[p.header, ", ".join(p.results) or "— (none matched)", ", ".join(p.results_by) or "—",
             "; ".join(p.results_notes) or "—"] for p in r.platforms]
    return Table(["platform", "your results files", "matched by", "note"], rows, text_columns=4,
                 title="which results file stands for which platform (its run label, else its device's spec row)")


def _variant(v: dict) -> str:
    return ", ".join(f"{k}={x}" for k, x in v.items()) or "any"


def _bounds(r: ClaimReport) -> str:
    b = r.bounds
    return (f"Bounds (docs/claims.md): a datasheet figure is within {b.get('datasheet_tolerance', 0):.0%} of a peak; "
            f"a model figure is plausible per device at ≤ {b.get('mfu_bound', 0):.0%} of its dense peak; within "
            f"published measurements means inside their range widened by {b.get('measured_tolerance', 0):.0%}; a "
            f"stated gap agrees within {b.get('gap_tolerance_pp', 0):g} points. Published measurements are others', "
            "not gapbench's; vendor-run and cloud-run figures are marked.")


def sections(r: ClaimReport) -> list[tuple[str, list]]:
    secs: list[tuple[str, list]] = [("Verdicts", [overview(r), _bounds(r)])]
    if r.results:
        secs.append(("Your results", [_results_table(r)]))
    for row in r.rows:
        secs.append((f"{row.label} — {row.verdict}", _row_blocks(r, row)))
    if r.unmatched:
        secs.append(("Not matched (not judged, never guessed)", [f"- {u}" for u in r.unmatched]))
    return secs


def render_terminal(r: ClaimReport) -> list:
    from gapbench.report.kit import rich_table, rich_text

    out: list = [rich_text(verdict_line(r), style="bold")]
    for title, blocks in sections(r):
        out += [rich_text(""), rich_text(title, style="bold underline")]
        out += [rich_table(b) if isinstance(b, Table) else rich_text(b) for b in blocks]
    return out


def render_markdown(r: ClaimReport) -> str:
    from gapbench.report.kit import md_table

    lines = [f"**{md_cell(verdict_line(r))}**", ""]
    for title, blocks in sections(r):
        lines += [f"### {md_cell(title)}", ""]
        for b in blocks:
            lines += (md_table(b) if isinstance(b, Table) else [md_cell(b)]) + [""]
    return "\n".join(lines).rstrip() + "\n"


def render_json(r: ClaimReport) -> str:
    from gapbench.results import json_text

    return json_printable(json_text({"verdict_line": verdict_line(r), **r.model_dump(mode="json")})) + "\n"


CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
CSS = """body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:1300px;padding:0 16px;color:#222}
h1{font-size:19px}h2{font-size:16px;margin:22px 0 6px;border-bottom:1px solid #ddd}table{border-collapse:collapse;
font-size:13px;margin:6px 0}th,td{border:1px solid #ddd;padding:3px 7px;vertical-align:top}th{background:#f4f4f4;
text-align:left}.worse{color:#a4161a;font-weight:600}.unknown{color:#8a5a00}.better{color:#17692b}.noise{color:#777}"""


def render_html(r: ClaimReport) -> str:
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
             f"<title>{escape(printable('gapbench claims: ' + (r.title or r.file)))}</title><style>{CSS}</style></head><body>",
             f"<h1>{escape(printable(verdict_line(r)))}</h1>",
             f"<p>gapbench {escape(__version__)} claims · {escape(printable(r.file))}</p>"]
    for title, blocks in sections(r):
        parts.append(f"<h2>{escape(printable(title))}</h2>")
        for b in blocks:
            parts.append(html_table(_shown(b)) if isinstance(b, Table) else f"<p>{escape(printable(b))}</p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _shown(t: Table) -> Table:
    """The table with every control character in its strings written as an escape (HTML escaping alone keeps them)."""
    return Table([printable(h) for h in t.headers], [[printable(c) for c in row] for row in t.rows], t.text_columns,
                 printable(t.title), t.styles, t.notes, t.numeric)


def render(r: ClaimReport, fmt: str):
    """`fmt`: 'table' gives rich renderables, the others text."""
    return {"table": render_terminal, "md": render_markdown, "json": render_json, "html": render_html}[fmt](r)
