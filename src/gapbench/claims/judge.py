"""One published number judged against the spec row of its platform and the measured references: a datasheet
peak (dense or sparse) quoted as a result, a figure above the physical peak, within or outside the range of
published measurements, or the FLOP/s a model throughput implies held against one device's peak."""

from __future__ import annotations

import math

from gapbench import specs as specs_mod
from gapbench.claims.match import PlatformMatch, Quantity, RowMatch
from gapbench.claims.records import Evidence, NumberVerdict
from gapbench.compare.rates import BYTE_UNITS, FLOP_UNITS
from gapbench.compare.references import DATASHEET_TOLERANCE, reference_matches

# Bounds, each explained in docs/claims.md:
MFU_BOUND = 0.60  # a per-device model FLOP rate above this share of the dense peak is implausible
MEASURED_TOLERANCE = 0.05  # "within the published measurements": inside their range widened by this much
SPARSE_DTYPES = ("tf32", "bf16", "fp16", "fp8", "int8")  # 2:4 structured sparsity doubles these rates
SEVERITY = {"unit_mismatch": "implausible", "above_peak": "implausible", "above_bound": "implausible",
            "datasheet": "unlike", "above_measured": "note", "below_measured": "note", "within_measured": "ok",
            "plausible": "ok", "no_reference": "unknown", "unreadable": "unknown", "no_platform": "unknown",
            "no_row": "unknown"}


def _tf(x: float) -> str:
    return f"{x / 1e12:,.1f} TFLOP/s" if x < 1e15 else f"{x / 1e15:,.2f} PFLOP/s"


def _tbs(x: float) -> str:
    return f"{x / 1e12:.2f} TB/s"


def _ref_si(r) -> float | None:
    u = r.unit.strip().lower()
    if u in FLOP_UNITS:
        return r.value * FLOP_UNITS[u]
    if u in BYTE_UNITS:
        return r.value * BYTE_UNITS[u]
    return r.value


def measured_refs(spec_key: str, row: RowMatch) -> list:
    """Measured references (not claims) of this platform for this row: same workload, the row's variant keys."""
    return [r for r in specs_mod.load_references() if r.measured and r.platform == spec_key
            and r.workload == row.workload and r.interactivity is None and reference_matches(row.variant, r.variant)]


def _evidence(r, text: str) -> Evidence:
    return Evidence(text=text, source=r.source, date=r.date, run_by=r.run_by)


def _peaks(spec, row: RowMatch) -> list[tuple[str, str, float]]:
    """(dtype, dense|sparse|bandwidth, value in SI) of every peak the number could have been copied from."""
    if row.kind == "bandwidth":
        return [("", "bandwidth", spec.bandwidth_tbs * 1e12)] if spec.bandwidth_tbs else []
    out = []
    for d, tf in spec.tflops.items():
        out.append((d, "dense", tf * 1e12))
        if d in SPARSE_DTYPES:
            out.append((d, "sparse", 2 * tf * 1e12))
    return out


def _datasheet(q: Quantity, spec, row: RowMatch) -> tuple[str, str, float] | None:
    hits = [p for p in _peaks(spec, row) if abs(q.si / p[2] - 1) <= DATASHEET_TOLERANCE]
    if not hits:
        return None
    same = [p for p in hits if not row.dtype or p[0] == row.dtype]  # the row's own precision first
    return min(same or hits, key=lambda p: abs(q.si / p[2] - 1))


def _peak_of(spec, row: RowMatch) -> tuple[float | None, str]:
    if row.kind == "bandwidth":
        return (spec.bandwidth_tbs * 1e12 if spec.bandwidth_tbs else None), "datasheet memory bandwidth"
    d = row.dtype or (max(spec.tflops, key=spec.tflops.get) if spec.tflops else "")
    p = spec.tflops.get(d)
    return (p * 1e12 if p else None), f"dense {d} peak"


def judge_number(header: str, cell: str, plat: PlatformMatch, row: RowMatch | None, q: Quantity | None,
                 ) -> NumberVerdict:
    base = dict(platform=header, spec=plat.spec, text=cell)
    if q is None:
        return NumberVerdict(**base, verdict="unreadable", severity="unknown",
                             evidence=[Evidence(text="no number with a unit could be read from the cell")])
    base.update(value=q.value, unit=q.unit, si_value=q.si)
    if row is None:
        return NumberVerdict(**base, verdict="no_row", severity="unknown")
    if q.kind != row.kind:
        what = q.kind or "a unit gapbench does not know"
        return NumberVerdict(**base, verdict="unit_mismatch", severity="implausible", evidence=[Evidence(
            text=f"'{q.unit}' is {what}; a {row.workload} row measures {row.kind}")])
    spec = specs_mod.by_key(plat.spec) if plat.spec else None
    if spec is None:
        why = plat.note or ("no platform name gapbench knows" if not plat.matched else "no spec row")
        return NumberVerdict(**base, verdict="no_platform", severity="unknown", evidence=[Evidence(text=why)])
    if row.work:
        return _model_number(base, q, spec, row)
    return _rate_number(base, q, spec, row)


