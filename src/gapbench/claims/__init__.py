"""gapbench claims: a published benchmark table checked before anyone buys on it.

claims(path, results=[...]) reads the table (Markdown, CSV, or TOML/JSON; claims.table), matches its platforms
and rows to gapbench's spec rows and workloads (aliases.toml), judges every number against datasheet peaks,
physical peaks and published measurements (claims.judge), and each row as a pair (claims.rows): the stated gap's
arithmetic, like for unlike, the like-for-like gap from references, and the user's own measurements.
"""

from __future__ import annotations

from gapbench.claims.judge import MEASURED_TOLERANCE, MFU_BOUND
from gapbench.claims.match import match_row
from gapbench.claims.measured import MeasuredRows
from gapbench.claims.records import SEVERITIES, ClaimReport, Platform, RowVerdict
from gapbench.claims.rows import GAP_TOLERANCE_PP, gap_check, judged_number, like_for_like, platform_of, unlike_reasons
from gapbench.claims.table import read_table
from gapbench.compare.references import DATASHEET_TOLERANCE

__all__ = ["claims", "ClaimReport", "SEVERITIES"]


def _worst(levels) -> str:
    return max(levels, key=SEVERITIES.index, default="unknown")


def _row(label: str, cells: list[str], gap_text: str, platforms: list[Platform], measured) -> RowVerdict:
    row = match_row(label)
    numbers = [judged_number(p, c, row) for p, c in zip(platforms, cells, strict=True)]
    rv = RowVerdict(label=label, workload=row.workload if row else "", variant=dict(row.variant) if row else {},
                    numbers=numbers, gap=gap_check(gap_text, numbers, platforms))
    levels = [n.severity for n in numbers]
    if row is None:
        rv = rv.replace(notes=[f"no gapbench workload matches the label {label!r}: its numbers are not judged"])
    elif len(numbers) >= 2:
        unlike = unlike_reasons(numbers, platforms)
        mine, said = measured(row, platforms, numbers) if measured else ([], [])
        stated = rv.gap.stated_pct
        mine = [m.replace(stated_within=m.lo <= stated <= m.hi) if stated is not None and m.lo is not None
                and m.hi is not None else m for m in mine]
        rv = rv.replace(unlike=unlike, like_for_like=like_for_like(row, platforms), measured=mine,
                        notes=[*rv.notes, *said])
        levels += ["unlike"] if unlike else []
    if rv.gap.verdict in ("sign_reversed", "other_baseline", "disagrees") or "opposite" in rv.gap.direction:
        levels.append("implausible")
    return rv.replace(verdict=_worst(levels))


def claims(path: str, results: list[str] | None = None) -> ClaimReport:
    """Check the claims table at `path`; `results`: gapbench results files, each matched to one of the table's
    platforms by the label it ran under (`gapbench run --label`, equal to the column's header), else by its
    device's spec row; the files of one platform are its runs. Their measurements of each matched row, and the
    gap between the first two platforms with its interval (gapbench.compare), are set beside the claim."""
    table = read_table(path)
    platforms = [platform_of(h) for h in table.platforms]
    measured = MeasuredRows(list(results)) if results else None
    if measured:
        platforms = measured.platforms(platforms)
    rows = [_row(label, cells, gap, platforms, measured) for label, cells, gap in table.rows]
    counts: dict[str, int] = {}
    for r in rows:
        for n in r.numbers:
            counts[n.verdict] = counts.get(n.verdict, 0) + 1
        counts[f"gap_{r.gap.verdict}"] = counts.get(f"gap_{r.gap.verdict}", 0) + 1
        if r.unlike:
            counts["unlike_rows"] = counts.get("unlike_rows", 0) + 1
        if r.measured:
            counts["measured_rows"] = counts.get("measured_rows", 0) + 1
    unmatched = [f"platform {p.header!r}" for p in platforms if not p.spec] + \
        [f"row {r.label!r}" for r in rows if not r.workload]
    unmatched += measured.matched.unmatched if measured else []
    verdict = _worst([r.verdict for r in rows])
    return ClaimReport(file=str(path), title=table.title, verdict=verdict, summary=summary(rows, verdict),
                       platforms=platforms, rows=rows, counts=counts, unmatched=unmatched,
                       results=[str(p) for p in results or []],
                       bounds={"datasheet_tolerance": DATASHEET_TOLERANCE, "mfu_bound": MFU_BOUND,
                               "measured_tolerance": MEASURED_TOLERANCE, "gap_tolerance_pp": GAP_TOLERANCE_PP})


WORDS = {"implausible": "implausible", "unlike": "like for unlike", "note": "outside published measurements",
         "ok": "consistent with published measurements", "unknown": "unverified"}


def summary(rows: list[RowVerdict], verdict: str) -> str:
    nums = [n for r in rows for n in r.numbers]
    c = {k: sum(1 for n in nums if n.verdict == k) for k in {n.verdict for n in nums}}
    bad = c.get("above_peak", 0) + c.get("above_bound", 0) + c.get("unit_mismatch", 0)
    parts = [f"{len(nums)} numbers in {len(rows)} rows",
             f"{bad} implausible", f"{c.get('datasheet', 0)} datasheet figures",
             f"{c.get('within_measured', 0) + c.get('plausible', 0)} consistent with measurements",
             f"{sum(c.get(k, 0) for k in ('no_reference', 'unreadable', 'no_platform', 'no_row'))} unverified"]
    stated = [r.gap for r in rows if r.gap.verdict not in ("not_stated", "no_values")]
    wrong = sum(1 for g in stated if g.verdict != "agrees")
    parts.append(f"{len(stated)} stated gaps, {len(stated) - wrong} agreeing with the values")
    unlike = sum(1 for r in rows if r.unlike)
    parts.append(f"{unlike} rows like for unlike")
    return f"{WORDS[verdict].upper()}: " + ", ".join(parts)
