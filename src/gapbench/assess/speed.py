"""The step time a traced model should take on each platform, and the expected gap, from measured rates.

Each traced operator call costs, on a platform (its rates from its results file, assess.rates):

    gemm              max(FLOPs / GEMM rate at the nearest measured shape of its dtype, bytes / bandwidth); a
                      grouped one (torch._grouped_mm) at the grouped GEMM rate of its dtype and layout measured at
                      its own group sizes (a trace on real tensors has them), else the nearest in one group's shape
                      and the number of groups
    conv              max(FLOPs / convolution rate of its dtype, pass and kernel size at the nearest im2col shape,
                      bytes / bw); a grouped one of few channels per group (a depthwise one) at the grouped rows
                      only, one of 8 channels per group or more as `groups` dense ones of one group's channels
    attention         max(FLOPs / attention rate of its dtype and pass at the nearest measured shape, bytes / bw)
    elementwise       max(elements / the operator's own measured rate of its dtype at the nearest size, bytes / bw):
                      a memory-class operator the elementwise rows measured (gelu, bernoulli_, softmax, norms, …)
    memory            bytes / bandwidth of its dtype (fp32's where that dtype has no membw rows) at the nearest size
    optimizer         a whole optimizer step (every call inside it): the parameters' elements / the measured step's
                      rate of that optimizer and dtype over the same parameter set, else the nearest one; where the
                      side has no such row, its calls are priced one by one as the classes above
    collective        message bytes / the collective's algorithm bandwidth at the nearest message size
    view              nothing but its per-operator cost

and every call also costs the platform's measured per-operator time (not the calls of an optimizer step priced
whole: its measured row includes them) (launch: `train` for a step with a backward
pass, `infer` for one without). Where host and device are one processor (a CPU) the two add up:
T = Σ per-operator + Σ work; on an accelerator the host issues operators while the device runs earlier ones,
so T = max(Σ per-operator, Σ work).

The interval: a seeded Monte Carlo over the rates' uncertainty — each rate drawn log-normally with the standard
deviation its own 95% interval implies, and each platform's whole level drawn with its run-to-run spread
(rates of one results file share that draw; two sides from the same file share everything they share) — and over
the model's own error: each drawn gap's ratio multiplied by a log-normal factor of the calibrated σ
(assess.calibration: measured on the development models' pairs, so that the stated level holds), unless both sides
are one platform running one trace (then there is nothing to be wrong about). The gap is T_source / T_target − 1
(> 0: the target is faster), its interval the 2.5th and 97.5th percentiles.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from gapbench.assess import calibration
from gapbench.assess.rates import PlatformRates, Rate, same_tokens, shape_distance
from gapbench.assess.work import COMPUTE, Item, Work
from gapbench.compare.gaps import Gap, HistoryChoice, interval_gap, judge, pair_spread, row_spread
from gapbench.compare.rates import time_per_iter

DRAWS = 4000
SEED = 0
LEVEL = 0.95
WORK_CLASSES = ("gemm", "conv", "attention", "elementwise", "memory", "optimizer", "collective")


@dataclass(frozen=True)
class ClassTime:
    cls: str  # gemm | conv | attention | elementwise | memory | optimizer | collective | overhead
    calls: int
    flops: float
    bytes: float
    seconds: float  # predicted, with the rates as measured
    rates: tuple[str, ...]  # the rows used, the most used first (at most three)


@dataclass(frozen=True)
class SidePrediction:
    platform: str
    path: str | None
    step_s: float  # predicted seconds per step, with the rates as measured
    lo: float  # the step time's interval (Monte Carlo percentiles)
    hi: float
    classes: tuple[ClassTime, ...]
    per_op: str  # the launch rate used: train | infer
    synchronous: bool
    spread: float
    spread_basis: str
    flagged: tuple[str, ...] = ()  # rates used that the host watch flagged
    # the step's dense GEMM shapes this side measured no row near (priced at a farther shape), most FLOPs first:
    # (dtype, 'MxNxK'), and their share of the step's dense GEMM FLOPs
    unmeasured_gemm: tuple[tuple[str, str], ...] = ()
    unmeasured_share: float = 0.0
    # the same for its convolutions: (dtype, 'NxCINxCOUTxHWxKxG') and their share of the step's convolution FLOPs
    unmeasured_conv: tuple[tuple[str, str], ...] = ()
    unmeasured_conv_share: float = 0.0
    # the same for its attentions: (dtype, 'BHxSxD[xKV][c]') and their share of the step's attention FLOPs
    unmeasured_attention: tuple[tuple[str, str], ...] = ()
    unmeasured_attention_share: float = 0.0
    # the step's optimizer steps this side has no row for at their own parameter set: (optimizer, dtype,
    # 'NUMEL*COUNT+…', how they were priced: 'nearest' set of the same optimizer | 'per-operator': no row of that
    # optimizer and dtype)
    unmeasured_optimizer: tuple[tuple[str, str, str, str], ...] = ()
    # its grouped GEMMs traced with their group sizes (on real tensors) that this side has no row at those sizes
    # for: (dtype, 'SIZESxNxK' | 'MxNxSIZES'), and their share of the step's grouped GEMM FLOPs
    unmeasured_grouped: tuple[tuple[str, str], ...] = ()
    unmeasured_grouped_share: float = 0.0


SHAPE_TOLERANCE = 0.25  # sum of |log| ratios of m, n, k within which a measured GEMM row is "at" a step's shape


def _unmeasured(work: Work, spec_of, far) -> tuple[tuple[tuple[str, str], ...], float]:
    """The traced calls that `spec_of` names (None: not of the kind) and whose nearest row on this side is `far`
    (far(item) is True), as (dtype, spec) most FLOPs first, and their share of the kind's FLOPs in the step."""
    flops: dict[tuple[str, str], float] = {}
    total = 0.0
    for it in work.items:
        spec = spec_of(it)
        if spec is None:
            continue
        total += it.flops * it.count
        if far(it):
            key = (it.dtype, spec)
            flops[key] = flops.get(key, 0.0) + it.flops * it.count
    order = sorted(flops, key=lambda k: -flops[k])
    share = sum(flops.values()) / total if total > 0 else 0.0
    return tuple(order), share


