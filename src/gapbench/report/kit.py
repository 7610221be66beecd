"""The renderer kit: every number, gap, interval and label gapbench prints is worded here, once, for
every output (run, compare, report, history, coverage, scan), and every table goes through one model
that each format escapes by default.

Nothing here measures or computes a statistic: values, intervals and significance come from the objects
(Measurement, Stats, Gap) that carry them.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

from gapbench.text import printable

MINUS = "−"
NO_CI_MARK = "*"
FLAGGED_MARK = "†"
STYLE_BETTER, STYLE_WORSE, STYLE_NOISE, STYLE_UNKNOWN, STYLE_STATUS = "better", "worse", "noise", "unknown", "status"


# ---- numbers ----------------------------------------------------------------------------------------

def fmt_num(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "—"
    if x == 0:
        return "0"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def fmt_pct(x: float) -> str:
    return f"{x:+.1f}%".replace("-", MINUS)


RATIO_FROM = 10.0  # from ten times faster or slower a gap is said as a ratio: −99.95% reads as zero, ×2,100 does not


def fmt_ratio(r: float) -> str:
    """'2,100', '35', '12.5': a ratio to two or three significant figures, thousands separated."""
    if r >= 100:
        digits = math.floor(math.log10(r)) - 1
        return f"{round(r, -digits):,.0f}"
    return f"{r:.3g}"


def ratio_of(pct: float) -> float:
    """The speed ratio a gap in % stands for: +100% is 2, −50% is 0.5."""
    return 1.0 + pct / 100.0


def is_extreme(pct: float | None) -> bool:
    if pct is None:
        return False
    r = ratio_of(pct)
    return r <= 0 or r >= RATIO_FROM or r <= 1.0 / RATIO_FROM


def fmt_gap_value(pct: float) -> str:
    """A gap as people say it: '+12.0%' or '−45.3%', and from ten times apart as a ratio, '×2,100 slower',
    '×35 faster' (a percentage near −100% hides how far apart two platforms are)."""
    r = ratio_of(pct)
    if not is_extreme(pct) or r <= 0:
        return fmt_pct(pct)
    return f"×{fmt_ratio(r)} faster" if r > 1 else f"×{fmt_ratio(1.0 / r)} slower"


def fmt_gap_interval(pct: float, lo: float, hi: float) -> str:
    """The interval of a gap in the form of its value: '[+60.0%, +150.4%]', or '[×1,900, ×2,300]' for a ratio."""
    if is_extreme(pct) and ratio_of(lo) > 0 and ratio_of(hi) > 0:
        a, b = ratio_of(lo), ratio_of(hi)
        a, b = (1 / b, 1 / a) if ratio_of(pct) < 1 else (a, b)
        return f"[×{fmt_ratio(a)}, ×{fmt_ratio(b)}]"
    return f"[{fmt_pct(lo)}, {fmt_pct(hi)}]"


UNIT_SPELLING = {"us": "µs", "usec": "µs", "tflops": "TFLOP/s", "gbps": "GB/s"}  # what a unit field may say


def unit_text(unit: str) -> str:
    """A unit as it is written: 'µs', not the ASCII 'us' some workloads record."""
    return UNIT_SPELLING.get(unit.strip().lower(), unit) if unit else unit


def fmt_size(n: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:g} {unit}"
    return f"{n:g} B"


def interval_text(ci: tuple[float, float] | list[float] | None, level: float = 0.95, named: bool = False) -> str:
    """'[lo, hi]': an interval as it is, never folded into a ± that would misstate an asymmetric one; its
    coverage beside it when that is below 95% ('[lo, hi] 75%'; named: '[lo, hi] 75% CI', where a % of peak
    stands near and a bare percentage would read as one)."""
    if not ci:
        return ""
    text = f"[{fmt_num(ci[0])}, {fmt_num(ci[1])}]"
    return text if level >= 0.95 else f"{text} {level:.0%}{' CI' if named else ''}"


def stats_text(value: float | None, stats, named: bool = False) -> str:
    """A median and its confidence interval: 'v [lo, hi]' (with its coverage when below 95%); the value alone
    without an interval of n > 1."""
    s = fmt_num(value)
    if stats is not None and stats.n > 1:
        s += " " + interval_text(stats.ci95, getattr(stats, "ci_level", 0.95), named)
    return s


def measurement_text(m) -> str:
    """A measurement's value with its interval (its coverage named when below 95%), or '-' when it has none."""
    return stats_text(m.value, m.stats, named=True) if m.ok else "-"


