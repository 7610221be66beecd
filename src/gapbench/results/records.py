"""The records of a results file: one Measurement per workload variant, and the ResultSet of one run.

The models are the records: built in code like any model, read from a file with `Record.read` (strict), written
with `model_dump(mode="json")`. Adding a field is one line here; docs/schema.md explains every field, and the JSON
Schema shipped as results.schema.json is generated from these models (gapbench.results.schema). The host and
device identities and the coverage and framework sections stay the JSON documents their producers wrote,
checked against the models below.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    WrapValidator,
    field_validator,
    model_serializer,
    model_validator,
)

from gapbench.record import (
    MAX_NAME,
    MAX_REASON,
    MAX_TEXT,
    Amount,
    Count,
    Json,
    Name,
    Obj,
    OptName,
    Rate,
    Reason,
    Record,
    SchemaError,
    Strings,
    Text,
    Time,
    is_read,
    json_safe,
)
from gapbench.stats import Stats

SCHEMA_VERSION = 1
STATUSES = ("ok", "unsupported", "wrong_result", "too_slow", "oom", "timeout", "crashed", "error")
MAX_MEASUREMENTS = 100_000  # per file; a real run has hundreds at most
MAX_OPS = 100_000  # coverage rows per file: every OpInfo entry times every dtype is about 20,000
MAX_FRAMEWORKS = 1000

__all__ = ["SCHEMA_VERSION", "STATUSES", "MAX_NAME", "MAX_TEXT", "MAX_REASON", "Measurement", "ResultSet", "Host",
           "DeviceIdentity", "Coverage", "CoverageRow", "FrameworkRow", "variant_key", "now_iso", "SchemaError"]


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def variant_key(workload: str, preset: str | None, variant: dict) -> str:
    """Stable identity of one measurement inside a run (used by the journal and --resume)."""
    return f"{workload}:{preset or ''}:{json.dumps(variant, sort_keys=True, separators=(',', ':'))}"


# ---- documents kept as JSON, checked against a model ----------------------------------------------------

def _keep_document(value: Any, handler, info: ValidationInfo) -> Any:
    """Check a JSON document against the field's model, and keep the document itself."""
    doc = json_safe(value)
    handler(doc)
    return doc


def _as_is(value: Any) -> Any:
    return value


def document(model: Any) -> Any:
    """The type of a field held as the JSON document its producer wrote and checked against `model` (whose
    schema the JSON Schema shows)."""
    return Annotated[model, WrapValidator(_keep_document), PlainSerializer(_as_is)]


class Host(Record):
    hostname: Text = None
    os: Text = None
    machine: Text = None
    cpu: Text = None
    cpu_count: Count = None
    cpu_affinity: Count = None
    physical_cores: Count = None
    cpu_max_mhz: Rate = None
    cpufreq: bool | None = None
    isa: Strings = None
    memory_bytes: Count = None
    python: Text = None


# gapbench's own variables worth recording (they change what a run measures); every other GAPBENCH_ variable is
# internal, set by gapbench for its own child processes (their tokens, pipes, job files, parent pid), and is
# never recorded, and dropped from older files when they are read
GAPBENCH_SETTINGS = ("GAPBENCH_SPECS", "GAPBENCH_TUNING_DIR", "GAPBENCH_TEST_ACCELERATOR", "GAPBENCH_COVERAGE_EXTRA_OPS")


def is_internal_env(name: str) -> bool:
    return name.startswith("GAPBENCH_") and not name.startswith(GAPBENCH_SETTINGS)


def recorded_env(env: dict) -> dict:
    """The environment variables a results file keeps: every one but gapbench's internal ones."""
    return {k: v for k, v in env.items() if not is_internal_env(str(k))}


class DeviceIdentity(Record):
    type: OptName = None
    spec: Text = None
    index: Count = None
    count: Count = None
    vendor: Text = None
    backend: Text = None
    product: Text = None
    name: Text = None
    arch: Text = None
    memory_bytes: Count = None
    driver: Text = None
    torch: Text = None
    runtime: Obj = None
    libraries: Obj = None
    env: Obj = None
    isa: Strings = None
    cores: Count = None
    physical_cores: Count = None
    threads: Count = None
    llc_bytes: Count = None
    cpu_max_mhz: Rate = None
    max_mhz: Rate = None
    cpufreq: bool | None = None
    memory_bandwidth_tbs: Rate = None
    distributed: Obj = None


