"""What the accelerator is and how to talk to it: detection, identity, synchronisation, timers, memory.

Every backend difference lives here. The vendor-neutral `torch.accelerator` API is used where the
installed torch has it; vendor branches only where they must be.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
from dataclasses import dataclass
from functools import cached_property

import torch

from gapbench.errors import GapbenchError

DEVICE_TYPES = ("cuda", "xpu", "npu", "mps", "cpu")

# env vars that change what a backend does; recorded so a result can be reproduced
ENV_PREFIXES = (
    "PYTORCH_", "TORCH_", "HIPBLASLT_", "ROCBLAS_", "MIOPEN_", "HIP_", "HSA_", "ROCR_", "NCCL_", "RCCL_",
    "CUBLAS", "CUBLASLT_", "CUDNN_", "CUDA_", "NVIDIA_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_",
    "ONEDNN_", "DNNL_", "ZE_", "SYCL_", "ONEAPI_", "CCL_", "ASCEND_", "HCCL_", "TORCH_NPU_", "MPS_",
    "GAPBENCH_", "TRITON_",
)
ENV_EXCLUDE = ("GAPBENCH_DB",)


def _npu_available() -> bool:
    try:
        import torch_npu  # noqa: F401
    except Exception:
        return False
    return hasattr(torch, "npu") and torch.npu.is_available()


def available_types() -> list[str]:
    """Device types usable in this process, best first."""
    out = []
    if torch.cuda.is_available():
        out.append("cuda")
    if hasattr(torch, "xpu") and torch.xpu.is_available():
        out.append("xpu")
    if _npu_available():
        out.append("npu")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        out.append("mps")
    out.append("cpu")
    return out


def resolve(spec: str | None) -> Device:
    """'cuda', 'cuda:1', 'cpu' or None (best found) -> Device; unknown or absent -> GapbenchError."""
    if not spec or spec == "auto":
        return Device(available_types()[0], 0)
    m = re.fullmatch(r"([a-z]+)(?::(\d+))?", spec.strip())
    if not m or m.group(1) not in DEVICE_TYPES:
        raise GapbenchError(f"unknown device {spec!r}; expected one of {', '.join(DEVICE_TYPES)} (optionally :INDEX)")
    kind, index = m.group(1), int(m.group(2) or 0)
    if kind not in available_types():
        hint = {
            "cuda": "no CUDA/ROCm device visible to this torch build",
            "npu": "torch_npu is not installed or sees no Ascend device",
            "xpu": "this torch build sees no Intel XPU",
            "mps": "MPS is not available (Apple silicon with macOS 12.3+ only)",
        }[kind]
        raise GapbenchError(f"device {spec!r} is not available: {hint}; found: {', '.join(available_types())}")
    dev = Device(kind, index)
    if index >= dev.count:
        raise GapbenchError(f"device {spec!r}: only {dev.count} {kind} device(s) visible")
    return dev


@dataclass(frozen=True)
class Device:
    type: str
    index: int = 0

    def __str__(self) -> str:
        return self.type if self.type in ("cpu", "mps") else f"{self.type}:{self.index}"

    @property
    def torch_device(self) -> torch.device:
        return torch.device(self.type) if self.type == "cpu" else torch.device(self.type, self.index)

    @property
    def is_cpu(self) -> bool:
        return self.type == "cpu"

    @property
    def module(self):
        """The torch.<backend> module (torch.cuda, torch.xpu, torch.npu, torch.mps), None for the CPU."""
        return None if self.is_cpu else getattr(torch, self.type, None)

    @property
    def is_rocm(self) -> bool:
        return self.type == "cuda" and getattr(torch.version, "hip", None) is not None

    @property
    def count(self) -> int:
        if self.is_cpu:
            return 1
        if self.type == "mps":
            return 1
        return int(self.module.device_count())

    def set_current(self) -> None:
        if self.type in ("cuda", "xpu", "npu"):
            self.module.set_device(self.index)

    # ---- execution --------------------------------------------------------------------------
    def synchronize(self) -> None:
        if self.is_cpu:
            return
        acc = getattr(torch, "accelerator", None)
        if acc is not None and hasattr(acc, "synchronize") and self.type != "mps":
            acc.synchronize(self.torch_device)
        else:
            self.module.synchronize()

    @cached_property
    def has_events(self) -> bool:
        """Whether device-side timing events are available (all accelerators torch drives; not the CPU)."""
        if self.is_cpu:
            return False
        try:
            t = self.new_timer()
            t.start()
            t.stop()
            return True
        except Exception:
            return False

    def new_timer(self) -> Timer:
        if self.is_cpu:
            return HostTimer(self)
        return EventTimer(self)

    # ---- memory ----------------------------------------------------------------------------
    def reset_peak_memory(self) -> None:
        if self.type in ("cuda", "xpu", "npu"):
            self.module.reset_peak_memory_stats(self.index)

    def peak_memory(self) -> int | None:
        """Peak bytes allocated by torch on the device since the last reset (None on the CPU)."""
        if self.type in ("cuda", "xpu", "npu"):
            return int(self.module.max_memory_allocated(self.index))
        if self.type == "mps":
            return int(torch.mps.driver_allocated_memory())
        return None

    def empty_cache(self) -> None:
        if self.type in ("cuda", "xpu", "npu", "mps"):
            self.module.empty_cache()

    @cached_property
    def total_memory(self) -> int:
        if self.type in ("cuda", "xpu", "npu"):
            return int(self.module.get_device_properties(self.index).total_memory)
        if self.type == "mps":
            return int(torch.mps.recommended_max_memory()) if hasattr(torch.mps, "recommended_max_memory") else host_memory()
        return host_memory()

    def free_memory(self) -> int:
        if self.type in ("cuda", "npu") and hasattr(self.module, "mem_get_info"):
            return int(self.module.mem_get_info(self.index)[0])
        if self.type == "xpu" and hasattr(torch.xpu, "mem_get_info"):
            try:
                return int(torch.xpu.mem_get_info(self.index)[0])
            except Exception:
                pass
        if self.is_cpu:
            return available_host_memory()
        return self.total_memory

    @cached_property
    def llc_bytes(self) -> int:
        """Last-level cache size: what a cache flush must overwrite. Unknown -> a generous 256 MiB."""
        if self.is_cpu:
            return cpu_llc_bytes() or 256 * 2**20
        if self.type == "cuda":
            props = torch.cuda.get_device_properties(self.index)
            l2 = int(getattr(props, "L2_cache_size", 0) or 0)
            # MI300X/MI325X/MI355X: 256 MiB Infinity Cache beyond L2
            name = getattr(props, "gcnArchName", "") or ""
            if self.is_rocm and name.startswith(("gfx942", "gfx950")):
                return max(l2, 256 * 2**20)
            return l2 or 256 * 2**20
        return 256 * 2**20

    # ---- identity -------------------------------------------------------------------------
    def identity(self) -> dict:
        return device_identity(self)


class Timer:
    def start(self) -> None: ...
    def stop(self) -> float: ...  # seconds since start, after the device finished the enqueued work


class HostTimer(Timer):
    """Host clock with a synchronize on both ends."""

    kind = "host-sync"

    def __init__(self, device: Device):
        self.device = device
        self._t0 = 0.0

    def start(self) -> None:
        self.device.synchronize()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        self.device.synchronize()
        return time.perf_counter() - self._t0


class EventTimer(Timer):
    """Device events: the time the device spent between two points of its stream."""

    kind = "device-events"

    def __init__(self, device: Device):
        self.device = device
        self._a = _new_event(device)
        self._b = _new_event(device)

    def start(self) -> None:
        self._a.record()

    def stop(self) -> float:
        self._b.record()
        self._b.synchronize()
        return self._a.elapsed_time(self._b) / 1e3


def _new_event(device: Device):
    if device.type == "mps":
        return torch.mps.event.Event(enable_timing=True)
    ev = getattr(torch, "Event", None)
    if ev is not None:
        try:
            return ev(device=device.torch_device, enable_timing=True)
        except Exception:
            pass
    return device.module.Event(enable_timing=True)


# ---- host facts ---------------------------------------------------------------------------------

def host_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def available_host_memory() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return host_memory()


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    k, _, v = line.partition(":")
                    info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return info


ISA_FLAGS_OF_INTEREST = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "sve", "sve2", "bf16", "i8mm",
)


def cpu_isa_flags() -> list[str]:
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    return [f for f in ISA_FLAGS_OF_INTEREST if f in flags]


def cpu_model() -> str:
    info = _cpuinfo()
    return info.get("model name") or info.get("Model") or platform.processor() or platform.machine()


def cpu_llc_bytes() -> int | None:
    """Largest cache level's size from sysfs (per instance; L3 is usually shared)."""
    best = None
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            if not entry.startswith("index"):
                continue
            with open(f"{base}/{entry}/size") as f:
                text = f.read().strip()
            m = re.fullmatch(r"(\d+)([KMG]?)", text)
            if not m:
                continue
            size = int(m.group(1)) * {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[m.group(2)]
            best = max(best or 0, size)
    except OSError:
        return None
    return best


def cpu_max_mhz() -> float | None:
    for path in ("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq",):
        try:
            with open(path) as f:
                return int(f.read().strip()) / 1000
        except (OSError, ValueError):
            pass
    mhz = _cpuinfo().get("cpu MHz")
    try:
        return float(mhz) if mhz else None
    except ValueError:
        return None


def host_identity() -> dict:
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_max_mhz": cpu_max_mhz(),
        "isa": cpu_isa_flags(),
        "memory_bytes": host_memory(),
        "python": platform.python_version(),
    }