def variant_text(variant: dict) -> str:
    """Compact variant label: 'fp32 1024x1024x1024' for GEMM-like variants, 'k=v' pairs otherwise."""
    v = dict(variant)
    parts = []
    if "dtype" in v:
        parts.append(str(v.pop("dtype")))
    if all(k in v for k in ("m", "n", "k")):
        parts.append(f"{v.pop('m')}x{v.pop('n')}x{v.pop('k')}")
    parts += [f"{k}={v[k]}" for k in sorted(v)]
    return " ".join(parts)


def shared_and_varying(variants: list[dict]) -> tuple[dict, str]:
    """What several rows' variants share, and what varies among them ('metric=ttft_ms, tpot_ms'): the label of rows
    said on one line because they failed the same way."""
    keys = list(dict.fromkeys(k for v in variants for k in v))
    same = {k: variants[0].get(k) for k in keys if all(k in v and v[k] == variants[0][k] for v in variants)}
    varying = [k for k in keys if k not in same]
    return same, "; ".join(f"{k}={', '.join(dict.fromkeys(str(v.get(k, '—')) for v in variants))}" for k in varying)


def one_line(text: str, limit: int = 300) -> str:
    """Any text as one line of at most `limit` characters (a reason, a path, a name from a file)."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# ---- a comparison's cells, gaps and rows ---------------------------------------------------------------

def cell_text(cell) -> str:
    return stats_text(cell.value, cell.measurement.stats, named=True) if cell.status == "ok" else cell.status


def gap_text(gap, interval: bool = False) -> str:
    """'+12.0%', '≈ +2.0%' (within noise), '+5.0%*' (no verdict: no runs on one side), '+9.0%†' (a side on a
    disturbed host); with interval=True also the gap's interval and, for single runs, that they are single."""
    if gap.pct is None:
        return gap.status or "n/a"
    text = ("≈ " if gap.overlap else "") + fmt_gap_value(gap.pct)
    if gap.overlap is None:
        text += FLAGGED_MARK if gap.withheld else NO_CI_MARK
    if interval and gap.lo is not None and gap.hi is not None:
        text += " " + fmt_gap_interval(gap.pct, gap.lo, gap.hi)
        if gap.basis == "single run":
            text += " (single run)"
    return text


def gap_style(gap) -> str:
    """How a gap is drawn, from its data: better, worse, noise (within noise), unknown (no interval), status."""
    if gap is None or gap.pct is None:
        return STYLE_STATUS
    if gap.overlap:
        return STYLE_NOISE
    if gap.overlap is None:
        return STYLE_UNKNOWN
    return STYLE_BETTER if gap.pct > 0 else STYLE_WORSE if gap.pct < 0 else STYLE_NOISE


def row_label(row) -> str:
    vt = variant_text(row.variant)
    return f"{row.workload} {vt}" if vt else row.workload


def published_text(pg) -> str:
    """A published gap with the figures behind it: '−20.9% (12,500 vs 15,800 tokens/s …)'."""
    text = fmt_pct(pg.gap_pct)
    if pg.value is not None and pg.baseline_value is not None:
        text += f" ({fmt_num(pg.value)} vs {fmt_num(pg.baseline_value)} {pg.unit})".rstrip()
    return text


# every mark a gap or a value can carry, defined once: the terminal's and Markdown's takeaway and the report's
# legend all print these sentences (the rule is compare.gaps.judge's)
MARKS = {
    "≈": "within noise: the gap's 95% interval holds 0 (an interval between runs, or, for single runs, from the "
         "run-to-run spread), so it could be noise",
    NO_CI_MARK: "no verdict: one side has no runs to judge by (a published figure), so its significance is "
                "unknown; such rows are counted apart, never as a lead",
    FLAGGED_MARK: "no verdict: a side was measured on a disturbed host (the host watch flagged it: busy, stolen or "
                  "throttled), or its training step ran on subnormal gradients (it timed the processor's subnormal "
                  "arithmetic); --allow-flagged to judge it anyway",
    "!": "above 100% of the peak: the peak figure is too low there (for a CPU, an estimate), so read its % of peak "
         "as relative only",
    "×": "a gap of ten times or more, said as a ratio (×2,100 slower) rather than as a percentage near −100%",
}


