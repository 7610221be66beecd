"""The micro workloads' options (gemm, gemm-libs, grouped-gemm, conv, attention, optimizer, elementwise): the dtypes,
whether each GEMM call starts with a cold cache, the shapes, group sizes and parameter sets the `listed` presets
measure, the optimizer, and the element-wise operators to measure."""

from __future__ import annotations

import re
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BeforeValidator, Field

from gapbench.workloads.options import MAX_ITEMS, DtypeOptions, comma_list, known_names

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


class ColdCacheOptions(DtypeOptions):
    """The options of a workload that can time each call after the last-level cache is overwritten."""

    flush_cache: bool = Field(False, description="overwrite the last-level cache before each timed call (a cold "
                              "cache, as a model's GEMMs, convolutions and optimizer step meet it)")


class GemmOptions(ColdCacheOptions):
    title: ClassVar[str] = "GEMM (gemm, gemm-libs)"


class GemmShapeOptions(GemmOptions):
    title: ClassVar[str] = "GEMM at chosen shapes (gemm)"
    gemm_shapes: GemmShapes | None = Field(None, description="the shapes gemm:listed measures, MxNxK each (a comma "
                                           "list; `gapbench assess` names a traced step's own; the other presets "
                                           "measure their own shapes)",
                                           json_schema_extra={"metavar": "MxNxK[,MxNxK]"})


_CONV = re.compile(r"\s*(\d+(?:\s*[x×]\s*\d+){3,7})\s*")


def _conv_shapes(value: Any) -> Any:
    """'2x32x64x56,4x96x96x32x7x96x2x0' (or a list of such strings, or of numbers) -> [[2, 32, 64, 56, 3, 1, 1, 1],
    [4, 96, 96, 32, 7, 96, 2, 0]]: batch, input channels, output channels, the output's height = width, kernel side
    (3 unless given), groups (1 unless given), stride (1 unless given), padding (K // 2 for an odd kernel, 0 for an
    even one, unless given)."""
    value = comma_list(value)
    if not isinstance(value, list):
        return value
    out = []
    for item in value:
        shown = item if isinstance(item, str) else "x".join(map(str, item)) if isinstance(item, (list, tuple)) \
            else repr(item)
        if isinstance(item, str):
            found = _CONV.fullmatch(item)
            if not found:
                raise ValueError(f"{item!r} is not a convolution shape NxCINxCOUTxHW[xK[xG[xS[xP]]]] (e.g. 4x96x96x32x7x96)")
            item = [int(x) for x in re.split(r"\s*[x×]\s*", found.group(1))]
        if not (isinstance(item, (list, tuple)) and 4 <= len(item) <= 8
                and all(isinstance(x, int) and 1 <= x <= MAX_DIM for x in item[:7])
                and all(isinstance(x, int) and 0 <= x <= MAX_DIM for x in item[7:])):
            raise ValueError(f"{shown}: a convolution shape NxCINxCOUTxHW[xK[xG[xS[xP]]]] is 4 to 8 whole numbers, each "
                             f"1 to {MAX_DIM} (the padding 0 to {MAX_DIM})")
        b, ci, co, hw, kernel, groups, stride = (list(item) + [3, 1, 1][len(item) - 4:])[:7]
        pad = item[7] if len(item) == 8 else default_padding(kernel)
        if ci % groups or co % groups:
            raise ValueError(f"{shown}: the groups ({groups}) must divide the input ({ci}) and "
                             f"output ({co}) channels")
        if (hw - 1) * stride + kernel - 2 * pad < 1:
            raise ValueError(f"{shown}: no input gives an output of side {hw} at this kernel, stride and padding")
        out.append([b, ci, co, hw, kernel, groups, stride, pad])
    return out


def default_padding(kernel: int) -> int:
    """What a convolution row is padded by unless told: K // 2 for an odd kernel (an image keeps its side at stride
    1), none for an even one (a ConvNeXt's 2×2 and 4×4 downsampling)."""
    return kernel // 2 if kernel % 2 else 0


ConvShapes = Annotated[list[tuple[int, int, int, int, int, int, int, int]], BeforeValidator(_conv_shapes),
                       Field(min_length=1, max_length=MAX_ITEMS)]


class ConvShapeOptions(ColdCacheOptions):
    title: ClassVar[str] = "convolution at chosen shapes (conv)"
    conv_shapes: ConvShapes | None = Field(None, description="the convolutions conv:listed measures, "
                                           "NxCINxCOUTxHW[xKERNEL[xGROUPS]] each (batch, channels in and out, the "
                                           "output's side, kernel side 3 and groups 1 unless given; stride 1; a "
                                           "comma list: `gapbench assess` names a traced step's own)",
                                           json_schema_extra={"metavar": "NxCINxCOUTxHW[xK[xG[xS[xP]]]][,...]"})


