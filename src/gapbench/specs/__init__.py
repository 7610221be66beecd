"""Accelerator peaks, prices and published reference results: package data (TOML) and the lookups on it.

`peak_tflops(identity, dtype)` and `peak_bandwidth_tbs(identity)` answer for a device identity as
results files record it (results.ResultSet.device); the CPU's peak is computed from its cores, clock and
ISA (an estimate, see CPU_FLOPS_PER_CYCLE). Unknown is None, never a guess dressed as a fact.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from gapbench.devices.dtypes import DTYPE_NAMES, normalize
from gapbench.errors import GapbenchError

DTYPES = DTYPE_NAMES  # the dtypes a spec row's peaks are given in: the one dtype table's
normalize_dtype = normalize  # 'bfloat16', 'torch.float16', 'float8_e4m3fn', 'FP32' -> 'bf16', 'fp16', 'fp8', 'fp32'


# ---- the CPU: peak = physical cores x clock x FLOPs per cycle per core ------------------------------------
# FLOPs per cycle per core for each ISA feature, assuming two vector FMA pipes of the feature's full width
# (an FMA counts 2 FLOPs). First row whose flag the CPU has wins, per dtype. This is an upper-bound ESTIMATE:
# parts with one 512-bit FMA pipe, or that split 512-bit ops in two (AMD Zen 4), reach half the AVX-512 row;
# the clock used is the maximum the OS reports, which all-core AVX-512 work rarely sustains.
#   AVX-512: 2 pipes x 16 fp32 lanes x 2 = 64 fp32 (32 fp64). AVX2+FMA: 2 x 8 x 2 = 32 fp32 (16 fp64).
#   AVX without FMA: one add + one mul pipe of 8 fp32 = 16 fp32 (8 fp64). SSE: 8 fp32 (4 fp64).
#   AVX512_BF16 / AVX512_FP16: pairs per lane, 2x fp32. AVX512_VNNI: 4 int8 MACs per 32-bit lane = 4x fp32 ops.
#   AMX (Sapphire Rapids and later): 1024 bf16/fp16 FLOP and 2048 int8 OP per cycle per core.
#   Arm NEON (asimd): 2 x 128-bit FMA = 16 fp32 (8 fp64); BF16 (BFMMLA) 2x, I8MM 4x that.
# A dtype without its own row runs at the fp32 rate at best (bf16/fp16/tf32 are converted), so the fp32
# peak stands in for them; fp8 has no CPU peak.
CPU_FLOPS_PER_CYCLE: tuple[tuple[str, str, int], ...] = (
    ("amx_bf16", "bf16", 1024), ("amx_fp16", "fp16", 1024), ("amx_int8", "int8", 2048),
    ("avx512_bf16", "bf16", 128), ("avx512_fp16", "fp16", 128), ("avx512_vnni", "int8", 256),
    ("avx512f", "fp32", 64), ("avx512f", "fp64", 32),
    ("avx_vnni", "int8", 128),
    ("fma", "fp32", 32), ("fma", "fp64", 16),
    ("avx", "fp32", 16), ("avx", "fp64", 8),
    ("sse4_2", "fp32", 8), ("sse4_2", "fp64", 4),
    ("bf16", "bf16", 32), ("i8mm", "int8", 64),
    ("asimd", "fp32", 16), ("asimd", "fp64", 8),
)
CPU_FP32_STANDS_IN = ("bf16", "fp16", "tf32")


@dataclass(frozen=True)
class Spec:
    """One accelerator (per torch device): dense peaks, memory, power, price, and where the figures come from."""

    key: str
    name: str
    vendor: str
    type: str
    tflops: dict = field(default_factory=dict)  # dtype -> dense peak TFLOPS (int8: TOPS), per torch device
    memory_gb: float | None = None
    bandwidth_tbs: float | None = None
    tdp_w: float | None = None
    price_usd_per_hour: float | None = None
    price_date: str | None = None
    price_source: str | None = None
    confidence: str = "high"
    source: str = ""
    date: str = ""
    arch: str | None = None
    match: tuple = ()
    logical_devices: int = 1
    estimate: bool = False  # computed, not published (the CPU)
    notes: str = ""
    clock_mhz: float | None = None  # the CPU's: the clock its peaks are computed at
    clock_source: str = ""  # where that clock comes from: CLOCK_CPUFREQ, CLOCK_MEASURED or CLOCK_NOMINAL

    def peak_tflops(self, dtype: str) -> float | None:
        d = normalize_dtype(dtype)
        return self.tflops.get(d) if d else None

    def ridge(self, dtype: str = "fp32") -> float | None:
        """Ridge point of the roofline, FLOP/byte: where peak compute meets peak bandwidth."""
        p = self.peak_tflops(dtype)
        if not p or not self.bandwidth_tbs:
            return None
        return p / self.bandwidth_tbs

    def to_dict(self) -> dict:
        return {
            "key": self.key, "name": self.name, "vendor": self.vendor, "type": self.type, "arch": self.arch,
            "tflops": dict(self.tflops), "memory_gb": self.memory_gb, "bandwidth_tbs": self.bandwidth_tbs,
            "tdp_w": self.tdp_w, "price_usd_per_hour": self.price_usd_per_hour, "price_date": self.price_date,
            "price_source": self.price_source, "confidence": self.confidence, "source": self.source,
            "date": self.date, "logical_devices": self.logical_devices, "estimate": self.estimate,
            "notes": self.notes, "clock_mhz": self.clock_mhz, "clock_source": self.clock_source,
        }


def _data_text(name: str) -> str:
    return resources.files("gapbench.specs").joinpath(name).read_text(encoding="utf-8")


def _parse_toml(text: str, where: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise GapbenchError(f"{where}: not valid TOML ({e})") from None


def _user_files() -> list[str]:
    raw = os.environ.get("GAPBENCH_SPECS", "")
    return [p for p in raw.split(os.pathsep) if p]


def _read_user(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return _parse_toml(f.read(), path)
    except OSError as e:
        raise GapbenchError(f"GAPBENCH_SPECS: cannot read {path} ({e.__class__.__name__})") from None


def _spec_from_row(row: dict, where: str) -> Spec:
    for name in ("key", "name", "source", "date"):
        if not row.get(name):
            raise GapbenchError(f"{where}: field {name!r} missing")
    tflops = row.get("tflops") or {}
    if not isinstance(tflops, dict) or any(k not in DTYPES or not isinstance(v, (int, float)) for k, v in tflops.items()):
        raise GapbenchError(f"{where}: tflops must map {', '.join(DTYPES)} to numbers")
    n = int(row.get("logical_devices", 1) or 1)

    def per_device(x):
        return None if x is None else float(x) / n

    for pat in row.get("match", []):
        try:
            re.compile(pat)
        except re.error as e:
            raise GapbenchError(f"{where}: bad match pattern {pat!r} ({e})") from None
    return Spec(
        key=str(row["key"]), name=str(row["name"]) + (f" (per device; 1/{n} of the package)" if n > 1 else ""),
        vendor=str(row.get("vendor", "")), type=str(row.get("type", "gpu")),
        tflops={k: float(v) / n for k, v in tflops.items()},
        memory_gb=per_device(row.get("memory_gb")), bandwidth_tbs=per_device(row.get("bandwidth_tbs")),
        tdp_w=per_device(row.get("tdp_w")), price_usd_per_hour=per_device(row.get("price_usd_per_hour")),
        price_date=row.get("price_date"), price_source=row.get("price_source"),
        confidence=str(row.get("confidence", "high")), source=str(row["source"]), date=str(row["date"]),
        arch=row.get("arch"), match=tuple(row.get("match", ())), logical_devices=n, notes=str(row.get("notes", "")),
    )


@lru_cache(maxsize=8)
def _load_specs(user_files: tuple[str, ...]) -> tuple[Spec, ...]:
    out: list[Spec] = []
    seen: set[str] = set()
    sources = [(p, _read_user(p)) for p in user_files]
    sources.append(("gapbench/specs/accelerators.toml", _parse_toml(_data_text("accelerators.toml"), "accelerators.toml")))
    for where, data in sources:
        for i, row in enumerate(data.get("accelerator", [])):
            spec = _spec_from_row(row, f"{where}: accelerator[{i}]")
            if spec.key not in seen:  # user rows come first and win
                seen.add(spec.key)
                out.append(spec)
    return tuple(out)


def load_specs() -> list[Spec]:
    """Every known accelerator: rows of $GAPBENCH_SPECS files first (they win on the same key), then the package's."""
    return list(_load_specs(tuple(_user_files())))