def _rate_number(base: dict, q: Quantity, spec, row: RowMatch) -> NumberVerdict:
    fmt = _tbs if row.kind == "bandwidth" else _tf
    peak, peak_what = _peak_of(spec, row)
    share = q.si / peak if peak else None
    ds = _datasheet(q, spec, row)
    refs = measured_refs(spec.key, row)
    ev = [_evidence(r, f"measured {fmt(_ref_si(r))} ({r.note})") for r in refs]
    if ds is not None:
        d, kind, value = ds
        what = f"the {kind} {d + ' ' if d else ''}datasheet peak" if kind != "bandwidth" else \
            "the datasheet memory bandwidth"
        ev.insert(0, Evidence(text=f"{fmt(q.si)} is {what} of {spec.name}, {fmt(value)} (within "
                                   f"{DATASHEET_TOLERANCE:.0%}): a specification, not a measurement",
                              source=spec.source, date=spec.date))
        return NumberVerdict(**base, verdict="datasheet", severity="unlike", peak_kind=kind, dtype=d,
                             peak_share=share, evidence=ev)
    if peak and q.si > peak * (1 + DATASHEET_TOLERANCE):
        ev.insert(0, Evidence(text=f"{fmt(q.si)} is {share:.2f}× the {peak_what} of {spec.name}, {fmt(peak)}: "
                                   "no measurement can exceed it", source=spec.source, date=spec.date))
        return NumberVerdict(**base, verdict="above_peak", severity="implausible", dtype=row.dtype,
                             peak_share=share, evidence=ev)
    verdict = _against_refs(q.si, [_ref_si(r) for r in refs])
    if share is not None:
        ev.append(Evidence(text=f"{share:.0%} of the {peak_what} of {spec.name} ({fmt(peak)})",
                           source=spec.source, date=spec.date))
    return NumberVerdict(**base, verdict=verdict, severity=SEVERITY[verdict], dtype=row.dtype, peak_share=share,
                         evidence=ev)


def _against_refs(si: float, values: list[float]) -> str:
    if not values:
        return "no_reference"
    lo, hi = min(values), max(values)
    if si > hi * (1 + MEASURED_TOLERANCE):
        return "above_measured"
    if si < lo * (1 - MEASURED_TOLERANCE):
        return "below_measured"
    return "within_measured"


def _model_number(base: dict, q: Quantity, spec, row: RowMatch) -> NumberVerdict:
    w = row.work
    d = w["dtype"]
    peak_tf = spec.tflops.get(d)
    implied = q.si * float(w["flops_per_unit"])
    ev = [Evidence(text=f"{q.value:,g} {w['unit']} × {float(w['flops_per_unit']) / 1e9:,.1f} GFLOP per "
                        f"{w['unit'].split('/')[0].rstrip('s')} = {_tf(implied)} ({w['assumptions']}; {w['formula']})")]
    refs = measured_refs(spec.key, row)
    for r in refs:
        ratio = q.si / r.value if r.value else math.inf
        ev.append(_evidence(r, f"published per-device figure {r.value:,g} {r.unit} "
                               f"({1 / r.value:.3g} s per {w['unit'].split('/')[0].rstrip('s')}); the claim is "
                               f"{ratio:.1f}× it ({r.note})"))
    if w["unit"] == "images/s":
        ev.append(Evidence(text=f"{1 / q.si * 1e3:,.0f} ms per image on one device"
                                + _steps_bound(q.si, w, peak_tf)))
    if not peak_tf:
        return NumberVerdict(**base, verdict=_against_refs(q.si, [r.value for r in refs]), severity="unknown",
                             implied_flops=implied, evidence=ev)
    share = implied / (peak_tf * 1e12)
    devices = max(1, math.ceil(implied / (MFU_BOUND * peak_tf * 1e12)))
    ev.insert(1, Evidence(text=f"{share:.0%} of one {spec.name}'s dense {d} peak ({peak_tf:,g} TFLOP/s); at ≤ "
                               f"{MFU_BOUND:.0%} MFU it takes at least {devices} device{'s' * (devices > 1)}",
                          source=spec.source, date=spec.date))
    if share > 1:
        verdict = "above_peak"
    elif share > MFU_BOUND:
        verdict = "above_bound"
    else:
        verdict = _against_refs(q.si, [r.value for r in refs]) if refs else "plausible"
    return NumberVerdict(**base, verdict=verdict, severity=SEVERITY[verdict], dtype=d, implied_flops=implied,
                         peak_share=share, devices_needed=devices, evidence=ev)


def _steps_bound(images_per_s: float, w: dict, peak_tf: float | None) -> str:
    """How many UNet steps one device could run per image at the bound, text encoders and VAE included."""
    if not peak_tf or "unet_step_flops" not in w:
        return ""
    budget = MFU_BOUND * peak_tf * 1e12 / images_per_s - float(w["text_flops"]) - float(w["vae_flops"])
    steps = budget / float(w["unet_step_flops"])
    if steps < 1:
        return (f"; at ≤ {MFU_BOUND:.0%} of the peak one device cannot fit even one UNet step and the VAE decode "
                "in that time")
    return f"; at ≤ {MFU_BOUND:.0%} of the peak one device fits at most {steps:.1f} UNet steps per image in that time"
