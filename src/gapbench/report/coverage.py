"""A coverage section and an operator trace as tables (the kit's, so any text from a file is escaped)."""

from __future__ import annotations

from gapbench.coverage.summary import headline
from gapbench.report.kit import Table, one_line


def coverage_headline(cov: dict, where: str = "") -> str:
    return (f"{headline(cov['summary'], where)}  (torch {cov.get('torch')}, dtypes {', '.join(cov.get('dtypes', []))}"
            f"{', with backward' if cov.get('grad') else ''})")


def family_table(cov: dict) -> Table:
    rows = []
    for name, c in sorted(cov.get("families", {}).items(), key=lambda kv: -kv[1]["total"]):
        pct = "—" if c.get("native_pct") is None else f"{c['native_pct']:.1f}"
        rows.append([name, str(c["total"]), str(c["native"]), pct, str(c["wrong_result"]), str(c["cpu_fallback"]),
                     str(c["unsupported"]), str(c["error"]), str(c["skipped"])])
    return Table(["family", "ops", "native", "native %", "wrong", "cpu fallback", "unsupported", "error", "skipped"],
                 rows, title="by family (one status per op: the worst over its dtypes)")


def not_native_table(cov: dict, show: int | None = 20) -> Table | None:
    bad = [r for r in cov.get("ops", []) if r["status"] not in ("native", "skipped")]
    if not bad:
        return None
    rows, styles = [], []
    for r in bad[: show or None]:
        name = r["op"] + (f".{r['variant']}" if r.get("variant") else "")
        err = "" if r.get("max_error") is None else f"{r['max_error']:.3g}"
        rows.append([name, r["dtype"], r["status"], err, one_line(r.get("reason") or "", 160)])
        styles.append(["", "", r["status"], "", ""])
    title = f"not native ({len(bad)} op×dtype)" + (f", first {show}" if show and len(bad) > show else "")
    return Table(["op", "dtype", "status", "max error", "reason"], rows, text_columns=5, title=title, styles=styles)


def coverage_tables(cov: dict, where: str = "", show: int | None = 20) -> list:
    """Headline, per-family table and the not-native (op, dtype) rows (at most `show`, None for all)."""
    out: list = [coverage_headline(cov, where), family_table(cov)]
    bad = not_native_table(cov, show)
    if bad is not None:
        out.append(bad)
    return out


def trace_table(trace, statuses: dict | None = None) -> Table:
    """One row per ATen overload: forward and backward call counts, and its status on a device when given."""
    headers = ["operator", "forward", "backward"] + (["OpInfo entry", "status"] if statuses is not None else [])
    rows, styles = [], []
    for name in trace.ops():
        row = [name, str(trace.forward.get(name, 0) or ""), str(trace.backward.get(name, 0) or "")]
        style = ["", "", ""]
        if statuses is not None:
            st = statuses.get(name)
            row += ["", ""] if st is None else [st.get("entry") or "—", st["status"]]
            style += ["", "" if st is None else st["status"]]
        rows.append(row)
        styles.append(style)
    return Table(headers, rows, text_columns=1, title=f"ATen operators used by {trace.target}", styles=styles)