def by_key(key: str) -> Spec | None:
    for s in load_specs():
        if s.key == key:
            return s
    return None


def _match_table(text: str, kind: str | None = None) -> Spec | None:
    """The spec whose match pattern covers the longest span of text (so 'H100 PCIe' beats a bare 'H100')."""
    best, best_len = None, 0
    for s in load_specs():
        if kind == "cpu" and s.type != "cpu":
            continue
        if kind != "cpu" and s.type == "cpu":
            continue
        for pat in s.match:
            m = re.search(pat, text, flags=re.IGNORECASE)
            if m and len(m.group(0)) > best_len:
                best, best_len = s, len(m.group(0))
    return best


def match(device_identity: dict) -> Spec | None:
    """The spec row for a device identity (results.ResultSet.device), the computed CPU spec, or None."""
    ident = device_identity or {}
    kind = ident.get("type")
    if kind == "reference":
        return by_key(str(ident.get("spec", "")))
    if kind == "cpu":
        return cpu_spec(ident)
    product = str(ident.get("product") or ident.get("name") or "")
    if not product:
        return None
    exact = by_key(product.strip().lower())
    return exact or _match_table(product)


def peak_tflops(device_identity: dict, dtype: str) -> float | None:
    """Dense peak TFLOPS (int8: TOPS) of one device for dtype ('fp64','fp32','tf32','bf16','fp16','fp8','int8')."""
    spec = match(device_identity)
    return spec.peak_tflops(dtype) if spec else None


