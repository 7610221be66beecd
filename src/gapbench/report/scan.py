"""A ScanReport (and a port's report) rendered: JSON, SARIF 2.1.0, and through the report kit Markdown,
self-contained HTML and terminal tables. Renderers return text (or rich renderables); they never print and never
touch the files scanned; every string from a scanned file is escaped by the kit's table model."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import PurePosixPath
from urllib.parse import quote

from gapbench import __version__
from gapbench.report.kit import Table, html_table, md_cell, md_table, one_line, rich_table, rich_text
from gapbench.scan.effort import format_days
from gapbench.scan.rules import TARGET_NAMES, VERDICT_HELP, VERDICTS
from gapbench.scan.scanreport import ScanReport
from gapbench.text import json_printable

FORMATS = ("table", "json", "md", "html", "sarif")
SARIF_LEVEL = {"works": "none", "auto": "note", "manual": "warning", "blocker": "error"}
SARIF_SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"


def render(report: ScanReport, fmt: str, limit: int | None = None):
    if fmt == "json":
        return render_json(report)
    if fmt == "md":
        return render_markdown(report)
    if fmt == "html":
        return render_html(report)
    if fmt == "sarif":
        return render_sarif(report)
    return terminal(report, limit)


def render_json(report: ScanReport) -> str:
    return json_printable(json.dumps(report.to_dict(), indent=2, ensure_ascii=False)) + "\n"


def _skip_reasons(report: ScanReport) -> Counter:
    return Counter(s.reason.split(" (")[0] for s in report.skipped)


def _stats_line(report: ScanReport) -> str:
    mb = report.bytes_scanned / 1e6
    line = (f"{report.files_scanned:,} files scanned ({mb:.1f} MB) of {report.files_seen:,} seen, "
            f"in {report.elapsed_s:.1f} s ({report.files_per_s:,.0f} files/s); {len(report.findings):,} findings")
    if report.ported:
        line += f", {report.ported} already ported (in ROCm/XPU/NPU branches: not counted)"
    if report.suppressed:
        line += f", {report.suppressed} suppressed"
    if report.skipped:
        line += f"; {len(report.skipped)} skipped"
    return line


# ---------------------------------------------------------------- the tables every format shows

def summary_table(report: ScanReport) -> Table:
    rows = [[f"{TARGET_NAMES[t]} ({t})", *(str(s.counts[v]) for v in VERDICTS), format_days(*s.effort_days)]
            for t, s in report.summaries.items()]
    styles = [["", *VERDICTS, ""] for _ in rows]
    return Table(["target", *VERDICTS, "effort (range)"], rows, numeric=tuple(range(1, 1 + len(VERDICTS))),
                 title="CUDA lock-in per target", styles=styles)


def blockers_table(report: ScanReport) -> Table | None:
    """The blockers of every selected target in one table (None when there are none)."""
    blockers: dict[str, list] = {}
    for t, s in report.summaries.items():
        for b in s.blockers:
            blockers.setdefault(b.rule, []).append((t, b))
    if not blockers:
        return None
    rules = report.ruleset.rules
    rows = [[rid, ", ".join(t for t, _ in items), str(items[0][1].findings), str(items[0][1].files),
             rules[rid].message, rules[rid].fix] for rid, items in blockers.items()]
    return Table(["rule", "targets", "findings", "files", "why", "fix"], rows, numeric=(2, 3),
                 title="Blockers (no equivalent on the target)")


def rules_table(report: ScanReport) -> Table:
    rules = report.ruleset.rules
    fired = report.firings()
    order = sorted(fired, key=lambda r: (-VERDICTS.index(rules[r].worst(report.targets)), -fired[r]["findings"], r))
    rows = [[rid, str(fired[rid]["findings"]), str(fired[rid]["ported"]), str(fired[rid]["files"]),
             *(rules[rid].verdicts[t] for t in report.targets), rules[rid].fix, rules[rid].reference] for rid in order]
    styles = [["", "", "", "", *(rules[rid].verdicts[t] for t in report.targets), "", ""] for rid in order]
    return Table(["rule", "fired", "already ported", "files", *report.targets, "fix", "reference"], rows,
                 numeric=(1, 2, 3), title="Rules hit (how often each fired; already ported ones are not counted)",
                 styles=styles)


def findings_table(report: ScanReport, limit: int | None = None) -> Table:
    shown = report.findings if not limit or limit <= 0 else report.findings[:limit]
    rows = [[f"{f.path}:{f.line}:{f.column}", f.rule,
             *("already ported" if f.ported else report.verdict(f, t) for t in report.targets),
             one_line(f.text, 200), report.ruleset.rules[f.rule].fix] for f in shown]
    styles = [["", "", *("" if f.ported else report.verdict(f, t) for t in report.targets), "", ""] for f in shown]
    return Table(["location", "rule", *report.targets, "text", "fix"], rows, numeric=(),
                 title=f"Findings (worst first; {len(shown)} of {len(report.findings)})", styles=styles)


def _path_table(items, column: str, title: str) -> Table:
    return Table(["path", column], [[x.path, getattr(x, column)] for x in items], numeric=(), title=title)


def _sections(report: ScanReport, limit: int | None = None) -> list[Table]:
    out = [summary_table(report)]
    bt = blockers_table(report)
    if bt is not None:
        out.append(bt)
    if report.findings:
        out += [rules_table(report), findings_table(report, limit)]
    if report.skipped:
        out.append(_path_table(report.skipped, "reason", "Skipped files"))
    if report.notes:
        out.append(_path_table(report.notes, "note", "Notes"))
    return out


def _verdict_help() -> str:
    return "; ".join(f"{v}: {VERDICT_HELP[v]}" for v in VERDICTS) + ". Effort is a range from documented weights, " \
        "not a measurement."


# ---------------------------------------------------------------- Markdown

def render_markdown(report: ScanReport) -> str:
    out = [f"# CUDA lock-in scan: {md_cell(report.root)}", "", md_cell(_stats_line(report)) + ".", "",
           md_cell(_verdict_help()), ""]
    for t in _sections(report):
        out += [f"## {md_cell(t.title)}", ""] + md_table(t) + [""]
    out += [f"Rules: {md_cell(report.ruleset.source)} ({md_cell(report.ruleset.date)}). gapbench {__version__}.", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- HTML

CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.num{text-align:right}
.works{background:#e6f4ea}.auto{background:#eef3fc}.manual{background:#fff4d6}.blocker{background:#fde2e1}
.muted{color:#666}
"""


