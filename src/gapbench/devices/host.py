"""Facts about the host every backend shares: CPU model, ISA, caches, clock, cores, memory, environment.

These are read where a run happens and recorded in its results file (`host`, and `device` for the CPU),
so that a comparison made elsewhere later never probes the machine it is rendered on. psutil answers what it
can on every OS; what it does not know (the CPU's model, ISA and caches, cpufreq) comes from /proc and /sys.
"""

from __future__ import annotations

import os
import platform
import re

import psutil

# env vars that change what a stack does; recorded so that a result can be reproduced
ENV_PREFIXES = (
    "PYTORCH_", "TORCH_", "HIPBLASLT_", "ROCBLAS_", "MIOPEN_", "HIP_", "HSA_", "ROCR_", "NCCL_", "RCCL_",
    "CUBLAS", "CUBLASLT_", "CUDNN_", "CUDA_", "NVIDIA_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "GOMP_",
    "ONEDNN_", "DNNL_", "ZE_", "SYCL_", "ONEAPI_", "CCL_", "ASCEND_", "HCCL_", "TORCH_NPU_", "MPS_",
    "GAPBENCH_", "TRITON_", "TORCHINDUCTOR_", "MALLOC_", "GLIBC_TUNABLES",
)
ENV_EXCLUDE = ("GAPBENCH_DB",)
# env vars of the collective libraries and launchers worth recording with a distributed result
DIST_ENV_PREFIXES = ("NCCL_", "RCCL_", "GLOO_", "HCCL_", "CCL_", "FI_", "UCX_", "TORCH_NCCL_", "TORCH_DISTRIBUTED",
                     "TORCHELASTIC_", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB", "SLURM_NNODES", "SLURM_NTASKS")

ISA_FLAGS_OF_INTEREST = (
    "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "sve", "sve2", "bf16", "i8mm",
)

# an allocator's words when an allocation fails, on any stack; the last is oneDNN's when a primitive's
# scratchpad allocation fails (seen under RLIMIT_AS on the CPU)
OOM_TEXT = ("out of memory", "not enough memory", "can't allocate memory", "cannot allocate memory",
            "failed to allocate", "allocation failed", "could not create a primitive")
# a library that cannot be mapped under the worker's address-space limit (--memory-limit): memory ran out too
MAP_TEXT = "failed to map segment from shared object"


def is_oom_text(exc: BaseException) -> bool:
    """MemoryError, torch.OutOfMemoryError, or a RuntimeError in an allocator's words."""
    import torch

    oom_type = getattr(torch, "OutOfMemoryError", None)
    if isinstance(exc, MemoryError) or (oom_type is not None and isinstance(exc, oom_type)):
        return True
    if isinstance(exc, ImportError):
        return MAP_TEXT in str(exc)
    return isinstance(exc, RuntimeError) and any(t in str(exc).lower() for t in OOM_TEXT)


def host_memory() -> int:
    """Physical memory in bytes; 0 where the OS does not say."""
    try:
        return psutil.virtual_memory().total
    except OSError:
        return 0


def available_host_memory() -> int:
    """Memory new allocations may take without swapping, in bytes (Linux's MemAvailable, macOS's free and
    inactive pages); 0 where the OS does not say."""
    try:
        return psutil.virtual_memory().available
    except OSError:
        return 0


# psutil reports neither the CPU's model and vendor nor its ISA flags: those come from /proc/cpuinfo
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


def cpu_isa_flags() -> list[str]:
    info = _cpuinfo()
    flags = set((info.get("flags") or info.get("Features") or "").split())
    return [f for f in ISA_FLAGS_OF_INTEREST if f in flags]


def cpu_model() -> str:
    info = _cpuinfo()
    return info.get("model name") or info.get("Model") or platform.processor() or platform.machine()


def cpu_vendor() -> str:
    vid = _cpuinfo().get("vendor_id", "")
    return {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(vid, vid or platform.machine())


def cpu_llc_bytes() -> int | None:
    """Largest cache level's size from sysfs (per instance; L3 is usually shared); psutil has no cache sizes."""
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


def has_cpufreq() -> bool:
    """Whether the OS reports the CPU's maximum clock (cpufreq); VMs often do not."""
    # not psutil's maximum: that is the nominal clock on Intel Macs (boost left out) and has come in GHz on
    # Apple's M4 (giampaolo/psutil#2642), so a maximum from psutil does not say the OS knows the real one
    return os.path.exists("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")


MIN_PLAUSIBLE_MHZ = 100.0  # below this a clock is a unit mistake (psutil#2642), not a CPU that runs gapbench


def _plausible(mhz: float | None) -> float | None:
    return float(mhz) if mhz and mhz >= MIN_PLAUSIBLE_MHZ else None


def _clocks() -> list:
    """psutil's clocks: one per CPU on Linux (cpufreq's, else /proc/cpuinfo's nominal one), one for the whole
    machine elsewhere; [] where the OS reports none."""
    try:
        return psutil.cpu_freq(percpu=True)
    except (OSError, RuntimeError):  # RuntimeError: no power-manager entry on some Apple silicon
        return []


def cpu_max_mhz() -> float | None:
    """The highest maximum clock the OS reports for a CPU, else the nominal one it reports (on Linux without
    cpufreq, /proc/cpuinfo's "cpu MHz")."""
    clocks = _clocks()
    top = max((c.max for c in clocks if c.max), default=None)
    return _plausible(top) or (_plausible(clocks[0].current) if clocks else None)


def cpu_current_mhz() -> float | None:
    """The current clock of the first usable CPU (the machine's where the OS reports one clock for all)."""
    clocks = _clocks()
    if not clocks:
        return None
    c = usable_cpus()[0]
    return _plausible((clocks[c] if c < len(clocks) else clocks[0]).current)


def usable_cpus() -> list[int]:
    """The CPUs this process may run on: its affinity, or every CPU where the OS has none (macOS)."""
    try:
        return sorted(psutil.Process().cpu_affinity())
    except (AttributeError, psutil.Error):
        return list(range(psutil.cpu_count() or 1))


def physical_cores() -> int | None:
    """Physical cores among the CPUs this process may run on (SMT siblings counted once)."""
    cpus = usable_cpus()
    if len(cpus) >= (psutil.cpu_count() or 0):
        return psutil.cpu_count(logical=False)
    # a narrower affinity (taskset, a container's cpuset): psutil counts the machine's cores but cannot say
    # which core a CPU is on, so the kernel's topology does
    cores = set()
    for c in cpus:
        base = f"/sys/devices/system/cpu/cpu{c}/topology"
        try:
            with open(f"{base}/core_id") as f:
                core = f.read().strip()
            with open(f"{base}/physical_package_id") as f:
                pkg = f.read().strip()
        except OSError:
            return None
        cores.add((pkg, core))
    return len(cores) or None


def clock_facts() -> dict:
    """The CPU clock as recorded with a run: the OS's maximum (cpufreq), or, where the OS reports only a nominal
    clock, the nominal one and the clock gapbench measured (devices.clock)."""
    facts: dict = {"cpu_max_mhz": cpu_max_mhz(), "cpufreq": has_cpufreq()}
    if not facts["cpufreq"]:
        from gapbench.devices.clock import METHOD, measured_mhz

        mhz = measured_mhz(cpu_model())
        if mhz:
            facts.update(cpu_measured_mhz=round(mhz, 1), cpu_clock_method=METHOD)
    return facts


def host_identity() -> dict:
    return {
        "hostname": platform.node(),
        "os": f"{platform.system()} {platform.release()}",
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cpu_count": psutil.cpu_count(),
        "cpu_affinity": len(usable_cpus()),
        "physical_cores": physical_cores(),
        **clock_facts(),
        "isa": cpu_isa_flags(),
        "memory_bytes": host_memory(),
        "python": platform.python_version(),
    }


def relevant_env() -> dict[str, str]:
    """The variables that change what a stack does, as recorded with a run: never gapbench's internal ones (the
    tokens, pipes and job files a parent hands its children)."""
    from gapbench.results.records import recorded_env

    return recorded_env({k: v for k, v in sorted(os.environ.items())
                         if k.startswith(ENV_PREFIXES) and k not in ENV_EXCLUDE})


def blas_libraries() -> dict:
    """The BLAS, LAPACK, oneDNN and OpenMP builds torch reports, and its thread count."""
    import torch

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
    return libs


def common_identity(device) -> dict:
    """The identity fields every backend records: type, index, count, torch, libraries, env."""
    import torch

    return {
        "type": device.kind,
        "backend": device.backend.name,
        "index": device.index,
        "count": device.count,
        "torch": torch.__version__,
        "libraries": blas_libraries(),
        "env": relevant_env(),
        "timer": device.timer_kind,
        "llc_bytes": device.llc_bytes,
    }
