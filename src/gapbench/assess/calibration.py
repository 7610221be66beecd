"""The step-time model's own error, measured, so that a predicted gap's interval holds what it states.

A prediction's Monte Carlo draws cover the noise of the rates it reads; the model itself misses too (a real
module's per-operator cost above the bare loop's, caches, overlap). Its error on a pair of platforms is measured
where both sides also ran the model: e = ln((1 + predicted gap) / (1 + measured gap)). The calibration is the
smallest σ such that, with every pair's gap drawn from N(its prediction, σ_rates² + σ²) in log space, the stated
level's interval holds the measured gap in at least that share of the calibration pairs:

    |e_i| ≤ z · √(σ_rates,i² + σ²)   for ≥ level of the pairs       (z: the level's normal quantile)

σ_rates,i is the pair's own interval width, ln((1 + hi) / (1 + lo)) / 2z. The pairs, their errors and the σ
that follows are kept in calibration.toml beside this module, written by benchmarks/assess_calibrate.py from
the development models' accuracy runs (never from the models held aside to score it).

The error has a centre as well as a spread. Pairs of one kind (`pair_kind`: the same two processors and core
counts, the same thread counts, one trace on both sides or two) can share a bias the model does not know of. The
pairs of one session (one run folder: its rows and steps measured on one machine within the hour) are not
independent evidence of it: on a 2-vCPU AMD EPYC VM the second thread's speed-up was over-predicted on 16 of 17
development pairs from five sessions (median log error +0.11), and two hours later, in the same boot, on the next
session's three held-aside pairs by +0.00 to +0.03, so a shift of +0.11 taken from the pairs as if independent made
them worse. So the unit is the
session: where a kind's sessions (each its pairs' median error) fall on one side of zero more often than chance
would put them there (a two-sided sign test, p below SHIFT_P, which takes at least eight sessions of one sign), the
median of the sessions' medians is the kind's shift: a prediction of that kind takes it off its log gap, and σ is
calibrated on the pairs' errors less their kind's shift. Medians, not means, since the score is the mean absolute
error and a few far misses would drag a mean. A kind without a shift is predicted as the model prices it.

A shift is one number for every session; the lean itself moves from session to session (the EPYC's thread pairs:
+0.03 to +0.11 by session median). What follows it is a reference: a model measured on both sides in the same
session as the one predicted, whose own log error e_ref on the pair is known. A prediction of a kind with a
reference weight w takes w · e_ref off its log gap (in place of the kind's shift, which the reference's error
already holds). w is the regression through the origin of a development pair's error on another pair's of its
kind and session, each session counting once (its couples' mean), as it counts once for a shift:

    w = Σ_s mean_{i ≠ j in s} e_i e_j / Σ_s mean_{j in s} e_j²      (the sessions s of one kind)

clipped to [0, 1]: near 1 where a session's pairs miss alike (the machine's state, shared), near 0 where each
misses in its own way (the model's error on that model), and then the reference changes almost nothing. Pooled
couple by couple instead, a session of n pairs would count n(n − 1) times: one session of eight noisy tiny-model
pairs would outweigh five sessions of three. A kind needs MIN_REFERENCE_SESSIONS sessions of two pairs or more to
have a weight, and keeps it only where it holds on sessions it was not fitted on: each session left out in turn, the
weight fitted on the others corrects each of its pairs by each other pair of it, and the mean |error| of the kind's
pairs must come out lower than without a reference (on the development pairs the Xeon's thread pairs, whose errors
are the model's on each model more than the machine's, fit w = 0.53 and came out worse, 11.9% against 11.0%). σ
stays as calibrated on the errors without a reference: where the reference narrows the error, the interval is wider
than it needs to be, never narrower.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from gapbench.stats import normal_quantile

CALIBRATION_FILE = Path(__file__).with_name("calibration.toml")
SHIFT_P = 0.01
MIN_REFERENCE_SESSIONS = 3


@dataclass(frozen=True)
class Pair:
    name: str
    error: float  # ln((1 + predicted) / (1 + measured)), gaps as fractions
    sigma_rates: float  # the prediction's own log-interval half-width over z
    kind: str = ""  # pair_kind of its two sides ("" where unknown: never shifted)
    session: str = ""  # the run folder both sides were measured in ("" where unknown: a session of its own)


@dataclass(frozen=True)
class Shift:
    kind: str
    shift: float  # the median of the kind's sessions' median log errors, taken off a prediction's log gap
    pairs: int
    sessions: int
    above: int  # of the sessions, how many predicted a larger gap than measured (by their pairs' median)
    p: float  # the two-sided sign test's p-value of that count

    def basis(self) -> str:
        return (f"the median error of {self.sessions} sessions of development pairs of this kind ({self.kind}; "
                f"{self.pairs} pairs), {self.above} of the sessions above zero, sign test p = {self.p:.2g}: "
                f"{self.shift:+.3f} in log gap")


@dataclass(frozen=True)
class Weight:
    kind: str
    weight: float  # the share of a reference's log error taken off a prediction's log gap, in [0, 1]
    couples: int  # ordered couples of pairs (one session, this kind) it was fitted on, each session counting once
    sessions: int  # sessions with two pairs or more of the kind
    checked: int = 0  # the kind's pairs corrected with one session left out in turn
    without: float = 0.0  # their mean |error|, % of the gap ratio, without a reference
    with_: float = 0.0  # and with one

    def basis(self) -> str:
        return (f"weight {self.weight:.2f}, fitted on {self.couples} couples of development pairs of this kind "
                f"measured in one session ({self.sessions} sessions); one session left out in turn, the mean "
                f"|error| of {self.checked} pairs {self.without:.1f}% without a reference, {self.with_:.1f}% with one")


@dataclass(frozen=True)
class Calibration:
    sigma: float  # the model's own error: a log-gap standard deviation added to every prediction's draws
    level: float
    pairs: tuple[Pair, ...]
    basis: str  # one line: what it was calibrated on
    device_classes: tuple[str, ...]  # the device classes the pairs ran on ('cpu')
    shifts: tuple[Shift, ...] = ()
    weights: tuple[Weight, ...] = ()

    def shift_of(self, kind: str) -> Shift | None:
        return next((s for s in self.shifts if kind and s.kind == kind), None)

    def weight_of(self, kind: str) -> Weight | None:
        return next((w for w in self.weights if kind and w.kind == kind), None)


def pair_kind(source: dict, target: dict, one_trace: bool) -> str:
    """What a pair's sides are, as its shift is keyed: each side's device class, product, cores and threads (the
    results files' identities, compare.platform_identity), and whether both sides run one trace."""
    def side(i: dict) -> str:
        cls = "cpu" if i.get("type") == "cpu" else "accelerator"
        return f"{cls} {i.get('product') or i.get('name') or '?'} ({i.get('cores', '?')} cores, " \
               f"{i.get('threads', '?')} threads)"
    return f"{side(source)} → {side(target)}, {'one trace' if one_trace else 'two traces'}"


def sign_test(above: int, n: int) -> float:
    """Two-sided p-value of `above` of n errors on one side of zero where each side is as likely."""
    k = max(above, n - above)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n)


