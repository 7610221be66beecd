"""Apple silicon GPUs through Metal Performance Shaders: one device sharing the host's unified memory,
MPS events, no float64, and the MPS CPU fallback switch the coverage audit uses."""

from __future__ import annotations

import platform
import subprocess

from gapbench.devices import host
from gapbench.devices.base import Backend, FrameworkNames


class Mps(Backend):
    name = "mps"
    device_type = "mps"
    torch_type = "mps"
    vendor = "Apple"
    indexed = False
    dist_backend = "gloo"
    unavailable_hint = "MPS is not available (Apple silicon with macOS 12.3+ only)"
    fallback_env = {"PYTORCH_ENABLE_MPS_FALLBACK": "1"}
    fallback_patterns = (
        r"operator '(aten::[\w.]+)' is not currently (?:supported|implemented) on the MPS backend and will fall back",
    )
    fallback_source = "aten/src/ATen/mps/MPSFallback.mm (torch 2.x)"
    frameworks = FrameworkNames(jax=("METAL", "mps"), tensorflow=("GPU",), onnxruntime=("CoreMLExecutionProvider",))

    def available(self) -> bool:
        import torch

        return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()

    def synchronize(self, index: int) -> None:
        import torch

        torch.mps.synchronize()

    def new_event(self, index: int):
        import torch

        return torch.mps.event.Event(enable_timing=True)

    def peak_memory(self, index: int) -> int | None:
        import torch

        return int(torch.mps.driver_allocated_memory())

    def empty_cache(self, index: int) -> None:
        import torch

        torch.mps.empty_cache()

    def total_memory(self, index: int) -> int:
        import torch

        if hasattr(torch.mps, "recommended_max_memory"):
            return int(torch.mps.recommended_max_memory())
        return host.host_memory()

    def dtype_unsupported(self, index: int, dtype: str) -> str:
        if dtype == "fp64":
            return "MPS has no float64"
        if dtype == "tf32":
            return "TF32 is a tensor-core input format; MPS has no TF32 path (fp32 runs instead)"
        return ""

    def identity(self, index: int) -> dict:
        return {"vendor": self.vendor, "product": apple_chip(), "arch": platform.machine(),
                "memory_bytes": host.host_memory(), "driver": None, "runtime": {"macos": platform.mac_ver()[0]}}


def apple_chip() -> str:
    try:
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "Apple GPU"
    except (OSError, subprocess.SubprocessError):
        return "Apple GPU"


BACKEND = Mps()
