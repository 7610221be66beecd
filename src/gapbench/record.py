"""The base of every record gapbench keeps: a pydantic model that is the record itself, open to fields added
later, strict when read from a file, and named field by field when it is wrong.

Known fields are typed (numbers finite and in range, strings capped at lengths a table can show); an unknown
field may hold any JSON value with finite numbers. In code a record is built like any model (values are
converted where that loses nothing: a tuple becomes a list, 3 becomes 3.0); what a user feeds in is read with
`Record.read(doc)`, strictly ("7" is not a number, true is not 1), and a bad document raises SchemaError naming
the first bad field ("measurements[3].stats.n").
"""

from __future__ import annotations

import math
import sys
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from typing_extensions import Self, TypeAliasType

MAX_NAME = 200  # workload, unit, preset, suite, label, status
MAX_TEXT = 500  # identity strings: product, driver, versions, host names
MAX_REASON = 10_000  # a reason is one line; a longer one is refused
INT64_MAX = 2**63 - 1  # what SQLite stores in an INTEGER
DOUBLE_MAX = int(sys.float_info.max)  # an integer beyond it has no float: every number must fit a double

# any JSON value, as open fields hold them: finite numbers that fit a double
Json = TypeAliasType("Json", None | bool | Annotated[int, Field(ge=-DOUBLE_MAX, le=DOUBLE_MAX)] | float | str
                     | list["Json"] | dict[str, "Json"])


def json_safe(obj: Any) -> Any:
    """The structure with what JSON cannot hold replaced: non-finite numbers by None, lone surrogates by '?',
    tuples by lists, other objects by their text."""
    if obj is None or isinstance(obj, (bool, int)):
        return obj
    if isinstance(obj, str):
        return _utf8(obj)
    if isinstance(obj, float):
        return finite_or_none(obj)
    if isinstance(obj, dict):
        return {_utf8(str(k)): json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return _utf8(str(obj))


def finite_or_none(x: Any) -> float | None:
    """A float, or None for what JSON cannot hold (NaN, infinities, numbers beyond a double)."""
    if x is None:
        return None
    try:
        x = float(x)
    except (OverflowError, TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _utf8(s: str) -> str:
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "replace").decode("utf-8")


Name = Annotated[str, StringConstraints(min_length=1, max_length=MAX_NAME)]
OptName = Annotated[str, StringConstraints(max_length=MAX_NAME)] | None
Text = Annotated[str, StringConstraints(max_length=MAX_TEXT)] | None
Reason = Annotated[str, StringConstraints(max_length=MAX_REASON)]
Time = Annotated[str, StringConstraints(max_length=64)] | None
Count = Annotated[int, Field(ge=0, le=INT64_MAX)] | None
Amount = Annotated[float, Field(ge=0)] | None
Rate = Annotated[float, Field(gt=0)] | None
Obj = Annotated[dict[str, Json] | None, BeforeValidator(json_safe)]
Strings = Annotated[list[Annotated[str, StringConstraints(max_length=MAX_TEXT)]], Field(max_length=10_000)] | None


class SchemaError(ValueError):
    """A document that breaks a record's schema: `field` is where ("measurements[3].stats.n"), `problem` what."""

    def __init__(self, field: str, problem: str):
        self.field, self.problem = field, problem
        super().__init__(f"{field}: {problem}" if field else problem)


READ = {"read": True}  # the validation context of a document read (not a record built in code)


def is_read(info: ValidationInfo) -> bool:
    """Whether a validator runs on a document read (strict, every required field given) rather than in code."""
    return bool((info.context or {}).get("read"))


class Record(BaseModel):
    """A record: known fields typed, unknown fields kept as JSON values; immutable unless a subclass says."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, frozen=True)
    __pydantic_extra__: dict[str, Json] = Field(init=False)

    @classmethod
    def read(cls, doc: Any) -> Self:
        """The record of a document a user or another process gave, validated strictly; SchemaError names the
        first bad field."""
        try:
            return cls.model_validate(doc, strict=True, context=READ)
        except ValidationError as e:
            raise schema_error(e, doc) from None
        except RecursionError:
            raise SchemaError("", "nested too deeply") from None

    def get(self, key: str, default: Any = None) -> Any:
        """A field or a field added later, by its name; `default` when it is absent or None."""
        value = self.__dict__.get(key) if key in type(self).model_fields else (self.__pydantic_extra__ or {}).get(key)
        return default if value is None else value

    def replace(self, **changes: Any) -> Self:
        """A copy with some fields changed, validated as any new record is."""
        fields = {k: v for k, v in self.__dict__.items() if k in type(self).model_fields}
        return type(self).model_validate({**fields, **(self.__pydantic_extra__ or {}), **changes})

    @model_validator(mode="before")
    @classmethod
    def _no_internal_keys(cls, data: Any) -> Any:
        """pydantic's own bookkeeping is never a field: a document that holds it (as files written by an earlier
        `replace` did) is read without it."""
        if isinstance(data, dict) and "__pydantic_extra__" in data:
            data = {k: v for k, v in data.items() if k != "__pydantic_extra__"}
        return data


# ---- naming the first bad field ------------------------------------------------------------------------

_TYPE_ERRORS = {"bool_type", "int_type", "float_type", "string_type", "list_type", "dict_type", "none_required",
                "model_type", "model_attributes_type", "literal_error", "tuple_type"}


def schema_error(e: ValidationError, doc: Any = None) -> SchemaError:
    """The SchemaError of a validation error: the most telling problem at the first bad field (located in `doc`,
    the document validated, or, for a record built in code, by the error's own location)."""
    errors = e.errors(include_url=False)
    if doc is None:
        paths = [_loc_path(x["loc"]) for x in errors]
    else:
        paths = [field_path(x["loc"], doc, x["type"] == "missing") for x in errors]
    # a value that may be one of several types fails once per type: the most telling failure is one that is not a
    # wrong type, at the first bad field or inside it
    best = next((i for i, x in enumerate(errors) if x["type"] not in _TYPE_ERRORS and _within(paths[i], paths[0])), 0)
    return SchemaError(paths[best], _problem(errors[best]))


def _within(path: str, outer: str) -> bool:
    return path == outer or path.startswith((outer + ".", outer + "[")) or not outer


def field_path(loc: tuple, doc: Any, missing: bool = False) -> str:
    """'measurements[3].stats.n' from a validation error's location, walked through the document itself (the
    location also names the types tried, which are no fields)."""
    out, cur = "", doc
    for i, part in enumerate(loc):
        if isinstance(cur, dict) and isinstance(part, str) and part in cur:
            out += ("." if out else "") + _key(part)
            cur = cur[part]
        elif isinstance(cur, (list, tuple)) and isinstance(part, int) and 0 <= part < len(cur):
            out += f"[{part}]"
            cur = cur[part]
        elif missing and i == len(loc) - 1 and isinstance(part, str):
            out += ("." if out else "") + _key(part)
    return out


def _loc_path(loc: tuple) -> str:
    """'stats.ci95' from a location, leaving out the names of the types tried ('function-after[…]', 'float')."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" not in part and "-" not in part and part not in ("float", "int", "str", "bool", "list", "dict", "none"):
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
    ctx = err.get("ctx") or {}
    if abs(ctx.get("le", ctx.get("ge", 0)) or 0) == DOUBLE_MAX:
        return f"a number beyond what a double holds (got {_shown(err.get('input'))[:20]}...)"
    shown = _shown(err.get("input"))
    return f"{msg} (got {shown})" if shown else msg


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