def marks_used(comp) -> list[str]:
    """The marks a comparison's tables show, in MARKS order."""
    t = comp.takeaway
    gaps = [g for r in comp.rows for g in r.gaps.values()]
    used = {"≈": t.any_noise, NO_CI_MARK: t.any_unknown, FLAGGED_MARK: t.any_flagged, "!": bool(t.over_peak),
            "×": any(is_extreme(g.pct) for g in gaps)}
    return [m for m in MARKS if used[m]]


def mark_line(mark: str) -> str:
    return f"{mark} {MARKS[mark]}."


def peak_text(cell) -> str:
    if cell.pct_peak is None:
        return "—"
    over = "!" if cell.pct_peak > 100.0 else ""  # above the peak: the peak figure is too low (see the takeaway)
    return f"{cell.pct_peak:.1f}%{over} {'MFU' if cell.peak_kind == 'MFU' else ''}".strip()


# ---- the takeaway -------------------------------------------------------------------------------------

BOUND_TITLES = {"compute": "compute-bound", "memory": "memory-bound", "host": "host-bound (eager decode)",
                "other": "end-to-end (no FLOP/byte counts)"}
HOST_BOUND_LINE = ("Host-bound rows (bound: host): a side decoded eagerly on an accelerator (llm-infer --decode eager, "
                   "or auto where no graph could be captured): every token's step was dispatched from Python, layer "
                   "by layer, with no graph capture, so at small batches its figure is the host's dispatch rate "
                   "rather than the device's. Serving engines and the published serving figures (InferenceMAX, "
                   "MLPerf) replay captured CUDA/HIP graphs: against them such a row is not the device's speed "
                   "(llm-infer --decode graph measures the device).")


def _class_sentence(lead, me: str, base: str) -> str:
    title = BOUND_TITLES[lead.bound]
    rng = (fmt_gap_value(lead.lo) if lead.lo == lead.hi
           else f"{fmt_gap_value(lead.lo)} to {fmt_gap_value(lead.hi)}")
    n = lead.rows
    rows_word = f"row{'s' * (n > 1)}"
    unknown = f", {lead.unknown} of unknown significance ({NO_CI_MARK})" if lead.unknown else ""
    unknown += f", {lead.flagged} flagged ({FLAGGED_MARK})" if lead.flagged else ""
    if lead.ahead == 0 and lead.behind == 0:
        if lead.unknown == n:
            return f"{title}: significance unknown on {n} {rows_word} ({NO_CI_MARK}), gap {rng}"
        if lead.flagged == n:
            return f"{title}: no verdict on {n} {rows_word}, flagged ({FLAGGED_MARK}), gap {rng}"
        if lead.unknown + lead.flagged == n:
            return f"{title}: no verdict on {n} {rows_word} (gap {rng}){unknown}"
        return f"{title}: no significant difference on {n} {rows_word} (gap {rng}){unknown}"
    leader, k = (me, lead.ahead) if lead.ahead >= lead.behind else (base, lead.behind)
    other = lead.behind if leader == me else lead.ahead
    extra = []
    if other:
        extra.append(f"{base if leader == me else me} on {other}")
    if lead.noise:
        extra.append(f"{lead.noise} within noise")
    if lead.unknown:
        extra.append(f"{lead.unknown} of unknown significance ({NO_CI_MARK})")
    if lead.flagged:
        extra.append(f"{lead.flagged} flagged ({FLAGGED_MARK})")
    extra_s = f" ({', '.join(extra)})" if extra else ""
    return f"{title}: {leader} leads on {k} of {n} {rows_word}{extra_s}, gap {rng}"


def verdict_lines(comp) -> list[str]:
    """The verdict in one sentence per non-baseline platform: who leads on which class of rows, by how much."""
    t = comp.takeaway
    base = comp.base.name
    lines = []
    for pt in t.platforms:
        me = comp.platforms[pt.platform].name
        parts = [_class_sentence(c, me, base) for c in pt.classes]
        if pt.not_comparable:
            parts.append(f"{pt.not_comparable} row{'s' * (pt.not_comparable > 1)} not comparable (missing or failed)")
        if parts:
            lines.append(f"{me} vs {base}: " + "; ".join(parts) + ".")
    return lines


