"""The takeaway's facts: per platform and bound class, how many rows it leads, trails or ties, and over
what range of gaps; the ridge points used; the caveats that apply. The sentences are the renderers'."""

from __future__ import annotations

from gapbench.compare.gaps import RUN_TO_RUN_SPREAD
from gapbench.compare.keys import beside_only
from gapbench.compare.model import ClassLead, Comparison, PlatformTakeaway, Takeaway
from gapbench.compare.rates import DEFAULT_RIDGE, measurement_dtype

BOUNDS = ("compute", "memory", "host", "other")


def ridge_of(platforms, baseline: int, dtype: str) -> tuple[float, str]:
    """The ridge point (FLOP/byte) for dtype, of a device that measured the row: the baseline's spec first, then
    another measured platform's, else the default of the measured devices' class. Never a published reference's:
    a row measured on a CPU is compute- or memory-bound by the CPU's roofline, not by the H100's it is held
    against."""
    order = [baseline] + [i for i in range(len(platforms)) if i != baseline]
    measured = [i for i in order if not platforms[i].reference] or order
    for i in measured:
        sp = platforms[i].spec
        r = sp.ridge(dtype) if sp else None
        if r:
            return r, f"{platforms[i].name} {dtype}"
    kind = platforms[measured[0]].result_set.device.get("type")
    cls = "cpu" if kind == "cpu" else "accelerator"
    return DEFAULT_RIDGE[cls], f"default for {cls}"


def class_lead(rows, i: int, bound: str) -> tuple[ClassLead | None, int]:
    """Platform i's lead on the rows of one class, and how many of those rows had no number on one side. A row that
    stands beside its like-for-like one (an fp8 GEMM of fast accumulation: compare.keys.beside_only) is not
    tallied: each fp8 shape counts once, by its fp32 accumulation row."""
    mine = [r for r in rows if r.bound == bound and i in r.gaps and not beside_only(r.workload, r.variant)]
    numeric = [r.gaps[i] for r in mine if r.gaps[i].pct is not None]
    if not numeric:
        return None, len(mine)
    verdicts = [_verdict(g) for g in numeric]
    lead = ClassLead(bound=bound, rows=len(numeric), ahead=verdicts.count("ahead"), behind=verdicts.count("behind"),
                     noise=verdicts.count("noise"), unknown=verdicts.count("unknown"),
                     lo=min(g.pct for g in numeric), hi=max(g.pct for g in numeric), flagged=verdicts.count("flagged"))
    return lead, len(mine) - len(numeric)


def _verdict(g) -> str:
    """ahead, behind, noise (within noise or equal), flagged (a disturbed host) or unknown (no runs on a side)."""
    if g.overlap is None:
        return "flagged" if g.withheld else "unknown"
    if g.overlap or g.pct == 0:
        return "noise"
    return "ahead" if g.pct > 0 else "behind"


def _per_platform(comp: Comparison) -> tuple[PlatformTakeaway, ...]:
    out = []
    for i in range(len(comp.platforms)):
        if i == comp.baseline:
            continue
        classes, not_comparable = [], 0
        for bound in BOUNDS:
            lead, missing = class_lead(comp.rows, i, bound)
            not_comparable += missing
            if lead is not None:
                classes.append(lead)
        if classes or not_comparable:
            out.append(PlatformTakeaway(i, tuple(classes), not_comparable))
    return tuple(out)


def _ridges(comp: Comparison) -> tuple:
    ridges: dict[tuple[float, str], list[str]] = {}
    if any(r.bound in ("compute", "memory") for r in comp.rows):
        for r in comp.rows:
            lead = r.cells[comp.baseline].measurement or next(c.measurement for c in r.cells if c.measurement)
            d = measurement_dtype(lead)
            key = ridge_of(comp.platforms, comp.baseline, d)
            if d not in ridges.setdefault(key, []):
                ridges[key].append(d)
    return tuple((tuple(ds), r, src) for (r, src), ds in ridges.items())


def takeaway(comp: Comparison) -> Takeaway:
    over = tuple(i for i, p in enumerate(comp.platforms) if not p.reference  # a datasheet figure is flagged apart
                 and any(r.cells[i].pct_peak is not None and r.cells[i].pct_peak > 100.0 for r in comp.rows))
    gaps = [g for r in comp.rows for g in r.gaps.values()]
    bases = tuple(b for b in ("runs", "single run") if any(g.basis == b for g in gaps))
    classes = sorted({"cpu" if p.result_set.device.get("type") == "cpu" else "accelerator"
                      for p in comp.platforms if not p.reference})
    return Takeaway(
        platforms=_per_platform(comp),
        ridges=_ridges(comp),
        over_peak=over,
        any_noise=any(g.overlap is True for g in gaps),
        any_unknown=any(g.pct is not None and g.overlap is None and not g.withheld for g in gaps),
        any_published=any(r.published for r in comp.rows),
        any_flagged=any(g.withheld and g.overlap is None for g in gaps),
        bases=bases,
        spreads=tuple((c, RUN_TO_RUN_SPREAD[c]) for c in classes) if "single run" in bases else ())
