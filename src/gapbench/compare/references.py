"""Published figures beside measured ones: reference platforms as virtual result sets, and published gaps
matched to the rows they describe."""

from __future__ import annotations

import functools

from gapbench import specs as specs_mod
from gapbench.compare.keys import row_variant
from gapbench.errors import GapbenchError
from gapbench.results import Measurement, ResultSet


def _dtype_equal(a, b) -> bool:
    na, nb = specs_mod.normalize_dtype(a), specs_mod.normalize_dtype(b)
    return (na or str(a)) == (nb or str(b))


# a reference variant's value for what its source does not say (the accumulation of an fp8 GEMM figure): it
# matches every measured value of that key, and compare says which ones it stands beside (unstated_lines)
UNSTATED = "unknown"


def reference_matches(ref_variant: dict, variant: dict) -> bool:
    """A reference row stands in for a measured variant when each of its keys is there with the same value, or
    one of the values of a list (dtype names normalised); the measured variant's other keys are free. A key the
    source leaves unsaid (UNSTATED) matches any value."""
    for k, want in ref_variant.items():
        if want == UNSTATED:
            continue
        if k not in variant:
            return False
        options = want if isinstance(want, list) else [want]
        if k in ("dtype", "precision"):
            if not any(_dtype_equal(v, variant[k]) for v in options):
                return False
        elif str(variant[k]) not in {str(v) for v in options}:
            return False
    return True


DATASHEET_TOLERANCE = 0.02  # a published "measured" figure within 2% of a datasheet peak is taken for that peak


def datasheet_peak(ref, spec) -> dict | None:
    """When a published figure equals its platform's datasheet peak (dense FLOP/s for its dtype, or memory
    bandwidth): that peak and what it is; None otherwise (or when the spec does not know)."""
    from gapbench.compare.rates import BYTE_UNITS, FLOP_UNITS

    if spec is None:
        return None
    u = ref.unit.strip().lower()
    if u in FLOP_UNITS:
        d = specs_mod.normalize_dtype(ref.variant.get("dtype"))
        peak = spec.peak_tflops(d) if d else None
        value, what = (ref.value * FLOP_UNITS[u] / 1e12, f"the dense {d} datasheet peak") if peak else (None, "")
    elif u in BYTE_UNITS and spec.bandwidth_tbs:
        peak, value, what = spec.bandwidth_tbs, ref.value * BYTE_UNITS[u] / 1e12, "the datasheet memory bandwidth"
    else:
        return None
    if not peak or value is None or abs(value / peak - 1) > DATASHEET_TOLERANCE:
        return None
    return {"peak": peak, "what": f"{what} of {spec.name}", "peak_unit": "TFLOP/s" if u in FLOP_UNITS else "TB/s"}


def same_row(a: dict, b: dict) -> bool:
    """Two reference variants of one row: the same keys with the same values, where a value one source leaves
    unsaid (UNSTATED) is any."""
    return a.keys() == b.keys() and all(a[k] == b[k] or UNSTATED in (a[k], b[k]) for k in a)


def measured_instead(ref, refs: list) -> list[dict]:
    """The measured max-achievable figures gapbench knows for the same platform and row (other collections); for
    a figure whose source leaves its accumulation unsaid, those of every accumulation (each note says which)."""
    return [{"value": r.value, "unit": r.unit, "source": r.source, "note": r.note, "variant": dict(r.variant)}
            for r in refs if r is not ref and r.platform == ref.platform and r.workload == ref.workload
            and r.collection != ref.collection and same_row(ref.variant, r.variant)]


def reference_result_set(name: str, like: list[ResultSet] | None = None) -> ResultSet:
    """The published rows of one reference platform as a ResultSet (device type 'reference').

    With `like`, each reference row is repeated under the variant of every measurement it stands in for
    (see reference_matches), so the gap table lines it up with them; rows that match nothing keep their own.
    """
    known = specs_mod.reference_platforms()
    if name not in known:
        raise GapbenchError(f"unknown reference {name!r}; known: {', '.join(known)}")
    platform = name.partition("@")[0]
    spec = specs_mod.by_key(platform)
    refs = specs_mod.load_references()
    ms: list[Measurement] = []
    for ref in refs:
        if ref.name != name or ref.interactivity is not None:  # a curve's point: compare.frontier's
            continue
        meta = {"reference": True, "source": ref.source, "date": ref.date, "note": ref.note,
                "reference_variant": ref.variant}
        peak = datasheet_peak(ref, spec)
        if peak is not None:
            meta["datasheet_peak"] = peak | {"measured_instead": measured_instead(ref, refs)}
        targets: list[dict] = []
        for rs in like or []:
            for m in rs.measurements:
                v = row_variant(m.workload, m.variant)
                if m.workload == ref.workload and reference_matches(ref.variant, v) and v not in targets:
                    targets.append(v)
        unstated = [k for k, v in ref.variant.items() if v == UNSTATED]
        if unstated and targets:
            meta["unstated"] = {k: list(dict.fromkeys(str(t.get(k)) for t in targets)) for k in unstated}
        for variant in targets or [ref.variant]:
            ms.append(Measurement(workload=ref.workload, variant=dict(variant), unit=ref.unit, value=ref.value,
                                  higher_is_better=ref.higher_is_better, metrics=dict(meta)))
    device = {"type": "reference", "spec": platform, "product": spec.name if spec else platform,
              "vendor": spec.vendor if spec else "", "collection": name.partition("@")[2] or None}
    return ResultSet(host={}, device=device, measurements=ms, suite=None, label=f"{name} (published)",
                     run_id=f"reference-{name}", complete=True)


def unstated_lines(ref_sets: list[ResultSet]) -> list[str]:
    """One line per published figure whose source leaves a key of its row unsaid (an fp8 GEMM figure's
    accumulation) and that stands beside measured rows: which values of that key it stands beside, every one."""
    out = []
    for rs in ref_sets:
        seen: set[str] = set()
        for m in rs.measurements:
            unstated = (m.metrics or {}).get("unstated")
            ref_variant = (m.metrics or {}).get("reference_variant") or {}
            key = f"{m.workload} {sorted(ref_variant.items(), key=str)}"
            if not unstated or key in seen:
                continue
            seen.add(key)
            what = ", ".join(f"{k}={v}" for k, v in ref_variant.items() if v != UNSTATED)
            for k, values in unstated.items():
                out.append(f"{rs.label}: the source of its {m.workload} {what} figure does not say its {k}; it "
                           f"stands beside each of your rows it could be ({', '.join(f'{k}={v}' for v in values)})")
    return out


def published_for(specs: list, baseline: int, workload: str, variant: dict) -> dict:
    """{platform index: PublishedGap} for the published gaps that describe this row, against the baseline's
    spec; `specs` holds each platform's matched spec (or None)."""
    out = {}
    base_spec = specs[baseline]
    if base_spec is None:
        return out
    for pg in _published_gaps():
        if pg.workload != workload or pg.baseline != base_spec.key or not reference_matches(pg.variant, variant):
            continue
        for i, sp in enumerate(specs):
            if i != baseline and sp is not None and sp.key == pg.platform:
                out[i] = pg
    return out


@functools.lru_cache(maxsize=1)
def _published_gaps() -> tuple:
    """The published gaps, read once per process (published_for runs once per row)."""
    return tuple(specs_mod.load_published_gaps())