def leanings(pairs: list[Pair] | tuple[Pair, ...]) -> tuple[Shift, ...]:
    """Every kind's sessions: the median of their median errors, how many lean above zero and the sign test's p
    (see the module's text); a kind is shifted where p < SHIFT_P."""
    by: dict[str, dict[str, list[float]]] = {}
    for i, p in enumerate(pairs):
        if p.kind:
            by.setdefault(p.kind, {}).setdefault(p.session or f"pair {i}", []).append(p.error)
    out = []
    for kind, sessions in sorted(by.items()):
        medians = [m for m in (statistics.median(e) for e in sessions.values()) if m != 0]
        if medians:
            above = sum(m > 0 for m in medians)
            out.append(Shift(kind, round(statistics.median(medians), 5), sum(map(len, sessions.values())),
                             len(medians), above, round(sign_test(above, len(medians)), 6)))
    return tuple(out)


def shifts(pairs: list[Pair] | tuple[Pair, ...]) -> tuple[Shift, ...]:
    """The kinds whose sessions' errors fall on one side of zero beyond chance, each with its shift."""
    return tuple(s for s in leanings(pairs) if s.p < SHIFT_P)


def fitted_weights(pairs: list[Pair] | tuple[Pair, ...]) -> tuple[Weight, ...]:
    """Every kind's reference weight as fitted (see the module's text), where MIN_REFERENCE_SESSIONS of its sessions
    hold two pairs or more; pairs without a kind or a session count for none. Not yet checked."""
    out = []
    for kind, sessions in sorted(_sessions(pairs).items()):
        groups = [e for e in sessions.values() if len(e) >= 2]
        if len(groups) < MIN_REFERENCE_SESSIONS:
            continue
        num = sum((sum(e) ** 2 - sum(x * x for x in e)) / (len(e) * (len(e) - 1)) for e in groups)
        den = sum(statistics.fmean(x * x for x in e) for e in groups)
        couples = sum(len(e) * (len(e) - 1) for e in groups)
        weight = min(1.0, max(0.0, num / den)) if den else 0.0
        out.append(Weight(kind, round(weight, 4), couples, len(groups)))
    return tuple(out)


def _sessions(pairs) -> dict[str, dict[str, list[float]]]:
    by: dict[str, dict[str, list[float]]] = {}
    for p in pairs:
        if p.kind and p.session:
            by.setdefault(p.kind, {}).setdefault(p.session, []).append(p.error)
    return by


