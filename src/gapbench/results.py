"""The result schema: measurements and the results file, JSON read/write (atomic), validation.

The schema is documented in docs/schema.md; bump SCHEMA_VERSION on any incompatible change.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gapbench.errors import ResultFileError
from gapbench.stats import Stats

SCHEMA_VERSION = 1

STATUSES = ("ok", "unsupported", "wrong_result", "too_slow", "oom", "timeout", "crashed", "error")


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def variant_key(workload: str, preset: str | None, variant: dict) -> str:
    """Stable identity of one measurement inside a run (used by the journal and --resume)."""
    return f"{workload}:{preset or ''}:{json.dumps(variant, sort_keys=True, separators=(',', ':'))}"


@dataclass(frozen=True)
class Measurement:
    """One workload variant measured once (with its repeats) on one device."""

    workload: str
    variant: dict
    unit: str
    status: str = "ok"
    value: float | None = None
    reason: str = ""
    preset: str | None = None
    higher_is_better: bool = True
    stats: Stats | None = None
    flops: float | None = None  # per unit of work the value counts (e.g. per GEMM call), see docs/schema.md
    bytes: float | None = None
    peak_memory_bytes: int | None = None
    energy_j: float | None = None  # energy per iteration, when a counter was readable
    power_w: float | None = None  # mean power while measured
    metrics: dict = field(default_factory=dict)  # workload-specific figures (stage split, MFU, estimates…)
    duration_s: float | None = None  # wall time spent measuring this variant
    started_at: str | None = None
    runs: list | None = None  # the value of each run (independent pass) when several were made, in order
    host_watch: dict | None = None  # what disturbed the measurement: load, steal, clocks, throttling; flagged

    @property
    def flagged(self) -> bool:
        return bool((self.host_watch or {}).get("flagged"))

    @property
    def run_values(self) -> list[float]:
        """The values of the independent runs behind this measurement (one when it is a single run)."""
        if self.runs:
            return [float(v) for v in self.runs]
        return [float(self.value)] if self.value is not None else []

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}")
        if self.status == "ok" and self.value is None:
            raise ValueError("an ok measurement needs a value")
        if self.status != "ok" and not self.reason:
            raise ValueError(f"status {self.status} needs a reason")

    @property
    def key(self) -> str:
        return variant_key(self.workload, self.preset, self.variant)

    @property
    def key_without_preset(self) -> str:
        """Identity across results files: rows match on workload and variant, not on the preset's name."""
        return variant_key(self.workload, None, self.variant)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_dict(self) -> dict:
        return {
            "workload": self.workload,
            "preset": self.preset,
            "variant": self.variant,
            "value": _num(self.value),
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "status": self.status,
            "reason": self.reason,
            "stats": self.stats.to_dict() if self.stats else None,
            "flops": _num(self.flops),
            "bytes": _num(self.bytes),
            "peak_memory_bytes": self.peak_memory_bytes,
            "energy_j": _num(self.energy_j),
            "power_w": _num(self.power_w),
            "metrics": _clean(self.metrics),
            "duration_s": _num(self.duration_s),
            "started_at": self.started_at,
            **({"runs": [_num(v) for v in self.runs]} if self.runs else {}),
            **({"host_watch": _clean(self.host_watch)} if self.host_watch else {}),
        }

    @classmethod
    def from_dict(cls, d: dict, where: str = "measurement") -> Measurement:
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected an object")
        for name in ("workload", "variant", "unit", "status"):
            if name not in d:
                raise ValueError(f"{where}.{name}: missing")
        if not isinstance(d["variant"], dict):
            raise ValueError(f"{where}.variant: expected an object")
        if d["status"] not in STATUSES:
            raise ValueError(f"{where}.status: unknown status {d['status']!r}")
        value = d.get("value")
        if value is not None and not isinstance(value, (int, float)):
            raise ValueError(f"{where}.value: expected a number or null")
        if d["status"] == "ok" and value is None:
            raise ValueError(f"{where}.value: an ok measurement needs a value")
        stats = None
        if d.get("stats") is not None:
            try:
                stats = Stats.from_dict(d["stats"])
            except (KeyError, TypeError, ValueError, IndexError) as e:
                raise ValueError(f"{where}.stats: malformed ({e})") from None
        return cls(
            workload=str(d["workload"]),
            preset=d.get("preset"),
            variant=d["variant"],
            value=None if value is None else float(value),
            unit=str(d["unit"]),
            higher_is_better=bool(d.get("higher_is_better", True)),
            status=d["status"],
            reason=d.get("reason") or ("" if d["status"] == "ok" else "no reason recorded"),
            stats=stats,
            flops=d.get("flops"),
            bytes=d.get("bytes"),
            peak_memory_bytes=d.get("peak_memory_bytes"),
            energy_j=d.get("energy_j"),
            power_w=d.get("power_w"),
            metrics=d.get("metrics") or {},
            duration_s=d.get("duration_s"),
            started_at=d.get("started_at"),
            runs=_runs(d.get("runs"), where),
            host_watch=d["host_watch"] if isinstance(d.get("host_watch"), dict) else None,
        )

    def with_status(self, status: str, reason: str) -> Measurement:
        return replace(self, status=status, reason=reason, value=self.value if status == "ok" else None)


