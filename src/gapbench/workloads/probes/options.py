"""The probes' options: which torch.compile backend the dynamic-shapes probe compiles with."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field, StringConstraints

from gapbench.workloads.options import Options


class DynamicShapesOptions(Options):
    title: ClassVar[str] = "dynamic shapes (dynamic-shapes)"
    compile_backend: Annotated[str, StringConstraints(min_length=1, max_length=200)] = Field(
        "inductor", description="the torch.compile backend of the compiled variants (inductor, aot_eager, or a "
        "vendor's); part of their identity", json_schema_extra={"metavar": "NAME"})