def peak_bandwidth_tbs(device_identity: dict) -> float | None:
    spec = match(device_identity)
    return spec.bandwidth_tbs if spec else None


# ---- the CPU -------------------------------------------------------------------------------------------

def cpu_flops_per_cycle(isa: list[str] | tuple[str, ...]) -> dict[str, int]:
    flags = set(isa)
    out: dict[str, int] = {}
    for flag, dtype, n in CPU_FLOPS_PER_CYCLE:
        if flag in flags and dtype not in out:
            out[dtype] = n
    if "fp32" in out:
        for d in CPU_FP32_STANDS_IN:
            out.setdefault(d, out["fp32"])
    return out


# the recorded host facts a CPU peak is computed from (the results file's host section, or this machine's)
CPU_HOST_FACTS = ("cpu_max_mhz", "isa", "physical_cores", "cpufreq", "cpu_measured_mhz", "cpu_clock_method")
CLOCK_CPUFREQ, CLOCK_MEASURED, CLOCK_NOMINAL = "OS maximum (cpufreq)", "measured", "nominal"
CLOCK_REPORTED = "as the OS reported it"  # a file from before gapbench recorded whether the OS had cpufreq


def cpu_identity(host: dict, device: dict | None = None) -> dict:
    """The identity a CPU's peak is computed from: the device section as recorded (if any), with the host facts
    (clock, ISA, cores) merged in where it lacks them. The one join of host facts and device for every verb:
    `specs` on this machine's facts, `run`, `compare` and `report` on a results file's."""
    ident = {"type": "cpu", "product": host.get("cpu"), "cores": host.get("cpu_affinity") or host.get("cpu_count"),
             "memory_bytes": host.get("memory_bytes")}
    ident.update({k: v for k, v in (device or {}).items() if v is not None})
    for k in CPU_HOST_FACTS:
        if ident.get(k) is None and host.get(k) is not None:
            ident[k] = host[k]
    return ident