def takeaway_lines(comp, marks: bool = True) -> list[str]:
    """The takeaway of a comparison as sentences; marks=False leaves out the marks' definitions (a renderer
    that shows them in a legend of its own, once)."""
    t = comp.takeaway
    lines = verdict_lines(comp)
    if any(r.bound == "host" for r in comp.rows):
        lines.append(HOST_BOUND_LINE)
    if t.ridges:
        ridges = "; ".join(f"{'/'.join(ds)}: {fmt_num(r, 3)} FLOP/byte ({src})" for ds, r, src in t.ridges)
        lines.append(f"Compute- vs memory-bound by arithmetic intensity against the ridge point — {ridges}.")
    for i in t.over_peak:
        p = comp.platforms[i]
        why = (" (a CPU estimate" + (f"; its clock: {p.spec.clock_source}" if p.spec.clock_source else "")
               + ", and boost can run above a nominal clock)" if p.spec is not None and p.spec.estimate else "")
        lines.append(f"! {p.name}: some rows exceed 100% of the peak{why}; the peak figure is too low there, so "
                     "read its % of peak as relative only.")
    if "runs" in t.bases:
        lines.append("Gaps between sides with two or more runs: the interval is Welch's t interval (95%) on the log "
                     "values of the runs; a gap is significant when it excludes 0.")
    if "single run" in t.bases:
        spreads = ", ".join(f"{k} {v:.0%}" for k, v in t.spreads) if t.spreads else ""
        lines.append("Single runs: the interval assumes the run-to-run spread of the device class"
                     + (f" ({spreads})" if spreads else "") + " or the spread the history measured for the row; "
                     "measure with --runs 3 (or several files per platform) to judge small gaps.")
    if marks:
        lines += [mark_line(m) for m in marks_used(comp) if m != "!"]
    if t.any_published:
        lines.append("Published gaps are as reported, not measured by gapbench.")
    lines += datasheet_lines(comp)
    return lines


def datasheet_lines(comp) -> list[str]:
    """A line for each published 'measured' figure that equals a datasheet peak, with what was measured instead."""
    out = []
    for d in getattr(comp, "datasheet_figures", []) or []:
        p = comp.platforms[d["platform"]]
        what = variant_text({k: v for k, v in (d.get("variant") or {}).items() if not isinstance(v, list)})
        line = (f"! {p.name}: the published {d['workload']}{' ' + what if what else ''} figure "
                f"({fmt_num(d['value'])} {d['unit']}) equals {d['what']} ({fmt_num(d['peak'])} {d['peak_unit']}): "
                "a datasheet number, not a measurement")
        instead = d.get("measured_instead") or []
        if instead:
            line += "; measured max-achievable: " + "; ".join(
                f"{fmt_num(x['value'])} {x['unit']} ({one_line(x.get('note') or x['source'], 80)})" for x in instead)
        else:
            line += "; gapbench knows no measured max-achievable figure for it"
        out.append(line + ".")
    return out


# ---- coverage and frameworks side by side --------------------------------------------------------------

def coverage_text(d: dict | None) -> str:
    if not isinstance(d, dict):
        return "—"
    total, native = d.get("total"), d.get("native")
    if isinstance(total, (int, float)) and isinstance(d.get("skipped"), (int, float)):
        total = total - d["skipped"]  # native_pct counts the ops tested, not the skipped ones
    pct = d.get("native_pct")
    if pct is None and isinstance(total, (int, float)) and total and isinstance(native, (int, float)):
        pct = native / total * 100.0
    bad = [f"{d[k]} {k.replace('_', ' ')}" for k in ("cpu_fallback", "unsupported", "wrong_result", "error")
           if isinstance(d.get(k), (int, float)) and d.get(k)]
    head = f"{pct:.1f}% native" if isinstance(pct, (int, float)) else "?"
    head += f" ({native}/{total})" if total is not None else ""
    return head + (f"; {', '.join(bad)}" if bad else "")


def coverage_table(comp) -> Table | None:
    side = comp.coverage
    if not side:
        return None
    rows = [[fam] + [coverage_text(s.get(fam)) if s is not None else "not audited" for s in side["summaries"]]
            for fam in side["families"]]
    return Table(["family"] + [p.name for p in comp.platforms], rows, text_columns=len(comp.platforms) + 1)


def framework_text(f: dict | None) -> str:
    if f is None:
        return "—"
    text = str(f.get("status", "?"))
    if f.get("version"):
        text += f" {f['version']}"
    if f.get("reason") and f.get("status") not in ("works", "ok"):
        text += f" ({f['reason']})"
    return one_line(text)


