"""The GEMM workloads' options (gemm, gemm-libs): the dtypes, whether each call starts with a cold cache, and the
shapes the `listed` preset measures (gemm only)."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field

from gapbench.workloads.options import MAX_ITEMS, DtypeOptions, comma_list

MAX_DIM = 1 << 20
_SHAPE = re.compile(r"\s*(\d+)\s*[x×]\s*(\d+)\s*[x×]\s*(\d+)\s*")


def _shapes(value: Any) -> Any:
    """'788x256x256,64x64x64' (or a list of such strings, or of [m, n, k]) -> [[788, 256, 256], [64, 64, 64]]."""
    value = comma_list(value)
    if not isinstance(value, list):
        return value
    out = []
    for item in value:
        if isinstance(item, str):
            found = _SHAPE.fullmatch(item)
            if not found:
                raise ValueError(f"{item!r} is not a GEMM shape MxNxK (e.g. 788x256x256)")
            item = [int(x) for x in found.groups()]
        if not (isinstance(item, (list, tuple)) and len(item) == 3):
            raise ValueError(f"{item!r} is not a GEMM shape MxNxK")
        if not all(isinstance(x, int) and 1 <= x <= MAX_DIM for x in item):
            raise ValueError(f"{'x'.join(map(str, item))}: each of M, N and K must be 1 to {MAX_DIM}")
        out.append(list(item))
    return out


GemmShapes = Annotated[list[tuple[int, int, int]], BeforeValidator(_shapes), Field(min_length=1,
                                                                                 max_length=MAX_ITEMS)]


class GemmOptions(DtypeOptions):
    title: ClassVar[str] = "GEMM (gemm, gemm-libs)"
    flush_cache: bool = Field(False, description="overwrite the last-level cache before each GEMM call (a cold "
                              "cache, as a model's GEMMs meet it)")


class GemmShapeOptions(GemmOptions):
    title: ClassVar[str] = "GEMM at chosen shapes (gemm)"
    gemm_shapes: GemmShapes | None = Field(None, description="the shapes gemm:listed measures, MxNxK each (a comma "
                                           "list; `gapbench assess` names a traced step's own; the other presets "
                                           "measure their own shapes)",
                                           json_schema_extra={"metavar": "MxNxK[,MxNxK]"})
