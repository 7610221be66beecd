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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from gapbench.stats import normal_quantile

CALIBRATION_FILE = Path(__file__).with_name("calibration.toml")


@dataclass(frozen=True)
class Pair:
    name: str
    error: float  # ln((1 + predicted) / (1 + measured)), gaps as fractions
    sigma_rates: float  # the prediction's own log-interval half-width over z


@dataclass(frozen=True)
class Calibration:
    sigma: float  # the model's own error: a log-gap standard deviation added to every prediction's draws
    level: float
    pairs: tuple[Pair, ...]
    basis: str  # one line: what it was calibrated on
    device_classes: tuple[str, ...]  # the device classes the pairs ran on ('cpu')


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
    pairs = tuple(Pair(p["name"], float(p["error"]), float(p["sigma_rates"])) for p in data.get("pair", []))
    return Calibration(float(data["sigma"]), float(data["level"]), pairs, str(data["basis"]),
                       tuple(data.get("device_classes", ())))


@lru_cache(maxsize=1)
def default() -> Calibration | None:
    """The shipped calibration (None when its file is absent: then predictions cover rate noise only)."""
    try:
        return load()
    except (OSError, KeyError, ValueError, tomllib.TOMLDecodeError):
        return None