def unmeasured_gemm(work: Work, pr: PlatformRates) -> tuple[tuple[tuple[str, str], ...], float]:
    """The traced step's dense GEMM shapes whose nearest measured row on this side is off by more than
    SHAPE_TOLERANCE (`gemm:listed --gemm-shapes` measures them), most FLOPs first, and their share of the step's
    dense GEMM FLOPs."""
    def far(it) -> bool:
        point = pr.gemm_rate(it.dtype, it.shape)
        return point is None or shape_distance((point.m, point.n, point.k), it.shape) > SHAPE_TOLERANCE

    return _unmeasured(work, lambda it: "x".join(map(str, it.shape))
                       if it.cls == "gemm" and not it.groups and it.shape else None, far)


def unmeasured_conv(work: Work, pr: PlatformRates) -> tuple[tuple[tuple[str, str], ...], float]:
    """The traced step's convolutions whose nearest measured row of their kind on this side (the same pass,
    kernel size, stride, padding and groupedness) is off by more than SHAPE_TOLERANCE in im2col shape or in groups
    (`conv:listed --conv-shapes` measures them), most FLOPs first, and their share of the step's convolution
    FLOPs. Forward and backward of one convolution are one spec: conv:listed measures both."""
    def far(it) -> bool:
        point = pr.conv_rate(it.dtype, "backward" in it.op, it.shape, it.kernel, it.groups, it.stride, it.padding)
        return point is None or point.kernel != it.kernel or point.stride != max(1, it.stride) \
            or point.padding != it.padding \
            or shape_distance((point.m, point.n, point.k), it.shape) > SHAPE_TOLERANCE \
            or abs(math.log(max(1, point.groups) / max(1, it.groups))) > SHAPE_TOLERANCE

    return _unmeasured(work, lambda it: it.conv_spec, far)


