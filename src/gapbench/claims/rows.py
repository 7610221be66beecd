"""A row of claims judged as a pair: the stated gap's arithmetic, whether the two figures are like for like,
the like-for-like gap from measured references, and the user's own measurements of the row."""

from __future__ import annotations

import re

from gapbench import specs as specs_mod
from gapbench.claims.judge import _ref_si, judge_number, measured_refs
from gapbench.claims.match import PlatformMatch, RowMatch, match_platform, parse_quantity
from gapbench.claims.records import GapCheck, LikeForLike, NumberVerdict, Platform
from gapbench.compare.gaps import gap_pct

GAP = re.compile(r"([+\-−–]?)\s*(\d+(?:\.\d+)?)\s*%")
GAP_TOLERANCE_PP = 0.5  # a stated whole-percent gap agrees when within half a point of the computed one
CONVENTION = "gap = first platform / second − 1 (> 0: the first platform is faster), as gapbench.compare counts it"


def judged_number(p: Platform, cell: str, row: RowMatch | None) -> NumberVerdict:
    """The number judged on its platform; where the name is ambiguous (a bare 'H100'), the reading under which
    it is a datasheet figure wins, and a different verdict under the other reading is said."""
    q = parse_quantity(cell)
    primary = PlatformMatch(p.spec, bool(p.spec or p.note), tuple(p.also), p.note)
    first = judge_number(p.header, cell, primary, row, q)
    if not p.also:
        return first
    others = [judge_number(p.header, cell, PlatformMatch(k, True), row, q) for k in p.also]
    if first.verdict != "datasheet":
        for o in others:
            if o.verdict == "datasheet":
                return _noted(o, f"'{p.header}' read as {_name(o.spec)}: the figure is its datasheet number "
                                 f"({p.note})")
    differing = [o for o in others if o.verdict != first.verdict]
    if differing:
        return _noted(first, f"'{p.header}' read as {_name(p.spec)} ({p.note}); as "
                             + "; as ".join(f"{_name(o.spec)} it would be {o.verdict.replace('_', ' ')}"
                                            for o in differing))
    return first


def _name(key: str) -> str:
    s = specs_mod.by_key(key)
    return s.name if s else key


def _noted(v: NumberVerdict, text: str) -> NumberVerdict:
    from gapbench.claims.records import Evidence

    return v.replace(evidence=[*v.evidence, Evidence(text=text)])


def platform_of(header: str) -> Platform:
    from gapbench.claims.match import date_in, stacks_in

    m = match_platform(header)
    spec = specs_mod.by_key(m.spec) if m.spec else None
    return Platform(header=header, spec=m.spec, spec_name=spec.name if spec else "", also=list(m.also),
                    note=m.note if m.matched else "no platform name gapbench knows", stacks=stacks_in(header),
                    date=date_in(header))


def gap_check(text: str, numbers: list[NumberVerdict], platforms: list[Platform]) -> GapCheck:
    m = GAP.search(text or "")
    vals = [n.si_value for n in numbers[:2]]
    if len(vals) < 2 or None in vals or numbers[0].unit.lower() != numbers[1].unit.lower():
        return GapCheck(stated_text=text, verdict="no_values" if m else "not_stated", convention=CONVENTION)
    computed = gap_pct(vals[0], vals[1])
    if not m:
        return GapCheck(stated_text=text, computed_pct=computed, verdict="not_stated", convention=CONVENTION)
    stated = float(m.group(2)) * (-1 if m.group(1) in "-−–" and m.group(1) else 1)
    other = gap_pct(vals[1], vals[0])
    if abs(stated - computed) <= GAP_TOLERANCE_PP:
        verdict = "agrees"
    elif abs(stated + computed) <= GAP_TOLERANCE_PP:
        verdict = "sign_reversed"
    elif other is not None and (abs(stated - other) <= GAP_TOLERANCE_PP or abs(stated + other) <= GAP_TOLERANCE_PP):
        verdict = "other_baseline"
    else:
        verdict = "disagrees"
    return GapCheck(stated_text=text, stated_pct=stated, computed_pct=computed, verdict=verdict,
                    convention=CONVENTION, direction=_winner(text, vals, platforms))


def _winner(text: str, vals: list[float], platforms: list[Platform]) -> str:
    """When the gap text names a winner ('AMD wins'), whether the values say the same."""
    if not re.search(r"\b(wins?|leads?|faster|ahead|better)\b", text, re.I):
        return ""
    words = set(re.findall(r"[A-Za-z0-9]+", text.lower()))
    for i, p in enumerate(platforms[:2]):
        if words & {w for w in re.findall(r"[A-Za-z0-9]+", p.header.lower()) if len(w) > 2} - {"wins"}:
            better = vals[i] > vals[1 - i]
            return f"names {p.header} the winner; the values {'agree' if better else 'say the opposite'}"
    return ""


def unlike_reasons(numbers: list[NumberVerdict], platforms: list[Platform]) -> list[str]:
    out = []
    a, b = numbers[0], numbers[1]
    ds = [n for n in (a, b) if n.verdict == "datasheet"]
    if len(ds) == 1:
        other = b if ds[0] is a else a
        out.append(f"{ds[0].platform}'s figure is a datasheet {ds[0].peak_kind} peak, {other.platform}'s is not: a "
                   "specification set against a measurement")
    if len(ds) == 2:
        out.append("both figures are datasheet numbers, not measurements: the stated gap is the specifications' gap")
    kinds = {n.peak_kind for n in ds}
    if "sparse" in kinds and (len(kinds) > 1 or len(ds) == 1):
        out.append("one figure is a 2:4-sparse peak and the other is not: sparse set against dense")
    dtypes = {n.dtype for n in (a, b) if n.dtype}
    if len(dtypes) > 1:
        out.append(f"the figures are in different precisions ({', '.join(sorted(dtypes))})")
    pa, pb = platforms[0], platforms[1]
    if pa.date and pb.date and pa.date != pb.date:
        out.append(f"the figures are from different dates ({pa.date}, {pb.date})")
    shared = set(pa.stacks) & set(pb.stacks)
    for s in sorted(shared):
        if pa.stacks[s] != pb.stacks[s]:
            out.append(f"the figures ran different {s} versions ({pa.stacks[s]}, {pb.stacks[s]})")
    return out


def like_for_like(row: RowMatch, platforms: list[Platform]) -> list[LikeForLike]:
    """Gaps between measured references of the two platforms for the same variant (the same kernel, dtype)."""
    if len(platforms) < 2 or not platforms[0].spec or not platforms[1].spec:
        return []
    ra, rb = measured_refs(platforms[0].spec, row), measured_refs(platforms[1].spec, row)
    out = []
    for x in ra:
        for y in rb:
            if x.variant != y.variant or x.unit != y.unit:
                continue
            pct = gap_pct(_ref_si(x), _ref_si(y))
            if pct is not None:
                out.append(LikeForLike(pct=pct, value=x.value, baseline_value=y.value, unit=x.unit,
                                       variant=dict(x.variant), source=x.source, baseline_source=y.source,
                                       same_source=x.collection == y.collection))
    return sorted(out, key=lambda g: (not g.same_source, g.pct))