def frameworks_table(comp) -> Table | None:
    side = comp.frameworks
    if not side:
        return None
    rows = [[n] + [framework_text(r.get(n)) if r is not None else "not probed" for r in side["rows"]]
            for n in side["names"]]
    return Table(["framework"] + [p.name for p in comp.platforms], rows, text_columns=len(comp.platforms) + 1)


# ---- tables -----------------------------------------------------------------------------------------

@dataclass
class Table:
    """A table of plain strings; `styles` (same shape, or None) names how a cell is drawn (a kit style or a
    status). Each format escapes the strings itself: a cell is never markup."""

    headers: list[str]
    rows: list[list[str]]
    text_columns: int = 1  # left-aligned columns at the start; the rest are numbers
    title: str = ""
    styles: list[list[str]] | None = None
    notes: list[str] = field(default_factory=list)
    numeric: tuple[int, ...] | None = None  # the numeric (right-aligned) columns, when not all after text_columns

    def is_numeric(self, j: int) -> bool:
        return j in self.numeric if self.numeric is not None else j >= self.text_columns

    def style(self, i: int, j: int) -> str:
        if not self.styles:
            return ""
        return self.styles[i][j] if i < len(self.styles) and j < len(self.styles[i]) else ""


def html_table(t: Table, table_class: str = "") -> str:
    """A Table as HTML, every string escaped; numeric columns right-aligned, styles as CSS classes."""
    e = html.escape
    out = [f'<table class="{e(table_class)}"><thead><tr>' + "".join(f"<th>{e(str(h))}</th>" for h in t.headers)
           + "</tr></thead><tbody>"]
    for i, row in enumerate(t.rows):
        cells = []
        for j, c in enumerate(row):
            cls = ["num"] if t.is_numeric(j) else []
            if t.style(i, j):
                cls.append(t.style(i, j))
            attr = f' class="{e(" ".join(cls))}"' if cls else ""
            cells.append(f"<td{attr}>{e(str(c))}</td>")
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def md_cell(s: str) -> str:
    """A string as one Markdown table cell (or line): no newline, no `|` that would end the cell, no HTML, and
    every control character shown as an escape."""
    text = str(s).replace("\r\n", " ").replace("\n", " ").replace("\\", "\\\\")
    return printable(text).replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def md_table(t: Table) -> list[str]:
    out = ["| " + " | ".join(md_cell(h) for h in t.headers) + " |",
           "|" + "|".join("---:" if t.is_numeric(j) else ":---" for j in range(len(t.headers))) + "|"]
    out += ["| " + " | ".join(md_cell(c) for c in row) + " |" for row in t.rows]
    return out


RICH_STYLES = {STYLE_BETTER: "green", STYLE_WORSE: "red", STYLE_NOISE: "dim", STYLE_UNKNOWN: "yellow",
               STYLE_STATUS: "yellow", "ok": "", "native": "green", "cpu_fallback": "yellow",
               "unsupported": "magenta", "wrong_result": "red", "error": "red", "skipped": "dim", "too_slow": "yellow",
               "oom": "red", "timeout": "red", "crashed": "red", "noisy": "yellow", "blocker": "red",
               "manual": "yellow", "auto": "cyan", "works": "green"}


TERMINAL_CELL = 500  # characters of one terminal cell; a longer string (a reason, a name) is cut with "…"


def rich_text(text: str, style: str = ""):
    """A line for the terminal as a rich Text: never read as markup, every control character shown as an escape."""
    from rich.text import Text

    return Text(printable(text, keep_newlines=True), style=style)


def _rich_cell(text: str, style: str = ""):
    from rich.text import Text

    return Text(_cut(printable(text, keep_newlines=True), TERMINAL_CELL), style=style)


def rich_table(t: Table):
    """A Table as a rich Table; cells are Text objects, so no string from a file is read as markup, every control
    character in it is shown as an escape, and no cell is longer than TERMINAL_CELL characters."""
    from rich.table import Table as RichTable

    rt = RichTable(title=_rich_cell(t.title) if t.title else None, title_justify="left")
    for j, h in enumerate(t.headers):
        rt.add_column(_rich_cell(str(h)), justify="right" if t.is_numeric(j) else "left", overflow="fold")
    for i, row in enumerate(t.rows):
        rt.add_row(*[_rich_cell(str(c), RICH_STYLES.get(t.style(i, j), "")) for j, c in enumerate(row)])
    return rt


# ---- throughput-interactivity curves (compare.frontier) ------------------------------------------------

