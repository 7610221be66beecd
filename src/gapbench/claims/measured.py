"""The user's own results files set beside a table: each file matched to one of the table's platforms (by the
label it was run under, `gapbench run --label`, else by its device's spec row), the files of one platform taken
as its runs, and each matched row compared through gapbench.compare (its gap, interval and basis)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gapbench import specs as specs_mod
from gapbench.claims.match import RowMatch
from gapbench.claims.records import MeasuredGap, NumberVerdict, Platform
from gapbench.compare.rates import BYTE_UNITS, FLOP_UNITS


def _name(text: str) -> str:
    return " ".join(str(text).split()).casefold()


def _header_names(header: str) -> set[str]:
    """A header as a label can name it: as written, and without its parenthesised parts ('Box A (ROCm 6.0)')."""
    return {_name(header), _name(re.sub(r"\(.*?\)", " ", header))} - {""}


@dataclass
class Matched:
    """Which results files stand for which table platform, and what could not be matched (said, never guessed)."""

    files: list[list[int]]  # per table platform, the indexes of its results files
    how: list[list[str]]  # per table platform, for each of its files: "label" or "spec row"
    notes: list[list[str]]  # per table platform, what the reader should know about its files
    unmatched: list[str] = field(default_factory=list)


def _candidates(rs, key: str, platforms: list[Platform]) -> tuple[list[int], str]:
    """The table platforms a results file could stand for: by its run label (equal to a header), else by its
    device's spec row (a platform's own, else one of its other readings)."""
    by_label = [j for j, p in enumerate(platforms) if rs.label and _name(rs.label) in _header_names(p.header)]
    if by_label:
        return by_label, "label"
    own = [j for j, p in enumerate(platforms) if key and key == p.spec]
    return own or [j for j, p in enumerate(platforms) if key and key in p.also], "spec row"


def _who(path: str, rs, device: str) -> str:
    return f"results file {path!r} (label {rs.label!r}, {device})" if rs.label else \
        f"results file {path!r} (no label, {device})"


def _note(path: str, how: str, key: str, spec, device: str, p: Platform) -> str:
    """What the reader should know about a file matched to a platform: a label set on another device, or a
    bare name read as the part the file ran on; '' when nothing."""
    if how == "label" and p.spec and key != p.spec and key not in p.also:
        return (f"{path} matched by its label, but it ran on {device} "
                f"({'spec row ' + key if key else 'no spec row'}), not {p.spec_name or p.spec}")
    if how == "spec row" and key != p.spec:
        return f"{path} ran on {spec.name}: '{p.header}' read as that part ({p.note})"
    return ""


def match_results(platforms: list[Platform], sets: list, paths: list[str]) -> Matched:
    from gapbench.compare import platform_identity

    m = Matched([[] for _ in platforms], [[] for _ in platforms], [[] for _ in platforms])
    for i, rs in enumerate(sets):
        spec = specs_mod.match(platform_identity(rs))
        key = spec.key if spec else ""
        device = rs.device.get("product") or rs.device.get("type") or "unknown device"
        hits, how = _candidates(rs, key, platforms)
        if len(hits) != 1:
            why = "matches no platform of the table by its label or its device's spec row" if not hits else \
                f"matches {len(hits)} platforms ({', '.join(repr(platforms[j].header) for j in hits)}) by its {how}"
            m.unmatched.append(f"{_who(paths[i], rs, device)}: {why}; run it with `gapbench run --label` set to "
                               "one column's header")
            continue
        j = hits[0]
        m.files[j].append(i)
        m.how[j].append(how)
        note = _note(paths[i], how, key, spec, device, platforms[j])
        m.notes[j] += [note] if note else []
    for j, p in enumerate(platforms):
        if not m.files[j]:
            m.unmatched.append(f"platform {p.header!r}: no results file given matches it (by label or spec row)")
    return m


def _si(value: float | None, unit: str) -> float | None:
    u = unit.strip().lower()
    scale = FLOP_UNITS.get(u) or BYTE_UNITS.get(u)
    return None if value is None else value * scale if scale else value


class MeasuredRows:
    """For a row of the table, the user's measurements of it on the first two platforms, each pair compared once."""

    def __init__(self, paths: list[str]):
        from gapbench.results import load

        self.paths = list(paths)
        self.sets = [load(p) for p in self.paths]
        self._comparisons: dict = {}
        self.matched: Matched | None = None

    def platforms(self, platforms: list[Platform]) -> list[Platform]:
        """The platforms with the results files matched to them recorded."""
        self.matched = match_results(platforms, self.sets, self.paths)
        m = self.matched
        return [p.replace(results=[self.paths[i] for i in m.files[j]], results_by=sorted(set(m.how[j])),
                          results_notes=m.notes[j]) for j, p in enumerate(platforms)]

    def _comparison(self, a: list[int], b: list[int], headers: list[str]):
        key = (tuple(a), tuple(b))
        if key not in self._comparisons:
            from gapbench.compare import compare

            groups = [[self.sets[i] for i in a], [self.sets[i] for i in b]]
            self._comparisons[key] = compare(groups, baseline=1, labels=headers)
        return self._comparisons[key]

    def __call__(self, row: RowMatch, platforms: list[Platform], numbers: list[NumberVerdict]
                 ) -> tuple[list[MeasuredGap], list[str]]:
        """(the measured gaps of the row, what is said when there are none)"""
        if self.matched is None or len(platforms) < 2:
            return [], []
        a, b = self.matched.files[0], self.matched.files[1]
        if not a or not b:
            missing = [p.header for p, f in zip(platforms[:2], (a, b), strict=True) if not f]
            return [], [f"your results: no file for {' or '.join(repr(h) for h in missing)}, so no measured gap"]
        from gapbench.compare.references import reference_matches

        comp = self._comparison(a, b, [platforms[0].header, platforms[1].header])
        out = []
        for r in comp.rows:
            if r.workload != row.workload or not reference_matches(row.variant, r.variant):
                continue
            out.append(_measured(r, numbers))
        if not out:
            what = f"{row.workload} " + (", ".join(f"{k}={v}" for k, v in row.variant.items()) or "(any variant)")
            return [], [f"your results hold no {what} measurement on both {platforms[0].header!r} and "
                        f"{platforms[1].header!r}"]
        return out, []


def _measured(r, numbers: list[NumberVerdict]) -> MeasuredGap:
    g = r.gaps.get(0)
    cells = r.cells[:2]
    shares = []
    for c, n in zip(cells, numbers[:2], strict=False):
        mine = _si(c.value, r.unit)
        shares.append(mine / n.si_value if mine is not None and n.si_value else None)
    return MeasuredGap(
        workload=r.workload, variant=dict(r.variant), values=[c.value for c in cells], unit=r.unit,
        intervals=[list(c.ci95) if c.ci95 else None for c in cells],
        runs=[len(c.measurement.run_values) if c.value is not None else 0 for c in cells],
        status=[c.status for c in cells], share_of_claim=shares,
        pct=g.pct if g else None, lo=g.lo if g else None, hi=g.hi if g else None,
        significant=g.significant if g else None, basis=g.basis if g else "", flagged=g.flagged if g else "",
        note=g.status if g else "")