def cpu_clock(identity: dict) -> tuple[float | None, str]:
    """(MHz, its source): the OS's maximum where cpufreq reports one; where the OS reports only a nominal clock,
    the clock gapbench measured where the run happened, else that nominal clock."""
    nominal = identity.get("cpufreq") is not True
    measured = identity.get("cpu_measured_mhz") if nominal else None
    if measured:
        return float(measured), CLOCK_MEASURED
    mhz = identity.get("cpu_max_mhz") or identity.get("max_mhz")
    if not mhz:
        return None, ""
    if identity.get("cpufreq") is None:
        return float(mhz), CLOCK_REPORTED
    return float(mhz), CLOCK_NOMINAL if nominal else CLOCK_CPUFREQ


def _clock_note(identity: dict, source: str) -> str:
    if source == CLOCK_MEASURED:
        return (f"; clock measured where it ran ({identity.get('cpu_clock_method') or 'dependent FMA chain'}):"
                f" the OS reported only a nominal {fmt_mhz(identity.get('cpu_max_mhz'))}")
    if source == CLOCK_NOMINAL:
        return ("; clock nominal: no cpufreq maximum where it ran (a VM?) and none measured, so it is the clock "
                "/proc/cpuinfo showed and boost can exceed it")
    if source == CLOCK_REPORTED:
        return ("; clock as the OS reported it (the run did not record whether that was cpufreq's maximum or a "
                "nominal clock, which boost can exceed)")
    return "; clock: the OS's maximum (cpufreq)"


def fmt_mhz(mhz) -> str:
    return f"{float(mhz):.0f} MHz" if isinstance(mhz, (int, float)) else "unknown"


def _cpu_cores(identity: dict) -> tuple[int | None, str]:
    """(cores the run used, what the note says about it): the physical cores, or the threads when fewer."""
    physical = identity.get("physical_cores") or identity.get("cores")
    threads = identity.get("threads")
    if physical and isinstance(threads, int) and 0 < threads < physical:
        return threads, f" (the {threads} thread{'s' * (threads != 1)} the run used)"
    return physical, ""


def cpu_spec(identity: dict) -> Spec:
    """The CPU as a Spec: peaks computed from cores used x clock x FLOPs/cycle (an estimate).

    Everything comes from the identity, as the run recorded it: 'isa', 'cpu_max_mhz' (cpu_identity merges it in
    from the results file's host section when the device section lacks it), 'cpufreq' (whether that clock was
    the OS's maximum or only a nominal one) and 'cpu_measured_mhz' (the clock gapbench measured where only a
    nominal one was reported, used then), 'physical_cores' (else the logical 'cores'), limited to 'threads',
    the threads the run used. This module never probes the machine it runs on. Bandwidth is unknown unless the
    identity carries 'memory_bandwidth_tbs' or a spec row of type "cpu" matches the product name.
    """
    product = str(identity.get("product") or "CPU")
    isa = identity.get("isa") or []
    mhz, source = cpu_clock(identity)
    clock = _clock_note(identity, source) if mhz else ""
    cores, used = _cpu_cores(identity)
    tflops = {}
    if mhz and cores:
        tflops = {d: round(float(cores) * float(mhz) * 1e6 * n / 1e12, 6) for d, n in cpu_flops_per_cycle(isa).items()}
    row = _match_table(product, kind="cpu")
    if row:
        tflops = {**tflops, **row.tflops}
    mem = identity.get("memory_bytes")
    note = (f"estimate: {cores} core{'s' * (cores != 1)}{used} x {float(mhz):.0f} MHz ({source}) x FLOPs/cycle "
            f"for ISA {', '.join(isa) or 'unknown'}" + clock if mhz and cores
            else "clock or core count unknown: no computed peak")
    return Spec(
        name=product, vendor=str(identity.get("vendor") or ""), type="cpu", tflops=tflops,
        memory_gb=round(mem / 1e9, 1) if mem else None,
        bandwidth_tbs=identity.get("memory_bandwidth_tbs") or (row.bandwidth_tbs if row else None),
        confidence="low", arch=identity.get("arch"), estimate=True, notes=note,
        clock_mhz=mhz if mhz and cores else None, clock_source=source if mhz and cores else "", **_cpu_row_facts(row),
    )