@dataclass
class ResultSet:
    """The content of one results file: who ran what, where, and every measurement."""

    host: dict
    device: dict
    measurements: list[Measurement] = field(default_factory=list)
    suite: str | None = None
    label: str | None = None
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:16])
    started_at: str = field(default_factory=now_iso)
    finished_at: str | None = None
    complete: bool = False
    gapbench_version: str = ""
    schema_version: int = SCHEMA_VERSION
    coverage: dict | None = None  # operator coverage audit, see docs/schema.md
    frameworks: list | None = None  # framework support matrix, see docs/schema.md
    options: dict = field(default_factory=dict)  # the run's options (budget, workloads asked for, …)
    path: str | None = None  # where it was loaded from; not serialised
    merged_from: list = field(default_factory=list)  # run ids of files merged into this one; not serialised

    @property
    def run_ids(self) -> list[str]:
        return list(self.merged_from) or [self.run_id]

    def __post_init__(self):
        if not self.gapbench_version:
            from gapbench import __version__

            self.gapbench_version = __version__

    @property
    def name(self) -> str:
        """How a platform is named in tables: the label, else the device product."""
        return self.label or self.device.get("product") or self.device.get("type") or "unknown"

    def to_dict(self) -> dict:
        return {
            "schema_version": self.schema_version,
            "gapbench_version": self.gapbench_version,
            "run_id": self.run_id,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "complete": self.complete,
            "suite": self.suite,
            "label": self.label,
            "options": _clean(self.options),
            "host": _clean(self.host),
            "device": _clean(self.device),
            "measurements": [m.to_dict() for m in self.measurements],
            "coverage": _clean(self.coverage),
            "frameworks": _clean(self.frameworks),
        }

    @classmethod
    def from_dict(cls, d: Any, path: str = "<data>") -> ResultSet:
        if not isinstance(d, dict):
            raise ResultFileError(path, "", "not a JSON object")
        if "schema_version" not in d:
            raise ResultFileError(path, "schema_version", "missing (not a gapbench results file?)")
        if d["schema_version"] != SCHEMA_VERSION:
            raise ResultFileError(
                path, "schema_version", f"is {d['schema_version']!r}; this gapbench reads version {SCHEMA_VERSION}"
            )
        for name, kind in (("host", dict), ("device", dict), ("measurements", list), ("run_id", str)):
            if name not in d:
                raise ResultFileError(path, name, "missing")
            if not isinstance(d[name], kind):
                raise ResultFileError(path, name, f"expected {'an object' if kind is dict else kind.__name__}")
        ms = []
        for i, md in enumerate(d["measurements"]):
            try:
                ms.append(Measurement.from_dict(md, where=f"measurements[{i}]"))
            except ValueError as e:
                field_, _, problem = str(e).partition(": ")
                raise ResultFileError(path, field_, problem) from None
        cov = d.get("coverage")
        if cov is not None and not isinstance(cov, dict):
            raise ResultFileError(path, "coverage", "expected an object or null")
        fw = d.get("frameworks")
        if fw is not None and not isinstance(fw, list):
            raise ResultFileError(path, "frameworks", "expected a list or null")
        return cls(
            host=d["host"],
            device=d["device"],
            measurements=ms,
            suite=d.get("suite"),
            label=d.get("label"),
            run_id=d["run_id"],
            started_at=d.get("started_at") or "",
            finished_at=d.get("finished_at"),
            complete=bool(d.get("complete", False)),
            gapbench_version=d.get("gapbench_version") or "unknown",
            schema_version=d["schema_version"],
            coverage=cov,
            frameworks=fw,
            options=d.get("options") or {},
            path=path,
        )