def relevant_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES) and k not in ENV_EXCLUDE}


def _blas_libraries() -> dict:
    libs: dict[str, object] = {}
    try:
        cfg = torch.__config__.show()
    except Exception:
        cfg = ""
    for key, pattern in (("blas", r"BLAS_INFO=(\w+)"), ("lapack", r"LAPACK_INFO=(\w+)"),
                         ("mkl", r"Intel\(R\) (?:oneAPI )?Math Kernel Library Version ([\w.]+)"),
                         ("mkldnn", r"MKL-DNN v([\w.]+)|oneDNN v([\w.]+)"), ("openmp", r"OpenMP (\d+)")):
        m = re.search(pattern, cfg)
        if m:
            libs[key] = next(g for g in m.groups() if g)
    libs["threads"] = torch.get_num_threads()
    try:
        libs["parallel"] = torch.__config__.parallel_info().splitlines()[1:3]
    except Exception:
        pass
    if torch.backends.cudnn.is_available():
        libs["cudnn"] = torch.backends.cudnn.version()
    return libs


def _nvidia_driver() -> str | None:
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


def _amd_driver() -> str | None:
    try:
        with open("/sys/module/amdgpu/version") as f:
            return f.read().strip() or None
    except OSError:
        return None


def device_identity(dev: Device) -> dict:
    ident: dict = {
        "type": dev.type,
        "index": dev.index,
        "count": dev.count,
        "torch": torch.__version__,
        "libraries": _blas_libraries(),
        "env": relevant_env(),
    }
    if dev.is_cpu:
        ident.update(vendor=_cpu_vendor(), product=cpu_model(), arch=platform.machine(), isa=cpu_isa_flags(),
                     memory_bytes=host_memory(), runtime={}, driver=None, cores=os.cpu_count(),
                     threads=torch.get_num_threads(), llc_bytes=dev.llc_bytes)
        return ident
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev.index)
        ident["product"] = props.name
        ident["memory_bytes"] = int(props.total_memory)
        ident["multiprocessors"] = props.multi_processor_count
        ident["l2_bytes"] = int(getattr(props, "L2_cache_size", 0) or 0) or None
        ident["llc_bytes"] = dev.llc_bytes
        if dev.is_rocm:
            ident["vendor"] = "AMD"
            ident["backend"] = "rocm"
            ident["arch"] = (getattr(props, "gcnArchName", "") or "").split(":")[0] or None
            ident["runtime"] = {"hip": torch.version.hip}
            ident["driver"] = _amd_driver()
            ident["libraries"]["rccl"] = _nccl_version()
        else:
            ident["vendor"] = "NVIDIA"
            ident["backend"] = "cuda"
            ident["arch"] = f"sm_{props.major}{props.minor}"
            ident["runtime"] = {"cuda": torch.version.cuda}
            ident["driver"] = _nvidia_driver()
            ident["libraries"]["nccl"] = _nccl_version()
        ident["libraries"]["blas_lt_preferred"] = str(torch.backends.cuda.preferred_blas_library()) \
            if hasattr(torch.backends.cuda, "preferred_blas_library") else None
    elif dev.type == "xpu":
        props = torch.xpu.get_device_properties(dev.index)
        ident.update(vendor="Intel", backend="xpu", product=props.name,
                     memory_bytes=int(props.total_memory), driver=getattr(props, "driver_version", None),
                     arch=str(getattr(props, "device_arch", None) or getattr(props, "platform_name", "") or "") or None,
                     runtime={"sycl": getattr(torch.version, "xpu", None)})
    elif dev.type == "npu":
        import torch_npu

        ident.update(vendor="Huawei", backend="npu", product=torch.npu.get_device_name(dev.index),
                     memory_bytes=int(torch.npu.get_device_properties(dev.index).total_memory),
                     arch=torch.npu.get_device_name(dev.index), driver=None,
                     runtime={"cann": getattr(torch_npu.version, "cann", None) if hasattr(torch_npu, "version") else None,
                              "torch_npu": getattr(torch_npu, "__version__", None)})
    elif dev.type == "mps":
        ident.update(vendor="Apple", backend="mps", product=_apple_chip(), arch=platform.machine(),
                     memory_bytes=host_memory(), driver=None, runtime={"macos": platform.mac_ver()[0]})
    return ident