MAX_GROUPS = 1024  # groups in one grouped GEMM (a mixture-of-experts layer's experts)
_SIZES = r"\d+(?:\s*\+\s*\d+)*"
_GROUPED = re.compile(rf"\s*({_SIZES})\s*[x×]\s*(\d+)\s*[x×]\s*({_SIZES})\s*")


def _grouped_shapes(value: Any) -> Any:
    """'82+173+130x1024x512,512x1024x82+173+130' (or a list of such strings, or of [layout, sizes, a, b]) ->
    [['rows', [82, 173, 130], 1024, 512], ['k', [82, 173, 130], 512, 1024]]: the groups' sizes where the offsets
    split the rows (SIZESxNxK: each group's rows, then n and k, as a layer's forward and input gradient call it)
    or the shared dimension (MxNxSIZES: m and n, then each group's share of k, as its weight gradient calls it).
    A group may be empty (an expert no token was routed to); a single group is a `rows` one."""
    value = comma_list(value)
    if not isinstance(value, list):
        return value
    return [_grouped_shape(item) for item in value]


def _grouped_shape(item: Any) -> list:
    shown = repr(item)
    if isinstance(item, str):
        found = _GROUPED.fullmatch(item)
        if not found or ("+" in found.group(1) and "+" in found.group(3)):
            raise ValueError(f"{item!r} is not a grouped GEMM shape SIZESxNxK or MxNxSIZES, the groups' sizes "
                             "joined by + (e.g. 82+173+130x1024x512)")
        first, n, last = found.groups()
        if "+" in last:
            item = ["k", [int(x) for x in last.split("+")], int(first), int(n)]
        else:
            item = ["rows", [int(x) for x in first.split("+")], int(n), int(last)]
    if not (isinstance(item, (list, tuple)) and len(item) == 4 and item[0] in ("rows", "k")
            and isinstance(item[1], (list, tuple)) and 1 <= len(item[1]) <= MAX_GROUPS
            and all(isinstance(x, int) and 0 <= x <= MAX_DIM for x in item[1]) and sum(item[1]) >= 1
            and all(isinstance(x, int) and 1 <= x <= MAX_DIM for x in item[2:])):
        raise ValueError(f"{shown}: a grouped GEMM shape is 1 to {MAX_GROUPS} groups' sizes, each 0 to {MAX_DIM} "
                         f"and not all 0, and two dimensions, each 1 to {MAX_DIM}")
    return [item[0], list(item[1]), item[2], item[3]]


def grouped_spec(layout: str, sizes, a: int, b: int) -> str:
    """The spec `--grouped-shapes` reads for one call: 'SIZESxNxK' (layout rows: a, b = n, k) or 'MxNxSIZES'
    (layout k: a, b = m, n)."""
    joined = "+".join(str(int(x)) for x in sizes)
    return f"{joined}x{a}x{b}" if layout == "rows" else f"{a}x{b}x{joined}"


GroupedShapes = Annotated[list[tuple[str, list[int], int, int]], BeforeValidator(_grouped_shapes),
                          Field(min_length=1, max_length=MAX_ITEMS)]


class GroupedShapeOptions(DtypeOptions):
    title: ClassVar[str] = "grouped GEMM at chosen group sizes (grouped-gemm)"
    grouped_shapes: GroupedShapes | None = Field(
        None, description="the grouped GEMMs grouped-gemm:listed measures, SIZESxNxK (the offsets split the rows) or "
        "MxNxSIZES (they split the shared dimension) each, SIZES the groups' sizes joined by + (a comma list: "
        "`gapbench assess --real` names a traced step's own, with the group sizes its routing gave)",
        json_schema_extra={"metavar": "SIZESxNxK|MxNxSIZES[,...]"})


OPTIMIZERS = ("adamw", "adam", "sgd")
_PARAM_PART = re.compile(r"\s*(\d+)\s*\*\s*(\d+)\s*")
MAX_PARAM_ELEMENTS = 1 << 34  # elements in one set (a 16 G-parameter model)


def _param_sets(value: Any) -> Any:
    """'786432*8+1536*24,4096*4' (or a list of such strings, or of [[numel, count], …]) -> [[[786432, 8], [1536,
    24]], [[4096, 4]]]: each set its tensors' sizes with how many of each."""
    value = comma_list(value)
    if not isinstance(value, list):
        return value
    out = []
    for item in value:
        if isinstance(item, str):
            parts = [_PARAM_PART.fullmatch(p) for p in item.split("+")]
            if not all(parts):
                raise ValueError(f"{item!r} is not a parameter set NUMEL*COUNT[+NUMEL*COUNT…] (e.g. 786432*8+1536*24)")
            item = [[int(p.group(1)), int(p.group(2))] for p in parts]
        if not (isinstance(item, (list, tuple)) and item and all(
                isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, int) and x >= 1 for x in p)
                for p in item)):
            raise ValueError(f"{item!r} is not a parameter set: pairs of a tensor's elements and a count, each 1 or more")
        if sum(n * c for n, c in item) > MAX_PARAM_ELEMENTS:
            raise ValueError(f"{param_set_spec(item)}: more than {MAX_PARAM_ELEMENTS} elements in one set")
        out.append([list(p) for p in item])
    return out


