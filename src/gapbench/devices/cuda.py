"""NVIDIA GPUs through CUDA: events for timing, the caching allocator's statistics, NVML for energy and
driver, NCCL for collectives, `nvidia-smi topo -m` for the NVLink/PCIe matrix.

ROCm shares torch's `cuda` device type; `gapbench.devices.rocm` builds on this module and changes what
differs on AMD GPUs.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess

from gapbench.devices.base import (
    Backend,
    EnergyCounter,
    FrameworkNames,
    GemmTuning,
    flex_attention_missing,
    triton_missing,
)
from gapbench.devices.tools import run_tool, strip_ansi


class NvmlCounter(EnergyCounter):
    """NVML's total energy counter (mJ since the driver loaded; Volta and newer)."""

    source = "nvml"

    def __init__(self, index: int):
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._h = pynvml.nvmlDeviceGetHandleByIndex(index)
        self.read()

    def read(self) -> float:
        return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._h) / 1e3


# NVML clocks-event (throttle) reasons: the ones that mean the device ran slower than it could
NVML_SLOWDOWNS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                  0x80: "power brake"}
NVML_LIMITS = {0x4: "software power cap"}  # normal at full load: recorded, not a disturbance


def nvml_telemetry(index: int) -> dict | None:
    """Clocks, temperature, power, throttle reasons and uncorrected ECC errors of one GPU through NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        return None
    out: dict = {}
    reads = {
        "sm_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        "mem_mhz": lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "temperature_c": lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "power_w": lambda: pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
        "ecc_errors": lambda: pynvml.nvmlDeviceGetTotalEccErrors(h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                                 pynvml.NVML_VOLATILE_ECC),
    }
    for key, read in reads.items():
        try:
            out[key] = float(read())
        except Exception:
            pass
    get = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
        pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    try:
        bits = int(get(h)) if get else 0
        out["throttle"] = [name for bit, name in NVML_SLOWDOWNS.items() if bits & bit]
        out["limits"] = [name for bit, name in NVML_LIMITS.items() if bits & bit]
    except Exception:
        pass
    return out or None


class TorchGpu(Backend):
    """What CUDA and ROCm share: torch.cuda for devices, streams, events and the caching allocator."""

    torch_type = "cuda"
    device_type = "cuda"
    fused_optimizer = True
    dist_backend = "nccl"

    def _hip(self) -> bool:
        import torch

        return getattr(torch.version, "hip", None) is not None

    def count(self) -> int:
        import torch

        return int(torch.cuda.device_count())

    def set_current(self, index: int) -> None:
        import torch

        torch.cuda.set_device(index)

    def synchronize(self, index: int) -> None:
        import torch

        torch.cuda.synchronize(index)

    def new_event(self, index: int):
        import torch

        return torch.cuda.Event(enable_timing=True)

    def reset_peak_memory(self, index: int) -> None:
        import torch

        torch.cuda.reset_peak_memory_stats(index)

    def peak_memory(self, index: int) -> int | None:
        import torch

        return int(torch.cuda.max_memory_allocated(index))

    def empty_cache(self, index: int) -> None:
        import torch

        torch.cuda.empty_cache()

    def total_memory(self, index: int) -> int:
        import torch

        return int(torch.cuda.get_device_properties(index).total_memory)

    def free_memory(self, index: int) -> int:
        import torch

        return int(torch.cuda.mem_get_info(index)[0])

    def host_buffer(self, n: int, dtype, pinned: bool):
        import torch

        return torch.empty(n, dtype=dtype, pin_memory=pinned)

    # the math mode is the base's (every torch switch of fp32 math, restored on exit): cuBLAS and cuDNN read them
    def tf32_enabled(self) -> bool:
        from gapbench.devices.base import tf32_switch

        return tf32_switch("cuda.matmul")

    # ---- libraries ---------------------------------------------------------------------------------
    # torch's preferred-BLAS setting as it reports it (torch._C._BlasBackend) -> the library on this stack
    blas_names: dict[str, str] = {}
    # gapbench's choice -> (what torch.backends.cuda.preferred_blas_library takes, the library it selects)
    blas_settings: dict[str, tuple[str, str]] = {}

    def gemm_library(self, index: int, dtype: str) -> str:
        import torch

        pref = str(torch.backends.cuda.preferred_blas_library()).rsplit(".", 1)[-1]
        return self.blas_names.get(pref, pref)

    def blas_choices(self, index: int) -> dict[str, str]:
        import torch

        if not hasattr(torch.backends.cuda, "preferred_blas_library"):
            return {}
        # the names this torch's preferred_blas_library takes ("ck" from torch 2.6, "hipblas" from 2.7): a choice
        # it would refuse is not offered
        known = getattr(torch.backends.cuda, "_BlasBackends", None)
        return {choice: library for choice, (setting, library) in self.blas_settings.items()
                if not isinstance(known, dict) or setting in known}

    @contextlib.contextmanager
    def prefer_blas(self, index: int, choice: str):
        import torch

        prev = torch.backends.cuda.preferred_blas_library()
        torch.backends.cuda.preferred_blas_library(self.blas_settings[choice][0])
        try:
            yield
        finally:
            torch.backends.cuda.preferred_blas_library(prev)

    def tunable_gemm_unsupported(self, index: int) -> str:
        import torch

        if not hasattr(torch.cuda, "tunable"):
            return f"torch {torch.__version__} has no torch.cuda.tunable (TunableOp)"
        return ""

    @contextlib.contextmanager
    def tunable_gemm(self, index: int, results_file: str, tune: bool):
        import torch

        t = torch.cuda.tunable
        prev = (t.is_enabled(), t.tuning_is_enabled(), t.get_filename())
        t.set_filename(results_file, insert_device_ordinal=False)
        t.enable(True)
        t.tuning_enable(tune)
        if os.path.exists(results_file):
            t.read_file(results_file)
        state = GemmTuning(results_file, known=len(t.get_results()))
        try:
            yield state
        finally:
            state.new = len(t.get_results()) - state.known
            if tune and state.new:
                write_tunableop_file(results_file)
            t.tuning_enable(prev[1])
            t.enable(prev[0])
            if prev[2]:
                t.set_filename(prev[2], insert_device_ordinal=False)

    def triton_unsupported(self, index: int) -> str:
        return triton_missing()

    def graph_unsupported(self, index: int) -> str:
        import torch

        return "" if hasattr(torch.cuda, "CUDAGraph") else f"torch {torch.__version__} has no torch.cuda.CUDAGraph"

    def capture_graph(self, index: int, fn, warmup: int = 3):
        """CUDA graphs (HIP graphs on ROCm): fn warmed up on a side stream (lazy initialisation, the allocator's
        first blocks), then captured; the graph is kept alive by the replay it returns."""
        import torch

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = fn()
        return graph.replay, out

    def inductor_gemm_templates(self, index: int) -> dict[str, str]:
        return {"TRITON": "Inductor's Triton GEMM templates (persistent and tiled mm, autotuned)"}

    def flex_attention_unsupported(self, index: int) -> str:
        missing = flex_attention_missing()
        if missing:
            return missing
        why = triton_missing()
        return f"FlexAttention is generated as Triton kernels here: {why}" if why else ""

    def _common_identity(self, index: int) -> dict:
        import torch

        props = torch.cuda.get_device_properties(index)
        libs: dict = {}
        if torch.backends.cudnn.is_available():
            libs["cudnn"] = torch.backends.cudnn.version()
        if hasattr(torch.backends.cuda, "preferred_blas_library"):
            libs["blas_lt_preferred"] = str(torch.backends.cuda.preferred_blas_library())
        try:
            v = torch.cuda.nccl.version()
            libs[self.collective_library] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:
            libs[self.collective_library] = None
        return {"product": props.name, "memory_bytes": int(props.total_memory),
                "multiprocessors": props.multi_processor_count,
                "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0) or None, "libraries": libs}


class Cuda(TorchGpu):
    name = "cuda"
    vendor = "NVIDIA"
    collective_library = "nccl"
    energy_source_name = "NVML"
    unavailable_hint = "no CUDA/ROCm device visible to this torch build"
    frameworks = FrameworkNames(jax=("cuda", "gpu"), tensorflow=("GPU",), paddle=("gpu",), mindspore="GPU",
                                onnxruntime=("CUDAExecutionProvider", "TensorrtExecutionProvider"))

    def available(self) -> bool:
        import torch

        return torch.cuda.is_available() and not self._hip()

    def _capability(self, index: int) -> tuple[int, int]:
        import torch

        return torch.cuda.get_device_capability(index)

    def llc_bytes(self, index: int) -> int:
        import torch

        l2 = int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or 0)
        return l2 or 256 * 2**20

    def dtype_unsupported(self, index: int, dtype: str) -> str:
        major, minor = self._capability(index)
        if dtype in ("bf16", "tf32") and major < 8:
            return f"{dtype} needs sm_80 or newer; this is sm_{major}{minor}"
        if dtype == "fp8" and (major, minor) < (8, 9):
            return f"fp8 tensor cores need sm_89 or newer; this is sm_{major}{minor}"
        return ""

    def has_native_bf16(self, index: int) -> bool:
        return self._capability(index)[0] >= 8

    def tf32_unsupported(self, index: int, op: str) -> str:
        why = self.dtype_unsupported(index, "tf32")
        if why or op != "attention":
            return why  # cuBLAS matmuls and cuDNN convolutions follow the switch
        return ("no fused attention kernel reads torch's TF32 switch: flash and cuDNN attention take fp16/bf16 only, "
                "and the memory-efficient kernel computes fp32 as 3×TF32 (fp32 accuracy) whatever the switch; only "
                "the unfused math path's matmuls would follow it, and SDPA does not pick that path for fp32 here")

    def semi_structured_unsupported(self, index: int) -> str:
        major, minor = self._capability(index)
        if major < 8:
            return f"2:4 semi-structured sparsity needs sparse tensor cores (sm_80 or newer); this is sm_{major}{minor}"
        return ""

    blas_names = {"Cublas": "cuBLAS", "Cublaslt": "cuBLASLt", "Default": "cuBLAS or cuBLASLt (torch's default choice)"}
    blas_settings = {"cublas": ("cublas", "cuBLAS"), "cublaslt": ("cublaslt", "cuBLASLt")}

    def attention_kernels(self, index: int) -> dict[str, str]:
        import torch

        out = {"flash": "FlashAttention-2 (built into torch)",
               "efficient": "memory-efficient attention (xFormers' CUTLASS kernels, built into torch)"}
        if torch.backends.cudnn.is_available():
            out["cudnn"] = f"cuDNN {torch.backends.cudnn.version()} SDPA"
        out["math"] = "ATen math (matmul, softmax, matmul; unfused)"
        return out

    def identity(self, index: int) -> dict:
        import torch

        ident = self._common_identity(index)
        major, minor = self._capability(index)
        ident.update(vendor=self.vendor, arch=f"sm_{major}{minor}", runtime={"cuda": torch.version.cuda},
                     driver=nvidia_driver())
        return ident

    def energy_counter(self, index: int) -> EnergyCounter | None:
        try:
            return NvmlCounter(index)
        except Exception:
            return None

    def telemetry(self, index: int) -> dict | None:
        return nvml_telemetry(index)

    def topology(self) -> dict | None:
        text = run_tool(["nvidia-smi", "topo", "-m"])
        if not text:
            return None
        return {"tool": "nvidia-smi topo -m", "text": strip_ansi(text), "links": nvlink_summary(text)}


def write_tunableop_file(path: str) -> None:
    """TunableOp's results in its own CSV layout (validators, then op, parameters, solution, time): torch
    writes the file itself only at exit, and only while tuning is still on."""
    import torch

    t = torch.cuda.tunable
    lines = [f"Validator,{k},{v}" for k, v in t.get_validators()]  # (key, value) pairs
    lines += [",".join(str(x) for x in r) for r in t.get_results()]
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def nvidia_driver() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        v = pynvml.nvmlSystemGetDriverVersion()
        return v.decode() if isinstance(v, bytes) else v
    except Exception:
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def nvlink_summary(topo_text: str) -> dict:
    """How many GPU pairs each link kind joins in an `nvidia-smi topo -m` matrix (NV#, PIX, PXB, PHB, NODE,
    SYS), each unordered pair counted once; the NIC and affinity columns are left out."""
    lines = [ln for ln in strip_ansi(topo_text).splitlines() if ln.strip()]
    header = next((ln.split() for ln in lines if ln.split() and re.fullmatch(r"GPU\d+", ln.split()[0])
                   and not ln.startswith("GPU")), None) or next((ln.split() for ln in lines), [])
    gpus = 0
    for tok in header:
        if not re.fullmatch(r"GPU\d+", tok):
            break
        gpus += 1
    counts: dict[str, int] = {}
    for line in lines:
        cells = line.split()
        m = re.fullmatch(r"GPU(\d+)", cells[0]) if cells else None
        if not m or line[0].isspace():
            continue
        i = int(m.group(1))
        for j, cell in enumerate(cells[1:1 + gpus]):
            if j > i and re.fullmatch(r"NV\d+|PIX|PXB|PHB|NODE|SYS", cell):
                counts[cell] = counts.get(cell, 0) + 1
    return counts


BACKEND = Cuda()