@dataclass(frozen=True)
class MeasuredCheck:
    """Predicted against measured, where both results files measured the traced workload variant."""

    workload: str
    variants: tuple[dict, dict]
    measured_s: tuple[float, float]  # seconds per iteration, source and target
    predicted_s: tuple[float, float]
    measured_gap: Gap  # compare's judgement of the two rows (speed; > 0: the target is faster)
    error_pp: float  # predicted gap − measured gap, percentage points

    @property
    def step_error_pct(self) -> tuple[float, float]:
        return tuple((p / m - 1) * 100 for p, m in zip(self.predicted_s, self.measured_s, strict=True))


@dataclass(frozen=True)
class Reference:
    """Another model measured on both sides of the pair in the same session as the predicted one, and its own log
    error there: ln((1 + its predicted gap) / (1 + its measured gap)), predicted without a shift or a reference."""

    name: str
    error: float | None  # None: the reference gives no error on this pair (`note` says why)
    note: str = ""


@dataclass(frozen=True)
class SpeedPrediction:
    source: SidePrediction
    target: SidePrediction
    gap_pct: float  # T_source / T_target − 1, in %; > 0: the target is faster
    lo: float
    hi: float
    level: float
    draws: int
    seed: int
    measured: MeasuredCheck | None = None
    measured_note: str = ""  # why there is no measured check
    model_sigma: float = 0.0  # the model's own error drawn into the interval (log-gap standard deviation)
    model_basis: str = ""  # what that σ was calibrated on ('' when none was drawn)
    kind: str = ""  # the pair's kind as the calibration keys its shifts (calibration.pair_kind)
    shift: float = 0.0  # the calibrated median error of this kind, taken off the steps' log ratio (0: none)
    shift_basis: str = ""  # what that shift was measured on ('' when none applies)
    reference: Reference | None = None  # the model whose error on the pair corrected this one's (None: none given)
    reference_weight: float = 0.0  # the share of its error taken off the log gap (0: none, or no weight calibrated)
    reference_basis: str = ""  # what the weight was fitted on, or why a given reference was not used

    @property
    def flagged(self) -> tuple[str, ...]:
        """The rates behind the prediction that the host watch flagged, either side, once each."""
        return tuple(dict.fromkeys((*self.source.flagged, *self.target.flagged)))

    def verdict(self, allow_flagged: bool = False) -> Gap:
        """The expected gap judged by the one verdict policy (compare.gaps): no verdict when a rate it uses was
        measured on a disturbed host, unless allowed."""
        flagged = f"{len(self.flagged)} rate(s) it uses" if self.flagged else ""
        return interval_gap(self.gap_pct, self.lo, self.hi, "predicted", flagged, allow_flagged)


@dataclass
class _Plan:
    """One side's operator calls as arrays over the unified rate table (index -1: no such term)."""

    count: np.ndarray
    flops: np.ndarray
    nbytes: np.ndarray
    compute: np.ndarray  # index of the FLOP rate (gemm, conv, attention)
    memory: np.ndarray  # index of the byte rate (bandwidth, or the collective's)
    classes: list[str]
    per_op: int  # index of the per-operator time
    calls: int  # the calls that pay the per-operator time
    platform: int  # index of the platform-level draw
    used: dict[str, list[str]]  # class -> rate sources, one per call
    items: list[Item] = dataclasses.field(default_factory=list)  # what each column prices (an optimizer step: one
    #                                                                item of class optimizer, its elements)


class _Table:
    """Rates of both sides in one list, so that a rate two sides share is drawn once."""

    def __init__(self):
        self.rates: list[Rate] = []
        self.index: dict[tuple, int] = {}

    def add(self, platform_key: str, rate: Rate) -> int:
        key = (platform_key, rate.source, rate.value)
        if key not in self.index:
            self.index[key] = len(self.rates)
            self.rates.append(rate)
        return self.index[key]


