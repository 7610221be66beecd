"""Gap tables between result sets: matched rows, gaps with their uncertainty, % of peak, efficiency, takeaway.

The sign convention, everywhere: a gap > 0 means the platform did better than the baseline, whatever the
unit's direction. For higher-is-better units (throughput) gap = value/baseline - 1; for lower-is-better
units (latency, time) gap = baseline/value - 1, i.e. the gap in speed (a 5 ms latency against 10 ms is
+100%, exactly as a throughput twice the baseline's is). A gap is marked "≈" when the two 95% confidence
intervals overlap: the difference could be noise.
"""

from __future__ import annotations

import json
import math
import os
import re
import sys
import types
from dataclasses import dataclass, field

from gapbench import specs as specs_mod
from gapbench.errors import GapbenchError
from gapbench.results import Measurement, ResultSet, load
from gapbench.stats import Stats

# Ridge point (FLOP/byte) used to split compute- from memory-bound rows when the baseline device's peaks
# are not both known. A server CPU sits near 10 (e.g. 5 TFLOPS fp32 / 0.5 TB/s); data-centre GPUs span
# 20 (H100 fp32 without tensor cores) to 300 (H100 bf16).
DEFAULT_RIDGE = {"cpu": 10.0, "accelerator": 100.0}

FLOP_UNITS = {"flop/s": 1.0, "kflop/s": 1e3, "mflop/s": 1e6, "gflop/s": 1e9, "tflop/s": 1e12, "pflop/s": 1e15,
              "gflops": 1e9, "tflops": 1e12, "gops": 1e9, "tops": 1e12, "gop/s": 1e9, "top/s": 1e12}
BYTE_UNITS = {"b/s": 1.0, "kb/s": 1e3, "mb/s": 1e6, "gb/s": 1e9, "tb/s": 1e12,
              "kib/s": 2.0**10, "mib/s": 2.0**20, "gib/s": 2.0**30, "tib/s": 2.0**40}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

NO_CI_MARK = "*"


# ---- numbers ------------------------------------------------------------------------------------------

def gap_pct(value: float, baseline: float, higher_is_better: bool = True) -> float | None:
    """Relative gap in %, > 0 when value is better than baseline (see the module docstring)."""
    if value is None or baseline is None or not math.isfinite(value) or not math.isfinite(baseline):
        return None
    if higher_is_better:
        return None if baseline == 0 else (value - baseline) / baseline * 100.0
    return None if value == 0 else (baseline / value - 1.0) * 100.0


def intervals_overlap(a: Stats | None, b: Stats | None) -> bool | None:
    """Whether two 95% CIs overlap (the difference could be noise); None when either has no interval."""
    if a is None or b is None or a.n < 2 or b.n < 2:  # one sample has no interval worth the name
        return None
    return a.ci95[0] <= b.ci95[1] and b.ci95[0] <= a.ci95[1]


def fmt_num(x: float | None, digits: int = 4) -> str:
    if x is None:
        return "—"
    if x == 0:
        return "0"
    if abs(x) >= 10 ** digits:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def fmt_pct(x: float) -> str:
    return f"{x:+.1f}%".replace("-", "−")


def flop_rate(m: Measurement) -> float | None:
    """Achieved FLOP/s of a measurement: from a FLOP-based unit, or its FLOPs per iteration and time."""
    return _rate(m, FLOP_UNITS, m.flops)


def byte_rate(m: Measurement) -> float | None:
    """Achieved bytes/s: from a bandwidth unit, or its bytes per iteration and time."""
    return _rate(m, BYTE_UNITS, m.bytes)


def _rate(m: Measurement, units: dict[str, float], per_iter: float | None) -> float | None:
    if not m.ok or m.value is None:
        return None
    u = m.unit.strip().lower()
    if u in units:
        return m.value * units[u]
    t = time_per_iter(m)
    if per_iter and t:
        return float(per_iter) / t
    return None


def time_per_iter(m: Measurement) -> float | None:
    u = m.unit.strip().lower()
    if m.value and u in TIME_UNITS:
        return m.value * TIME_UNITS[u]
    t = (m.metrics or {}).get("time_per_iter_s")
    return float(t) if isinstance(t, (int, float)) and t > 0 else None


def arithmetic_intensity(m: Measurement) -> float | None:
    """FLOPs per byte moved, from the measurement's own counts."""
    if m.flops is None or m.bytes is None:
        return None
    if not m.bytes:
        return math.inf if m.flops else None
    return float(m.flops) / float(m.bytes)