Y_TITLES = {"output_tokens_per_s": "output tokens/s per device", "total_tokens_per_s": "total tokens/s per device"}
X_TITLE = "tokens/s per user"


def series_text(workload: str, series: dict) -> str:
    vt = variant_text(series)
    return f"{workload} {vt}" if vt else workload


def series_title(workload: str, series: dict) -> str:
    """A short name of an inference series for a plot's title: model, engine, dtype, lengths, batching."""
    parts = [workload, str(series.get("model", "")), str(series.get("engine", "")), str(series.get("dtype", ""))]
    if "input_len" in series and "output_len" in series:
        parts.append(f"{series['input_len']}→{series['output_len']} tokens")
    if series.get("batching") == "static":
        parts.append("static batching")
    if series.get("compile"):
        parts.append("compiled")
    return " ".join(p for p in parts if p)


def level_text(level: float | None) -> str:
    return "highest throughput" if level is None else f"{fmt_num(level, 3)} {X_TITLE}"


def value_text(v) -> str:
    """A frontier value: 'y [lo, hi]', 'y' without an interval, or 'not reached' outside the curve."""
    if v is None:
        return "not reached"
    return fmt_num(v.y) + (f" {interval_text(v.ci)}" if v.ci else "")


def frontier_table(comp) -> Table | None:
    """The gap at equal interactivity: one row per series, y metric and level; a value column per platform that
    has the curve, a gap column per non-baseline platform."""
    f = comp.frontiers
    if f is None or not f.gaps:
        return None
    shown = sorted({i for g in f.gaps for i in g.values})
    others = [i for i in shown if i != comp.baseline]
    headers = ["series", "y", "at"] + [comp.platforms[i].name + (" (baseline)" if i == comp.baseline else "")
                                       for i in shown] + [f"gap {comp.platforms[i].name}" for i in others]
    rows, styles = [], []
    for g in f.gaps:
        row = [series_text(g.workload, g.series), Y_TITLES.get(g.y_metric, g.y_metric), level_text(g.level)]
        style = ["", "", ""]
        for i in shown:
            row.append(value_text(g.values.get(i)) if i in g.values else "no curve")
            style.append("" if g.values.get(i) is not None else STYLE_STATUS)
        for i in others:
            gap = g.gaps.get(i)
            row.append(gap_text(gap) if gap is not None else "no curve")
            style.append(gap_style(gap) if gap is not None else STYLE_STATUS)
        rows.append(row)
        styles.append(style)
    return Table(headers, rows, text_columns=3, styles=styles,
                 title=f"throughput per device at equal interactivity, against {comp.base.name} (> 0: better)")


def frontier_lines(comp) -> list[str]:
    """The answer in words: at each interactivity, who gives how many tokens/s per device, and the gap."""
    f = comp.frontiers
    if f is None:
        return []
    lines = []
    for g in f.gaps:
        base = g.values.get(comp.baseline)
        if g.level is None or base is None:
            continue
        for i, gap in g.gaps.items():
            v = g.values.get(i)
            if v is None or gap.pct is None:
                continue
            lines.append(f"{series_text(g.workload, g.series)}: at {fmt_num(g.level, 3)} {X_TITLE}, "
                         f"{comp.platforms[i].name} gives {value_text(v)} {Y_TITLES.get(g.y_metric, g.y_metric)} "
                         f"against {value_text(base)} on {comp.base.name}: {gap_text(gap)}.")
    said = set()
    for c in f.curves:
        if c.host_bound and (c.platform, series_text(c.workload, c.series)) not in said:
            said.add((c.platform, series_text(c.workload, c.series)))
            lines.append(f"{comp.platforms[c.platform].name}, {series_text(c.workload, c.series)}: eager decode, "
                         "host-bound — every token's step dispatched from Python with no graph capture, so its curve "
                         "is the host's dispatch rate more than the device's; published serving curves replay "
                         "captured graphs (llm-infer --decode graph).")
    if any(c.series.get("batching") == "static" for c in f.curves):
        lines.append("Static batching (llm-infer's transformers engine): every request of a batch starts and ends "
                     "together; it is not a serving engine's continuous batching.")
    if any(c.reference for c in f.curves):
        lines.append("Published curve points are as reported, not measured by gapbench; between them the curve is "
                     "interpolated like a measured one.")
    if f.gaps:
        lines.append("Between frontier points the curve is linear; below its lowest interactivity a curve gives its "
                     "highest throughput, beyond its highest it is not extended (\"not reached\").")
    return lines


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
