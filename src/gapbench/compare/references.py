"""Published figures beside measured ones: reference platforms as virtual result sets, and published gaps
matched to the rows they describe."""

from __future__ import annotations

import functools

from gapbench import specs as specs_mod
from gapbench.errors import GapbenchError
from gapbench.results import Measurement, ResultSet


def _dtype_equal(a, b) -> bool:
    na, nb = specs_mod.normalize_dtype(a), specs_mod.normalize_dtype(b)
    return (na or str(a)) == (nb or str(b))


def reference_matches(ref_variant: dict, variant: dict) -> bool:
    """A reference row stands in for a measured variant when each of its keys is there with the same value
    (dtype names normalised); the measured variant's other keys are free."""
    for k, v in ref_variant.items():
        if k not in variant:
            return False
        if k in ("dtype", "precision"):
            if not _dtype_equal(v, variant[k]):
                return False
        elif str(v) != str(variant[k]):
            return False
    return True


def reference_result_set(name: str, like: list[ResultSet] | None = None) -> ResultSet:
    """The published rows of one reference platform as a ResultSet (device type 'reference').

    With `like`, each reference row is repeated under the variant of every measurement it stands in for
    (see reference_matches), so the gap table lines it up with them; rows that match nothing keep their own.
    """
    known = specs_mod.reference_platforms()
    if name not in known:
        raise GapbenchError(f"unknown reference {name!r}; known: {', '.join(known)}")
    spec = specs_mod.by_key(name)
    ms: list[Measurement] = []
    for ref in specs_mod.load_references():
        if ref.platform != name:
            continue
        meta = {"reference": True, "source": ref.source, "date": ref.date, "note": ref.note,
                "reference_variant": ref.variant}
        targets: list[dict] = []
        for rs in like or []:
            for m in rs.measurements:
                if m.workload == ref.workload and reference_matches(ref.variant, m.variant) and m.variant not in targets:
                    targets.append(m.variant)
        for variant in targets or [ref.variant]:
            ms.append(Measurement(workload=ref.workload, variant=dict(variant), unit=ref.unit, value=ref.value,
                                  higher_is_better=ref.higher_is_better, metrics=dict(meta)))
    device = {"type": "reference", "spec": name, "product": spec.name if spec else name,
              "vendor": spec.vendor if spec else ""}
    return ResultSet(host={}, device=device, measurements=ms, suite=None, label=f"{name} (published)",
                     run_id=f"reference-{name}", complete=True)


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
