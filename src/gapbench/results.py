"""The result schema: measurements and the results file, validated reading, strict atomic writing.

The schema is the strict models of gapbench.schema (docs/schema.md explains every field; the JSON Schema
src/gapbench/results.schema.json is generated from them). Everything a user feeds in is read through
`read_bytes` (regular files only, size cap) and `parse_json` (strict JSON, nesting cap), so a bad file is
one line naming the file and the field. Every file gapbench writes goes through `write_text_atomic`, after
`check_output` said, before any work, that writing there destroys nothing. Bump SCHEMA_VERSION only with a
reader for the old version.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from gapbench.errors import GapbenchError, ResultFileError
from gapbench.stats import Stats

SCHEMA_VERSION = 1

STATUSES = ("ok", "unsupported", "wrong_result", "too_slow", "oom", "timeout", "crashed", "error")

MAX_REASON = 10_000  # a reason is one line; a longer one is cut when written (gapbench.schema.MAX_REASON)
MAX_FILE_BYTES = 64 * 2**20  # a results file larger than this is refused (a run writes well under 1 MiB)
MAX_NESTING = 200  # arrays and objects nested deeper than this are refused (the JSON reader's own limit)


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
            "variant": _clean(self.variant),
            "value": _num(self.value),
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "status": self.status,
            "reason": _cut(self.reason, MAX_REASON),
            "stats": _clean(self.stats.to_dict()) if self.stats else None,
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
        """A measurement from its JSON form, validated (gapbench.schema); ValueError names the field."""
        from gapbench import schema  # pydantic is imported when a file is read, not when gapbench starts

        try:
            schema.check_measurement(d)
        except schema.SchemaError as e:
            raise ValueError(f"{where}.{e.field}: {e.problem}" if e.field else f"{where}: {e.problem}") from None
        return cls._from_valid(d)

    @classmethod
    def _from_valid(cls, d: dict) -> Measurement:
        stats = d.get("stats")
        value = d.get("value")
        return cls(
            workload=d["workload"],
            preset=d.get("preset"),
            variant=d["variant"],
            value=None if value is None else float(value),
            unit=d["unit"],
            higher_is_better=d.get("higher_is_better", True),
            status=d["status"],
            reason=d.get("reason") or ("" if d["status"] == "ok" else "no reason recorded"),
            stats=None if stats is None else Stats.from_dict({k: v for k, v in stats.items() if v is not None}),
            flops=d.get("flops"),
            bytes=d.get("bytes"),
            peak_memory_bytes=d.get("peak_memory_bytes"),
            energy_j=d.get("energy_j"),
            power_w=d.get("power_w"),
            metrics=d.get("metrics") or {},
            duration_s=d.get("duration_s"),
            started_at=d.get("started_at"),
            runs=[float(v) for v in d["runs"]] if d.get("runs") else None,
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
        """A result set from a parsed results file, validated; ResultFileError names the file and the field."""
        if isinstance(d, dict):
            if "schema_version" not in d:
                raise ResultFileError(path, "schema_version", "missing (not a gapbench results file?)")
            v = d["schema_version"]
            if type(v) is int and v != SCHEMA_VERSION:
                raise ResultFileError(path, "schema_version", f"is {v}; this gapbench reads version {SCHEMA_VERSION}")
        from gapbench import schema

        try:
            schema.check_results_file(d)
        except schema.SchemaError as e:
            raise ResultFileError(path, e.field, e.problem) from None
        return cls(
            host=d["host"],
            device=d["device"],
            measurements=[Measurement._from_valid(m) for m in d["measurements"]],
            suite=d.get("suite"),
            label=d.get("label"),
            run_id=d["run_id"],
            started_at=d.get("started_at") or "",
            finished_at=d.get("finished_at"),
            complete=d.get("complete", False),
            gapbench_version=d.get("gapbench_version") or "unknown",
            schema_version=d["schema_version"],
            coverage=d.get("coverage"),
            frameworks=d.get("frameworks"),
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
    return ResultSet.from_dict(parse_json(read_bytes(p), p), path=p)


# ---- reading what users give ------------------------------------------------------------------------------

def read_bytes(path: str | os.PathLike, limit: int = MAX_FILE_BYTES) -> bytes:
    """The content of a regular file of at most `limit` bytes, else ResultFileError. A FIFO, a device or a
    folder is refused without reading: opening never blocks and nothing endless is read."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise ResultFileError(p, "", "no such file") from None
    except (OSError, ValueError) as e:
        raise ResultFileError(p, "", f"cannot read ({_why(e)})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ResultFileError(p, "", "is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise ResultFileError(p, "", "not a regular file (a FIFO, device or socket is never read)")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise ResultFileError(p, "", f"cannot read ({_why(e)})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise ResultFileError(p, "", f"larger than {_mib(limit)}, the most gapbench reads (a run writes well under "
                                     "1 MiB; split the file)")
    return b"".join(chunks)


_NON_JSON = re.compile(rb"-?(?:NaN|Infinity)")
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def parse_json(data: bytes, path: str) -> Any:
    """Strict JSON: no NaN or Infinity, UTF-8, no lone surrogates, nested at most MAX_NESTING deep."""
    from pydantic_core import from_json  # strict, fast, and bounded in depth (json.loads recurses in C)

    try:
        return from_json(data, allow_inf_nan=False)
    except ValueError as e:
        raise ResultFileError(path, "", f"not valid JSON ({_json_problem(str(e), data)})") from None


def _json_problem(msg: str, data: bytes) -> str:
    m = re.search(r"line (\d+) column (\d+)", msg)
    where = f"line {m.group(1)}, column {m.group(2)}" if m else ""
    if "recursion limit" in msg:
        return f"arrays or objects nested more than {MAX_NESTING} deep, at {where}"
    if not m:
        return msg[:200]
    lines = data.split(b"\n")
    row, col = int(m.group(1)) - 1, int(m.group(2))
    line = lines[row] if 0 <= row < len(lines) else b""
    if msg.startswith("expected value") and any(_NON_JSON.match(line, max(col - k, 0)) for k in (1, 2)):
        return f"NaN and Infinity are not JSON numbers, at {where}"
    if "surrogate" in msg or ("hex escape" in msg and _SURROGATE.search(line, max(col - 14, 0), col + 1)):
        return f"a lone surrogate (\\ud800 to \\udfff without its pair) is no text, at {where}"
    return msg[:200]


def _why(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or e.__class__.__name__


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


# ---- writing -------------------------------------------------------------------------------------------

def save(rs: ResultSet, path: str | os.PathLike) -> None:
    """Write atomically: a temporary file in the same folder, fsync, then rename over the target."""
    write_json_atomic(path, rs.to_dict())


def json_text(data: Any, indent: int | None = 1) -> str:
    """Strict JSON text: a non-finite number becomes null (JSON has none), a lone surrogate '?', anything
    else unknown a string. Linear and fast for large documents (pydantic_core's encoder; json.dumps with an
    indent runs in pure Python)."""
    from pydantic_core import PydanticSerializationError, to_json

    try:
        return to_json(data, indent=indent, inf_nan_mode="null", fallback=str).decode("utf-8")
    except (PydanticSerializationError, ValueError, RecursionError):  # a lone surrogate, a cycle, ...
        return json.dumps(_clean(data), indent=indent, allow_nan=False)


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    write_text_atomic(path, json_text(data) + "\n")


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8; a lone surrogate becomes '?') to a unique temporary file in the target's folder,
    fsync it, then rename it over the target: a reader sees the old file or the new one, never half of one."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; an output is as readable as any other file
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8", "replace"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (), force: bool = False,
                 flag: str = "--output", resume_hint: bool = False) -> None:
    """Before any work: GapbenchError unless writing `path` is possible and destroys nothing. Refused: a
    folder, something that is not a regular file, one of the verb's inputs, a results file (or an
    interrupted run's journal beside it) unless `force`, a place where no file can be created."""
    p = Path(path)
    if p.is_dir():
        raise GapbenchError(f"{flag} {p}: is a folder; name a file")
    if p.exists() and not p.is_file():
        raise GapbenchError(f"{flag} {p}: is not a regular file (use '-' for standard output where a verb takes it)")
    for inp in inputs:
        if p.exists() and os.path.exists(inp) and os.path.samefile(p, inp):
            raise GapbenchError(f"{flag} {p}: is also an input; writing it would destroy what is being read")
    hint = "; to complete an interrupted run use --resume" if resume_hint else ""
    if not force and p.is_file() and is_results_file(p):
        raise GapbenchError(f"{flag} {p}: already holds a gapbench results file; add --force to replace it{hint}")
    journal = Path(f"{p}.journal.jsonl")
    if not force and resume_hint and journal.is_file():
        raise GapbenchError(f"{flag} {p}: the journal of an interrupted run, {journal}, is beside it; continue "
                            "that run with --resume, or add --force to start again")
    folder = p.absolute().parent
    while not folder.exists() and folder != folder.parent:  # the folders the write would create are not made here
        folder = folder.parent
    if not folder.is_dir():
        raise GapbenchError(f"{flag} {p}: cannot write there ({folder} is not a folder)")
    try:
        fd, probe = tempfile.mkstemp(prefix=".gapbench-", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except (OSError, ValueError) as e:
        raise GapbenchError(f"{flag} {p}: cannot write there ({_why(e)})") from None


def is_results_file(path: str | os.PathLike) -> bool:
    """Whether a regular file looks like a gapbench results file (its first 4 KiB name a schema_version)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"schema_version"' in head


def _cut(text: str | None, limit: int) -> str | None:
    return text if text is None or len(text) <= limit else text[: limit - 1] + "…"


def _num(x):
    """JSON has no NaN/inf: store them (and numbers beyond a double) as null."""
    if x is None:
        return None
    try:
        x = float(x)
    except (OverflowError, TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def json_safe(obj: Any) -> Any:
    """The structure with what JSON cannot hold replaced: non-finite numbers by null, lone surrogates by '?',
    tuples by lists, other objects by their text."""
    return _clean(obj)


def _clean(obj):
    """Make a structure JSON-safe: non-finite floats become null, tuples lists, unknown objects strings, lone
    surrogates (which UTF-8 cannot hold) '?'."""
    if obj is None or isinstance(obj, (bool, int)):
        return obj
    if isinstance(obj, str):
        return _utf8(obj)
    if isinstance(obj, float):
        return _num(obj)
    if isinstance(obj, dict):
        return {_utf8(str(k)): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return _utf8(str(obj))


def _utf8(s: str) -> str:
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")