class CoverageCounts(Record):
    total: Count = None
    native: Count = None
    cpu_fallback: Count = None
    unsupported: Count = None
    wrong_result: Count = None
    error: Count = None
    skipped: Count = None
    native_pct: Annotated[float, Field(ge=0, le=100)] | None = None


class CoverageRow(Record):
    op: Name
    variant: OptName = None
    family: OptName = None
    dtype: Name
    status: Name
    reason: Reason | None = None
    max_error: float | None = None
    device_time_s: Amount = None
    cpu_time_s: Amount = None
    samples: Count = None
    wall_s: Amount = None


class Coverage(Record):
    torch: Text = None
    device: DeviceIdentity | None = None
    dtypes: Strings = None
    grad: bool | None = None
    summary: CoverageCounts | None = None
    families: Annotated[dict[str, CoverageCounts], Field(max_length=10_000)] | None = None
    ops: Annotated[list[CoverageRow], Field(max_length=MAX_OPS)] | None = None
    cpu_threads: Count = None
    headline: Reason | None = None
    not_audited: Count = None


class FrameworkRow(Record):
    framework: Name
    status: Name
    version: Text = None
    device: Text = None
    reason: Reason | None = None


# ---- what a file must say as it is ------------------------------------------------------------------------

_NOT_BLANK = re.compile(r"\S")  # the JSON Schema's pattern, read the same way (Python's re, as jsonschema does)


def _not_blank(s: str) -> str:
    if not _NOT_BLANK.search(s):
        raise ValueError(f"blank: a name needs a character that is not a space (got {s!r})")
    return s


def _given(v: Any, info: ValidationInfo) -> Any:
    """A file leaves out what it does not know; a null where the schema says string or object is refused (built in
    code, None is the value not known, and the file is written without the field)."""
    if v is None and is_read(info):
        raise ValueError("null is no value here: a file gives one, or leaves the field out")
    return v


def _without_null(schema: dict) -> None:
    """The JSON Schema of a field that a file never gives as null: its type without the null."""
    if schema.get("default", "") is None:
        del schema["default"]
    kept = [b for b in schema.pop("anyOf", []) if b != {"type": "null"}]
    if len(kept) == 1:
        schema.update(kept[0])
    elif kept:
        schema["anyOf"] = kept


# a workload or unit: a name with something in it besides spaces
Named = Annotated[Name, AfterValidator(_not_blank), Field(json_schema_extra={"pattern": _NOT_BLANK.pattern})]
NOT_NULL = Field(json_schema_extra=_without_null)
# fields a file may leave out but never gives as null
GivenText = Annotated[Text, BeforeValidator(_given), NOT_NULL]
GivenTime = Annotated[Time, BeforeValidator(_given), NOT_NULL]
GivenObj = Annotated[Obj, BeforeValidator(_given), NOT_NULL]


# ---- one measurement -------------------------------------------------------------------------------------

def _finite(v: Any) -> Any:
    """A non-finite float built in code is no number: None (an ok row without a value is then refused)."""
    return None if isinstance(v, float) and not math.isfinite(v) else v


Finite = BeforeValidator(_finite)


def _json_object(v: Any) -> Any:
    return {} if v is None else json_safe(v)


# a training step whose gradients hold more subnormal floats than this share measures the processor's subnormal
# arithmetic (slow in fp32 on most CPUs, flushed by bf16 matrix units), not the stack: its gaps get no verdict
SUBNORMAL_LIMIT = 0.01