def plan_side(work: Work, pr: PlatformRates, table: _Table, platform: int, key: str) -> tuple[_Plan | None, list[str]]:
    """The side's plan over `table`, or None with what its results file lacks for this trace."""
    missing: list[str] = []
    kind = "train" if work.has_backward else "infer"
    cols: dict[str, list] = {k: [] for k in ("count", "flops", "bytes", "compute", "memory", "cls", "items")}
    used: dict[str, list[str]] = {}
    steps = optimizer_rates(work, pr)
    for it in work.items:
        if steps and it.phase == "optimizer":
            continue  # priced whole below
        ci = mi = -1
        cls, units = it.cls, it.flops
        if it.cls in COMPUTE:
            point, lacking = compute_rate(pr, it)
            if point is None:
                missing.append(lacking)
                continue
            ci = table.add(key, point.rate)
            used.setdefault(it.cls, []).extend([point.rate.source] * it.count)
        elif it.cls == "memory" and (ew := pr.elementwise_at(it.packet, it.dtype, it.elements)) is not None:
            # an operator whose arithmetic the elementwise rows measured: max(elements / rate, bytes / bandwidth)
            cls, units, ci = "elementwise", float(it.elements), table.add(key, ew.rate)
            used.setdefault(cls, []).extend([ew.rate.source] * it.count)
        if (it.cls in COMPUTE or it.cls == "memory") and it.bytes > 0:
            # a memory-bound operator moves its bytes at its dtype's rate (narrow types are converted on some
            # stacks); a compute-bound one's bytes are a bound on data movement alone
            bw = pr.bandwidth_at(it.bytes, it.dtype if cls == "memory" else None)
            if bw is None:
                missing.append("no memory bandwidth rows (membw)")
                continue
            mi = table.add(key, bw.rate)
            if cls == "memory":
                used.setdefault(cls, []).extend([bw.rate.source] * it.count)
        elif it.cls == "collective":
            point = pr.collective_at(it.op, it.bytes)
            if point is None:
                missing.append(f"no collective rows for {it.op}")
                continue
            mi = table.add(key, point.rate)
            used.setdefault(it.cls, []).extend([point.rate.source] * it.count)
        for name, v in (("count", it.count), ("flops", units), ("bytes", it.bytes), ("compute", ci),
                        ("memory", mi), ("cls", cls), ("items", it)):
            cols[name].append(v)
    _optimizer_columns(steps or [], cols, used, table, key)
    if kind not in pr.per_op:
        missing.append(f"no per-operator time (launch, kind={kind})")
    if missing:
        return None, [f"{pr.name}: {m}" for m in dict.fromkeys(missing)]
    used["overhead"] = [pr.per_op[kind].source]
    return _Plan(np.array(cols["count"], dtype=float), np.array(cols["flops"], dtype=float),
                 np.array(cols["bytes"], dtype=float), np.array(cols["compute"], dtype=int),
                 np.array(cols["memory"], dtype=int), cols["cls"], table.add(key, pr.per_op[kind]),
                 work.calls - (work.optimizer_calls if steps else 0), platform, used, cols["items"]), []


def unmeasured_attention(work: Work, pr: PlatformRates) -> tuple[tuple[tuple[str, str], ...], float]:
    """The traced step's attentions whose nearest measured row on this side differs in causality or by more than
    SHAPE_TOLERANCE in batch × heads, sequences and head dimension (`attention:listed --attention-shapes` measures
    them), most FLOPs first, and their share of the step's attention FLOPs."""
    def far(it) -> bool:
        p = pr.attention_rate(it.dtype, "backward" in it.op, it.shape, it.kv, it.causal)
        bh, seq, d = it.shape
        return p is None or p.causal != it.causal or shape_distance((p.batch_heads, p.seq, p.head_dim), (bh, seq, d)) \
            + abs(math.log(max(1, p.kv or p.seq) / max(1, it.kv or seq))) > SHAPE_TOLERANCE

    return _unmeasured(work, lambda it: it.attention_spec, far)


def unmeasured_grouped(work: Work, pr: PlatformRates) -> tuple[tuple[tuple[str, str], ...], float]:
    """The traced step's grouped GEMMs with group sizes (a trace on real tensors) that this side has no row at those
    sizes for (`grouped-gemm:listed --grouped-shapes` measures them), most FLOPs first, and their share of the
    step's grouped GEMM FLOPs: a routed layer's uneven groups can run far from equal ones of their mean. A row of
    another routed split of the call's tokens is no gap (PlatformRates.grouped_rate)."""
    def far(it) -> bool:
        point = pr.grouped_rate(it.dtype, it.shape, it.groups, it.layout, it.sizes)
        return point is None or (bool(it.sizes) and not same_tokens(point.sizes, it.sizes))

    return _unmeasured(work, lambda it: it.grouped_spec, far)


