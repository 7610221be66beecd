"""Numerics parity per layer: each side's error against its own float64 reference, the two sides against each
other, the rounding bound each side's precision predicts, the first layer past it, and the losses' divergence.

The bound of a module's output (or a gradient) is Higham and Mary's probabilistic forward error bound for inner
products (SIAM J. Sci. Comput. 41(5), 2019, Theorem 3.1: a length-n sum in precision u errs by at most
λ·√n·u with probability at least 1 − 2·exp(−λ²/2), against the worst case γ_n = n·u/(1 − n·u) of Higham's
"Accuracy and Stability of Numerical Algorithms", §3.1), summed along the path to the output:

    bound = λ · √( max(m, 1) · u² + n · u_acc² )

with u the unit roundoff of the compute dtype (each of the m rounding modules on the path — linear layers,
convolutions, norms, attention — rounds its operands and result once), u_acc the unit roundoff its sums
accumulate in (fp32 for fp32, tf32, bf16, fp16 and fp8 products, as CPUs and tensor cores do; fp64 for fp64) and
n the reduction lengths along the path (gapbench.workloads.probes.numerics.reduction_length). λ = 10: the
probability bound is then below 1e-21 per sum, and the margin covers the amplification the formula leaves out
(softmax and normalisation conditioning, sin/cos of positions). On the CPU runs in results/ the largest error of a
module output was 0.49 of its bound in fp32 (Llama's rotary embedding: sin and cos of positions; 0.30 elsewhere, the
UNet's timestep embedding) and 0.09 in bf16; of a gradient 0.02 and 0.06 (docs/numerics.md).

A gradient's path is the whole forward, then back to its module: n = N + (N − n_module) + rows (the sum over
tokens that forms a weight's gradient), m = M + (M − m_module) + 1, with N and M the forward's totals.

An error is ‖x − x₆₄‖₂ / ‖x₆₄‖₂ where the reference is not (nearly) zero; an output whose reference norm is below a
thousandth of the outputs' RMS scaled to its size, or a gradient below the gradients' RMS scaled to its size, is
measured against that instead: a gradient that is zero in exact arithmetic (the key projection's bias, which
softmax's shift invariance cancels; a bias just before a norm) has no relative error. Between two sides the error is taken on the seeded sample of values both recorded, the
same positions on every machine, against the bound √(b₁² + b₂²).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gapbench.results import Measurement

WORKLOAD = "numerics"
LAMBDA = 10.0
# below this share of its kind's RMS (scaled to its size) a reference counts as zero and is measured against that
# instead: module outputs a thousandth; gradients all of it, since a gradient that exact arithmetic makes zero (a
# bias before a norm, the key projection's bias) is a cancellation of terms of the model's typical size
FLOOR = {"output": 1e-3, "grad": 1.0}
KNOBS = ("dtype", "attention", "tf32", "deterministic", "fp8_format")


def bound(u: float, u_acc: float, n: float, m: float) -> float:
    """λ·√(max(m, 1)·u² + n·u_acc²): see the module docstring."""
    return LAMBDA * math.sqrt(max(m, 1) * u * u + max(n, 0) * u_acc * u_acc)


@dataclass
class NumericsSide:
    """One measured row of the probe on one platform."""

    platform: int
    measurement: Measurement
    knobs: dict
    dtype: str = ""
    losses: list = field(default_factory=list)
    reference_losses: list = field(default_factory=list)
    start: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.measurement.ok and isinstance((self.measurement.metrics or {}).get("numerics"), dict)


@dataclass
class LayerError:
    """One module output or one gradient: per side its error against float64 and its bound; between the two sides
    the sampled difference and its bound."""

    name: str
    kind: str  # output | grad
    n: int
    err: list  # per side (None: not recorded)
    bounds: list
    cross: float | None = None
    cross_bound: float | None = None

    def over(self, side: int) -> bool:
        e, b = self.err[side], self.bounds[side]
        return e is not None and b is not None and e > b

    @property
    def cross_over(self) -> bool:
        return self.cross is not None and self.cross_bound is not None and self.cross > self.cross_bound


@dataclass
class Divergence:
    """Where the first error leaves its bound: which side (None: between the two sides), layer, error, bound."""

    side: int | None
    index: int
    name: str
    kind: str
    err: float
    bound: float


@dataclass
class NumericsEntry:
    """One model compared: its sides (the baseline's first), layer by layer, and what the numbers say."""

    model: str
    problem: dict
    sides: list[NumericsSide]
    outputs: list[LayerError] = field(default_factory=list)
    grads: list[LayerError] = field(default_factory=list)
    first: Divergence | None = None  # the first module output past its bound (any side, or between them)
    first_grad: Divergence | None = None
    loss_diff: float | None = None  # |L_b − L_a| / |L_a| after the last step (one side: against float64)
    loss_diff_max: float | None = None  # the largest such difference over the steps
    steps: int = 0
    same_start: bool | None = None  # the two sides started from the same weights and inputs
    knobs_differ: list = field(default_factory=list)
    status: str = ""  # "" when both sides have fingerprints; else why there are no numbers

    @property
    def worst_dtype(self) -> str:
        sides = [s for s in self.sides if s.ok]
        return max(sides, key=lambda s: _u(s)).dtype if sides else ""

    def to_dict(self, names: list[str]) -> dict:
        def layer(le: LayerError) -> dict:
            return {"name": le.name, "kind": le.kind, "n": le.n, "err": le.err, "bound": le.bounds,
                    "cross": le.cross, "cross_bound": le.cross_bound}

        def div(d: Divergence | None) -> dict | None:
            return None if d is None else {"side": None if d.side is None else names[self.sides[d.side].platform],
                                           "name": d.name, "kind": d.kind, "err": d.err, "bound": d.bound}

        return {"model": self.model, "problem": self.problem, "status": self.status or None,
                "sides": [{"platform": names[s.platform], "variant": s.measurement.variant,
                           "status": s.measurement.status, "reason": s.measurement.reason or None,
                           "losses": s.losses, "reference_losses": s.reference_losses,
                           "probe_s": s.measurement.value} for s in self.sides],
                "first_divergence": div(self.first), "first_gradient_divergence": div(self.first_grad),
                "loss_diff": self.loss_diff, "loss_diff_max": self.loss_diff_max, "steps": self.steps,
                "same_start": self.same_start, "knobs_differ": self.knobs_differ,
                "layers": [layer(x) for x in self.outputs], "gradients": [layer(x) for x in self.grads]}


def _doc(s: NumericsSide) -> dict:
    return s.measurement.metrics["numerics"]


def _u(s: NumericsSide) -> float:
    return float(_doc(s).get("unit_roundoff") or 0.0)


def _rows(columns: dict) -> list[dict]:
    keys = list(columns)
    return [dict(zip(keys, vals, strict=True)) for vals in zip(*(columns[k] for k in keys), strict=True)]


def _floor_of(ref_rows: list[dict]) -> float:
    """The RMS per element of a kind's reference values (outputs or gradients)."""
    sq = sum((r.get("l2") or 0.0) ** 2 for r in ref_rows)
    count = sum(r.get("numel") or 0 for r in ref_rows)
    return math.sqrt(sq / count) if count else 0.0


def _scale(ref: dict | None, rms: float, size: int, kind: str) -> float:
    l2 = (ref or {}).get("l2") or 0.0
    return max(l2, FLOOR[kind] * rms * math.sqrt(max(size, 1)))


def _side_tables(s: NumericsSide) -> tuple[dict, dict, dict, dict]:
    """(outputs by name, gradients by name, reference outputs by name, reference gradients by name)."""
    d = _doc(s)
    by = lambda rows: {r["name"]: r for r in rows}  # noqa: E731
    return (by(_rows(d["outputs"])), by(_rows(d["grads"])), by(_rows(d["reference"]["outputs"])),
            by(_rows(d["reference"]["grads"])))


def _own_error(row: dict | None, ref: dict | None, rms: float, kind: str) -> float | None:
    if row is None or row.get("diff") is None:
        return None
    scale = _scale(ref, rms, row.get("numel") or 1, kind)
    return row["diff"] / scale if scale > 0 else None


def _sample_diff(a: dict | None, b: dict | None, ref: dict | None, rms: float, kind: str) -> float | None:
    sa, sb = (a or {}).get("sample"), (b or {}).get("sample")
    sr = (ref or {}).get("sample")
    if not sa or not sb or not sr or len(sa) != len(sb) or len(sa) != len(sr):
        return None
    diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(sa, sb, strict=True) if x is not None and y is not None))
    denom = max(math.sqrt(sum(x * x for x in sr if x is not None)), FLOOR[kind] * rms * math.sqrt(len(sr)))
    return diff / denom if denom > 0 else None


