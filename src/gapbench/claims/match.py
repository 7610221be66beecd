"""Names and numbers as tables write them, matched to gapbench's: platforms to spec rows, labels to workloads,
precisions to dtypes (aliases.toml, work.toml), and a cell's value and unit to a physical quantity."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

from gapbench.compare.rates import BYTE_UNITS, FLOP_UNITS

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

# the spellings people use, beyond compare.rates' (which covers what gapbench writes)
EXTRA_FLOP_UNITS = {"pflops": 1e15, "eflops": 1e18, "eflop/s": 1e18, "tflop": 1e12, "pflop": 1e15,
                    "tflops/s": 1e12, "petaflops": 1e15, "teraflops": 1e12, "pops": 1e15, "pop/s": 1e15}
EXTRA_BYTE_UNITS = {"tbps": 1e12, "gbps": 1e9, "tb/sec": 1e12, "gb/sec": 1e9, "pb/s": 1e15}
WORK_UNITS = {  # per second, by what is counted
    "tokens/s": ("tokens", "token", "tok", "toks"),
    "images/s": ("images", "image", "img", "imgs", "pictures"),
    "samples/s": ("samples", "sample", "sequences", "sequence", "seq", "seqs", "examples"),
}
PER_SECOND = re.compile(r"\s*(/|per)\s*(s|sec|second)\b\.?$", re.I)
NUMBER = re.compile(r"^\s*[~≈<>≥≤]?\s*(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)\s*(?P<rest>.*)$")


@dataclass(frozen=True)
class Quantity:
    value: float  # as written
    unit: str  # as written
    kind: str  # "flops", "bandwidth", "tokens/s", "images/s", "samples/s", or "" (not a unit gapbench knows)
    si: float | None  # FLOP/s, bytes/s, or units of work per second


def parse_quantity(cell: str) -> Quantity | None:
    """'12,500 tokens/sec' -> 12500 tokens/s; '1.28 PFLOPS' -> 1.28e15 FLOP/s; None when no number leads."""
    text = re.sub(r"\(.*?\)", "", cell).strip()
    m = NUMBER.match(text)
    if not m:
        return None
    if re.match(r"[,.\d]", m.group("rest")):  # "1,2 TFLOPS": a decimal comma, or digits run together
        return None
    value = float(m.group("num").replace(",", ""))
    unit = m.group("rest").strip().rstrip(".")
    key = unit.lower().replace(" ", "")
    flops = {**FLOP_UNITS, **EXTRA_FLOP_UNITS}
    byts = {**BYTE_UNITS, **EXTRA_BYTE_UNITS}
    if key in flops:
        return Quantity(value, unit, "flops", value * flops[key])
    if key in byts:
        return Quantity(value, unit, "bandwidth", value * byts[key])
    base = PER_SECOND.sub("", unit).strip().lower()
    if base != unit.lower():
        for kind, words in WORK_UNITS.items():
            if base in words:
                return Quantity(value, unit, kind, value)
    return Quantity(value, unit, "", None)


@dataclass(frozen=True)
class PlatformMatch:
    spec: str  # "" when the product is known but has no spec row, or nothing matched
    matched: bool
    also: tuple[str, ...] = ()
    note: str = ""


@dataclass(frozen=True)
class RowMatch:
    workload: str
    kind: str
    variant: dict = field(default_factory=dict)
    work: dict | None = None  # the work.toml entry, for model rows
    dtype: str = ""  # the precision the label names ("" when none)


@lru_cache(maxsize=1)
def aliases() -> dict:
    return tomllib.loads(resources.files("gapbench.claims").joinpath("aliases.toml").read_text(encoding="utf-8"))


@lru_cache(maxsize=1)
def works() -> dict[str, dict]:
    doc = tomllib.loads(resources.files("gapbench.claims").joinpath("work.toml").read_text(encoding="utf-8"))
    return {w["key"]: w for w in doc.get("work", [])}


def match_platform(header: str) -> PlatformMatch:
    best, best_len = None, 0
    for row in aliases().get("platform", []):
        m = re.search(row["pattern"], header, flags=re.I)
        if m and len(m.group(0)) > best_len:
            best, best_len = row, len(m.group(0))
    if best is None:
        return PlatformMatch("", False)
    return PlatformMatch(best["spec"], True, tuple(best.get("also", ())), best.get("note", ""))


def stacks_in(text: str) -> dict[str, str]:
    """{'ROCm': '6.0'} for the software stacks and versions a header names."""
    pattern = aliases().get("stacks", {}).get("pattern")
    return {m.group(1): m.group(2) for m in re.finditer(pattern, text, flags=re.I)} if pattern else {}


DATE = re.compile(r"\b((?:19|20)\d\d(?:-(?:0[1-9]|1[0-2]))?(?:-\d\d)?)\b")


def date_in(text: str) -> str:
    """A date written as YYYY, YYYY-MM or YYYY-MM-DD outside a version or model name, else ''."""
    cleaned = re.sub(aliases().get("stacks", {}).get("pattern", "$^"), "", text, flags=re.I)
    m = DATE.search(cleaned)
    return m.group(1) if m else ""


def dtype_in(text: str) -> str:
    for row in aliases().get("dtype", []):
        if re.search(row["pattern"], text, flags=re.I):
            return row["dtype"]
    return ""


def kernel_in(text: str) -> str:
    for row in aliases().get("kernel", []):
        if re.search(row["pattern"], text, flags=re.I):
            return row["kernel"]
    return ""


def match_row(label: str) -> RowMatch | None:
    for row in aliases().get("row", []):
        if re.search(row["pattern"], label, flags=re.I):
            variant = dict(row.get("variant", {}))
            dtype = dtype_in(label)
            if row["workload"] == "gemm" and dtype:
                variant["dtype"] = dtype
            kernel = kernel_in(label) if row["workload"] == "membw" else ""
            if kernel:
                variant["kernel"] = kernel
            work = works().get(row.get("work", "")) if row.get("work") else None
            return RowMatch(row["workload"], row["kind"], variant, work, dtype)
    return None
