"""Workload options as typed declarations: each workload says which options it takes (`Workload.options`, a
model whose fields have a type, a range or choices, a default and a help line); `gapbench run` makes one flag
per field and the plan checks every value against each workload of the run before any worker starts.

The base and the dtype list live here; each family declares its own beside its code, in a module named
`options.py` that imports no torch (the command line reads them all to build its flags). A field's flag is its name with
dashes (`batch_size` -> `--batch-size`) unless its `json_schema_extra` names another (`flag`), and a boolean
field that defaults to True is switched off by its flag (`--no-baseline`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError

from gapbench.devices.dtypes import DTYPE_NAMES
from gapbench.errors import GapbenchError

MAX_ITEMS = 1000  # items in a comma list


def comma_list(value: Any) -> Any:
    """'a,b' -> ['a', 'b'] (an empty item is refused by the item's own type); lists pass through."""
    if isinstance(value, str):
        return [v.strip() for v in value.split(",")]
    if isinstance(value, tuple):
        return list(value)
    return value


def finite(value: Any) -> Any:
    """NaN and infinities are no option values (a string 'nan' parses to one)."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        return value
    if not math.isfinite(x):
        raise ValueError(f"expected a finite number, not {value!r}")
    return value


def known_names(value: Any, known: tuple[str, ...], what: str, flag: str) -> Any:
    """A comma list whose every name is one of `known`; the first that is not is one line naming the flag."""
    value = comma_list(value)
    for name in value if isinstance(value, list) else []:
        if name not in known:
            raise ValueError(f"unknown {what} {name!r} in {flag}; known: {', '.join(known)}")
    return value


def _dtype_names(value: Any) -> Any:
    return known_names(value, DTYPE_NAMES, "dtype", "--dtype")


DTypeName = Literal[DTYPE_NAMES]
DTypes = Annotated[list[DTypeName], BeforeValidator(_dtype_names), Field(min_length=1, max_length=len(DTYPE_NAMES))]
Positive = Annotated[int, Field(ge=1, le=1_000_000)]
PositiveFloat = Annotated[float, BeforeValidator(finite), Field(gt=0)]


class Options(BaseModel):
    """The options a workload takes; each field is a `gapbench run` flag. Values are checked when the plan is
    made and again in the worker (a journal may have been edited). `get` reads a field by name, as workload
    files written against the plain dictionary of options do."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, validate_default=True)
    title: ClassVar[str] = "workload options"  # the heading of the flags first declared here in `run --help`

    def get(self, name: str, default: Any = None) -> Any:
        value = getattr(self, name, None) if name in type(self).model_fields else (self.model_extra or {}).get(name)
        return default if value is None else value

    def given(self) -> dict:
        """The options set, as JSON values (what a job carries to its worker)."""
        return self.model_dump(mode="json", exclude_unset=True)


class AnyOptions(Options):
    """What a workload that declares no options gets: every option of the run as given, unchecked (the way
    workload files written before typed options read them)."""

    model_config = ConfigDict(extra="allow")


class DtypeOptions(Options):
    title: ClassVar[str] = "workload options"
    dtype: DTypes | None = Field(None, description="precision(s) to measure: fp64, fp32, tf32, bf16, fp16, fp8, "
                                 "int8 (a comma list; a dtype a workload cannot use is recorded as unsupported)",
                                 json_schema_extra={"metavar": "DTYPE[,DTYPE]"})


def asked_dtypes(options) -> list[str]:
    """The dtypes --dtype asked for, in its order ([] when it was not given), from a workload's options or a
    plain dictionary of them."""
    asked = options.get("dtype")
    return [asked] if isinstance(asked, str) else list(asked or [])


def read_options(cls: type[Options], raw: dict, workload: str) -> Options:
    """The options `raw` (JSON values, or the strings of the command line) as `cls` declares them; GapbenchError
    (one line, exit 2) naming the flag, the value and the workload when one is bad."""
    try:
        return cls.model_validate(raw)
    except ValidationError as e:
        errors = e.errors(include_url=False)
        name = errors[0]["loc"][0] if errors[0]["loc"] and isinstance(errors[0]["loc"][0], str) else ""
        if name in cls.model_fields:
            flag = flag_of(name, cls.model_fields[name])
            here = [x for x in errors if x["loc"] and x["loc"][0] == name]
            raise GapbenchError(f"{flag} {_shown(raw.get(name))}: {_problem(here)} ({workload})") from None
        if errors[0]["type"] == "extra_forbidden":
            raise GapbenchError(f"{workload} takes no option {name!r}") from None
        raise GapbenchError(f"{workload}: {_problem(errors[:1])}") from None


_EXPECTED = {"int_parsing": "a whole number", "int_type": "a whole number", "int_from_float": "a whole number",
             "float_parsing": "a number", "float_type": "a number", "bool_type": "true or false",
             "string_type": "text", "list_type": "a comma list"}


def _problem(errors: list[dict]) -> str:
    """One line from the errors of one field: what a value was expected to be (a union is tried member by
    member: each says what it wanted), or what was wrong with it."""
    wanted, said = [], []
    for x in errors:
        kind, ctx = x["type"], x.get("ctx") or {}
        if kind == "value_error":
            said.append(str(x["msg"]).removeprefix("Value error, "))
        elif kind == "literal_error":
            expected = str(ctx.get("expected"))
            wanted.append(f"one of {expected}" if " or " in expected else expected)
        elif kind in _EXPECTED:
            wanted.append(_EXPECTED[kind])
        elif kind in ("greater_than_equal", "greater_than", "less_than", "less_than_equal"):
            bound = {"greater_than_equal": "at least", "greater_than": "above", "less_than": "below",
                     "less_than_equal": "at most"}[kind]
            wanted.append(f"{bound} {next(iter(ctx.values()))}")
        elif kind in ("too_short", "too_long"):
            wanted.append(f"{ctx.get('min_length', 1)} to {ctx.get('max_length', MAX_ITEMS)} items")
        else:
            said.append(str(x["msg"]))
    if said:
        return said[0]
    return "expected " + " or ".join(dict.fromkeys(wanted))


def _shown(value: Any) -> str:
    text = ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
    return repr(text if len(text) <= 60 else text[:57] + "...")


@dataclass(frozen=True)
class Flag:
    """One `gapbench run` flag: an option name, the field that declares it first (help, default), and every
    declaration of it (a family may widen a shared option: llm-infer's batch size is also a list)."""

    name: str
    flag: str
    field: Any
    owner: type[Options]  # the class that declares it first: its title heads the flag's group in --help
    declarations: tuple[Any, ...]

    def parse(self, text: str) -> Any:
        """The value as a declaration reads it (the first that accepts it), as JSON; ValueError with the
        problem the first declaration found otherwise."""
        first = None
        for field in self.declarations:
            try:
                return TypeAdapter(field.rebuild_annotation()).dump_python(
                    TypeAdapter(field.rebuild_annotation()).validate_python(text), mode="json")
            except ValidationError as e:
                first = first or e
        raise ValueError(_problem(first.errors(include_url=False)))


def flag_of(name: str, field) -> str:
    extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
    return str(extra.get("flag") or "--" + name.replace("_", "-"))


def declared_in(cls: type[Options]) -> dict[type[Options], list[str]]:
    """The fields of an options class by the class of its ancestry that first declares them (for grouping)."""
    out: dict[type[Options], list[str]] = {}
    for name in cls.model_fields:
        owner = next(c for c in reversed(cls.__mro__) if isinstance(c, type) and issubclass(c, Options)
                     and name in getattr(c, "__annotations__", {}))
        out.setdefault(owner, []).append(name)
    return out