def render_html(report: ScanReport) -> str:
    e = html.escape
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
             f"<title>CUDA lock-in scan: {e(report.root)}</title><style>{_CSS}</style></head><body>",
             f"<h1>CUDA lock-in scan</h1><p><code>{e(report.root)}</code></p><p>{e(_stats_line(report))}.</p>",
             f"<p class=muted>{e(_verdict_help())}</p>"]
    for t in _sections(report):
        parts.append(f"<h2>{e(t.title)}</h2>{html_table(t)}")
    parts.append(f"<p class=muted>Rules: {e(report.ruleset.source)} ({e(report.ruleset.date)}). "
                 f"gapbench {e(__version__)}.</p></body></html>\n")
    return "\n".join(parts)


# ---------------------------------------------------------------- SARIF 2.1.0

def _root_uri(root: str) -> str:
    p = PurePosixPath(root.replace("\\", "/"))
    uri = "file://" + quote(str(p))
    return uri if uri.endswith("/") else uri + "/"


def to_sarif(report: ScanReport) -> dict:
    rules = report.ruleset.rules
    used = report.rules_used()
    index = {rid: i for i, rid in enumerate(used)}
    sarif_rules = []
    for rid in used:
        r = rules[rid]
        worst = r.worst(report.targets)
        entry = {
            "id": rid,
            "name": "".join(w.capitalize() for w in rid.split("-")),
            "shortDescription": {"text": r.message},
            "fullDescription": {"text": r.message + ". Per target: "
                                + ", ".join(f"{t}={r.verdicts[t]}" for t in report.targets)},
            "help": {"text": f"{r.fix} (see {r.reference})"},
            "defaultConfiguration": {"level": SARIF_LEVEL[worst]},
            "properties": {"verdicts": {t: r.verdicts[t] for t in report.targets}, "kinds": list(r.kinds),
                           "reference": r.reference, "tags": ["cuda-lock-in", worst]},
        }
        if r.reference.startswith(("http://", "https://")):
            entry["helpUri"] = r.reference
        sarif_rules.append(entry)
    results = []
    for f in report.findings:
        r = rules[f.rule]
        verdicts = {t: r.verdicts[t] for t in report.targets}
        results.append({
            "ruleId": f.rule,
            "ruleIndex": index[f.rule],
            "level": SARIF_LEVEL[r.worst(report.targets)],
            "message": {"text": f"{r.message} [" + ", ".join(f"{t}: {v}" for t, v in verdicts.items())
                        + f"] Fix: {r.fix}"},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": quote(f.path), "uriBaseId": "SRCROOT"},
                "region": {"startLine": f.line, "startColumn": f.column, "snippet": {"text": f.text}},
            }}],
            "partialFingerprints": {"gapbench/v1": f"{f.rule}:{f.path}:{f.text}"},
            "properties": {"verdicts": verdicts},
        })
    notifications = [{"level": "note", "message": {"text": f"skipped: {s.reason}"},
                      "locations": [{"physicalLocation": {"artifactLocation": {"uri": quote(s.path),
                                                                               "uriBaseId": "SRCROOT"}}}]}
                     for s in report.skipped]
    notifications += [{"level": "note", "message": {"text": n.note},
                       "locations": [{"physicalLocation": {"artifactLocation": {"uri": quote(n.path),
                                                                                "uriBaseId": "SRCROOT"}}}]}
                      for n in report.notes]
    return {
        "$schema": SARIF_SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "gapbench", "version": __version__, "semanticVersion": __version__,
                                "rules": sarif_rules}},
            "originalUriBaseIds": {"SRCROOT": {"uri": _root_uri(report.root)}},
            "invocations": [{"executionSuccessful": True, "toolExecutionNotifications": notifications}],
            "results": results,
            "properties": {"targets": list(report.targets),
                           "summary": {t: {"counts": s.counts} for t, s in report.summaries.items()}},
        }],
    }


