"""The element types gapbench measures in: one table for every workload and every backend.

Each row says how the type is stored (the torch dtype and its size), how matmuls compute in it where that
differs from the storage (TF32 is fp32 storage with a 10-bit-mantissa tensor-core multiply), and its unit
roundoff. Whether a device computes in a type at all is its backend's answer (`Backend.dtype_unsupported`,
`Backend.matmul_unsupported`), and the e4m3 flavour of fp8 is the backend's too (`Backend.fp8_e4m3`:
e4m3fn on NVIDIA and Intel, e4m3fnuz on MI300).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from gapbench.errors import GapbenchError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DType:
    name: str  # gapbench's name, as --dtype and results files spell it
    storage: str  # the torch dtype tensors are kept in (an attribute of torch)
    itemsize: int  # bytes per element as stored
    unit_roundoff: float  # 2^-(mantissa bits + 1): the relative error of one rounding (0 for integers)
    math: str = ""  # how a matmul computes when that is not the storage type: "tf32"
    accumulates_in: str = ""  # the type a matmul's result comes out in when it is not the storage: int8 -> int32
    what: str = ""
    aliases: tuple[str, ...] = ()  # other names people write for it (datasheets, other tools)

    @property
    def torch(self) -> torch.dtype:
        """The torch dtype of the storage (fp8: the e4m3fn flavour; a device's own is Device.torch_dtype)."""
        import torch

        return getattr(torch, self.storage)

    @property
    def is_float(self) -> bool:
        return self.unit_roundoff > 0


DTYPES: dict[str, DType] = {d.name: d for d in (
    DType("fp64", "float64", 8, 2.0**-53, what="IEEE double", aliases=("float64", "double", "f64")),
    DType("fp32", "float32", 4, 2.0**-24, what="IEEE single; matmuls in full fp32 precision",
          aliases=("float32", "float", "f32", "single")),
    DType("tf32", "float32", 4, 2.0**-11, math="tf32", what="fp32 storage, matmul inputs rounded to TF32 (10-bit "
          "mantissa) on tensor cores", aliases=("tensorfloat32",)),
    DType("bf16", "bfloat16", 2, 2.0**-8, what="bfloat16: fp32's range, 8-bit mantissa", aliases=("bfloat16",)),
    DType("fp16", "float16", 2, 2.0**-11, what="IEEE half", aliases=("float16", "half", "f16")),
    DType("fp8", "float8_e4m3fn", 1, 2.0**-4, accumulates_in="bfloat16", what="fp8 e4m3 (scaled matmul, bf16 out)"),
    DType("int8", "int8", 1, 0.0, accumulates_in="int32", what="int8 (matmul accumulates in int32)",
          aliases=("i8", "qint8")),
)}
_ALIASES = {a: d.name for d in DTYPES.values() for a in d.aliases}
DTYPE_NAMES = tuple(DTYPES)



def dtype(name: str) -> DType:
    """The row of a gapbench dtype name; GapbenchError (one line, exit 2) for an unknown one."""
    try:
        return DTYPES[name]
    except KeyError:
        raise GapbenchError(f"unknown dtype {name!r}; known: {', '.join(DTYPE_NAMES)}") from None


def normalize(name: object) -> str | None:
    """gapbench's name of a dtype as people write it ('bfloat16', 'torch.float16', 'float8_e4m3fn', 'FP32'), or
    None for a name it does not know."""
    if name is None:
        return None
    s = str(name).strip().lower().removeprefix("torch.")
    if s in DTYPES:
        return s
    if s in _ALIASES:
        return _ALIASES[s]
    if s.startswith(("float8", "fp8", "e4m3", "e5m2")):
        return "fp8"
    return None


def name_of(torch_dtype) -> str:
    """gapbench's name of a torch dtype ('fp32' for torch.float32), or torch's own name when it has none."""
    if torch_dtype is None:
        return ""
    return normalize(torch_dtype) or str(torch_dtype).replace("torch.", "")
