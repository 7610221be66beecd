"""Where a measured gap comes from: a model row that both sides measured, split into what each class of work
contributes to it, by the step model (assess.speed) over the traced iteration and each side's assess-suite
rates, and the residual that the model does not explain.

For a row with measured times T_b (the baseline) and T_p (the other side), gap = T_b / T_p − 1. Each class c
(GEMM per dtype, convolution and attention per dtype, memory-bound, a whole optimizer step where both sides
measured one, collective, per-operator overhead) has a
modelled time t_b,c and t_p,c on the two sides, and contributes (t_b,c − t_p,c) / T_p to the gap; the residual
is the measured gap minus their sum, ((T_b − M_b) − (T_p − M_p)) / T_p with M the modelled step. The parts and
the residual add up to the measured gap (compare's gap of the row) exactly. A class that a side lacks a rate for
is unexplained (no number, the missing rate named); the residual then holds it, and says so. Intervals: the rates
drawn as the prediction draws them (assess.speed.drawn_values), and for the residual the measured gap too,
log-normal from compare's interval of it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from dataclasses import dataclass

import numpy as np

from gapbench.assess.rates import PlatformRates, Rate, platform_rates
from gapbench.assess.speed import (
    DRAWS,
    LEVEL,
    SEED,
    _item_times,
    _Plan,
    _platform_key,
    _Table,
    alike_optimizers,
    compute_rate,
    drawn_values,
    plan_side,
)
from gapbench.assess.work import COMPUTE, Item, Work
from gapbench.compare.gaps import Gap
from gapbench.compare.model import Comparison, Row
from gapbench.compare.rates import time_per_iter
from gapbench.errors import GapbenchError

MEMORY = "memory-bound"  # element-wise operators with their own rate and the rest at bandwidth, one class
OVERHEAD = "overhead"
PART_ORDER = ("gemm", "conv", "attention", MEMORY, "optimizer", "collective", OVERHEAD)


@dataclass(frozen=True)
class Part:
    name: str  # 'gemm fp32', 'conv bf16', 'attention fp32', 'memory-bound', 'optimizer bf16', 'collective', 'overhead'
    seconds: tuple[float | None, float | None]  # modelled on the baseline and the other side; None: unexplained
    pp: float | None  # contribution to the measured gap, percentage points; None: unexplained
    lo: float | None  # its interval (None where the draws give none)
    hi: float | None
    rates: tuple[str, ...] = ()  # the rows that priced it, the most used first (at most three)
    missing: tuple[str, ...] = ()  # what a side lacks for it ('2 threads: no bf16 GEMM rows (gemm)')


@dataclass(frozen=True)
class Attribution:
    workload: str  # the traced workload 'llm-train:tiny'
    variant: dict
    platform: int  # the comparison's platform index of the other side
    names: tuple[str, str]  # baseline, other side
    measured_s: tuple[float, float]  # seconds per iteration, baseline and other side
    measured_pct: float  # compare's gap of the row, in % (T_b / T_p − 1 in speed)
    gap: Gap  # compare's judgement of the row
    modelled_s: tuple[float | None, float | None]  # the modelled step, None where a class is unexplained there
    parts: tuple[Part, ...]
    residual: float  # percentage points: measured minus the explained parts
    residual_lo: float | None
    residual_hi: float | None
    synchronous: tuple[bool, bool]  # host and device one processor (overhead and work add) on each side

    @property
    def unexplained(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parts if p.pp is None)

    def to_dict(self) -> dict:
        return {"workload": self.workload, "variant": self.variant, "baseline": self.names[0],
                "platform": self.names[1], "measured_s": list(self.measured_s), "measured_gap_pct": self.measured_pct,
                "modelled_s": list(self.modelled_s),
                "parts": [{"class": p.name, "seconds": list(p.seconds), "pp": p.pp,
                           "interval_pp": [p.lo, p.hi] if p.lo is not None else None, "rates": list(p.rates),
                           "missing": list(p.missing)} for p in self.parts],
                "residual_pp": self.residual,
                "residual_interval_pp": [self.residual_lo, self.residual_hi] if self.residual_lo is not None else None,
                "residual_includes": list(self.unexplained)}


@dataclass
class _Side:
    """One side's modelled seconds per part: nominal and drawn, and what it lacks per part."""

    nominal: dict[str, float]
    drawn: dict[str, np.ndarray]
    missing: dict[str, list[str]]
    rates: dict[str, list[str]]


