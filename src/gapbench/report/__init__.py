"""Renderers: terminal (rich), Markdown, CSV, JSON and a self-contained HTML page of a comparison, and the
tables of a run, of the history, of a coverage audit. All of them word numbers through one kit (kit.py).

Renderers take result objects and return text; they measure nothing and find no files.
"""

from __future__ import annotations

from gapbench.errors import GapbenchError

FORMATS = ("terminal", "md", "csv", "json", "html")


def render(result_sets, format: str = "html", baseline=None, labels=None, refs=None, prices=None,
           comparison=None, title: str = "gapbench report") -> str:
    """Render result sets (ResultSet objects or paths) or a ready Comparison in one of FORMATS."""
    from gapbench.compare import compare
    from gapbench.report import csvfile, html, jsonfile, markdown, terminal

    if format not in FORMATS:
        raise GapbenchError(f"unknown format {format!r}; expected one of {', '.join(FORMATS)}")
    comp = comparison if comparison is not None else compare(result_sets, baseline=baseline, labels=labels,
                                                            refs=refs, prices=prices)
    if format == "html":
        return html.render_html(comp, title=title)
    if format == "md":
        return markdown.render_markdown(comp)
    if format == "csv":
        return csvfile.render_csv(comp)
    if format == "json":
        return jsonfile.render_json(comp)
    return terminal.render_terminal(comp)