def measurement_dtype(m: Measurement) -> str:
    v = m.variant or {}
    mt = m.metrics or {}
    for candidate in (v.get("dtype"), v.get("precision"), mt.get("peak_dtype"), mt.get("dtype")):
        d = specs_mod.normalize_dtype(candidate)
        if d:
            return d
    return "fp32"


def percent_of_peak(m: Measurement, spec: specs_mod.Spec | None) -> tuple[float | None, str]:
    """(percent, kind): kind is 'MFU' for model workloads reporting metrics['mfu'] (a fraction 0..1),
    'peak FLOP/s' or 'peak BW'; percent None when the peak or the achieved rate is unknown."""
    if not m.ok:
        return None, ""
    mfu = (m.metrics or {}).get("mfu")
    if isinstance(mfu, (int, float)) and math.isfinite(mfu):
        return float(mfu) * 100.0, "MFU"
    if spec is None:
        return None, ""
    u = m.unit.strip().lower()
    if (m.variant or {}).get("kernel") in ("h2d", "d2h"):
        return None, ""  # host<->device transfers are bound by the link, not the device memory
    if u in BYTE_UNITS:
        bw = byte_rate(m)
        return (bw / (spec.bandwidth_tbs * 1e12) * 100.0, "peak BW") if bw and spec.bandwidth_tbs else (None, "")
    fr = flop_rate(m)
    peak = spec.peak_tflops(measurement_dtype(m))
    if fr and peak:
        return fr / (peak * 1e12) * 100.0, "peak FLOP/s"
    return None, ""


def variant_text(variant: dict) -> str:
    """Compact variant label: 'fp32 1024x1024x1024' for GEMM-like variants, 'k=v' pairs otherwise."""
    v = dict(variant)
    parts = []
    if "dtype" in v:
        parts.append(str(v.pop("dtype")))
    if all(k in v for k in ("m", "n", "k")):
        parts.append(f"{v.pop('m')}x{v.pop('n')}x{v.pop('k')}")
    parts += [f"{k}={v[k]}" for k in sorted(v)]
    return " ".join(parts)


# ---- the comparison -------------------------------------------------------------------------------------

@dataclass
class Platform:
    name: str
    result_set: ResultSet
    spec: specs_mod.Spec | None
    price_usd_per_hour: float | None = None
    price_source: str = ""
    reference: bool = False

    @property
    def identity(self) -> dict:
        return platform_identity(self.result_set)


@dataclass
class Cell:
    measurement: Measurement | None
    status: str  # 'ok', a measurement status, or 'missing'
    reason: str = ""
    pct_peak: float | None = None
    peak_kind: str = ""
    power_w: float | None = None
    per_watt: float | None = None
    per_dollar: float | None = None

    @property
    def value(self) -> float | None:
        return self.measurement.value if self.measurement is not None and self.status == "ok" else None

    @property
    def text(self) -> str:
        if self.status != "ok":
            return self.status
        m = self.measurement
        s = fmt_num(m.value)
        if m.stats is not None and m.stats.n > 1:
            s += f" ± {fmt_num(m.stats.half_width, 2)}"
        return s


@dataclass
class Gap:
    pct: float | None
    overlap: bool | None  # True: CIs overlap (could be noise); None: no CI on one side
    status: str = ""  # why there is no number

    @property
    def significant(self) -> bool | None:
        return None if self.overlap is None else not self.overlap

    @property
    def text(self) -> str:
        if self.pct is None:
            return self.status or "n/a"
        if self.overlap:
            return "≈ " + fmt_pct(self.pct)
        return fmt_pct(self.pct) + (NO_CI_MARK if self.overlap is None else "")


@dataclass
class Row:
    workload: str
    variant: dict
    unit: str
    higher_is_better: bool
    cells: list[Cell]
    gaps: dict[int, Gap]  # platform index -> gap against the baseline
    intensity: float | None = None
    bound: str = "other"  # compute | memory | other
    published: dict[int, specs_mod.PublishedGap] = field(default_factory=dict)

    @property
    def label(self) -> str:
        vt = variant_text(self.variant)
        return f"{self.workload} {vt}" if vt else self.workload