def left_out_check(pairs: list[Pair] | tuple[Pair, ...], kind: str) -> tuple[int, float, float]:
    """(pairs, mean |error| in % of the gap ratio without a reference, with one) of a kind's pairs in sessions of two
    or more, each session left out in turn: its pairs corrected by each other pair of it with the weight fitted on
    the other sessions (none where they fit none)."""
    before, after = [], []
    for session, errors in _sessions(pairs).get(kind, {}).items():
        if len(errors) < 2:
            continue
        rest = next((w.weight for w in fitted_weights([p for p in pairs if p.session != session]) if w.kind == kind),
                    0.0)
        for i, e in enumerate(errors):
            before.append(abs(math.expm1(e)) * 100)
            after.append(statistics.fmean(abs(math.expm1(e - rest * r)) * 100 for j, r in enumerate(errors) if j != i))
    if not before:
        return 0, 0.0, 0.0
    return len(before), round(statistics.fmean(before), 2), round(statistics.fmean(after), 2)


def checked_weights(pairs: list[Pair] | tuple[Pair, ...]) -> tuple[tuple[Weight, ...], tuple[Weight, ...]]:
    """(kept, dropped): every fitted weight with its left-out check; kept where it narrowed the kind's errors."""
    kept, dropped = [], []
    for w in fitted_weights(pairs):
        n, without, with_ = left_out_check(pairs, w.kind)
        w = dataclasses.replace(w, checked=n, without=without, with_=with_)
        (kept if w.weight > 0 and with_ < without else dropped).append(w)
    return tuple(kept), tuple(dropped)


def reference_weights(pairs: list[Pair] | tuple[Pair, ...]) -> tuple[Weight, ...]:
    """The kinds' reference weights that hold on sessions they were not fitted on (see the module's text)."""
    return checked_weights(pairs)[0]


def unshifted(pairs: list[Pair] | tuple[Pair, ...], found: tuple[Shift, ...]) -> list[Pair]:
    """The pairs' errors less their kind's shift: what is left for σ to cover."""
    by = {s.kind: s.shift for s in found}
    return [Pair(p.name, p.error - by.get(p.kind, 0.0), p.sigma_rates, p.kind, p.session) for p in pairs]


def log_error(predicted_pct: float, measured_pct: float) -> float:
    return math.log((1 + predicted_pct / 100) / (1 + measured_pct / 100))


def sigma_of_interval(lo_pct: float, hi_pct: float, level: float = 0.95) -> float:
    z = normal_quantile(0.5 + level / 2)
    return math.log((1 + hi_pct / 100) / (1 + lo_pct / 100)) / (2 * z)


def covered(pairs: tuple[Pair, ...] | list[Pair], sigma: float, level: float) -> int:
    z = normal_quantile(0.5 + level / 2)
    return sum(abs(p.error) <= z * math.sqrt(p.sigma_rates ** 2 + sigma ** 2) for p in pairs)


def needed(n: int, level: float = 0.95) -> int:
    """Of n calibration pairs, how many an interval must hold: ⌈level · (n + 1)⌉, at most n."""
    return min(n, math.ceil(level * (n + 1) - 1e-9))


def calibrate(pairs: list[Pair], level: float = 0.95) -> float:
    """The smallest σ (to 1e-4) whose intervals hold the measured gaps of ⌈level · (n + 1)⌉ of the n pairs (all of
    them where that is more than n): split conformal prediction's rank, so that a new pair exchangeable with these
    falls inside with probability at least `level`, where holding a bare `level` of the pairs themselves would fall
    short of it by up to 1/(n + 1)."""
    if not pairs:
        raise ValueError("no pairs to calibrate on")
    need = needed(len(pairs), level)
    lo, hi = 0.0, 10.0
    if covered(pairs, lo, level) >= need:
        return 0.0
    while hi - lo > 1e-4:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if covered(pairs, mid, level) >= need else (mid, hi)
    return round(hi, 4)


def load(path: Path = CALIBRATION_FILE) -> Calibration:
    with open(path, "rb") as f:
        data = tomllib.load(f)
    pairs = tuple(Pair(p["name"], float(p["error"]), float(p["sigma_rates"]), str(p.get("kind", "")),
                       str(p.get("session", ""))) for p in data.get("pair", []))
    found = tuple(Shift(str(s["kind"]), float(s["shift"]), int(s["pairs"]), int(s["sessions"]), int(s["above"]),
                        float(s["p"])) for s in data.get("shift", []))
    weights = tuple(Weight(str(w["kind"]), float(w["weight"]), int(w["couples"]), int(w["sessions"]),
                           int(w["checked"]), float(w["without"]), float(w["with"])) for w in data.get("reference", []))
    return Calibration(float(data["sigma"]), float(data["level"]), pairs, str(data["basis"]),
                       tuple(data.get("device_classes", ())), found, weights)


@lru_cache(maxsize=1)
def default() -> Calibration | None:
    """The shipped calibration (None when its file is absent: then predictions cover rate noise only)."""
    try:
        return load()
    except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError):
        return None
