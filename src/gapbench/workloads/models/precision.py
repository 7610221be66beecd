"""How a model computes: its precision (matmul dtype, weight dtype, loss scaling) and its attention backend."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from gapbench.devices import Device
from gapbench.devices.dtypes import DTYPES as TABLE
from gapbench.workloads.models.options import ATTENTION as ATTENTION_CHOICES
from gapbench.workloads.options import asked_dtypes

DTYPES = ("fp32", "bf16", "fp16")  # what the model workloads train and run in (llm-infer adds fp8)


@dataclass(frozen=True)
class Precision:
    """How a step computes: the matmul dtype, the dtype parameters are stored in, and the loss scaling.

    weights == "fp32" with dtype bf16/fp16 is mixed precision (fp32 master weights, autocast);
    weights == dtype keeps parameters (and AdamW states) in the low-precision type.
    """

    dtype: str  # fp32 | bf16 | fp16
    weights: str  # fp32 | bf16 | fp16
    source: str  # "default" or "option"

    @property
    def torch_dtype(self) -> torch.dtype:
        return TABLE[self.dtype].torch

    @property
    def weight_dtype(self) -> torch.dtype:
        return TABLE[self.weights].torch

    @property
    def autocast(self) -> bool:
        return self.dtype != "fp32" and self.weights == "fp32"

    @property
    def grad_scaler(self) -> bool:
        return self.dtype == "fp16"

    def context(self, device: Device):
        if not self.autocast:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.torch_dtype)

    def peak_dtype(self, device: Device) -> str:
        """The dtype whose dense peak MFU is taken against (fp32 matmuls may run as TF32 if allowed)."""
        if self.dtype == "fp32" and device.tf32_enabled():
            return "tf32"
        return self.dtype


def default_dtype(device: Device) -> str:
    """bf16 where the hardware has it (accelerator or CPU with AVX512-BF16/AMX/SVE-BF16);
    fp16 on an accelerator without bf16; fp32 on a CPU without bf16."""
    if device.has_native_bf16() and not device.dtype_unsupported("bf16"):
        return "bf16"
    return "fp16" if device.is_accelerator else "fp32"


def precision_of(dtype: str, *, low_memory_weights: bool = False, training: bool = True,
                 source: str = "option") -> Precision:
    """The precision a model computes `dtype` in.

    Training keeps fp32 master weights (autocast) unless `low_memory_weights` (the 7B/13B/70B-slice presets,
    whose fp32 weights plus AdamW states would not fit one device), and always for fp16, which needs fp32
    master weights for its grad scaler. Inference stores weights in the compute dtype, as pipelines do.
    """
    if dtype not in DTYPES:  # e.g. fp8 meant for gemm: a run reports it unsupported, it does not crash
        return Precision(dtype=dtype, weights=dtype, source=source)
    weights = dtype if not training or (low_memory_weights and dtype == "bf16") else "fp32"
    return Precision(dtype=dtype, weights=weights, source=source)


def choose_precisions(device: Device, options, **kw) -> list[Precision]:
    """The precisions of a run: one per dtype --dtype asked for (those the model workloads compute in first; any
    other is recorded `unsupported` before anything is built), else the device's default."""
    asked = asked_dtypes(options)
    if not asked:
        return [precision_of(default_dtype(device), source="default", **kw)]
    return [precision_of(d, **kw) for d in [*(d for d in DTYPES if d in asked), *(d for d in asked if d not in DTYPES)]]


def choose_precision(device: Device, options, **kw) -> Precision:
    """The one precision of a traced or single iteration: the first dtype asked for, else the device default."""
    asked = asked_dtypes(options)
    return precision_of(asked[0], **kw) if asked else precision_of(default_dtype(device), source="default", **kw)


def precision_unsupported(device: Device, precision: Precision) -> str:
    """'' when the device can compute in this precision at all, else why not."""
    if precision.dtype not in DTYPES:
        return f"dtype {precision.dtype!r}: the model workloads run {', '.join(DTYPES)}"
    why = device.dtype_unsupported(precision.dtype)
    return f"{precision.dtype}: {why}" if why else ""


def batch_option(options, default: int) -> int | str:
    """The `batch_size` option (checked where options are read): the preset's `default` when not given."""
    b = options.get("batch_size")
    return default if b is None else b


def attention_choice(options) -> tuple[str, list | None]:
    """(transformers attn_implementation, SDPA backends to restrict to or None) for the `attention` option."""
    asked = options.get("attention") or "sdpa"
    if asked not in ATTENTION_CHOICES:
        raise ValueError(f"attention {asked!r} is not one of {', '.join(ATTENTION_CHOICES)}")
    if asked in ("sdpa", "eager"):
        return asked, None
    from torch.nn.attention import SDPBackend

    backend = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
               "math": SDPBackend.MATH, "cudnn": SDPBackend.CUDNN_ATTENTION}[asked]
    return "sdpa", [backend]


def sdpa_context(backends: list | None):
    if not backends:
        return contextlib.nullcontext()
    from torch.nn.attention import sdpa_kernel

    return sdpa_kernel(backends)


def is_unavailable_kernel(exc: BaseException) -> bool:
    """The restricted SDPA backend cannot run these inputs on this device."""
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("No available kernel" in text or "No viable backend" in text)


def no_kernel_reason(attention: str, device: Device) -> str:
    return f"attention backend {attention!r} has no kernel for these inputs on {device}"


@contextlib.contextmanager
def creating_dtype(dtype: torch.dtype):
    """Create parameters directly in dtype (a 13B model never exists in fp32 on the way to bf16)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(before)