def unmeasured_optimizer(work: Work, pr: PlatformRates) -> tuple[tuple[str, str, str, str], ...]:
    out = []
    for step in work.optimizers:
        point = pr.optimizer_at(step.name, step.dtype, step.spec, step.elements, step.tensors)
        if point is None or point.params != step.spec:
            out.append((step.name, step.dtype, step.spec, "nearest" if point else "per-operator"))
    return tuple(out)


def alike_optimizers(sides: list[tuple[Work, PlatformRates]]) -> list[tuple[Work, PlatformRates]]:
    """The sides as they are where every side has a row for each optimizer step of its trace; else the traces
    without their optimizer steps, so that both sides price those calls one by one: a gap between one side's
    whole step and the other's operators would be a difference of methods, not of platforms."""
    if all(optimizer_rates(w, pr) for w, pr in sides) or not any(w.optimizers for w, _ in sides):
        return sides
    return [(dataclasses.replace(w, optimizers=[]), pr) for w, pr in sides]


def _optimizer_columns(steps: list, cols: dict[str, list], used: dict[str, list[str]], table: _Table,
                       key: str) -> None:
    """One column per optimizer step priced whole: its parameters' elements over its measured step rate."""
    for step, point in steps:
        for name, v in (("count", 1), ("flops", float(step.elements)), ("bytes", 0.0),
                        ("compute", table.add(key, point.rate)), ("memory", -1), ("cls", "optimizer"),
                        ("items", optimizer_item(step))):
            cols[name].append(v)
        used.setdefault("optimizer", []).append(point.rate.source)


def optimizer_rates(work: Work, pr: PlatformRates) -> list | None:
    """[(optimizer step, its measured row)] for every optimizer step of the trace, or None where the side has no
    row for one of them (then every call is priced one by one)."""
    if not work.optimizers:
        return None
    out = []
    for step in work.optimizers:
        point = pr.optimizer_at(step.name, step.dtype, step.spec, step.elements, step.tensors)
        if point is None:
            return None
        out.append((step, point))
    return out


def optimizer_item(step) -> Item:
    """An optimizer step as one column of a plan: its parameters' elements are its units."""
    return Item(f"optimizer.{step.name}", "optimizer", step.dtype, "optimizer", 0.0, 0.0, elements=step.elements)


def compute_rate(pr: PlatformRates, it):
    """(the rate point for a FLOP-priced call, or None and what the results file lacks)."""
    shape = it.shape or (1, 1, 1)
    backward = "backward" in it.op
    pas = "backward" if backward else "forward"
    if it.cls == "gemm" and it.groups:
        return (pr.grouped_rate(it.dtype, shape, it.groups, it.layout, it.sizes),
                f"no {it.dtype} grouped GEMM rows (grouped-gemm)")
    if it.cls == "gemm":
        return pr.gemm_rate(it.dtype, shape), f"no {it.dtype} GEMM rows (gemm)"
    if it.cls == "conv":
        kind = "depthwise " if it.groups else ""
        return (pr.conv_rate(it.dtype, backward, shape, it.kernel, it.groups, it.stride, it.padding),
                f"no {it.dtype} {pas} {kind}convolution rows (conv)")
    return (pr.attention_rate(it.dtype, backward, shape, it.kv, it.causal),
            f"no {it.dtype} {pas} attention rows (attention)")


