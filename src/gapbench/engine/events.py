"""The events a workload worker (or rank 0 of a rank group) sends its parent, each a typed record.

The parent reads every event through `read_event`, as strictly as a results file: numbers finite and in range,
counts non-negative and bounded, texts and lists capped. What breaks its model raises EventError naming the
event and the field, and fails the variant that was running; it never reaches the parent's clocks or tables.
Whether an event fits the job (its keys, its workload, its order) is the parent's rule (run/workload.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from gapbench.record import MAX_REASON, Json, Name, OptName, Record, SchemaError
from gapbench.results.records import DeviceIdentity, Measurement, document

MAX_KEY = 20_000  # a variant key: workload:preset: and the variant's parameters as JSON
MAX_VARIANTS = 10_000  # a workload's variants; the largest sweep has hundreds (a results file holds 100,000 rows)
MAX_BUDGET_S = 30 * 86400.0  # a variant's budget; the parent holds it to its job's own (run/workload.py)
MAX_DESCRIBED = 10_000  # workloads described in one answer
MAX_LOG = 200_000  # a set-up failure's reason and traceback, before the parent cuts them to one line

Key = Annotated[str, StringConstraints(min_length=1, max_length=MAX_KEY)]
Params = dict[str, Json]
LongText = Annotated[str, StringConstraints(max_length=MAX_LOG)]


class EventError(ValueError):
    """An event that breaks its model: `kind` is the event, `field` the first bad field."""

    def __init__(self, kind: str, field: str, problem: str):
        self.kind, self.field, self.problem = kind, field, problem
        super().__init__(f"an invalid {kind!r} event ({field + ': ' if field else ''}{problem})")


class Event(Record):
    """Any event: its kind, and fields added later kept as JSON values."""

    event: Name


class Hello(Event):
    """The worker is up, on this device."""

    event: Literal["hello"]
    pid: Annotated[int, Field(ge=1, le=2**31)] | None = None
    device: document(DeviceIdentity) | None = None


class Variants(Event):
    """The variants the worker will run (those not already measured), in order."""

    event: Literal["variants"]
    total: Annotated[int, Field(ge=0, le=MAX_VARIANTS)]
    todo: Annotated[int, Field(ge=0, le=MAX_VARIANTS)]
    keys: Annotated[list[Key], Field(max_length=MAX_VARIANTS)]
    variants: Annotated[list[Params], Field(max_length=MAX_VARIANTS)]
    unit: OptName = ""
    higher_is_better: bool = True

    @model_validator(mode="after")
    def _counted(self) -> Variants:
        if not len(self.keys) == len(self.variants) == self.todo:
            raise ValueError(f"todo is {self.todo} with {len(self.keys)} key(s) and {len(self.variants)} variant(s)")
        if self.todo > self.total:
            raise ValueError(f"todo ({self.todo}) is more than total ({self.total})")
        if len(set(self.keys)) != len(self.keys):
            raise ValueError("a key is announced twice")
        return self


class Start(Event):
    """A variant begins, with the budget it was given."""

    event: Literal["start"]
    key: Key
    variant: Params | None = None
    budget_s: Annotated[float, Field(gt=0, le=MAX_BUDGET_S)]


class Result(Event):
    """A variant's measurement (a rank group may send rows of its own before the variant's)."""

    event: Literal["result"]
    key: Key
    measurement: Measurement


class SetupError(Event):
    """The worker could not set up: unknown device, unimportable workload, variants() raised."""

    event: Literal["setup_error"]
    reason: LongText
    traceback: LongText | None = None


class BadInput(SetupError):
    """The set-up failed on the user's input (a GapbenchError in the child)."""

    event: Literal["bad_input"]


class Described(Record):
    """One workload of a workload file, as `describe` tells it."""

    presets: Annotated[list[Name], Field(max_length=MAX_DESCRIBED)]
    default_preset: OptName = None
    unit: OptName = ""
    category: OptName = None
    description: Annotated[str, StringConstraints(max_length=MAX_REASON)] | None = ""
    file: bool = True
    options: Annotated[list[Name], Field(max_length=MAX_DESCRIBED)] = Field(default_factory=list)
    any_options: bool = False


class Describe(Event):
    """The workloads of the job's workload files."""

    event: Literal["describe"]
    workloads: Annotated[dict[Name, Described], Field(max_length=MAX_DESCRIBED)]


class Done(Event):
    """Every variant announced was run."""

    event: Literal["done"]


KINDS: dict[str, type[Event]] = {"hello": Hello, "variants": Variants, "start": Start, "result": Result,
                                 "setup_error": SetupError, "bad_input": BadInput, "describe": Describe, "done": Done}


def read_event(raw: dict[str, Any]) -> Event | None:
    """The typed event of a parsed line; None for a kind the parent does not read; EventError when it breaks its
    model."""
    kind = raw.get("event")
    model = KINDS.get(kind) if isinstance(kind, str) else None
    if model is None:
        return None
    try:
        return model.read(raw)
    except SchemaError as e:
        raise EventError(kind, e.field, e.problem) from None
    except (ArithmeticError, TypeError) as e:  # a validator that met a number it cannot hold (a 400-digit integer)
        raise EventError(kind, "", f"{e.__class__.__name__}: {str(e)[:120]}") from None