@dataclass
class Comparison:
    platforms: list[Platform]
    baseline: int
    rows: list[Row]
    takeaway: list[str]
    warnings: list[str]
    coverage: dict | None = None  # {"columns": [...], "rows": [[family, cell, ...]]}
    frameworks: dict | None = None

    @property
    def base(self) -> Platform:
        return self.platforms[self.baseline]

    def to_dict(self) -> dict:
        return {
            "sign_convention": "gap_pct > 0: the platform did better than the baseline (speed, whatever the unit's direction)",
            "baseline": self.base.name,
            "platforms": [
                {"name": p.name, "reference": p.reference, "run_id": p.result_set.run_id, "path": p.result_set.path,
                 "suite": p.result_set.suite, "device": p.result_set.device.get("product"),
                 "spec": p.spec.key if p.spec else None, "price_usd_per_hour": p.price_usd_per_hour}
                for p in self.platforms
            ],
            "rows": [
                {
                    "workload": r.workload, "variant": r.variant, "unit": r.unit, "higher_is_better": r.higher_is_better,
                    "arithmetic_intensity": _finite(r.intensity), "bound": r.bound,
                    "cells": {
                        self.platforms[i].name: {
                            "status": c.status, "reason": c.reason, "value": c.value,
                            "ci95": list(c.measurement.stats.ci95) if c.value is not None and c.measurement.stats else None,
                            "pct_of_peak": c.pct_peak, "peak_kind": c.peak_kind or None, "power_w": c.power_w,
                            "per_watt": c.per_watt, "per_dollar": c.per_dollar,
                        } for i, c in enumerate(r.cells)
                    },
                    "gaps": {
                        self.platforms[i].name: {"gap_pct": g.pct, "significant": g.significant, "text": g.text,
                                                 "status": g.status or None}
                        for i, g in r.gaps.items()
                    },
                    "published": {self.platforms[i].name: {"gap_pct": pg.gap_pct, "source": pg.source, "date": pg.date}
                                  for i, pg in r.published.items()},
                }
                for r in self.rows
            ],
            "takeaway": self.takeaway,
            "warnings": self.warnings,
            "coverage": self.coverage,
            "frameworks": self.frameworks,
        }


def _finite(x):
    return x if x is None or math.isfinite(x) else None


def platform_identity(rs: ResultSet) -> dict:
    """The device identity with the host facts a CPU spec needs (clock) merged in."""
    ident = dict(rs.device)
    if ident.get("type") == "cpu":
        for k in ("cpu_max_mhz",):
            if k not in ident and rs.host.get(k) is not None:
                ident[k] = rs.host[k]
        if "isa" not in ident and rs.host.get("isa") is not None:
            ident["isa"] = rs.host["isa"]
    return ident


def per_unit_text(unit: str) -> str | None:
    """'tokens/s' -> 'tokens' (what one dollar buys); None for units that are not a rate."""
    u = unit.strip()
    return u[:-2].strip() if u.endswith("/s") and len(u) > 2 else None


