"""Intel GPUs through torch.xpu (oneAPI/SYCL): events, the allocator's statistics, XCCL collectives,
`xpu-smi` topology, and the XPU fallback switch the coverage audit uses."""

from __future__ import annotations

from typing import Any

from gapbench.devices.base import Backend, FrameworkNames, flex_attention_missing, scaled_mm_missing, triton_missing
from gapbench.devices.tools import run_tool


def xccl_missing(available: Any, version: str) -> str:
    """'' when torch.distributed's is_xccl_available (torch 2.6 and later; None on an older torch) says this build
    has the xccl backend, else why XPU ranks cannot form a group."""
    if callable(available) and available():
        return ""
    return f"torch {version} has no xccl backend (XPU rank groups need torch 2.6 with XCCL); use --backend gloo"


class Xpu(Backend):
    name = "xpu"
    device_type = "xpu"
    torch_type = "xpu"
    vendor = "Intel"
    dist_backend = "xccl"
    collective_library = "oneCCL"
    unavailable_hint = "this torch build sees no Intel XPU"
    fallback_env = {"PYTORCH_ENABLE_XPU_FALLBACK": "1", "PYTORCH_DEBUG_XPU_FALLBACK": "1"}
    fallback_patterns = (
        r"operator '(aten::[\w.]+)' is not currently (?:supported|implemented) on the XPU backend and will fall back",
        r"Aten Op fallback from XPU to CPU",
    )
    fallback_source = "intel/torch-xpu-ops src/ATen/native/xpu/XPUFallback.template"
    frameworks = FrameworkNames(jax=("xpu", "sycl"), tensorflow=("XPU", "GPU"), paddle=("intel_gpu", "xpu"),
                                paddle_xpu_build=True, onnxruntime=("OpenVINOExecutionProvider", "DmlExecutionProvider"))

    def available(self) -> bool:
        import torch

        return hasattr(torch, "xpu") and torch.xpu.is_available()

    def dist_backend_missing(self) -> str:
        import torch
        import torch.distributed as dist

        return xccl_missing(getattr(dist, "is_xccl_available", None), torch.__version__)

    def count(self) -> int:
        import torch

        return int(torch.xpu.device_count())

    def set_current(self, index: int) -> None:
        import torch

        torch.xpu.set_device(index)

    def synchronize(self, index: int) -> None:
        import torch

        torch.xpu.synchronize(index)

    def new_event(self, index: int):
        import torch

        return torch.xpu.Event(enable_timing=True)

    def reset_peak_memory(self, index: int) -> None:
        import torch

        if hasattr(torch.xpu, "reset_peak_memory_stats"):  # torch 2.5 and later
            torch.xpu.reset_peak_memory_stats(index)

    def peak_memory(self, index: int) -> int | None:
        import torch

        if not hasattr(torch.xpu, "max_memory_allocated"):  # torch 2.5 and later: before, the allocator counted none
            return None
        return int(torch.xpu.max_memory_allocated(index))

    def empty_cache(self, index: int) -> None:
        import torch

        torch.xpu.empty_cache()

    def total_memory(self, index: int) -> int:
        import torch

        return int(torch.xpu.get_device_properties(index).total_memory)

    def free_memory(self, index: int) -> int:
        import torch

        get = getattr(torch.xpu, "mem_get_info", None)  # torch 2.6 and later
        try:
            return int(get(index)[0]) if get else self.total_memory(index)
        except Exception:
            return self.total_memory(index)

    def matmul_unsupported(self, index: int, dtype: str) -> str:
        import torch

        if dtype == "fp8" and scaled_mm_missing():
            return scaled_mm_missing()
        if dtype == "int8" and not hasattr(torch, "_int_mm"):
            return f"torch {torch.__version__} has no torch._int_mm"
        return ""

    def gemm_library(self, index: int, dtype: str) -> str:
        return "oneDNN (torch's XPU matmul)"

    def triton_unsupported(self, index: int) -> str:
        return triton_missing()

    def inductor_gemm_templates(self, index: int) -> dict[str, str]:
        return {"TRITON": "Inductor's Triton GEMM templates (Intel's XPU backend for Triton)"}

    def flex_attention_unsupported(self, index: int) -> str:
        missing = flex_attention_missing()
        if missing:
            return missing
        why = triton_missing()
        return f"FlexAttention is generated as Triton kernels here: {why}" if why else ""

    def attention_kernels(self, index: int) -> dict[str, str]:
        from torch.nn.attention import SDPBackend

        out = {}
        if hasattr(SDPBackend, "OVERRIDEABLE"):  # torch 2.5 and later: the backend XPU's fused SDPA is chosen by
            out["overrideable"] = "oneDNN SDPA (torch's XPU fused attention)"
        out["math"] = "ATen math (matmul, softmax, matmul; unfused)"
        return out

    def identity(self, index: int) -> dict:
        import torch

        props = torch.xpu.get_device_properties(index)
        arch = getattr(props, "device_arch", None) or getattr(props, "platform_name", "") or ""
        return {"vendor": self.vendor, "product": props.name, "memory_bytes": int(props.total_memory),
                "driver": getattr(props, "driver_version", None), "arch": str(arch) or None,
                "runtime": {"sycl": getattr(torch.version, "xpu", None)}}

    def topology(self) -> dict | None:
        text = run_tool(["xpu-smi", "topology", "-m"])
        return {"tool": "xpu-smi topology -m", "text": text} if text else None


BACKEND = Xpu()