def priced_items(work: Work, pr: PlatformRates) -> tuple[list[tuple[Item, str, float]], float, list[str]]:
    """One side's prices, call by call as the prediction sums them: ([(item, class it is priced as, seconds of all
    its calls' work)], the per-operator seconds every call also pays, what the results file lacks: [] or the
    lacks alone). An optimizer step priced whole is one item of class optimizer."""
    table = _Table()
    plan, missing = plan_side(work, pr, table, 0, _platform_key(pr))
    if plan is None:
        return [], 0.0, missing
    values = np.array([r.value for r in table.rates])
    seconds = _item_times(plan, values[None, :])[0]
    return ([(it, cls, float(t)) for it, cls, t in zip(plan.items, plan.classes, seconds, strict=True)],
            float(values[plan.per_op]), [])


def _item_times(plan: _Plan, values: np.ndarray) -> np.ndarray:
    """Seconds of each item (all its calls) for rate values of shape (draws, rates); (draws, items)."""
    padded = np.concatenate([values, np.full((values.shape[0], 1), np.inf)], axis=1)  # index -1: no such term
    with np.errstate(divide="ignore"):
        tc = plan.flops / padded[:, plan.compute]
        tm = plan.nbytes / padded[:, plan.memory]
    return plan.count * np.maximum(np.nan_to_num(tc, nan=0.0), np.nan_to_num(tm, nan=0.0))


def _step_times(plan: _Plan, values: np.ndarray, synchronous: bool) -> np.ndarray:
    work = _item_times(plan, values).sum(axis=1)
    overhead = plan.calls * values[:, plan.per_op]
    return work + overhead if synchronous else np.maximum(work, overhead)


def _classes(plan: _Plan, values: np.ndarray) -> tuple[ClassTime, ...]:
    t = _item_times(plan, values[None, :])[0]
    out = []
    for cls in WORK_CLASSES:
        sel = np.array([c == cls for c in plan.classes], dtype=bool)
        if not sel.any():
            continue
        sources = plan.used.get(cls, [])
        top = tuple(sorted(set(sources), key=lambda s: -sources.count(s))[:3])
        flops = float((plan.flops * plan.count)[sel].sum()) if cls in COMPUTE else 0.0  # elementwise, optimizer:
        #                                                                                    elements
        out.append(ClassTime(cls, int(plan.count[sel].sum()), flops,
                             float((plan.nbytes * plan.count)[sel].sum()), float(t[sel].sum()), top))
    out.append(ClassTime("overhead", plan.calls, 0.0, 0.0, float(plan.calls * values[plan.per_op]),
                         tuple(plan.used["overhead"])))
    return tuple(out)


def model_error(sides: list[tuple[Work, PlatformRates]], sigma: float | None,
                kind: str) -> tuple[float, str, calibration.Shift | None]:
    """(σ, basis, shift) of the model's own error for this pair: `sigma` as given (and no shift), else the
    shipped calibration's σ and the shift of the pair's `kind` (side_kind) where it has one; none when both sides
    are one platform running one trace."""
    (w0, p0), (w1, p1) = sides
    if _platform_key(p0) == _platform_key(p1) and w0.items == w1.items:
        return 0.0, "", None
    if sigma is not None:
        return sigma, "as given" if sigma else "", None
    cal = calibration.default()
    if cal is None:
        return 0.0, "", None
    classes = {"cpu" if pr.synchronous else "accelerator" for _, pr in sides}
    beyond = sorted(classes - set(cal.device_classes))
    basis = cal.basis + (f"; not calibrated on {' or '.join(beyond)} pairs: applied as measured there" if beyond
                         else "")
    return cal.sigma, basis, cal.shift_of(kind)


def reference_correction(kind: str, reference: Reference | None,
                         sigma: float | None) -> tuple[float, str]:
    """(weight, basis) of a reference's error on a prediction of `kind`: the shipped calibration's weight for the
    kind, none where the model's σ is given (the model as it prices), where the kind has no weight, or where no
    reference is given."""
    if reference is None:
        return 0.0, ""
    if reference.error is None:
        return 0.0, f"not applied: {reference.note}"
    if sigma is not None:
        return 0.0, "not applied: the model's own error was given, so the prediction is the model's as it prices"
    cal = calibration.default()
    weight = cal.weight_of(kind) if cal else None
    if weight is None:
        return 0.0, "not applied: no weight is calibrated for this kind of pair"
    return weight.weight, weight.basis()


