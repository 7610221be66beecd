"""Terminal renderables for a coverage section and an operator trace (no printing here)."""

from __future__ import annotations

from rich.table import Table

from gapbench.coverage.summary import headline

STATUS_STYLE = {"native": "green", "cpu_fallback": "yellow", "unsupported": "magenta", "wrong_result": "red",
                "error": "red", "skipped": "dim"}


def _styled(status: str) -> str:
    style = STATUS_STYLE.get(status)
    return f"[{style}]{status}[/]" if style else status


def coverage_tables(cov: dict, where: str = "", show: int | None = 20) -> list:
    """Headline, per-family table and the not-native (op, dtype) rows (at most `show`, None for all)."""
    out: list = [f"[bold]{headline(cov['summary'], where)}[/bold]  "
                 f"(torch {cov.get('torch')}, dtypes {', '.join(cov.get('dtypes', []))}"
                 f"{', with backward' if cov.get('grad') else ''})"]
    fam = Table(title="by family (one status per op: the worst over its dtypes)")
    for col in ("family", "ops", "native", "native %", "wrong", "cpu fallback", "unsupported", "error", "skipped"):
        fam.add_column(col, justify="left" if col == "family" else "right")
    for name, c in sorted(cov.get("families", {}).items(), key=lambda kv: -kv[1]["total"]):
        pct = "—" if c.get("native_pct") is None else f"{c['native_pct']:.1f}"
        fam.add_row(name, str(c["total"]), str(c["native"]), pct, str(c["wrong_result"]), str(c["cpu_fallback"]),
                    str(c["unsupported"]), str(c["error"]), str(c["skipped"]))
    out.append(fam)
    bad = [r for r in cov.get("ops", []) if r["status"] not in ("native", "skipped")]
    if bad:
        t = Table(title=f"not native ({len(bad)} op×dtype)" + (f", first {show}" if show and len(bad) > show else ""))
        for col in ("op", "dtype", "status", "max error", "reason"):
            t.add_column(col, overflow="fold")
        for r in bad[: show or None]:
            name = r["op"] + (f".{r['variant']}" if r.get("variant") else "")
            err = "" if r.get("max_error") is None else f"{r['max_error']:.3g}"
            t.add_row(name, r["dtype"], _styled(r["status"]), err,
                      (r.get("reason") or "")[:160])
        out.append(t)
    return out


def trace_table(trace, statuses: dict | None = None) -> Table:
    """One row per ATen overload: forward and backward call counts, and its status on a device when given."""
    t = Table(title=f"ATen operators used by {trace.target}")
    t.add_column("operator")
    t.add_column("forward", justify="right")
    t.add_column("backward", justify="right")
    if statuses is not None:
        t.add_column("OpInfo entry")
        t.add_column("status")
    for name in trace.ops():
        row = [name, str(trace.forward.get(name, 0) or ""), str(trace.backward.get(name, 0) or "")]
        if statuses is not None:
            st = statuses.get(name)
            if st is None:
                row += ["", ""]
            else:
                row += [st.get("entry") or "—", _styled(st["status"])]
        t.add_row(*row)
    return t