def part_of(it: Item) -> str | None:
    """The part an operator call belongs to (None: a view, which costs nothing but its overhead)."""
    if it.cls in COMPUTE:
        return f"{it.cls} {it.dtype}"
    return {"memory": MEMORY, "collective": "collective", "optimizer": f"optimizer {it.dtype}"}.get(it.cls)


def lacking(pr: PlatformRates, it: Item) -> str | None:
    """What the results file lacks to price this call (None: it has every rate the call needs)."""
    if it.cls in COMPUTE:
        point, why = compute_rate(pr, it)
        if point is None:
            return why
    if it.cls in (*COMPUTE, "memory") and it.bytes > 0 and pr.bandwidth_at(it.bytes, it.dtype) is None:
        return "no memory bandwidth rows (membw)"
    if it.cls == "collective" and pr.collective_at(it.op, it.bytes) is None:
        return f"no collective rows for {it.op}"
    return None


def _priceable(work: Work, pr: PlatformRates) -> tuple[Work, dict[str, list[str]]]:
    """The trace without the calls this side cannot price, and per part what it lacks."""
    keep, missing = [], {}
    for it in work.items:
        why = lacking(pr, it)
        if why is None:
            keep.append(it)
        else:
            missing.setdefault(part_of(it) or it.cls, []).append(f"{pr.name}: {why}")
    return dataclasses.replace(work, items=keep), missing


def _sources(plan: _Plan, part: str) -> list[str]:
    cls, _, dtype = part.partition(" ")
    if part == MEMORY:
        sources = plan.used.get("elementwise", []) + plan.used.get("memory", [])
    else:
        sources = [s for s in plan.used.get(cls, []) if not dtype or f" {dtype} " in f"{s} "]
    return sorted(set(sources), key=lambda s: -sources.count(s))[:3]


