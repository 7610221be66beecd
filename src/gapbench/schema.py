"""The results file as strict models: what a file must hold for gapbench to read it.

Known fields are typed strictly (no coercion: "7" is not a number, true is not 1), numbers are finite and
in range, strings are capped at lengths a table can show; objects stay open to fields added later (an
unknown field may hold any JSON value with finite numbers). `check_results_file(doc)` and
`check_measurement(doc)` raise SchemaError naming the first bad field ("measurements[3].stats.n").
`json_schema()` is the same contract as a JSON Schema document, shipped as results.schema.json.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from typing_extensions import TypeAliasType

SCHEMA_VERSION = 1
STATUSES = ("ok", "unsupported", "wrong_result", "too_slow", "oom", "timeout", "crashed", "error")

MAX_MEASUREMENTS = 100_000  # per file; a real run has hundreds at most
MAX_OPS = 100_000  # coverage rows per file: every OpInfo entry times every dtype is about 20,000
MAX_NAME = 200  # workload, unit, preset, suite, label, status
MAX_TEXT = 500  # identity strings: product, driver, versions, host names
MAX_REASON = 10_000  # a reason is one line; a longer one is cut when written
INT64_MAX = 2**63 - 1  # what SQLite stores in an INTEGER


DOUBLE_MAX = int(sys.float_info.max)  # an integer beyond it has no float: every number must fit a double

# any JSON value, as fields open to later additions hold them: finite numbers that fit a double
Json = TypeAliasType("Json", None | bool | Annotated[int, Field(ge=-DOUBLE_MAX, le=DOUBLE_MAX)] | float | str
                     | list["Json"] | dict[str, "Json"])


class SchemaError(ValueError):
    """A document that breaks the schema: `field` is where ("measurements[3].stats.n"), `problem` what."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"{field}: {problem}" if field else problem)


class _Open(BaseModel):
    """Known fields strict; unknown fields allowed, as any JSON value whose numbers are finite."""

    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    __pydantic_extra__: dict[str, Json] = Field(init=False)


Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME)]
OptName = Annotated[str, StringConstraints(max_length=MAX_NAME)] | None
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)] | None
Reason = Annotated[str, StringConstraints(max_length=MAX_REASON)] | None
Time = Annotated[str, StringConstraints(max_length=64)] | None
Count = Annotated[int, Field(ge=0, le=INT64_MAX)] | None
Amount = Annotated[float, Field(ge=0)] | None
Rate = Annotated[float, Field(gt=0)] | None
Obj = dict[str, Json] | None
Strings = Annotated[list[Annotated[str, StringConstraints(max_length=MAX_TEXT)]], Field(max_length=10_000)] | None


class Host(_Open):
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


class Device(_Open):
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


class StatsModel(_Open):
    median: float
    iqr: Annotated[float, Field(ge=0)]
    min: float
    max: float
    n: Annotated[int, Field(ge=1, le=1_000_000_000)]
    ci95: Annotated[list[float], Field(min_length=2, max_length=2)]
    mean: float | None = None
    stdev: Annotated[float, Field(ge=0)] | None = None
    noisy: bool | None = None
    ci_level: Annotated[float, Field(gt=0, le=1)] | None = None  # the interval's coverage (below 0.95 with few repeats)

    @field_validator("ci95")
    @classmethod
    def _interval(cls, v: list[float]) -> list[float]:
        if v[0] > v[1]:
            raise ValueError(f"the interval is reversed: low {v[0]:g} is above high {v[1]:g}")
        return v

    @model_validator(mode="after")
    def _range(self) -> StatsModel:
        if self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self


