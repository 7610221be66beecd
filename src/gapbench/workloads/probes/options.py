"""The probes' options: which torch.compile backend the dynamic-shapes probe compiles with; the numerics probe's
knobs (attention, training steps, deterministic algorithms, fp8 encoding, a model of your own)."""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, StringConstraints

from gapbench.workloads.models.options import ATTENTION
from gapbench.workloads.options import DtypeOptions, Options


class DynamicShapesOptions(Options):
    title: ClassVar[str] = "dynamic shapes (dynamic-shapes)"
    compile_backend: Annotated[str, StringConstraints(min_length=1, max_length=200)] = Field(
        "inductor", description="the torch.compile backend of the compiled variants (inductor, aot_eager, or a "
        "vendor's); part of their identity", json_schema_extra={"metavar": "NAME"})


ENTRY_PATTERN = r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$"


class NumericsOptions(DtypeOptions):
    """The numerics probe's knobs: each is recorded in the variant, so a gap can be pinned on one of them."""

    title: ClassVar[str] = "numerics parity (numerics)"
    attention: Literal[ATTENTION] = Field("sdpa", description="attention implementation: sdpa (PyTorch picks the "
                                          "kernel), eager, or one SDPA kernel forced: flash, efficient, math, cudnn")
    train_steps: Annotated[int, Field(ge=1, le=1000)] = Field(
        5, description="numerics: training steps on the fixed batch after the fingerprinted forward and backward "
        "(the loss is recorded after each)", json_schema_extra={"metavar": "K"})
    deterministic: bool = Field(False, description="numerics: run under torch.use_deterministic_algorithms(True)")
    fp8_format: Literal["e4m3", "e5m2"] = Field(
        "e4m3", description="numerics with --dtype fp8: the fp8 encoding linear layers' inputs and weights are "
        "rounded to (e4m3: the device's own flavour)")
    entry: Annotated[str, StringConstraints(pattern=ENTRY_PATTERN, max_length=200)] | None = Field(
        None, description="numerics: your MODULE:CALLABLE returning (model, example_inputs), fingerprinted instead "
        "of the preset's models (importing it RUNS your code)", json_schema_extra={"metavar": "MODULE:CALLABLE"})