def reference_of(name: str, sides: list[tuple[Work, PlatformRates]], history: HistoryChoice = True) -> Reference:
    """The reference `name` on the two sides (its own trace on each side's rates): its log error predicted as the
    model prices it (no shift, no reference) against its measured rows; an error of None, with why, where either
    side lacks a rate it needs or its measured row."""
    pred, missing = predict(sides, model_sigma=0.0, history=history)
    if pred is None:
        return Reference(name, None, f"the reference {name} cannot be predicted here ({'; '.join(missing)})")
    if pred.measured is None:
        return Reference(name, None, f"the reference {name} has no measured gap here ({pred.measured_note})")
    return Reference(name, calibration.log_error(pred.gap_pct, pred.measured.measured_gap.pct))


def side_kind(sides: list[tuple[Work, PlatformRates]]) -> str:
    """The pair's kind as the calibration keys its shifts (calibration.pair_kind)."""
    (w0, p0), (w1, p1) = sides
    return calibration.pair_kind(p0.identity or {"type": p0.device_type},
                                 p1.identity or {"type": p1.device_type}, w0.items == w1.items)


def predict(sides: list[tuple[Work, PlatformRates]], draws: int = DRAWS, seed: int = SEED,
            level: float = LEVEL, history: HistoryChoice = True,
            model_sigma: float | None = None,
            reference: Reference | None = None) -> tuple[SpeedPrediction | None, list[str]]:
    """The step time on the source (sides[0]) and the target (sides[1]) and the expected gap with its interval;
    (None, what is missing) when a results file lacks a rate the trace needs. `model_sigma`: the model's own
    error to draw into the interval (default: the calibrated one; 0: the rates' noise alone). `reference`: another
    model's error on the same two sides in the same session; the calibrated weight of the pair's kind takes that
    share of it off the log gap, in place of the kind's shift."""
    table = _Table()
    platform_keys = list(dict.fromkeys(_platform_key(pr) for _, pr in sides))
    plans, missing = [], []
    for work, pr in alike_optimizers(sides):
        key = _platform_key(pr)
        plan, miss = plan_side(work, pr, table, platform_keys.index(key), key)
        plans.append(plan)
        missing += miss
    if missing:
        return None, list(dict.fromkeys(missing))
    if any(p.calls == 0 for p in plans):
        return None, ["the traced step ran no operators"]
    spreads = [next(pr.spread for _, pr in sides if _platform_key(pr) == k) for k in platform_keys]
    nominal, drawn = drawn_values(table, plans, spreads, draws, seed)
    totals = [_step_times(plan, v, pr.synchronous) for plan, v, (_, pr) in zip(plans, drawn, sides, strict=True)]
    point = [float(_step_times(p, nominal[None, :], pr.synchronous)[0]) for p, (_, pr) in zip(plans, sides,
                                                                                                strict=True)]
    kind = side_kind(sides)
    sigma, basis, shift = model_error(sides, model_sigma, kind)
    weight, weight_basis = reference_correction(kind, reference, model_sigma)
    if weight:
        shift = None  # the reference's error holds this session's lean, the kind's shift only its usual one
    log_shift = shift.shift if shift else weight * reference.error if weight else 0.0
    shifted = math.exp(-log_shift)
    own = np.exp(np.random.default_rng(seed + 1).standard_normal(draws) * sigma) if sigma > 0 else 1.0
    gaps = (totals[0] / totals[1] * own * shifted - 1) * 100
    q = [(1 - level) / 2 * 100, (1 + level) / 2 * 100]
    side_preds = []
    for i, (plan, (work, pr)) in enumerate(zip(plans, sides, strict=True)):
        lo, hi = np.percentile(totals[i], q)
        flagged = tuple(sorted({r.source for j, r in enumerate(table.rates) if r.flagged and _uses(plan, j)}))
        side_preds.append(SidePrediction(pr.name, pr.path, point[i], float(lo), float(hi), _classes(plan, nominal),
                                         "train" if work.has_backward else "infer", pr.synchronous, pr.spread,
                                         pr.spread_basis, flagged, *unmeasured_gemm(work, pr),
                                         *unmeasured_conv(work, pr), *unmeasured_attention(work, pr),
                                         unmeasured_optimizer(work, pr), *unmeasured_grouped(work, pr)))
    glo, ghi = np.percentile(gaps, q)
    gap = (point[0] / point[1] * shifted - 1) * 100
    check, note = measured_check(sides, point, gap, history)
    return SpeedPrediction(side_preds[0], side_preds[1], gap, float(glo), float(ghi), level, draws, seed, check,
                           note, sigma, basis, kind, shift.shift if shift else 0.0,
                           shift.basis() if shift else "", reference, weight, weight_basis), []


