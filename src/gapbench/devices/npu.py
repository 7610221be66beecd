"""Huawei Ascend NPUs through torch_npu (CANN): events, the allocator's statistics, HCCL collectives,
`npu-smi` topology (HCCS), and how torch_npu reports an operator it ran on the CPU."""

from __future__ import annotations

from gapbench.devices.base import Backend, FrameworkNames
from gapbench.devices.tools import run_tool


def _torch_npu():
    try:
        import torch_npu
    except Exception:
        return None
    return torch_npu


class Npu(Backend):
    name = "npu"
    device_type = "npu"
    torch_type = "npu"
    vendor = "Huawei"
    dist_backend = "hccl"
    collective_library = "hccl"
    unavailable_hint = "torch_npu is not installed or sees no Ascend device"
    # torch_npu falls back by default; TORCH_NPU_FALLBACK_CPU_DISABLE=1 turns each fallback into an error (then
    # classified unsupported): the user's setting is left alone
    fallback_env = {}
    fallback_patterns = (
        r"operator '(aten::[\w.]+)' is not currently (?:supported|implemented) on the NPU backend and will fall back",
        r"(aten::[\w.]+)\S* .*(?:fallback|fall back) to (?:run on the )?CPU",
    )
    fallback_source = "Ascend/pytorch torch_npu/csrc/aten/common (TORCH_NPU_FALLBACK_CPU_DISABLE)"
    frameworks = FrameworkNames(torch_modules=("torch_npu",), jax=("npu",), tensorflow=("NPU",), paddle=("npu",),
                                mindspore="Ascend", onnxruntime=("CANNExecutionProvider",))

    def _mod(self):
        import torch

        _torch_npu()
        return torch.npu

    def available(self) -> bool:
        import torch

        return _torch_npu() is not None and hasattr(torch, "npu") and torch.npu.is_available()

    def count(self) -> int:
        return int(self._mod().device_count())

    def set_current(self, index: int) -> None:
        self._mod().set_device(index)

    def synchronize(self, index: int) -> None:
        self._mod().synchronize()

    def new_event(self, index: int):
        return self._mod().Event(enable_timing=True)

    def reset_peak_memory(self, index: int) -> None:
        self._mod().reset_peak_memory_stats(index)

    def peak_memory(self, index: int) -> int | None:
        return int(self._mod().max_memory_allocated(index))

    def empty_cache(self, index: int) -> None:
        self._mod().empty_cache()

    def total_memory(self, index: int) -> int:
        return int(self._mod().get_device_properties(index).total_memory)

    def free_memory(self, index: int) -> int:
        return int(self._mod().mem_get_info(index)[0])

    def identity(self, index: int) -> dict:
        mod, tn = self._mod(), _torch_npu()
        name = mod.get_device_name(index)
        return {"vendor": self.vendor, "product": name, "memory_bytes": self.total_memory(index), "arch": name,
                "driver": None,
                "runtime": {"cann": getattr(getattr(tn, "version", None), "cann", None),
                            "torch_npu": getattr(tn, "__version__", None)}}

    def topology(self) -> dict | None:
        text = run_tool(["npu-smi", "info", "-t", "topo"])
        return {"tool": "npu-smi info -t topo", "text": text} if text else None


BACKEND = Npu()
