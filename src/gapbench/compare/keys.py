"""Which measurements of results files are the same row: the variant a row is matched by.

gemm's fp8 rows name their accumulation in the variant (`accum`: "fp32" for torch._scaled_mm's use_fast_accum=False,
"fast" for True). Files written before gemm named it ran every fp8 row with use_fast_accum=False and carry no
`accum`: such a row reads as `accum: "fp32"` wherever rows are matched — compare's row keys, the runs of one
platform merged from several files, the published references a row lines up with, the history's run-to-run
spread of a row and its table — so an old file's fp8 row lines up with a new file's "fp32" one, never as a row of
its own. This module is that one rule; every one of those places asks it.

Which of the two fp8 rows of one shape is the like-for-like one between stacks: the "fp32" row. ROCm and XPU
measure only it (their libraries have no fast accumulation), so wherever rows are tallied or rates are taken per
dtype — the takeaway's rows per class, assess's GEMM rates — the "fp32" row counts and the "fast" row of the same
shape stands beside it (its own row in the gap table, its own points in assess's rates), never averaged with it,
never counted twice (`beside_only`).
"""

from __future__ import annotations

import json

from gapbench import specs as specs_mod
from gapbench.results import Measurement

GEMM = "gemm"
ACCUM = "accum"
ACCUM_BEFORE_NAMED = "fp32"  # what an fp8 gemm row without `accum` ran with (use_fast_accum=False)
LIKE_FOR_LIKE_ACCUM = "fp32"  # the fp8 accumulation every stack measures: the one rows are tallied and priced by


def _fp8_gemm(workload: str, variant: dict) -> bool:
    return workload == GEMM and specs_mod.normalize_dtype(variant.get("dtype")) == "fp8"


def row_variant(workload: str, variant: dict) -> dict:
    """The variant a row is matched by: the measurement's own, with `accum: "fp32"` added to an fp8 gemm row that
    names no accumulation (written before gemm named it)."""
    if ACCUM not in variant and _fp8_gemm(workload, variant):
        return {**variant, ACCUM: ACCUM_BEFORE_NAMED}
    return variant


def row_key(workload: str, variant: dict) -> tuple[str, str]:
    """(workload, the row variant as canonical JSON): equal for every measurement of one row."""
    return workload, json.dumps(row_variant(workload, variant), sort_keys=True, separators=(",", ":"), default=str)


def as_row(m: Measurement) -> Measurement:
    """The measurement under its row variant (itself when that is its own variant)."""
    v = row_variant(m.workload, m.variant)
    return m if v is m.variant else m.replace(variant=v)


def spellings(workload: str, variant: dict) -> list[dict]:
    """Every variant results files have written for this row, its own first: an fp8 gemm row of fp32 accumulation
    with `accum` and without it (a file written before gemm named it)."""
    out = [variant]
    row = row_variant(workload, variant)
    if _fp8_gemm(workload, row) and row.get(ACCUM) == ACCUM_BEFORE_NAMED:
        out += [v for v in (row, {k: x for k, x in row.items() if k != ACCUM}) if v not in out]
    return out


def beside_only(workload: str, variant: dict) -> bool:
    """Whether a row stands beside its like-for-like row and is not tallied or priced itself: an fp8 gemm row of
    an accumulation other than "fp32" (the fast one)."""
    row = row_variant(workload, variant)
    return _fp8_gemm(workload, row) and row.get(ACCUM) != LIKE_FOR_LIKE_ACCUM