def _output_bounds(s: NumericsSide, row: dict | None) -> float | None:
    if row is None:
        return None
    d = _doc(s)
    return bound(_u(s), float(d.get("accumulation_roundoff") or 0.0), row.get("n") or 0, row.get("m") or 0)


def _grad_bound(s: NumericsSide, name: str, outputs: dict, totals: tuple[int, int]) -> float:
    d = _doc(s)
    big_n, big_m = totals
    owner = outputs.get(name.rsplit(".", 1)[0])
    if owner is None:
        n, m = 2 * big_n, 2 * big_m
    else:
        n = big_n + (big_n - (owner.get("n") or 0)) + (owner.get("rows") or 1)
        m = big_m + (big_m - (owner.get("m") or 0)) + 1
    return bound(_u(s), float(d.get("accumulation_roundoff") or 0.0), n, m)


def _layers(sides: list[NumericsSide]) -> tuple[list[LayerError], list[LayerError]]:
    tables = [_side_tables(s) for s in sides]
    first = tables[0]
    out_rms = [_floor_of(list(t[2].values())) for t in tables]
    grad_rms = [_floor_of(list(t[3].values())) for t in tables]
    totals = [(max((r.get("n") or 0 for r in t[0].values()), default=0),
               max((r.get("m") or 0 for r in t[0].values()), default=0)) for t in tables]
    outputs = []
    for name, row in first[0].items():
        rows = [t[0].get(name) for t in tables]
        le = LayerError(name, "output", row.get("n") or 0,
                        [_own_error(r, t[2].get(name), rms, "output")
                         for r, t, rms in zip(rows, tables, out_rms, strict=True)],
                        [_output_bounds(s, r) for s, r in zip(sides, rows, strict=True)])
        if len(sides) == 2:
            le.cross = _sample_diff(rows[0], rows[1], first[2].get(name), out_rms[0], "output")
            le.cross_bound = _pair_bound(le.bounds)
        outputs.append(le)
    grads = []
    for name in first[1]:
        rows = [t[1].get(name) for t in tables]
        le = LayerError(name, "grad", 0,
                        [_own_error(r, t[3].get(name), rms, "grad") for r, t, rms in zip(rows, tables, grad_rms, strict=True)],
                        [_grad_bound(s, name, t[0], tot) if r is not None else None
                         for s, r, t, tot in zip(sides, rows, tables, totals, strict=True)])
        if len(sides) == 2:
            le.cross = _sample_diff(rows[0], rows[1], first[3].get(name), grad_rms[0], "grad")
            le.cross_bound = _pair_bound(le.bounds)
        grads.append(le)
    return outputs, grads