class Measurement(Record):
    """One workload variant measured once (with its repeats) on one device."""

    # the check of `value` below, as JSON Schema states it
    model_config = ConfigDict(json_schema_extra={
        "if": {"properties": {"status": {"const": "ok"}}, "required": ["status"]},
        "then": {"properties": {"value": {"type": "number", "exclusiveMinimum": 0}}, "required": ["value"]}})

    workload: Named
    preset: OptName = None
    variant: Annotated[dict[str, Json], BeforeValidator(json_safe)]
    status: Literal[STATUSES]  # before value: the check of value reads it
    # a rate or a time: above 0 when given, whatever the status (checked below, where the status is known)
    value: Annotated[float | None, Finite, WithJsonSchema({"anyOf": [{"type": "number", "exclusiveMinimum": 0},
                                                                     {"type": "null"}]})] = Field(
        default=None, validate_default=True)
    unit: Named
    higher_is_better: bool = True
    reason: Annotated[Reason | None, BeforeValidator(_given), NOT_NULL] = ""  # one line; "" for ok
    stats: Stats | None = None
    flops: Annotated[Amount, Finite] = None  # per unit of work the value counts (e.g. per GEMM call), see docs/schema.md
    bytes: Annotated[Amount, Finite] = None
    peak_memory_bytes: Count = None
    energy_j: Annotated[Amount, Finite] = None  # energy per iteration, when a counter was readable
    power_w: Annotated[Amount, Finite] = None  # mean power while measured
    metrics: Annotated[dict[str, Json] | None, BeforeValidator(_json_object), BeforeValidator(_given), NOT_NULL] = Field(
        default_factory=dict)  # workload-specific figures (stage split, MFU, estimates…): any JSON, signed too
    duration_s: Annotated[Amount, Finite] = None  # wall time spent measuring this variant
    started_at: Time = None
    runs: Annotated[list[Annotated[float, Field(gt=0)]], Field(max_length=10_000)] | None = None  # per-run values
    host_watch: Obj = None  # what else the host did while this row was measured (gapbench.hostwatch)

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any, info: ValidationInfo) -> Any:
        """Built in code a measurement is ok unless it says otherwise (a file must say), and a failure must say why;
        a failure read without a reason says that none was recorded; no reason is '' (in a file a string, never
        null: the field refuses it)."""
        if not isinstance(data, dict):
            return data
        read = is_read(info)
        if "status" not in data and not read:
            data = {**data, "status": "ok"}
        reason = data.get("reason", "")
        if reason is None and read:
            return data
        if data.get("status", "ok") != "ok" and not reason:
            if not read:
                raise ValueError(f"status {data.get('status')} needs a reason")
            return {**data, "reason": "no reason recorded"}
        if reason is None:
            return {**data, "reason": ""}
        return data

    @field_validator("value")
    @classmethod
    def _ok_has_a_value(cls, v: float | None, info: ValidationInfo) -> float | None:
        if info.data.get("status") == "ok" and (v is None or not v > 0):
            raise ValueError("an ok measurement needs a value above 0" + ("" if v is None else f", not {v:g}"))
        if v is not None and not v > 0:
            raise ValueError(f"a value is a rate or a time, above 0, not {v:g} (a row that is not ok may have none: "
                             "null)")
        return v

    @model_serializer(mode="wrap")
    def _without_empty_optionals(self, handler) -> dict:
        d = handler(self)
        for k in ("runs", "host_watch"):  # fields of later versions are written only where they hold something
            if not d.get(k):
                d.pop(k, None)
        return d

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def flagged(self) -> bool:
        return bool((self.host_watch or {}).get("flagged"))

    @property
    def subnormal(self) -> str:
        """'' or why this training step's time is not the stack's: more than SUBNORMAL_LIMIT of its gradients
        were subnormal floats (metrics.subnormal_grads)."""
        share = (self.metrics or {}).get("subnormal_grads")
        if not self.ok or isinstance(share, bool) or not isinstance(share, int | float) or share <= SUBNORMAL_LIMIT:
            return ""
        return f"{share:.1%} of the step's gradients were subnormal floats (it timed their arithmetic, not the stack)"

    @property
    def run_values(self) -> list[float]:
        """The values of the independent runs behind this measurement (one when it is a single run)."""
        if self.runs:
            return [float(v) for v in self.runs]
        return [float(self.value)] if self.value is not None else []

    @property
    def key(self) -> str:
        return variant_key(self.workload, self.preset, self.variant)

    @property
    def key_without_preset(self) -> str:
        """Identity across results files: rows match on workload and variant, not on the preset's name."""
        return variant_key(self.workload, None, self.variant)

    def with_status(self, status: str, reason: str) -> Measurement:
        return self.replace(status=status, reason=reason, value=self.value if status == "ok" else None)


# ---- one run ------------------------------------------------------------------------------------------

def _default_version() -> str:
    from gapbench import __version__

    return __version__


# the order of a written file: who, when, what, then the measurements
FILE_ORDER = ("schema_version", "gapbench_version", "run_id", "started_at", "finished_at", "complete", "suite",
              "label", "options", "host", "device", "measurements", "coverage", "frameworks")
UNKNOWN_LEFT_OUT = ("gapbench_version", "started_at", "finished_at")  # strings in a file: left out when not known


