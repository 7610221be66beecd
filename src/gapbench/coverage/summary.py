"""From per-(op, dtype) rows to one status per op, counts overall and per family, and the headline."""

from __future__ import annotations

from collections import defaultdict

from gapbench.coverage.classify import STATUSES, worst

SUMMARY_KEYS = ("total", *STATUSES, "native_pct")


def op_label(op: str, variant: str) -> str:
    return f"{op}.{variant}" if variant else op


def op_statuses(rows: list[dict]) -> dict[tuple[str, str], tuple[str, str]]:
    """(op, variant) -> (status, family): the worst status over its dtypes, skipped dtypes ignored."""
    by_op: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        by_op[(r["op"], r.get("variant") or "")].append(r)
    return {k: (worst(r["status"] for r in rs), rs[0].get("family") or "other") for k, rs in by_op.items()}


def counts(statuses: list[str]) -> dict:
    c = {k: 0 for k in ("total", *STATUSES)}
    for s in statuses:
        c["total"] += 1
        c[s] = c.get(s, 0) + 1
    tested = c["total"] - c["skipped"]
    c["native_pct"] = round(100.0 * c["native"] / tested, 1) if tested else None
    return c


def summarize(rows: list[dict]) -> tuple[dict, dict]:
    """(summary, families): counts of ops (OpInfo entries) by their one status, overall and per family."""
    per_op = op_statuses(rows)
    summary = counts([s for s, _ in per_op.values()])
    fam: dict[str, list[str]] = defaultdict(list)
    for s, f in per_op.values():
        fam[f].append(s)
    return summary, {f: counts(v) for f, v in sorted(fam.items())}


def headline(summary: dict, where: str = "") -> str:
    """'N of M ops native (X%), K wrong, F fall back to CPU' (+ the rest), M = ops not skipped."""
    tested = summary["total"] - summary["skipped"]
    pct = summary.get("native_pct")
    text = (f"{summary['native']} of {tested} ops native" + (f" ({pct:.1f}%)" if pct is not None else "")
            + f", {summary['wrong_result']} wrong, {summary['cpu_fallback']} fall back to CPU"
            + f", {summary['unsupported']} unsupported, {summary['error']} error"
            + f"; {summary['skipped']} skipped")
    return f"{where}: {text}" if where else text