def _pair_bound(bounds: list) -> float | None:
    return math.hypot(*bounds) if all(b is not None for b in bounds) else None


def first_divergence(layers: list[LayerError]) -> Divergence | None:
    """The first layer (in execution order) where a side's error against float64 leaves its bound — a later
    side first when both do at once — or, failing that, where the two sides' difference leaves theirs."""
    for i, le in enumerate(layers):
        for side in reversed(range(len(le.err))):
            if le.over(side):
                return Divergence(side, i, le.name, le.kind, le.err[side], le.bounds[side])
        if le.cross_over:
            return Divergence(None, i, le.name, le.kind, le.cross, le.cross_bound)
    return None


def _loss_diffs(sides: list[NumericsSide]) -> tuple[float | None, float | None]:
    a = sides[0].losses if len(sides) == 2 else sides[0].reference_losses
    b = sides[-1].losses
    pairs = [(x, y) for x, y in zip(a, b, strict=False) if x is not None and y is not None]
    if not pairs:
        return None, None
    diffs = [abs(y - x) / abs(x) if x else abs(y - x) for x, y in pairs]
    return diffs[-1], max(diffs)


def _same_start(sides: list[NumericsSide]) -> bool | None:
    if len(sides) < 2:
        return None
    a, b = _doc(sides[0]).get("start"), _doc(sides[1]).get("start")
    if not a or not b:
        return None
    return all(abs(x["sum"] - y["sum"]) <= 1e-12 * max(1.0, abs(x["sum"])) and x["numel"] == y["numel"]
               for x, y in zip(a, b, strict=False))