def render_sarif(report: ScanReport) -> str:
    return json_printable(json.dumps(to_sarif(report), indent=2, ensure_ascii=False)) + "\n"


# ---------------------------------------------------------------- terminal (rich)

def terminal(report: ScanReport, limit: int | None = 40) -> list:
    """Rich renderables: the summary, blockers first, then the worst findings (up to `limit`)."""
    out: list = [rich_text(_stats_line(report), style="dim")]
    out += [rich_table(t) for t in _sections(report, limit) if t.title not in ("Rules hit", "Skipped files", "Notes")]
    reasons = _skip_reasons(report)
    if reasons:
        out.append(rich_text("skipped: " + "; ".join(f"{n} {r}" for r, n in reasons.most_common()), style="dim"))
    for n in report.notes[:10]:
        out.append(rich_text(f"note: {n.path}: {n.note}", style="dim"))
    if len(report.notes) > 10:
        out.append(rich_text(f"note: {len(report.notes) - 10} more notes (see --format json)", style="dim"))
    return out


# ---------------------------------------------------------------- port reports

def render_port_json(report) -> str:
    return json_printable(json.dumps(report.to_dict(), indent=2, ensure_ascii=False)) + "\n"


def _port_tables(d: dict) -> list[Table]:
    out = []
    if d["unmapped"]:
        out.append(Table(["identifier", "count", "first"], [[u["identifier"], str(u["count"]), u["first"]]
                                                            for u in d["unmapped"]], numeric=(1,),
                         title="Left unmapped by hipify (still CUDA)"))
    if d["remaining_work"]:
        rows = [[f"{f['path']}:{f['line']}:{f['column']}", f["rule"], f["verdict"], f["fix"]] for f in d["remaining_work"]]
        out.append(Table(["location", "rule", "verdict", "fix"], rows, numeric=(),
                         title="Remaining manual work for ROCm (scan of the output)",
                         styles=[["", "", f["verdict"], ""] for f in d["remaining_work"]]))
    if d["translated"]:
        out.append(Table(["source", "output", "changed", "launches"],
                         [[p["source"], p["output"], "yes" if p["changed"] else "no", str(p["kernel_launches"])]
                          for p in d["translated"]], numeric=(3,), title="Translated files"))
    for title, key, col in (("Skipped", "skipped", "reason"), ("Notes", "notes", "note")):
        if d[key]:
            out.append(Table(["path", col], [[x["path"], x[col]] for x in d[key]], numeric=(), title=title))
    return out


def _port_line(d: dict) -> str:
    return (f"{len(d['translated'])} files translated with torch.utils.hipify "
            f"({sum(p['kernel_launches'] for p in d['translated'])} kernel launches rewritten), "
            f"{d['copied']} copied unchanged, {len(d['skipped'])} skipped")


def render_port_markdown(report) -> str:
    d = report.to_dict()
    out = [f"# CUDA -> HIP port: {md_cell(d['input'])} -> {md_cell(d['output'])}", "", md_cell(_port_line(d)) + ".", ""]
    if not d["unmapped"]:
        out += ["Nothing that still looks like CUDA was left in the translated files.", ""]
    if not d["remaining_work"]:
        out += ["The scanner found no manual or blocker items in the output.", ""]
    for t in _port_tables(d):
        out += [f"## {md_cell(t.title)}", ""] + md_table(t) + [""]
    return "\n".join(out)


def port_terminal(report) -> list:
    d = report.to_dict()
    out: list = [rich_text(f"{_port_line(d)} -> {d['output']}")]
    if not d["unmapped"]:
        out.append(rich_text("nothing left that looks like CUDA in the translated files", style="green"))
    out += [rich_table(t) for t in _port_tables(d) if t.title != "Translated files"]
    return out
