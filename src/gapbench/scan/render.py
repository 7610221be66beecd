"""Render a ScanReport: JSON, Markdown, self-contained HTML, SARIF 2.1.0, and rich tables for the terminal.
Renderers return text (or rich renderables); they never print and never touch the files scanned."""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import PurePosixPath
from urllib.parse import quote

from gapbench import __version__
from gapbench.scan.effort import format_days
from gapbench.scan.rules import TARGET_NAMES, VERDICT_HELP, VERDICTS
from gapbench.scan.scanreport import ScanReport

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
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"


def _skip_reasons(report: ScanReport) -> Counter:
    return Counter(s.reason.split(" (")[0] for s in report.skipped)


def _stats_line(report: ScanReport) -> str:
    mb = report.bytes_scanned / 1e6
    line = (f"{report.files_scanned:,} files scanned ({mb:.1f} MB) of {report.files_seen:,} seen, "
            f"in {report.elapsed_s:.1f} s ({report.files_per_s:,.0f} files/s); {len(report.findings):,} findings")
    if report.suppressed:
        line += f", {report.suppressed} suppressed"
    if report.skipped:
        line += f"; {len(report.skipped)} skipped"
    return line


# ---------------------------------------------------------------- Markdown

def _md(s: str) -> str:
    return str(s).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ").replace("`", "'")


def render_markdown(report: ScanReport) -> str:
    rules = report.ruleset.rules
    out = [f"# CUDA lock-in scan: {_md(report.root)}", "", _stats_line(report) + ".", "",
           "## Summary per target", "",
           "| target | works | auto | manual | blocker | effort |", "|---|---:|---:|---:|---:|---|"]
    for t, s in report.summaries.items():
        c = s.counts
        out.append(f"| {TARGET_NAMES[t]} ({t}) | {c['works']} | {c['auto']} | {c['manual']} | {c['blocker']} | "
                   f"{format_days(*s.effort_days)} |")
    out += ["", "Verdicts: " + "; ".join(f"**{v}**: {VERDICT_HELP[v]}" for v in VERDICTS) + ".",
            "Effort is a range from the weights in docs/scan.md, not a measurement.", ""]
    for t, s in report.summaries.items():
        if s.blockers:
            out += [f"## Blockers for {TARGET_NAMES[t]}", "", "| rule | findings | files | why | fix |",
                    "|---|---:|---:|---|---|"]
            for b in s.blockers:
                r = rules[b.rule]
                out.append(f"| `{b.rule}` | {b.findings} | {b.files} | {_md(r.message)} | {_md(r.fix)} |")
            out.append("")
    out += ["## Rules hit", "", "| rule | findings | " + " | ".join(report.targets) + " | fix | reference |",
            "|---|---:|" + "---|" * len(report.targets) + "---|---|"]
    counts = Counter(f.rule for f in report.findings)
    for rid in sorted(counts, key=lambda r: (-VERDICTS.index(rules[r].worst(report.targets)), -counts[r], r)):
        r = rules[rid]
        out.append(f"| `{rid}` | {counts[rid]} | " + " | ".join(r.verdicts[t] for t in report.targets)
                   + f" | {_md(r.fix)} | {_md(r.reference)} |")
    out += ["", "## Findings", "", "| location | rule | " + " | ".join(report.targets) + " | text |",
            "|---|---|" + "---|" * len(report.targets) + "---|"]
    for f in report.findings:
        out.append(f"| {_md(f.path)}:{f.line}:{f.column} | `{f.rule}` | "
                   + " | ".join(report.verdict(f, t) for t in report.targets) + f" | `{_md(f.text)}` |")
    if report.skipped:
        out += ["", "## Skipped files", "", "| path | reason |", "|---|---|"]
        out += [f"| {_md(s.path)} | {_md(s.reason)} |" for s in report.skipped]
    if report.notes:
        out += ["", "## Notes", "", "| path | note |", "|---|---|"]
        out += [f"| {_md(n.path)} | {_md(n.note)} |" for n in report.notes]
    out += ["", f"Rules: {_md(report.ruleset.source)} ({report.ruleset.date}). gapbench {__version__}.", ""]
    return "\n".join(out)


# ---------------------------------------------------------------- HTML

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222;max-width:1400px}
table{border-collapse:collapse;margin:1em 0}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;
vertical-align:top}th{background:#f3f3f3}td.n{text-align:right}code{font-size:12px}
.works{background:#e6f4ea}.auto{background:#eef3fc}.manual{background:#fff4d6}.blocker{background:#fde2e1}
.muted{color:#666}
"""


def render_html(report: ScanReport) -> str:
    e = html.escape
    rules = report.ruleset.rules
    v = lambda verdict: f'<td class="{e(verdict)}">{e(verdict)}</td>'  # noqa: E731
    parts = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
             f"<title>CUDA lock-in scan: {e(report.root)}</title><style>{_CSS}</style></head><body>",
             f"<h1>CUDA lock-in scan</h1><p><code>{e(report.root)}</code></p><p>{e(_stats_line(report))}.</p>",
             "<h2>Summary per target</h2><table><tr><th>target</th>"
             + "".join(f"<th>{x}</th>" for x in VERDICTS) + "<th>effort</th></tr>"]
    for t, s in report.summaries.items():
        parts.append(f"<tr><td>{e(TARGET_NAMES[t])} ({e(t)})</td>"
                     + "".join(f'<td class="n">{s.counts[x]}</td>' for x in VERDICTS)
                     + f"<td>{e(format_days(*s.effort_days))}</td></tr>")
    parts.append("</table><p class=muted>" + e("; ".join(f"{x}: {VERDICT_HELP[x]}" for x in VERDICTS))
                 + ". Effort is a range from documented weights, not a measurement.</p>")
    for t, s in report.summaries.items():
        if s.blockers:
            parts.append(f"<h2>Blockers for {e(TARGET_NAMES[t])}</h2><table><tr><th>rule</th><th>findings</th>"
                         "<th>files</th><th>why</th><th>fix</th></tr>")
            for b in s.blockers:
                r = rules[b.rule]
                parts.append(f"<tr><td><code>{e(b.rule)}</code></td><td class=n>{b.findings}</td>"
                             f"<td class=n>{b.files}</td><td>{e(r.message)}</td><td>{e(r.fix)}</td></tr>")
            parts.append("</table>")
    parts.append("<h2>Findings</h2><table><tr><th>location</th><th>rule</th>"
                 + "".join(f"<th>{e(t)}</th>" for t in report.targets) + "<th>text</th><th>fix</th></tr>")
    for f in report.findings:
        r = rules[f.rule]
        ref = (f'<a href="{e(r.reference)}">{e(f.rule)}</a>' if r.reference.startswith(("http://", "https://"))
               else e(f.rule))
        parts.append(f"<tr><td><code>{e(f.path)}:{f.line}:{f.column}</code></td><td>{ref}</td>"
                     + "".join(v(report.verdict(f, t)) for t in report.targets)
                     + f"<td><code>{e(f.text)}</code></td><td>{e(r.fix)}</td></tr>")
    parts.append("</table>")
    if report.skipped:
        parts.append("<h2>Skipped files</h2><table><tr><th>path</th><th>reason</th></tr>"
                     + "".join(f"<tr><td><code>{e(s.path)}</code></td><td>{e(s.reason)}</td></tr>"
                               for s in report.skipped) + "</table>")
    if report.notes:
        parts.append("<h2>Notes</h2><table><tr><th>path</th><th>note</th></tr>"
                     + "".join(f"<tr><td><code>{e(n.path)}</code></td><td>{e(n.note)}</td></tr>"
                               for n in report.notes) + "</table>")
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
    return json.dumps(to_sarif(report), indent=2, ensure_ascii=False) + "\n"


# ---------------------------------------------------------------- terminal (rich)

def _blockers_table(report: ScanReport):
    """The blockers of every selected target in one rich table (None when there are none)."""
    from rich.table import Table

    blockers: dict[str, list] = {}
    for t, s in report.summaries.items():
        for b in s.blockers:
            blockers.setdefault(b.rule, []).append((t, b))
    if not blockers:
        return None
    bt = Table(title="Blockers (no equivalent on the target)", title_justify="left")
    for col in ("rule", "targets", "findings", "files", "fix"):
        bt.add_column(col, overflow="fold")
    for rid, items in blockers.items():
        bt.add_row(rid, ", ".join(t for t, _ in items), str(items[0][1].findings), str(items[0][1].files),
                   report.ruleset.rules[rid].fix)
    return bt


def terminal(report: ScanReport, limit: int | None = 40) -> list:
    """Rich renderables: the summary, blockers first, then the worst findings (up to `limit`)."""
    from rich.table import Table
    from rich.text import Text

    style = {"works": "green", "auto": "cyan", "manual": "yellow", "blocker": "bold red"}
    out: list = [Text(_stats_line(report), style="dim")]
    summary = Table(title="CUDA lock-in per target", title_justify="left")
    summary.add_column("target")
    for v in VERDICTS:
        summary.add_column(v, justify="right", style=style[v])
    summary.add_column("effort (range)")
    for t, s in report.summaries.items():
        summary.add_row(f"{TARGET_NAMES[t]} ({t})", *(str(s.counts[v]) for v in VERDICTS),
                        format_days(*s.effort_days))
    out.append(summary)
    bt = _blockers_table(report)
    if bt is not None:
        out.append(bt)
    if report.findings:
        shown = report.findings if not limit or limit <= 0 else report.findings[:limit]
        ft = Table(title=f"Findings (worst first; {len(shown)} of {len(report.findings)})", title_justify="left")
        ft.add_column("location", overflow="fold")
        ft.add_column("rule", overflow="fold")
        for t in report.targets:
            ft.add_column(t)
        ft.add_column("text", overflow="fold")
        for f in shown:
            ft.add_row(f"{f.path}:{f.line}:{f.column}", f.rule,
                       *(Text(report.verdict(f, t), style=style[report.verdict(f, t)]) for t in report.targets),
                       f.text)
        out.append(ft)
    reasons = _skip_reasons(report)
    if reasons:
        out.append(Text("skipped: " + "; ".join(f"{n} {r}" for r, n in reasons.most_common()), style="dim"))
    for n in report.notes[:10]:
        out.append(Text(f"note: {n.path}: {n.note}", style="dim"))
    if len(report.notes) > 10:
        out.append(Text(f"note: {len(report.notes) - 10} more notes (see --format json)", style="dim"))
    return out


# ---------------------------------------------------------------- port reports

def render_port_json(report) -> str:
    return json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"


def render_port_markdown(report) -> str:
    d = report.to_dict()
    out = [f"# CUDA -> HIP port: {_md(d['input'])} -> {_md(d['output'])}", "",
           f"{len(d['translated'])} files translated with torch.utils.hipify "
           f"({sum(p['kernel_launches'] for p in d['translated'])} kernel launches rewritten), "
           f"{d['copied']} copied unchanged, {len(d['skipped'])} skipped.", "",
           "## Left unmapped", ""]
    if d["unmapped"]:
        out += ["| identifier | count | first |", "|---|---:|---|"]
        out += [f"| `{_md(u['identifier'])}` | {u['count']} | {_md(u['first'])} |" for u in d["unmapped"]]
    else:
        out.append("Nothing that still looks like CUDA was left in the translated files.")
    out += ["", "## Remaining manual work for ROCm", ""]
    if d["remaining_work"]:
        out += ["| location | rule | verdict | fix |", "|---|---|---|---|"]
        out += [f"| {_md(f['path'])}:{f['line']}:{f['column']} | `{f['rule']}` | {f['verdict']} | {_md(f['fix'])} |"
                for f in d["remaining_work"]]
    else:
        out.append("The scanner found no manual or blocker items in the output.")
    if d["translated"]:
        out += ["", "## Translated files", "", "| source | output | changed | launches |", "|---|---|---|---:|"]
        out += [f"| {_md(p['source'])} | {_md(p['output'])} | {'yes' if p['changed'] else 'no'} | "
                f"{p['kernel_launches']} |" for p in d["translated"]]
    for title, key, col in (("Skipped", "skipped", "reason"), ("Notes", "notes", "note")):
        if d[key]:
            out += ["", f"## {title}", "", f"| path | {col} |", "|---|---|"]
            out += [f"| {_md(x['path'])} | {_md(x[col])} |" for x in d[key]]
    return "\n".join(out) + "\n"


def port_terminal(report) -> list:
    from rich.table import Table
    from rich.text import Text

    d = report.to_dict()
    out: list = [Text(f"{len(d['translated'])} files translated to HIP "
                      f"({sum(p['kernel_launches'] for p in d['translated'])} kernel launches rewritten), "
                      f"{d['copied']} copied unchanged, {len(d['skipped'])} skipped -> {d['output']}")]
    if d["unmapped"]:
        t = Table(title="Left unmapped by hipify (still CUDA)", title_justify="left")
        for c in ("identifier", "count", "first"):
            t.add_column(c, overflow="fold")
        for u in d["unmapped"]:
            t.add_row(u["identifier"], str(u["count"]), u["first"])
        out.append(t)
    else:
        out.append(Text("nothing left that looks like CUDA in the translated files", style="green"))
    if d["remaining_work"]:
        t = Table(title="Remaining manual work for ROCm (scan of the output)", title_justify="left")
        for c in ("location", "rule", "verdict", "fix"):
            t.add_column(c, overflow="fold")
        for f in d["remaining_work"]:
            t.add_row(f"{f['path']}:{f['line']}:{f['column']}", f["rule"], f["verdict"], f["fix"])
        out.append(t)
    for s in d["skipped"]:
        out.append(Text(f"skipped: {s['path']}: {s['reason']}", style="dim"))
    for n in d["notes"]:
        out.append(Text(f"note: {n['path']}: {n['note']}", style="dim"))
    return out