def _cpu_row_facts(row: Spec | None) -> dict:
    """What a user's `type = "cpu"` spec row adds to the computed CPU spec: its key, power, price and source."""
    if row is None:
        return {"key": "cpu", "source": "computed by gapbench.specs.cpu_spec", "date": ""}
    return {"key": row.key, "tdp_w": row.tdp_w, "price_usd_per_hour": row.price_usd_per_hour,
            "price_date": row.price_date, "price_source": row.price_source, "source": row.source, "date": row.date}


# ---- published reference results ----------------------------------------------------------------------

@dataclass(frozen=True)
class Reference:
    platform: str
    workload: str
    variant: dict
    value: float
    unit: str
    higher_is_better: bool
    source: str
    date: str
    note: str = ""
    interactivity: float | None = None  # tokens/s per user: a point of a throughput-interactivity curve
    collection: str = ""  # a published table of its own (compare --ref PLATFORM@COLLECTION); "" for the default
    measured: bool = True  # False: the figure is itself a claim (a published table's row), not a measurement
    run_by: str = ""  # "vendor" (the chip vendor's lab), "cloud" (a provider selling the part), "independent", ""

    @property
    def name(self) -> str:
        """What --ref takes for this row's platform: 'h100-sxm', or 'h100-sxm@mi300x-vs-h100'."""
        return f"{self.platform}@{self.collection}" if self.collection else self.platform


@dataclass(frozen=True)
class PublishedGap:
    platform: str
    baseline: str
    workload: str
    variant: dict
    label: str
    gap_pct: float
    source: str
    date: str
    value: float | None = None  # the two absolute figures behind the gap, as published (with their unit)
    baseline_value: float | None = None
    unit: str = ""


@lru_cache(maxsize=1)
def _references_data() -> dict:
    return _parse_toml(_data_text("references.toml"), "references.toml")


def load_references() -> list[Reference]:
    out = []
    for i, r in enumerate(_references_data().get("reference", [])):
        try:
            out.append(Reference(platform=r["platform"], workload=r["workload"], variant=dict(r.get("variant", {})),
                                 value=float(r["value"]), unit=r["unit"],
                                 higher_is_better=bool(r.get("higher_is_better", True)), source=r["source"],
                                 date=str(r["date"]), note=r.get("note", ""), collection=str(r.get("collection", "")),
                                 measured=bool(r.get("measured", True)), run_by=str(r.get("run_by", "")),
                                 interactivity=float(r["interactivity"]) if "interactivity" in r else None))
        except (KeyError, TypeError, ValueError) as e:
            raise GapbenchError(f"references.toml: reference[{i}]: bad or missing field ({e})") from None
    return out


def load_published_gaps() -> list[PublishedGap]:
    out = []
    for i, r in enumerate(_references_data().get("published_gap", [])):
        try:
            out.append(PublishedGap(platform=r["platform"], baseline=r["baseline"], workload=r["workload"],
                                    variant=dict(r.get("variant", {})), label=r.get("label", r["workload"]),
                                    gap_pct=float(r["gap_pct"]), source=r["source"], date=str(r["date"]),
                                    value=float(r["value"]) if "value" in r else None,
                                    baseline_value=float(r["baseline_value"]) if "baseline_value" in r else None,
                                    unit=str(r.get("unit", ""))))
        except (KeyError, TypeError, ValueError) as e:
            raise GapbenchError(f"references.toml: published_gap[{i}]: bad or missing field ({e})") from None
    return out


def reference_platforms() -> list[str]:
    """The names usable with `compare --ref`, in file order: a platform's default rows, and PLATFORM@COLLECTION
    for the rows of one published table."""
    return list(dict.fromkeys(r.name for r in load_references()))