def _nccl_version():
    try:
        v = torch.cuda.nccl.version()
        return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        return None


def _cpu_vendor() -> str:
    vid = _cpuinfo().get("vendor_id", "")
    return {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(vid, vid or platform.machine())


def _apple_chip() -> str:
    try:
        out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "Apple GPU"
    except (OSError, subprocess.SubprocessError):
        return "Apple GPU"


def supports_dtype(dev: Device, dtype: torch.dtype) -> tuple[bool, str]:
    """Whether the device can compute in dtype at all (not whether it is fast); with the reason if not."""
    if dtype == torch.float64 and dev.type == "mps":
        return False, "MPS has no float64"
    if dtype == torch.bfloat16 and dev.type == "cuda" and not dev.is_rocm:
        major = torch.cuda.get_device_capability(dev.index)[0]
        if major < 8:
            return False, f"bf16 needs sm_80 or newer; this is sm_{major}x"
    return True, ""


def has_native_bf16(dev: Device) -> bool:
    """Hardware bf16 arithmetic: accelerators that have it, CPUs with AVX512-BF16/AMX/SVE-BF16."""
    if dev.is_cpu:
        flags = set(cpu_isa_flags())
        return bool(flags & {"avx512_bf16", "amx_bf16", "bf16"})
    if dev.type == "cuda":
        if dev.is_rocm:
            return True
        return torch.cuda.is_bf16_supported()
    return dev.type in ("xpu", "npu", "mps")