def param_set_spec(sizes) -> str:
    """[(786432, 8), (1536, 24)] -> '786432*8+1536*24': the largest tensors first, one term per size."""
    merged: dict[int, int] = {}
    for n, c in sizes:
        merged[int(n)] = merged.get(int(n), 0) + int(c)
    return "+".join(f"{n}*{c}" for n, c in sorted(merged.items(), key=lambda x: -x[0]))


ParamSets = Annotated[list[list[tuple[int, int]]], BeforeValidator(_param_sets), Field(min_length=1,
                                                                                      max_length=MAX_ITEMS)]


class OptimizerOptions(ColdCacheOptions):
    title: ClassVar[str] = "optimizer step (optimizer)"
    optimizer: Literal[OPTIMIZERS] = Field("adamw", description="the optimizer whose step is measured")
    param_sets: ParamSets | None = Field(None, description="the parameter sets optimizer:listed measures, each "
                                         "NUMEL*COUNT[+NUMEL*COUNT…] (tensors of NUMEL elements, COUNT of them; a "
                                         "comma list: `gapbench assess` names a traced step's own)",
                                         json_schema_extra={"metavar": "NUMEL*COUNT[+...][,...]"})


_ATTENTION = re.compile(r"\s*(\d+)\s*[x×]\s*(\d+)\s*[x×]\s*(\d+)\s*(?:[x×]\s*(\d+)\s*)?(c?)\s*")


def _attention_shapes(value: Any) -> Any:
    """'16x1024x32x16,10x192x64c' (or a list of such strings, or of [bh, seq, d, kv, causal]) -> [[16, 1024, 32, 16,
    False], [10, 192, 64, 192, True]]: batch × heads, the query's sequence, the head dimension, the keys' sequence
    (the query's unless given), causal (a trailing `c`)."""
    value = comma_list(value)
    if not isinstance(value, list):
        return value
    out = []
    for item in value:
        if isinstance(item, str):
            found = _ATTENTION.fullmatch(item)
            if not found:
                raise ValueError(f"{item!r} is not an attention shape BHxSxD[xKV][c] (e.g. 16x1024x32x16 or "
                                 "10x192x64c)")
            bh, seq, d, kv, c = found.groups()
            item = [int(bh), int(seq), int(d), int(kv or seq), c == "c"]
        if not (isinstance(item, (list, tuple)) and len(item) == 5
                and all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x <= MAX_DIM for x in item[:4])
                and isinstance(item[4], bool)):
            raise ValueError(f"{item!r}: an attention shape is batch × heads, sequence, head dimension and the keys' "
                             f"sequence, each 1 to {MAX_DIM}, and whether it is causal")
        out.append(list(item))
    return out


AttentionShapes = Annotated[list[tuple[int, int, int, int, bool]], BeforeValidator(_attention_shapes),
                            Field(min_length=1, max_length=MAX_ITEMS)]


class AttentionShapeOptions(DtypeOptions):
    title: ClassVar[str] = "attention at chosen shapes (attention)"
    attention_shapes: AttentionShapes | None = Field(
        None, description="the attentions attention:listed measures, BHxSxD[xKV][c] each (batch × heads, the query's "
        "sequence, head dimension, the keys' sequence where it differs, c: causal; a comma list: `gapbench assess` "
        "names a traced step's own)", json_schema_extra={"metavar": "BHxSxD[xKV][c][,...]"})


# the elementwise workload's ATen operators (overload packet names, as a trace records them)
ELEMENTWISE_OPS = ("gelu", "gelu_backward", "bernoulli_", "silu", "sqrt", "_softmax", "_log_softmax", "native_layer_norm",
                   "native_group_norm", "native_batch_norm",
                   "lerp", "addcmul", "addcdiv",   # an Adam-family optimizer's update, per parameter element
                   "mul", "add", "div", "tanh", "copy_", "fill_",
                   "avg_pool2d", "avg_pool2d_backward",   # 3×3, stride 1, padding 1, padding not counted: PoolFormer's mixer
                   "max_pool2d_with_indices", "max_pool2d_with_indices_backward")   # 3×3, stride 2, padding 1: a ResNet's stem


def _ops(value: Any) -> Any:
    return known_names(value, ELEMENTWISE_OPS, "operator", "--elementwise-ops")


class ElementwiseOptions(DtypeOptions):
    title: ClassVar[str] = "element-wise operators (elementwise)"
    elementwise_ops: Annotated[list[Literal[ELEMENTWISE_OPS]], BeforeValidator(_ops), Field(min_length=1)] | None = \
        Field(None, description="only these operators of elementwise (a comma list of ATen names: gelu, "
              "avg_pool2d, …; default: every one)", json_schema_extra={"metavar": "OP[,OP]"})
