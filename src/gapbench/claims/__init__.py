"""gapbench claims: a published benchmark table checked before anyone buys on it.

claims(path, results=[...]) reads the table (Markdown, CSV, or TOML/JSON; claims.table), matches its platforms
and rows to gapbench's spec rows and workloads (aliases.toml), judges every number against datasheet peaks,
physical peaks and published measurements (claims.judge), and each row as a pair (claims.rows): the stated gap's
arithmetic, like for unlike, the like-for-like gap from references, and the user's own measurements.
"""

from __future__ import annotations

from gapbench.claims.judge import MEASURED_TOLERANCE, MFU_BOUND
from gapbench.claims.match import match_row
from gapbench.claims.records import SEVERITIES, ClaimReport, MeasuredGap, Platform, RowVerdict
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
        rv = rv.replace(unlike=unlike, like_for_like=like_for_like(row, platforms),
                        measured=measured(row, platforms))
        levels += ["unlike"] if unlike else []
    if rv.gap.verdict in ("sign_reversed", "other_baseline", "disagrees") or "opposite" in rv.gap.direction:
        levels.append("implausible")
    return rv.replace(verdict=_worst(levels))


def _measured_gaps(results: list[str]):
    """A function giving, for a row, the user's own measurements of it on the table's first two platforms."""
    if not results:
        return lambda row, platforms: []
    from gapbench import specs as specs_mod
    from gapbench.compare import compare, platform_identity
    from gapbench.compare.references import reference_matches
    from gapbench.results import load

    sets = [load(p) for p in results]
    keys = []
    for rs in sets:
        s = specs_mod.match(platform_identity(rs))
        keys.append(s.key if s else "")

    def measured(row, platforms: list[Platform]) -> list[MeasuredGap]:
        idx = [next((i for i, k in enumerate(keys) if k and k in (p.spec, *p.also)), None) for p in platforms[:2]]
        if None in idx or idx[0] == idx[1]:
            return []
        comp = compare([sets[idx[0]], sets[idx[1]]], baseline=1, labels=[platforms[0].header, platforms[1].header])
        out = []
        for r in comp.rows:
            if r.workload != row.workload or not reference_matches(row.variant, r.variant):
                continue
            g = r.gaps.get(0)
            out.append(MeasuredGap(workload=r.workload, variant=dict(r.variant), values=[c.value for c in r.cells],
                                   unit=r.unit, pct=g.pct if g else None, lo=g.lo if g else None,
                                   hi=g.hi if g else None, significant=g.significant if g else None,
                                   basis=g.basis if g else "", note=g.status if g else ""))
        return out

    return measured


def claims(path: str, results: list[str] | None = None) -> ClaimReport:
    """Check the claims table at `path`; `results`: gapbench results files, matched to the table's platforms by
    their device's spec row, whose measurements of each matched row are set beside the claim."""
    table = read_table(path)
    platforms = [platform_of(h) for h in table.platforms]
    measured = _measured_gaps(list(results or []))
    rows = [_row(label, cells, gap, platforms, measured) for label, cells, gap in table.rows]
    counts: dict[str, int] = {}
    for r in rows:
        for n in r.numbers:
            counts[n.verdict] = counts.get(n.verdict, 0) + 1
        counts[f"gap_{r.gap.verdict}"] = counts.get(f"gap_{r.gap.verdict}", 0) + 1
        if r.unlike:
            counts["unlike_rows"] = counts.get("unlike_rows", 0) + 1
    unmatched = [f"platform {p.header!r}" for p in platforms if not p.spec] + \
        [f"row {r.label!r}" for r in rows if not r.workload]
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