class ResultSet(Record):
    """The content of one results file: who ran what, where, and every measurement (schema version 1)."""

    model_config = ConfigDict(frozen=False, validate_assignment=True)

    # declared in the order errors are found in: what makes a file a results file first (a file must hold the
    # fields without a default; built in code, a result set gets them, see _defaults)
    schema_version: Annotated[int, Field(ge=SCHEMA_VERSION, le=SCHEMA_VERSION)]
    host: document(Host)
    device: document(DeviceIdentity)
    measurements: Annotated[list[Measurement], Field(max_length=MAX_MEASUREMENTS, fail_fast=True)]
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    gapbench_version: GivenText = None
    started_at: GivenTime = None
    finished_at: GivenTime = None
    complete: bool = False
    suite: OptName = None
    label: OptName = None
    options: GivenObj = Field(default_factory=dict)  # the run's options (budget, workloads asked for, …)
    coverage: document(Coverage | None) = None  # operator coverage audit, see docs/schema.md
    frameworks: document(Annotated[list[FrameworkRow], Field(max_length=MAX_FRAMEWORKS)] | None) = None

    _path: str | None = PrivateAttr(default=None)  # where it was loaded from
    _merged_from: list[str] = PrivateAttr(default_factory=list)  # run ids of the files merged into this one

    @model_validator(mode="before")
    @classmethod
    def _defaults(cls, data: Any, info: ValidationInfo) -> Any:
        """Built in code, a result set is this version's, new (a run id, a start time) and may start empty."""
        if not isinstance(data, dict) or is_read(info):
            return data
        return {"schema_version": SCHEMA_VERSION, "measurements": [], "run_id": uuid.uuid4().hex[:16],
                "gapbench_version": _default_version(), "started_at": now_iso(), **data}

    @field_validator("device", mode="after")
    @classmethod
    def _no_internal_env(cls, device: Any) -> Any:
        """gapbench's internal variables (GAPBENCH_CHILD_TOKEN, …) out of the device's env, also in older files."""
        if isinstance(device, dict) and isinstance(device.get("env"), dict):
            env = recorded_env(device["env"])
            if len(env) != len(device["env"]):
                device = {**device, "env": env}
        return device

    @field_validator("options", mode="after")
    @classmethod
    def _options_dict(cls, v: dict | None) -> dict:
        return v or {}

    @model_serializer(mode="wrap")
    def _in_file_order(self, handler) -> dict:
        d = handler(self)
        for k in UNKNOWN_LEFT_OUT:
            if d.get(k) is None:
                d.pop(k, None)
        return {k: d[k] for k in FILE_ORDER if k in d} | {k: v for k, v in d.items() if k not in FILE_ORDER}

    @classmethod
    def read(cls, doc: Any) -> ResultSet:
        """A parsed results file, validated; SchemaError names the first bad field."""
        if not isinstance(doc, dict):
            raise SchemaError("", "not a JSON object")
        if "schema_version" not in doc:
            raise SchemaError("schema_version", "missing (not a gapbench results file?)")
        v = doc["schema_version"]
        if type(v) is int and v != SCHEMA_VERSION:
            raise SchemaError("schema_version", f"is {v}; this gapbench reads version {SCHEMA_VERSION}")
        for key, cap in (("measurements", MAX_MEASUREMENTS), ("frameworks", MAX_FRAMEWORKS)):
            if isinstance(doc.get(key), list) and len(doc[key]) > cap:  # refused before any item is looked at
                raise SchemaError(key, f"{len(doc[key])} entries; gapbench reads at most {cap} per file")
        cov = doc.get("coverage")
        if isinstance(cov, dict) and isinstance(cov.get("ops"), list) and len(cov["ops"]) > MAX_OPS:
            raise SchemaError("coverage.ops", f"{len(cov['ops'])} rows; gapbench reads at most {MAX_OPS} per file")
        return super().read(doc)

    @property
    def path(self) -> str | None:
        return self._path

    @path.setter
    def path(self, value: str | None) -> None:
        self._path = value

    @property
    def merged_from(self) -> list[str]:
        return self._merged_from

    @merged_from.setter
    def merged_from(self, value: list[str]) -> None:
        self._merged_from = list(value)

    @property
    def run_ids(self) -> list[str]:
        return list(self.merged_from) or [self.run_id]

    @property
    def name(self) -> str:
        """How a platform is named in tables: the label, else the device product."""
        return self.label or self.device.get("product") or self.device.get("type") or "unknown"