def entry_of(model: str, problem: dict, sides: list[NumericsSide]) -> NumericsEntry:
    e = NumericsEntry(model, problem, sides, steps=int(problem.get("train_steps") or 0))
    if len(sides) == 2:
        e.knobs_differ = [k for k in KNOBS if sides[0].knobs.get(k) != sides[1].knobs.get(k)]
    bad = [s for s in sides if not s.ok]
    if bad:
        e.status = bad[0].measurement.status if bad[0].measurement.status != "ok" else "no fingerprints"
        return e
    e.outputs, e.grads = _layers(sides)
    e.first, e.first_grad = first_divergence(e.outputs), first_divergence(e.grads)
    e.loss_diff, e.loss_diff_max = _loss_diffs(sides)
    e.same_start = _same_start(sides)
    return e


def _side(platform: int, m: Measurement) -> NumericsSide:
    doc = (m.metrics or {}).get("numerics") if m.ok else None
    doc = doc if isinstance(doc, dict) else {}
    return NumericsSide(platform, m, {k: m.variant.get(k) for k in KNOBS}, str(m.variant.get("dtype", "")),
                        list(doc.get("losses") or []), list((doc.get("reference") or {}).get("losses") or []),
                        list(doc.get("start") or []))


def _problem(m: Measurement) -> tuple[str, dict]:
    p = {k: v for k, v in m.variant.items() if k not in KNOBS}
    return str(m.variant.get("model", "?")), p


def _grouped(platforms) -> dict:
    """{(model, problem as text): {platform index: [measurements]}} in order of first appearance."""
    out: dict = {}
    for i, p in enumerate(platforms):
        for m in p.result_set.measurements:
            if m.workload != WORKLOAD:
                continue
            model, problem = _problem(m)
            key = (model, repr(sorted(problem.items())))
            out.setdefault(key, {"problem": problem}).setdefault(i, []).append(m)
    return out


def _pairs(base: list[Measurement], other: list[Measurement]) -> list[tuple[Measurement, Measurement]]:
    """Rows with the same knobs first; then, when one row is left on each side, those two."""
    pairs, left = [], list(other)
    rest = []
    for m in base:
        same = next((o for o in left if o.variant == m.variant), None)
        if same is not None:
            pairs.append((m, same))
            left.remove(same)
        else:
            rest.append(m)
    if len(rest) == 1 and len(left) == 1:
        pairs.append((rest[0], left[0]))
    return pairs


def numerics_side(platforms, base_i: int) -> list[NumericsEntry]:
    """Every numerics comparison of the inputs: each model's rows on each platform paired with the baseline's
    (the same knobs first, else the one row each side has); rows with no partner stand alone against float64."""
    entries = []
    for (model, _), group in _grouped(platforms).items():
        problem = group.pop("problem")
        base = group.get(base_i, [])
        paired: set[int] = set()
        for i, rows in group.items():
            if i == base_i:
                continue
            for a, b in _pairs(base, rows):
                paired |= {id(a), id(b)}
                entries.append(entry_of(model, problem, [_side(base_i, a), _side(i, b)]))
        for i, rows in group.items():
            entries += [entry_of(model, problem, [_side(i, m)]) for m in rows if id(m) not in paired]
    return entries