class MeasurementModel(_Open):
    # the value check below, as JSON Schema states it
    model_config = ConfigDict(json_schema_extra={
        "if": {"properties": {"status": {"const": "ok"}}, "required": ["status"]},
        "then": {"properties": {"value": {"type": "number", "exclusiveMinimum": 0}}, "required": ["value"]}})

    workload: Name
    preset: OptName = None
    variant: dict[str, Json]
    status: Literal[STATUSES]  # before value: the check of value reads it
    value: float | None = Field(default=None, validate_default=True)
    unit: Name
    higher_is_better: bool = True
    reason: Reason = None
    stats: StatsModel | None = None
    flops: Amount = None
    bytes: Amount = None
    peak_memory_bytes: Count = None
    energy_j: Amount = None
    power_w: Amount = None
    metrics: Obj = None
    duration_s: Amount = None
    started_at: Time = None
    runs: Annotated[list[Annotated[float, Field(gt=0)]], Field(max_length=10_000)] | None = None  # per-run values
    host_watch: Obj = None  # what else the host did while this row was measured (devices.watch)

    @field_validator("value")
    @classmethod
    def _ok_has_a_value(cls, v: float | None, info: ValidationInfo) -> float | None:
        if info.data.get("status") == "ok" and (v is None or not v > 0):
            raise ValueError("an ok measurement needs a value above 0" + ("" if v is None else f", not {v:g}"))
        return v


class CoverageCounts(_Open):
    total: Count = None
    native: Count = None
    cpu_fallback: Count = None
    unsupported: Count = None
    wrong_result: Count = None
    error: Count = None
    skipped: Count = None
    native_pct: Annotated[float, Field(ge=0, le=100)] | None = None


class CoverageRow(_Open):
    op: Name
    variant: OptName = None
    family: OptName = None
    dtype: Name
    status: Name
    reason: Reason = None
    max_error: float | None = None
    device_time_s: Amount = None
    cpu_time_s: Amount = None
    samples: Count = None
    wall_s: Amount = None


class Coverage(_Open):
    torch: Text = None
    device: Device | None = None
    dtypes: Strings = None
    grad: bool | None = None
    summary: CoverageCounts | None = None
    families: Annotated[dict[str, CoverageCounts], Field(max_length=10_000)] | None = None
    ops: Annotated[list[CoverageRow], Field(max_length=MAX_OPS)] | None = None
    cpu_threads: Count = None
    headline: Reason = None
    not_audited: Count = None


class FrameworkRow(_Open):
    framework: Name
    status: Name
    version: Text = None
    device: Text = None
    reason: Reason = None


class ResultsFile(_Open):
    """A results file of schema version 1 (docs/schema.md)."""

    # the order errors are found in: what makes a file a results file first
    schema_version: Annotated[int, Field(ge=SCHEMA_VERSION, le=SCHEMA_VERSION)]
    host: Host
    device: Device
    measurements: Annotated[list[MeasurementModel], Field(max_length=MAX_MEASUREMENTS, fail_fast=True)]
    run_id: Annotated[str, StringConstraints(min_length=1, max_length=100)]
    gapbench_version: Text = None
    started_at: Time = None
    finished_at: Time = None
    complete: bool = False
    suite: OptName = None
    label: OptName = None
    options: Obj = None
    coverage: Coverage | None = None
    frameworks: Annotated[list[FrameworkRow], Field(max_length=1000)] | None = None


class RunPlan(_Open):
    """The plan a run journal's header (or a run's results file, under `options`) holds for --resume."""

    device: Name
    entries: Annotated[list[Annotated[list[OptName], Field(min_length=2, max_length=2)]], Field(max_length=10_000)]
    suite: OptName = None
    workload_files: Annotated[list[Annotated[str, StringConstraints(max_length=4096)]], Field(max_length=1000)] = []
    options: dict[str, Json] = {}
    budget_s: Rate = None
    variant_budget_s: Rate = None
    timeout_s: Rate = None
    min_time_s: Rate = None
    repeats: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    threads: Annotated[int, Field(ge=1, le=100_000)] | None = None
    memory_limit_bytes: Annotated[int, Field(ge=1, le=INT64_MAX)] | None = None
    label: OptName = None
    nproc: Annotated[int, Field(ge=1, le=100_000)] | None = None
    backend: OptName = None
    runs: Annotated[int, Field(ge=1, le=1000)] | None = None


