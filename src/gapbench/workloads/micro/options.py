"""The GEMM workloads' options (gemm, gemm-libs): the dtypes, and whether each call starts with a cold cache."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from gapbench.workloads.options import DtypeOptions


class GemmOptions(DtypeOptions):
    title: ClassVar[str] = "GEMM (gemm, gemm-libs)"
    flush_cache: bool = Field(False, description="overwrite the last-level cache before each GEMM call (a cold "
                              "cache, as a model's GEMMs meet it)")