def _side_times(plan: _Plan, items: list[Item], calls: int, nominal: np.ndarray, drawn: np.ndarray,
                synchronous: bool) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Seconds per part, as measured ({part: s}) and drawn ({part: (draws,)}); on an accelerator only what the
    step waits for counts (the larger of the host's overhead and the device's work), the rest is hidden."""
    t_nom = _item_times(plan, nominal[None, :])[0]
    t_drawn = _item_times(plan, drawn)
    nom: dict[str, float] = {}
    out: dict[str, np.ndarray] = {}
    for j, it in enumerate(items):
        part = part_of(it)
        if part is not None:
            nom[part] = nom.get(part, 0.0) + float(t_nom[j])
            out[part] = out.get(part, 0.0) + t_drawn[:, j]
    nom[OVERHEAD] = calls * float(nominal[plan.per_op])
    out[OVERHEAD] = calls * drawn[:, plan.per_op]
    if not synchronous:
        work_nom, work = sum(v for k, v in nom.items() if k != OVERHEAD), sum(
            (v for k, v in out.items() if k != OVERHEAD), np.zeros(len(drawn)))
        host_wins = out[OVERHEAD] > work
        for k in out:
            out[k] = np.where(host_wins, out[k], 0.0) if k == OVERHEAD else np.where(host_wins, 0.0, out[k])
        for k in nom:
            wins = nom[OVERHEAD] > work_nom
            nom[k] = (nom[k] if wins else 0.0) if k == OVERHEAD else (0.0 if wins else nom[k])
    return nom, out


def _sides(works: list[Work], rates: list[PlatformRates], draws: int, seed: int) -> list[_Side] | None:
    table = _Table()
    keys = list(dict.fromkeys(_platform_key(pr) for pr in rates))
    plans, kept, missing = [], [], []
    for work, pr in alike_optimizers(list(zip(works, rates, strict=True))):
        priced, miss = _priceable(work, pr)
        kind = "train" if work.has_backward else "infer"
        if kind not in pr.per_op:
            miss.setdefault(OVERHEAD, []).append(f"{pr.name}: no per-operator time (launch, kind={kind})")
            # a zero stand-in lets the other parts be priced; the overhead itself is unexplained (never shown)
            pr = dataclasses.replace(pr, per_op={**pr.per_op, kind: Rate(0.0, 0.0, "none")})
        plan, still = plan_side(priced, pr, table, keys.index(_platform_key(pr)), _platform_key(pr))
        if plan is None:
            raise GapbenchError("; ".join(still))  # every call was checked above: a rate lookup disagrees
        plans.append(plan)
        kept.append(plan.items)
        missing.append(miss)
    spreads = [next(pr.spread for pr in rates if _platform_key(pr) == k) for k in keys]
    nominal, drawn = drawn_values(table, plans, spreads, draws, seed)
    out = []
    for plan, items, pr, v, miss in zip(plans, kept, rates, drawn, missing, strict=True):
        nom, d = _side_times(plan, items, plan.calls, nominal, v, pr.synchronous)
        if miss and not pr.synchronous:
            # what the step waits for (host or device) is not known without every part
            miss = {k: miss.get(k) or [f"{pr.name}: the overlap of overhead and work is unknown without every "
                                       "part"] for k in set(nom) | set(miss)}
        out.append(_Side(nom, d, miss, {p: _sources(plan, p) for p in nom}))
    return out


def _interval(x: np.ndarray, level: float) -> tuple[float | None, float | None]:
    lo, hi = np.percentile(x, [(1 - level) / 2 * 100, (1 + level) / 2 * 100])
    return (float(lo), float(hi)) if hi > lo else (None, None)


def _order(name: str) -> tuple[int, str]:
    head = name.split(" ")[0]
    return (PART_ORDER.index(head) if head in PART_ORDER else len(PART_ORDER), name)


def attribute(works: tuple[Work, Work], rates: tuple[PlatformRates, PlatformRates], measured: tuple, gap: Gap,
              platform: int, draws: int = DRAWS, seed: int = SEED, level: float = LEVEL) -> Attribution:
    """The attribution of one row: `measured` the two sides' Measurements (baseline first), `works` the traced
    iteration on each side, `rates` each side's rates."""
    sides = _sides(list(works), list(rates), draws, seed)
    tb, tp = (time_per_iter(m) for m in measured)
    parts = []
    explained = np.zeros(draws)
    for name in sorted(set(sides[0].nominal) | set(sides[1].nominal) | set(sides[0].missing)
                       | set(sides[1].missing), key=_order):
        miss = tuple(dict.fromkeys(sides[0].missing.get(name, []) + sides[1].missing.get(name, [])))
        secs = tuple(None if name in s.missing else s.nominal.get(name, 0.0) for s in sides)
        rates_used = tuple(dict.fromkeys(sides[0].rates.get(name, []) + sides[1].rates.get(name, [])))[:3]
        if miss:
            parts.append(Part(name, secs, None, None, None, rates_used, miss))
            continue
        d = (sides[0].drawn.get(name, np.zeros(draws)) - sides[1].drawn.get(name, np.zeros(draws))) / tp * 100
        explained = explained + d
        parts.append(Part(name, secs, (secs[0] - secs[1]) / tp * 100, *_interval(d, level), rates_used))
    measured_pct = float(gap.pct)  # compare's gap of the row, so that the report has one measured gap
    residual = measured_pct - sum(p.pp for p in parts if p.pp is not None)
    lo = hi = None
    if gap.lo is not None and gap.hi is not None and gap.hi > gap.lo > -100:
        # the measured gap drawn log-normally from compare's own interval of it, less the explained parts
        mu, z = np.log1p(measured_pct / 100), 1.959963984540054
        sd = (np.log1p(gap.hi / 100) - np.log1p(gap.lo / 100)) / (2 * z)
        drawn = np.expm1(mu + np.random.default_rng(seed + 1).standard_normal(draws) * sd) * 100
        lo, hi = _interval(drawn - explained, level)
    modelled = tuple(None if s.missing else sum(s.nominal.values()) for s in sides)
    return Attribution(works[0].target, dict(measured[0].variant), platform, (rates[0].name, rates[1].name),
                       (tb, tp), measured_pct, gap, modelled, tuple(parts), residual, lo, hi,
                       (rates[0].synchronous, rates[1].synchronous))