def drawn_values(table: _Table, plans: list[_Plan], spreads: list[float], draws: int,
                 seed: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """(the rates as measured, and for each plan its rates drawn: shape (draws, rates)): every rate log-normal
    with its own sigma, each platform's whole level with its spread (shared by the rates of one platform)."""
    rng = np.random.default_rng(seed)
    nominal = np.array([r.value for r in table.rates])
    sigma = np.array([r.sigma for r in table.rates])
    values = nominal * np.exp(rng.standard_normal((draws, len(nominal))) * sigma)
    level_draws = np.exp(rng.standard_normal((draws, len(spreads))) * np.array(spreads))
    per_op_rates = [p.per_op for p in plans]
    # a per-operator rate is a time, not a rate: a slower platform level makes it longer, not shorter
    out = []
    for plan in plans:
        v = values.copy()
        v[:, [i for i in range(len(nominal)) if i not in per_op_rates]] *= level_draws[:, [plan.platform]]
        v[:, per_op_rates] /= level_draws[:, [plan.platform]]
        out.append(v)
    return nominal, out


def _uses(plan: _Plan, j: int) -> bool:
    return j == plan.per_op or bool((plan.compute == j).any() or (plan.memory == j).any())


def _platform_key(pr: PlatformRates) -> str:
    return pr.run_id or pr.path or pr.name


def _measured_row(work: Work, pr: PlatformRates):
    name = work.target.split(":")[0]
    return next((m for m in pr.models if m.workload == name and m.variant == work.variant), None)


def measured_check(sides: list[tuple[Work, PlatformRates]], predicted: list[float], gap_pct: float,
                   history: HistoryChoice = True) -> tuple[MeasuredCheck | None, str]:
    """Predicted (the steps `predicted`, the gap `gap_pct`) against measured when both results files hold the traced
    workload variant; the measured gap is judged as compare judges it (the row's spread from the history, else the
    class default)."""
    (w_src, src), (w_tgt, tgt) = sides
    if w_src.variant is None or w_tgt.variant is None:
        return None, "the traced step is not a built-in workload's measured iteration"
    a, b = _measured_row(w_src, src), _measured_row(w_tgt, tgt)
    if a is None or b is None:
        lacking = " and ".join(pr.name for pr, m in ((src, a), (tgt, b)) if m is None)
        return None, f"{lacking} measured no {w_src.target} row with the traced variant"
    ta, tb = time_per_iter(a), time_per_iter(b)
    if not ta or not tb:
        return None, "the measured rows carry no time per iteration"
    spreads = tuple(row_spread(pr.identity or {"type": pr.device_type}, m.workload, m.variant, history,
                               exclude_runs=tuple(pr.run_id.split("+")))
                    for pr, m in ((tgt, b), (src, a)))
    spread, drift = pair_spread(*spreads, len(set(tgt.run_id.split("+"))) < 2, len(set(src.run_id.split("+"))) < 2)
    if src.run_id and src.run_id == tgt.run_id and len(a.run_values) >= 2 and len(b.run_values) >= 2:
        drift = 0.0     # both rows from the same interleaved passes of one session: no drift between sessions
    gap = judge(b, a, b.higher_is_better, spread, drift=drift, spreads=spreads)
    if gap.pct is None:
        return None, f"the measured rows give no gap ({gap.status})"
    error = gap_pct - gap.pct
    return MeasuredCheck(w_src.target, (a.variant, b.variant), (ta, tb), (predicted[0], predicted[1]), gap, error), ""
