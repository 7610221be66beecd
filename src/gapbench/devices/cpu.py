"""The host CPU as a backend: the embedded default, what tests and CI run on.

Timing is the host clock (nothing runs asynchronously); memory is the process's; energy is RAPL
(Intel and AMD package counters under /sys/class/powercap) where it is readable.
"""

from __future__ import annotations

import glob
import os
import platform

from gapbench.devices import host
from gapbench.devices.base import Backend, EnergyCounter, FrameworkNames, flex_attention_missing


def rapl_zones() -> list[str]:
    """Package-level zones only (intel-rapl:N), not their sub-zones (intel-rapl:N:M): no double counting."""
    return sorted(p for p in glob.glob("/sys/class/powercap/*-rapl:*") if p.count(":") == 1
                  and os.access(os.path.join(p, "energy_uj"), os.R_OK))


class RaplCounter(EnergyCounter):
    """The sum of the package zones' energy counters, with each zone's wrap-around undone."""

    source = "rapl"

    def __init__(self, zones: list[str]):
        self.zones = zones
        self._last = [self._zone(z) for z in zones]
        self._total = 0.0

    @staticmethod
    def _zone(zone: str) -> tuple[int, int]:
        with open(os.path.join(zone, "energy_uj")) as f:
            e = int(f.read())
        try:
            with open(os.path.join(zone, "max_energy_range_uj")) as f:
                rng = int(f.read())
        except OSError:
            rng = 2**32
        return e, rng

    def read(self) -> float:
        for i, z in enumerate(self.zones):
            e1, rng = self._zone(z)
            e0, _ = self._last[i]
            self._total += (e1 - e0) if e1 >= e0 else (e1 + rng - e0)
            self._last[i] = (e1, rng)
        return self._total / 1e6


def numpy_blas() -> str:
    """numpy's BLAS: name, version, the kernels it picked and its threading ('' without numpy). From
    threadpoolctl's view of the loaded library where it sees one, else numpy's build configuration."""
    try:
        import numpy
    except ImportError:
        return ""
    try:
        build = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:
        build = {}
    name, version = str(build.get("name") or "numpy's BLAS"), build.get("version")
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return f"{name} {version}" if version else name
    blas = [lib for lib in threadpool_info() if lib.get("user_api") == "blas"
            and lib.get("internal_api", "") in name.lower()]
    # numpy's own copy first: scipy (which transformers imports where it is installed) loads an OpenBLAS of its own
    blas.sort(key=lambda lib: os.sep + "numpy" not in str(lib.get("filepath", "")))
    for lib in blas:
            extra = ", ".join(f"{v} {k}" for k, v in (("kernels", lib.get("architecture")),
                                                        ("threading", lib.get("threading_layer"))) if v)
            return f"{lib['internal_api']} {lib.get('version') or version or ''} ({extra})".replace("  ", " ")
    return f"{name} {version}" if version else name


class Cpu(Backend):
    name = "cpu"
    device_type = "cpu"
    torch_type = "cpu"
    vendor = ""
    is_accelerator = False
    indexed = False
    dist_backend = "gloo"
    collective_library = "gloo"
    energy_source_name = "RAPL"
    host_memory_is_device_memory = True
    frameworks = FrameworkNames(jax=("cpu",), tensorflow=(), paddle=(), mindspore="CPU", onnxruntime=())

    def available(self) -> bool:
        return True

    def total_memory(self, index: int) -> int:
        return host.host_memory()

    def free_memory(self, index: int) -> int:
        return host.available_host_memory()

    def llc_bytes(self, index: int) -> int:
        return host.cpu_llc_bytes() or 256 * 2**20

    def host_buffer(self, n: int, dtype, pinned: bool):
        import torch

        return torch.empty(n, dtype=dtype)  # host and device are one memory: nothing to pin

    def dtype_unsupported(self, index: int, dtype: str) -> str:
        if dtype == "tf32":
            return "TF32 is a tensor-core input format; this device has no TF32 path (fp32 runs instead)"
        return ""

    def has_native_bf16(self, index: int) -> bool:
        """AVX512-BF16, AMX-BF16 or Arm BF16 (BFMMLA): bf16 arithmetic in hardware."""
        return bool(set(host.cpu_isa_flags()) & {"avx512_bf16", "amx_bf16", "bf16"})

    def semi_structured_unsupported(self, index: int) -> str:
        return ("2:4 semi-structured sparsity (torch.sparse.to_sparse_semi_structured) has kernels for the sparse "
                "tensor cores of CUDA (sm_80 and newer) and ROCm GPUs only; the CPU has none")

    def gemm_library(self, index: int, dtype: str) -> str:
        import torch

        libs = host.blas_libraries()
        onednn = f"oneDNN {libs['mkldnn']}" if libs.get("mkldnn") else "oneDNN"
        if dtype == "bf16" and torch.ops.mkldnn._is_mkldnn_bf16_supported():
            return onednn
        if dtype == "fp16" and torch.ops.mkldnn._is_mkldnn_fp16_supported():
            return onednn
        if dtype != "fp32":
            return f"ATen's own CPU GEMM (no {onednn} {dtype} path on this CPU)"
        blas = str(libs.get("blas") or "ATen's own CPU GEMM")
        return f"MKL {libs['mkl']}" if blas.lower() == "mkl" and libs.get("mkl") else blas

    def host_gemm_libraries(self, index: int) -> dict[str, str]:
        import torch

        out = {}
        blas = numpy_blas()
        if blas:
            out["numpy"] = blas
        if torch.backends.mkldnn.is_available():
            v = host.blas_libraries().get("mkldnn")
            out["onednn"] = f"oneDNN {v}" if v else "oneDNN"
        return out

    def inductor_gemm_templates(self, index: int) -> dict[str, str]:
        return {"CPP": "Inductor's C++ GEMM template (micro-kernels for AVX2/AVX-512/AMX, weights packed at compile)"}

    def attention_kernels(self, index: int) -> dict[str, str]:
        return {"flash": "ATen's CPU flash-attention kernel (C++, vectorised)",
                "math": "ATen math (matmul, softmax, matmul; unfused)"}

    def flex_attention_unsupported(self, index: int) -> str:
        import importlib.util

        import torch

        missing = flex_attention_missing()
        if missing:
            return missing
        if importlib.util.find_spec("torch._inductor.codegen.cpp_flex_attention_template") is None:
            return (f"torch {torch.__version__}'s Inductor has no C++ FlexAttention template (FlexAttention on a CPU "
                    "came with torch 2.6)")
        return ""

    def identity(self, index: int) -> dict:
        import torch

        return {"vendor": host.cpu_vendor(), "product": host.cpu_model(), "arch": platform.machine(),
                "isa": host.cpu_isa_flags(), "memory_bytes": host.host_memory(), "runtime": {}, "driver": None,
                "cores": os.cpu_count(), "physical_cores": host.physical_cores(), "threads": torch.get_num_threads(),
                **host.clock_facts()}

    def energy_counter(self, index: int) -> EnergyCounter | None:
        zones = rapl_zones()
        if not zones:
            return None
        try:
            return RaplCounter(zones)
        except OSError:
            return None


BACKEND = Cpu()