def merge_runs(groups: list[list[Measurement]]) -> list[Measurement]:
    """Measurements of the same variants from independent runs (passes of one `--runs N` run, or several
    results files of one platform) as one measurement per variant, in order of first appearance.

    The value is the median of the run values (every run's own `runs`, else its value), `runs` lists them
    all, `stats` is computed over them (n = the number of runs), and `metrics.run_stats` keeps each run's
    own statistics; the other fields come from the run whose value is nearest the median. A run that failed
    is listed in `metrics.failed_runs`; only when every run failed is the merged measurement a failure (the
    last one). A variant seen once, without runs of its own, comes back unchanged.
    """
    order: dict[str, list[Measurement]] = {}
    for group in groups:
        for m in group:
            order.setdefault(m.key_without_preset, []).append(m)
    out = []
    for ms in order.values():
        ok = [m for m in ms if m.ok]
        if len(ms) == 1 and not ms[0].runs:
            out.append(ms[0])
        elif not ok:
            out.append(ms[-1])
        else:
            out.append(_merged(ok, [m for m in ms if not m.ok]))
    return out


def _merged(ok: list[Measurement], failed: list[Measurement]) -> Measurement:
    values = [v for m in ok for v in m.run_values]
    stats = Stats.from_samples(values)
    pick = min(ok, key=lambda m: abs(float(m.value) - stats.median))
    metrics = dict(pick.metrics)
    metrics["run_stats"] = [m.stats.to_dict() if m.stats else None for m in ok]
    if failed:
        metrics["failed_runs"] = [{"status": m.status, "reason": m.reason} for m in failed]
    watched = [m.host_watch for m in ok if m.host_watch]
    watch = None
    if watched:
        reasons = [f"run {i + 1}: {r}" for i, m in enumerate(ok) for r in (m.host_watch or {}).get("reasons", [])]
        watch = {"flagged": bool(reasons), "reasons": reasons, "runs": watched}
    return replace(pick, value=stats.median, stats=stats, runs=values, metrics=metrics, host_watch=watch,
                   duration_s=sum(m.duration_s or 0.0 for m in ok) or None)


def load(path: str | os.PathLike) -> ResultSet:
    """Read and validate a results file; raise ResultFileError naming the file and field."""
    p = str(path)
    try:
        text = Path(p).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultFileError(p, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ResultFileError(p, "", f"cannot read ({e.__class__.__name__}: {e})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ResultFileError(p, "", f"not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    return ResultSet.from_dict(data, path=p)


def save(rs: ResultSet, path: str | os.PathLike) -> None:
    """Write atomically: a temporary file in the same folder, fsync, then rename over the target."""
    write_json_atomic(path, rs.to_dict())


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a results file is as readable as any other file
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1, allow_nan=False)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _runs(x, where: str) -> list[float] | None:
    if x is None:
        return None
    if not isinstance(x, list) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                                          for v in x):
        raise ValueError(f"{where}.runs: expected a list of finite numbers")
    return [float(v) for v in x] or None


def _num(x):
    """JSON has no NaN/inf: store them as null."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _clean(obj):
    """Make a structure JSON-safe: non-finite floats become null, tuples lists, unknown objects strings."""
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):
        return _num(obj)
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return str(obj)