def parse_prices(items: list[str] | None) -> dict[str, float]:
    """['NAME=USD_PER_HOUR', ...] -> {NAME: price}; malformed -> GapbenchError."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, val = str(item).rpartition("=")
        try:
            price = float(val)
        except ValueError:
            price = -1.0
        if not sep or not name or not math.isfinite(price) or price <= 0:
            raise GapbenchError(f"--price {item!r}: expected NAME=USD_PER_HOUR with a positive number, e.g. 'H100=2.99'")
        out[name] = price
    return out


# ---- references as a virtual platform ------------------------------------------------------------------

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
    device = {"type": "reference", "spec": name, "product": spec.name if spec else name, "vendor": spec.vendor if spec else ""}
    return ResultSet(host={}, device=device, measurements=ms, suite=None, label=f"{name} (published)",
                     run_id=f"reference-{name}", complete=True)


# ---- building the comparison ----------------------------------------------------------------------------

def _row_key(m: Measurement) -> tuple[str, str]:
    return m.workload, json.dumps(m.variant, sort_keys=True, separators=(",", ":"), default=str)


def _as_result_sets(result_sets) -> list[ResultSet]:
    out = []
    for x in result_sets:
        if isinstance(x, ResultSet):
            out.append(x)
        elif isinstance(x, (str, os.PathLike)):
            out.append(load(x))
        else:
            raise GapbenchError(f"cannot compare {type(x).__name__}: expected a ResultSet or a results file path")
    return out


def _unique_names(names: list[str], sets: list[ResultSet]) -> list[str]:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    out, seen = [], {}
    for n, rs in zip(names, sets, strict=True):
        if counts[n] > 1:
            stem = os.path.splitext(os.path.basename(rs.path))[0] if rs.path else None
            seen[n] = seen.get(n, 0) + 1
            n = f"{n} [{stem}]" if stem and stem != n else f"{n} #{seen[n]}"
        out.append(n)
    if len(set(out)) != len(out):  # same file stem twice
        out = [f"{n} #{i + 1}" if out.count(n) > 1 else n for i, n in enumerate(out)]
    return out


def _pick_baseline(baseline, sets: list[ResultSet], names: list[str], default: int) -> int:
    if baseline is None:
        return default
    if isinstance(baseline, int) and not isinstance(baseline, bool):
        if 0 <= baseline < len(sets):
            return baseline
        raise GapbenchError(f"baseline index {baseline} out of range (0..{len(sets) - 1})")
    if isinstance(baseline, ResultSet):
        for i, rs in enumerate(sets):
            if rs is baseline:
                return i
        raise GapbenchError("the baseline result set is not among the compared ones")
    b = str(baseline)
    for i, rs in enumerate(sets):
        if rs.path and (os.path.abspath(rs.path) == os.path.abspath(b)):
            return i
    for i, n in enumerate(names):
        if b == n or b == sets[i].name or b == sets[i].run_id:
            return i
    raise GapbenchError(f"baseline {b!r} is not one of the compared inputs: {', '.join(names)}")


def _price_names(p_name: str, rs: ResultSet, spec) -> list[str]:
    names = [p_name, rs.name, rs.label, rs.device.get("product"), spec.key if spec else None]
    if rs.path:
        names += [rs.path, os.path.splitext(os.path.basename(rs.path))[0]]
    return [n for n in names if n]


def _price_for(p_name: str, rs: ResultSet, spec, prices: dict[str, float]) -> tuple[float | None, str]:
    for n in _price_names(p_name, rs, spec):
        if n in prices:
            return prices[n], "--price"
    if spec and spec.price_usd_per_hour:
        return spec.price_usd_per_hour, f"spec {spec.key}, {spec.price_date}"
    return None, ""


def _cell(m: Measurement | None, platform: Platform) -> Cell:
    if m is None:
        return Cell(None, "missing", "not measured in this input")
    if not m.ok:
        return Cell(m, m.status, m.reason)
    pct, kind = percent_of_peak(m, platform.spec)
    power = m.power_w
    t = time_per_iter(m)
    if power is None and m.energy_j and t:
        power = float(m.energy_j) / t
    per_unit = None if platform.reference else per_unit_text(m.unit)  # a published figure has no power or price
    per_watt = m.value / power if power and m.higher_is_better and per_unit else None
    per_dollar = (m.value * 3600.0 / platform.price_usd_per_hour
                  if platform.price_usd_per_hour and m.higher_is_better and per_unit else None)
    return Cell(m, "ok", "", pct, kind, power, per_watt, per_dollar)


def _gap(cell: Cell, base: Cell, higher_is_better: bool) -> Gap:
    if cell.status != "ok":
        return Gap(None, None, cell.status)
    if base.status != "ok":
        return Gap(None, None, f"baseline {base.status}")
    if cell.measurement.unit != base.measurement.unit:
        return Gap(None, None, "unit differs")
    pct = gap_pct(cell.value, base.value, higher_is_better)
    if pct is None:
        return Gap(None, None, "n/a (zero)")
    return Gap(pct, intervals_overlap(cell.measurement.stats, base.measurement.stats))


def _ridge(platforms: list[Platform], baseline: int, dtype: str) -> tuple[float, str]:
    order = [baseline] + [i for i in range(len(platforms)) if i != baseline]
    for i in order:
        sp = platforms[i].spec
        r = sp.ridge(dtype) if sp else None
        if r:
            return r, f"{platforms[i].name} {dtype}"
    kind = platforms[baseline].result_set.device.get("type")
    cls = "cpu" if kind == "cpu" else "accelerator"
    return DEFAULT_RIDGE[cls], f"default for {cls}"


def classify(m: Measurement | None, ridge: float) -> tuple[str, float | None]:
    """'compute' or 'memory' by arithmetic intensity against the ridge point; by unit when counts are missing."""
    if m is None:
        return "other", None
    ai = arithmetic_intensity(m)
    if ai is not None:
        return ("compute" if ai >= ridge else "memory"), ai
    if m.bytes and not m.flops:
        return "memory", 0.0
    u = m.unit.strip().lower()
    if u in BYTE_UNITS:
        return "memory", None
    if u in FLOP_UNITS or m.flops:
        return "compute", None
    return "other", None


def _published_for(platforms: list[Platform], baseline: int, workload: str, variant: dict) -> dict:
    out = {}
    base_spec = platforms[baseline].spec
    if base_spec is None:
        return out
    for pg in specs_mod.load_published_gaps():
        if pg.workload != workload or pg.baseline != base_spec.key or not reference_matches(pg.variant, variant):
            continue
        for i, p in enumerate(platforms):
            if i != baseline and p.spec is not None and p.spec.key == pg.platform:
                out[i] = pg
    return out


def compare(result_sets, baseline=None, labels: list[str] | None = None, refs: list[str] | None = None,
            prices: dict[str, float] | None = None) -> Comparison:
    """Line up result sets (ResultSet objects or paths) into a gap table against a baseline.

    baseline: index, path, platform name/label, run id or ResultSet; default the first input, or the first
    reference when refs are given. labels name the inputs in order. refs are reference platform keys
    (specs/references.toml). prices: {name: USD per hour} (name = label, platform name, file stem or spec key).
    """
    sets = _as_result_sets(list(result_sets))
    if not sets and not refs:
        raise GapbenchError("nothing to compare: give at least one results file")
    warnings: list[str] = []
    versions = sorted({rs.schema_version for rs in sets})
    if len(versions) > 1:
        raise GapbenchError(f"cannot compare results of different schema versions ({', '.join(map(str, versions))}); "
                            "re-run with one gapbench version")
    labels = list(labels or [])
    if len(labels) > len(sets):
        raise GapbenchError(f"{len(labels)} labels for {len(sets)} input(s): give at most one --label per file")
    names = [labels[i] if i < len(labels) else rs.name for i, rs in enumerate(sets)]
    ref_sets = [reference_result_set(r, like=sets) for r in (refs or [])]
    all_sets = sets + ref_sets
    names = _unique_names(names + [rs.label for rs in ref_sets], all_sets)
    base_i = _pick_baseline(baseline, all_sets, names, default=len(sets) if ref_sets else 0)
    if len(all_sets) < 2:
        warnings.append("only one input: showing its values, no gaps")

    suites = {rs.suite for rs in sets if rs.suite}
    if len(suites) > 1:
        warnings.append(f"inputs ran different suites ({', '.join(sorted(suites))}): only the rows they share have gaps")
    seen_runs: dict[str, int] = {}
    for i, rs in enumerate(sets):
        if rs.run_id in seen_runs:
            warnings.append(f"{names[i]} and {names[seen_runs[rs.run_id]]} are the same run ({rs.run_id})")
        seen_runs.setdefault(rs.run_id, i)
        if not rs.complete:
            warnings.append(f"{names[i]}: the run did not complete (interrupted or still running); rows may be missing")
    gv = {rs.gapbench_version for rs in sets}
    if len(gv) > 1:
        warnings.append(f"inputs come from different gapbench versions ({', '.join(sorted(gv))})")

    prices = prices or {}
    platforms = []
    for i, rs in enumerate(all_sets):
        spec = specs_mod.match(platform_identity(rs))
        price, psrc = _price_for(names[i], rs, spec, prices)
        platforms.append(Platform(names[i], rs, spec, price, psrc, reference=rs.device.get("type") == "reference"))
    known = {n for p in platforms for n in _price_names(p.name, p.result_set, p.spec)}
    unused = set(prices) - known
    if unused:
        raise GapbenchError(f"--price names {', '.join(sorted(unused))} match no input; inputs: {', '.join(names)}")

    # rows: every (workload, variant) present anywhere, in order of first appearance
    order: list[tuple[str, str]] = []
    by_set: list[dict[tuple[str, str], Measurement]] = []
    for rs in all_sets:
        table: dict[tuple[str, str], Measurement] = {}
        for m in rs.measurements:
            k = _row_key(m)
            if k not in table or (not table[k].ok and m.ok):  # a retried variant: keep the ok result
                table[k] = m
            if k not in order:
                order.append(k)
        by_set.append(table)

    rows = []
    for k in order:
        ms = [t.get(k) for t in by_set]
        first = next(m for m in ms if m is not None)
        lead = ms[base_i] if ms[base_i] is not None else first
        hib = lead.higher_is_better
        cells = [_cell(m, platforms[i]) for i, m in enumerate(ms)]
        gaps = {i: _gap(c, cells[base_i], hib) for i, c in enumerate(cells) if i != base_i} if len(all_sets) > 1 else {}
        ridge, _ = _ridge(platforms, base_i, measurement_dtype(lead))
        probe = lead if (lead.flops is not None or lead.bytes is not None) else next(
            (m for m in ms if m is not None and (m.flops is not None or m.bytes is not None)), lead)
        bound, ai = classify(probe, ridge)
        rows.append(Row(first.workload, first.variant, lead.unit, hib, cells, gaps, ai, bound,
                        _published_for(platforms, base_i, first.workload, first.variant)))

    if len(all_sets) > 1 and rows and not any(g.pct is not None for r in rows for g in r.gaps.values()):
        warnings.append("no row has a number on both sides: the inputs share no successfully measured "
                        "workload variant, so there is no gap to show")
    comp = Comparison(platforms, base_i, rows, [], warnings)
    comp.takeaway = takeaway(comp)
    comp.coverage = coverage_table(platforms)
    comp.frameworks = frameworks_table(platforms)
    return comp


# ---- takeaway --------------------------------------------------------------------------------------------

BOUND_TITLES = {"compute": "compute-bound", "memory": "memory-bound", "other": "end-to-end (no FLOP/byte counts)"}


def takeaway(comp: Comparison) -> list[str]:
    """A few computed sentences: who leads where, by bound class, with the range of the gap."""
    lines: list[str] = []
    base = comp.base
    dtype_ridges = {}
    for r in comp.rows:
        lead = r.cells[comp.baseline].measurement or next(c.measurement for c in r.cells if c.measurement)
        d = measurement_dtype(lead)
        if d not in dtype_ridges:
            dtype_ridges[d] = _ridge(comp.platforms, comp.baseline, d)
    for i, p in enumerate(comp.platforms):
        if i == comp.baseline:
            continue
        parts = []
        not_comparable = 0
        for bound in ("compute", "memory", "other"):
            rows = [r for r in comp.rows if r.bound == bound and i in r.gaps]
            numeric = [r.gaps[i] for r in rows if r.gaps[i].pct is not None]
            not_comparable += len(rows) - len(numeric)
            if not numeric:
                continue
            title = BOUND_TITLES[bound]
            lo, hi = min(g.pct for g in numeric), max(g.pct for g in numeric)
            rng = fmt_pct(lo) if lo == hi else f"{fmt_pct(lo)} to {fmt_pct(hi)}"
            ahead = sum(1 for g in numeric if g.pct > 0 and g.overlap is not True)
            behind = sum(1 for g in numeric if g.pct < 0 and g.overlap is not True)
            noise = sum(1 for g in numeric if g.overlap is True or g.pct == 0)
            n = len(numeric)
            if noise == n:
                parts.append(f"{title}: no significant difference on {n} row{'s' * (n > 1)} (gap {rng})")
                continue
            leader, k = (p.name, ahead) if ahead >= behind else (base.name, behind)
            other = behind if leader == p.name else ahead
            extra = []
            if other:
                extra.append(f"{base.name if leader == p.name else p.name} on {other}")
            if noise:
                extra.append(f"{noise} within noise")
            extra_s = f" ({', '.join(extra)})" if extra else ""
            parts.append(f"{title}: {leader} leads on {k} of {n} row{'s' * (n > 1)}{extra_s}, gap {rng}")
        if not_comparable:
            parts.append(f"{not_comparable} row{'s' * (not_comparable > 1)} not comparable (missing or failed)")
        if parts:
            lines.append(f"{p.name} vs {base.name}: " + "; ".join(parts) + ".")
    grouped: dict[tuple[float, str], list[str]] = {}
    for d, (r, src) in dtype_ridges.items():
        grouped.setdefault((r, src), []).append(d)
    ridges = "; ".join(f"{'/'.join(ds)}: {fmt_num(r, 3)} FLOP/byte ({src})" for (r, src), ds in grouped.items())
    if ridges and any(r.bound != "other" for r in comp.rows):
        lines.append(f"Compute- vs memory-bound by arithmetic intensity against the ridge point — {ridges}.")
    over = [p for i, p in enumerate(comp.platforms)
            if any(r.cells[i].pct_peak is not None and r.cells[i].pct_peak > 100.0 for r in comp.rows)]
    for p in over:
        why = (" (a CPU estimate: the clock the OS reports may be the base clock, e.g. in a VM without cpufreq, "
               "and boost runs above it)" if p.spec is not None and p.spec.estimate else "")
        lines.append(f"! {p.name}: some rows exceed 100% of the peak{why}; the peak figure is too low there, so "
                     "read its % of peak as relative only.")
    if any(g.overlap is True for r in comp.rows for g in r.gaps.values()):
        lines.append("≈ marks a gap whose 95% confidence intervals overlap: it could be noise.")
    if any(g.pct is not None and g.overlap is None for r in comp.rows for g in r.gaps.values()):
        lines.append(f"{NO_CI_MARK} one side has no confidence interval (a published figure or a single sample): "
                     "significance unknown.")
    if any(r.published for r in comp.rows):
        lines.append("Published gaps are as reported, not measured by gapbench.")
    return lines


# ---- coverage and frameworks, side by side --------------------------------------------------------------

COVERAGE_KEYS = ("total", "native", "cpu_fallback", "unsupported", "wrong_result", "error", "skipped", "native_pct")


def _coverage_text(d: dict | None) -> str:
    if not isinstance(d, dict):
        return "—"
    total, native = d.get("total"), d.get("native")
    if isinstance(total, (int, float)) and isinstance(d.get("skipped"), (int, float)):
        total = total - d["skipped"]  # native_pct counts the ops tested, not the skipped ones
    pct = d.get("native_pct")
    if pct is None and isinstance(total, (int, float)) and total and isinstance(native, (int, float)):
        pct = native / total * 100.0
    bad = [f"{d[k]} {k.replace('_', ' ')}" for k in ("cpu_fallback", "unsupported", "wrong_result", "error")
           if isinstance(d.get(k), (int, float)) and d.get(k)]
    head = f"{pct:.1f}% native" if isinstance(pct, (int, float)) else "?"
    head += f" ({native}/{total})" if total is not None else ""
    return head + (f"; {', '.join(bad)}" if bad else "")


def coverage_table(platforms: list[Platform]) -> dict | None:
    """Operator coverage per family, one column per platform; None when no input has a coverage section."""
    covs = [p.result_set.coverage if isinstance(p.result_set.coverage, dict) else None for p in platforms]
    if not any(covs):
        return None
    families: list[str] = []
    for c in covs:
        for fam in (c or {}).get("families", {}) or {}:
            if fam not in families:
                families.append(fam)
    rows = [["all operators"] + [_coverage_text((c or {}).get("summary")) if c else "not audited" for c in covs]]
    for fam in families:
        rows.append([fam] + [_coverage_text(((c or {}).get("families") or {}).get(fam)) if c else "not audited"
                             for c in covs])
    return {"columns": ["family"] + [p.name for p in platforms], "rows": rows}


def frameworks_table(platforms: list[Platform]) -> dict | None:
    lists = [p.result_set.frameworks if isinstance(p.result_set.frameworks, list) else None for p in platforms]
    if not any(lists):
        return None
    names: list[str] = []
    for fl in lists:
        for f in fl or []:
            n = str((f or {}).get("framework", "?")) if isinstance(f, dict) else "?"
            if n not in names:
                names.append(n)
    rows = []
    for n in names:
        row = [n]
        for fl in lists:
            if fl is None:
                row.append("not probed")
                continue
            f = next((x for x in fl if isinstance(x, dict) and str(x.get("framework")) == n), None)
            if f is None:
                row.append("—")
                continue
            text = str(f.get("status", "?"))
            if f.get("version"):
                text += f" {f['version']}"
            if f.get("reason") and f.get("status") not in ("works", "ok"):
                text += f" ({f['reason']})"
            row.append(re.sub(r"\s+", " ", text))
        rows.append(row)
    return {"columns": ["framework"] + [p.name for p in platforms], "rows": rows}


class _CallableModule(types.ModuleType):
    """`gapbench.compare(...)` is the lazy API's name for compare(); once this module is imported, Python binds
    the name gapbench.compare to the module itself, so the module forwards calls to the function."""

    def __call__(self, *args, **kwargs) -> Comparison:
        return compare(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