def has_rates(pr: PlatformRates) -> bool:
    """The results file holds any assess-suite rate (a row gemm, conv, attention, elementwise, membw or launch)."""
    return bool(pr.gemm or pr.conv or pr.attention or pr.elementwise or pr.bandwidth or pr.per_op or pr.optimizer)


def _traceable(workload: str) -> bool:
    from gapbench import workloads

    try:
        return callable(getattr(workloads.get(workload), "build_iteration", None))
    except GapbenchError:
        return False


class _Traces:
    """Each workload, preset and dtype traced once (a trace that fails is said once, with its reason)."""

    def __init__(self):
        self.works: dict[tuple, Work | None] = {}
        self.notes: list[str] = []

    def get(self, workload: str, variant: dict) -> Work | None:
        from gapbench.assess.step import trace_like

        key = (workload, variant.get("model"), variant.get("dtype"))
        if key not in self.works:
            spec = f"{workload}:{variant.get('model')}" if variant.get("model") else workload
            try:
                with contextlib.redirect_stdout(sys.stderr):  # what the model prints is not the report
                    self.works[key] = trace_like(spec, {"dtype": variant.get("dtype") or "fp32"})[1]
            except GapbenchError as e:
                self.works[key] = None
                self.notes.append(f"{spec}: not traced: {e}")
        return self.works[key]


def _row_sides(comp: Comparison, r: Row, i: int) -> tuple | None:
    a, b = r.cells[comp.baseline], r.cells[i]
    g = r.gaps.get(i)
    if a.value is None or b.value is None or g is None or g.pct is None:
        return None
    if not time_per_iter(a.measurement) or not time_per_iter(b.measurement):
        return None
    return a.measurement, b.measurement, g


def attributions(comp: Comparison, draws: int = DRAWS, seed: int = SEED) -> tuple[list[Attribution], list[str]]:
    """Every model row both sides measured that is a built-in workload's traced iteration at its preset,
    attributed, for each platform against the baseline; and notes on what could not be traced. Nothing when
    neither side of a pair holds an assess-suite rate."""
    rates = [None if p.reference else platform_rates(p.result_set) for p in comp.platforms]
    base = rates[comp.baseline]
    traces = _Traces()
    out: list[Attribution] = []
    matched: set[str] = set()
    wanted: set[str] = set()
    for r in comp.rows:
        if not _traceable(r.workload):
            continue
        for i, pr in enumerate(rates):
            sides = _row_sides(comp, r, i) if i != comp.baseline and pr is not None and base is not None else None
            if sides is None or not (has_rates(base) or has_rates(pr)):
                continue
            wanted.add(r.workload)
            work = traces.get(r.workload, r.variant)
            if work is None or work.variant != r.variant:
                continue  # another metric of the point, or not the preset's iteration
            matched.add(r.workload)
            out.append(attribute((work, work), (base, pr), sides[:2], sides[2], i, draws, seed))
    notes = traces.notes + [f"{w}: no row is the traced iteration of its preset (another batch size or option)"
                            for w in sorted(wanted - matched) if not any(n.startswith(f"{w}:") for n in traces.notes)]
    return out, notes