def check_results_file(doc: Any) -> None:
    """Raise SchemaError at the first field of `doc` (a parsed results file) that breaks the schema."""
    if not isinstance(doc, dict):
        raise SchemaError("", "not a JSON object")
    for key, cap in (("measurements", MAX_MEASUREMENTS), ("frameworks", 1000)):
        if isinstance(doc.get(key), list) and len(doc[key]) > cap:  # refused before any item is looked at
            raise SchemaError(key, f"{len(doc[key])} entries; gapbench reads at most {cap} per file")
    cov = doc.get("coverage")
    if isinstance(cov, dict) and isinstance(cov.get("ops"), list) and len(cov["ops"]) > MAX_OPS:
        raise SchemaError("coverage.ops", f"{len(cov['ops'])} rows; gapbench reads at most {MAX_OPS} per file")
    _check(ResultsFile, doc)


def check_measurement(doc: Any) -> None:
    _check(MeasurementModel, doc)


def check_run_plan(doc: Any) -> None:
    _check(RunPlan, doc)


def is_coverage_row(doc: Any) -> bool:
    """Whether one row of an operator coverage audit (a journal entry) is valid."""
    try:
        _check(CoverageRow, doc)
    except SchemaError:
        return False
    return True


def json_schema() -> dict:
    """The results file's JSON Schema (draft 2020-12), as shipped in results.schema.json."""
    doc = ResultsFile.model_json_schema(mode="validation")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "urn:gapbench:results:1",
            "title": "gapbench results file, schema version 1",
            "description": "Generated from gapbench.schema; docs/schema.md explains every field. Numbers are "
                           "finite; an ok measurement has a value above 0; a stats interval has low <= high and "
                           "min <= max (checks JSON Schema cannot state are made by gapbench as well).",
            **{k: v for k, v in doc.items() if k != "title"}}


_TYPE_ERRORS = {"bool_type", "int_type", "float_type", "string_type", "list_type", "dict_type", "none_required",
                "model_type", "model_attributes_type", "literal_error", "tuple_type"}


def _check(model: type[BaseModel], doc: Any) -> None:
    try:
        model.model_validate(doc)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        paths = [field_path(x["loc"], doc, x["type"] == "missing") for x in errors]
        # a value that may be one of several types fails once per type: the most telling failure is one that is
        # not a wrong type, at the first bad field or inside it
        best = next((i for i, x in enumerate(errors) if x["type"] not in _TYPE_ERRORS and _within(paths[i], paths[0])),
                    0)
        raise SchemaError(paths[best], _problem(errors[best])) from None
    except RecursionError:
        raise SchemaError("", "nested too deeply") from None


def _within(path: str, outer: str) -> bool:
    return path == outer or path.startswith((outer + ".", outer + "[")) or not outer


def field_path(loc: tuple, doc: Any, missing: bool = False) -> str:
    """'measurements[3].stats.n' from a validation error's location, walked through the document itself
    (the location also names the types tried, which are no fields)."""
    out, cur = "", doc
    for i, part in enumerate(loc):
        if isinstance(cur, dict) and isinstance(part, str) and part in cur:
            out += ("." if out else "") + _key(part)
            cur = cur[part]
        elif isinstance(cur, list) and isinstance(part, int) and 0 <= part < len(cur):
            out += f"[{part}]"
            cur = cur[part]
        elif missing and i == len(loc) - 1 and isinstance(part, str):
            out += ("." if out else "") + _key(part)
    return out


def _key(k: str) -> str:
    return k if k.replace("_", "").replace("-", "").isalnum() and len(k) <= 64 else repr(k[:40])


def _problem(err: dict) -> str:
    msg = str(err["msg"]).removeprefix("Value error, ")
    msg = msg[:1].lower() + msg[1:]
    if err["type"] == "missing":
        return "missing"
    if err["type"] in ("value_error",):
        return msg
    if abs((err.get("ctx") or {}).get("le", (err.get("ctx") or {}).get("ge", 0)) or 0) == DOUBLE_MAX:
        return f"a number beyond what a double holds (got {_shown(err.get('input'))[:20]}...)"
    shown = _shown(err.get("input"))
    return f"{msg} (got {shown})" if shown else msg


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


if __name__ == "__main__":  # python -m gapbench.schema > src/gapbench/results.schema.json
    import json

    print(json.dumps(json_schema(), indent=1, sort_keys=True))
