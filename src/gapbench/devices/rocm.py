"""AMD GPUs through ROCm/HIP, which torch exposes as its `cuda` device type: events and the caching
allocator as on CUDA; gfx architecture names, the fnuz fp8 encoding of gfx942, the 256 MiB Infinity
Cache of MI300-class parts, amdsmi for energy, RCCL for collectives, `rocm-smi --showtopo` for XGMI.
"""

from __future__ import annotations

import contextlib
import os
import re

from gapbench.devices.base import EnergyCounter, FrameworkNames, fp32_math, tf32_switch
from gapbench.devices.cuda import TorchGpu
from gapbench.devices.tools import run_tool

# MI300X/MI325X (gfx942) and MI355X (gfx950): a 256 MiB Infinity Cache beyond L2
INFINITY_CACHE_ARCHS = ("gfx942", "gfx950")
FNUZ_FP8_ARCHS = ("gfx942",)  # their fp8 units use the e4m3fnuz encoding (OCP e4m3fn from gfx950 on)
TF32_ARCHS = ("gfx94", "gfx95")  # xf32 (TF32) matrix instructions: MI300-class and later; not MI200 (gfx90a), not RDNA
# torch 2.7 brought TF32 through hipBLASLt, and asks this variable at each matmul besides its own switch (builds
# from before pytorch#147186 read it once, at the first matmul); later torch reads its switch alone
HIPBLASLT_TF32 = "HIPBLASLT_ALLOW_TF32"
MIOPEN_NO_TF32 = ("torch's MIOpen convolutions have no TF32 switch: torch 2.4–2.11 pass neither "
                  "torch.backends.cudnn.allow_tf32 nor cudnn.conv.fp32_precision to MIOpen, so fp32 convolutions run "
                  "in fp32 whatever the setting and a tf32 row would measure fp32; it cannot be switched from inside "
                  "the process")
ATTENTION_NO_TF32 = ("torch's fused attention kernels on ROCm (AOTriton, CK) are built ahead of time and read no TF32 "
                     "switch; only the unfused math path's matmuls would follow it")


def torch_version() -> tuple[int, int]:
    import torch

    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


class AmdsmiCounter(EnergyCounter):
    source = "amdsmi"

    def __init__(self, index: int):
        import amdsmi

        amdsmi.amdsmi_init()
        self._amdsmi = amdsmi
        self._h = amdsmi.amdsmi_get_processor_handles()[index]
        self.read()

    def read(self) -> float:
        info = self._amdsmi.amdsmi_get_energy_count(self._h)
        counter = info.get("energy_accumulator", info.get("power"))
        res = info.get("counter_resolution", 15.3)  # µJ per count
        return counter * res / 1e6


class Rocm(TorchGpu):
    name = "rocm"
    aliases = ("rocm", "hip")
    vendor = "AMD"
    collective_library = "rccl"
    energy_source_name = "amdsmi"
    unavailable_hint = "no ROCm device visible to this torch build (a ROCm build of torch is needed)"
    frameworks = FrameworkNames(jax=("rocm", "gpu"), tensorflow=("GPU",), paddle=("gpu",), mindspore=None,
                                onnxruntime=("ROCMExecutionProvider", "MIGraphXExecutionProvider"))

    blas_names = {"Cublas": "rocBLAS", "Cublaslt": "hipBLASLt", "Ck": "Composable Kernel",
                  "Default": "hipBLASLt or rocBLAS (torch's default choice per architecture)"}
    # hipBLASLt against rocBLAS, and Composable Kernel, the GEMMs the stack offers beside its default
    blas_settings = {"hipblaslt": ("hipblaslt", "hipBLASLt"), "rocblas": ("hipblas", "rocBLAS"),
                     "ck": ("ck", "Composable Kernel (CK)")}

    def available(self) -> bool:
        import torch

        return torch.cuda.is_available() and self._hip()

    def attention_kernels(self, index: int) -> dict[str, str]:
        import torch

        fa = "AOTriton"
        if hasattr(torch.backends.cuda, "preferred_rocm_fa_library"):  # TORCH_ROCM_FA_PREFER_CK=1 selects CK
            fa = str(torch.backends.cuda.preferred_rocm_fa_library()).rsplit(".", 1)[-1].replace("Default", "AOTriton")
        return {"flash": f"{fa} flash attention",
                "efficient": "AOTriton memory-efficient attention",
                "math": "ATen math (matmul, softmax, matmul; unfused)"}

    def arch(self, index: int) -> str:
        import torch

        return (getattr(torch.cuda.get_device_properties(index), "gcnArchName", "") or "").split(":")[0]

    def llc_bytes(self, index: int) -> int:
        import torch

        l2 = int(getattr(torch.cuda.get_device_properties(index), "L2_cache_size", 0) or 0)
        if self.arch(index).startswith(INFINITY_CACHE_ARCHS):
            return max(l2, 256 * 2**20)
        return l2 or 256 * 2**20

    def dtype_unsupported(self, index: int, dtype: str) -> str:
        if dtype != "tf32":
            return ""
        import torch

        if torch_version() < (2, 7):
            return (f"torch {torch.__version__} computes fp32 matmuls on ROCm in fp32 whatever the TF32 switch "
                    "(TF32 through hipBLASLt came with torch 2.7)")
        arch = self.arch(index)
        if not arch.startswith(TF32_ARCHS):
            return f"TF32 (xf32) matrix instructions are on gfx94x and later (MI300-class); this is {arch or 'unknown'}"
        return ""

    def tf32_unsupported(self, index: int, op: str) -> str:
        why = self.dtype_unsupported(index, "tf32")
        if why:
            return why
        return {"conv": MIOPEN_NO_TF32, "attention": ATTENTION_NO_TF32}.get(op, "")

    @contextlib.contextmanager
    def tf32(self, on: bool):
        """The base's switches, and HIPBLASLT_ALLOW_TF32 ("1" for TF32, "0" for fp32) for as long, restored after:
        torch 2.7+ asks it at each fp32 matmul before it lets hipBLASLt compute in xf32."""
        prev = os.environ.get(HIPBLASLT_TF32)
        os.environ[HIPBLASLT_TF32] = "1" if on else "0"
        try:
            with fp32_math(on):
                yield
        finally:
            if prev is None:
                os.environ.pop(HIPBLASLT_TF32, None)
            else:
                os.environ[HIPBLASLT_TF32] = prev

    def tf32_enabled(self) -> bool:
        # a torch that no longer asks the variable follows its switch alone: this may then answer False for TF32
        return (tf32_switch("cuda.matmul") and os.environ.get(HIPBLASLT_TF32, "").strip().lower() in
                ("1", "on", "yes", "true", "y") and not self.dtype_unsupported(0, "tf32"))

    def fp8_e4m3(self, index: int):
        import torch

        return torch.float8_e4m3fnuz if self.arch(index).startswith(FNUZ_FP8_ARCHS) else torch.float8_e4m3fn

    def identity(self, index: int) -> dict:
        import torch

        ident = self._common_identity(index)
        ident.update(vendor=self.vendor, arch=self.arch(index) or None, runtime={"hip": torch.version.hip},
                     driver=amd_driver())
        return ident

    def semi_structured_unsupported(self, index: int) -> str:
        return ""

    def energy_counter(self, index: int) -> EnergyCounter | None:
        try:
            return AmdsmiCounter(index)
        except Exception:
            return None

    def telemetry(self, index: int) -> dict | None:
        return amdsmi_telemetry(index)

    def topology(self) -> dict | None:
        text = run_tool(["rocm-smi", "--showtopo"]) or run_tool(["amd-smi", "topology"])
        return {"tool": "rocm-smi --showtopo", "text": text} if text else None


def amdsmi_telemetry(index: int) -> dict | None:
    """Clocks, temperature, power, throttle status and uncorrectable ECC count of one GPU through amdsmi."""
    try:
        import amdsmi

        amdsmi.amdsmi_init()
        h = amdsmi.amdsmi_get_processor_handles()[index]
    except Exception:
        return None
    out: dict = {}
    reads = {
        "sm_mhz": lambda: amdsmi.amdsmi_get_clock_info(h, amdsmi.AmdSmiClkType.GFX)["clk"],
        "mem_mhz": lambda: amdsmi.amdsmi_get_clock_info(h, amdsmi.AmdSmiClkType.MEM)["clk"],
        "temperature_c": lambda: amdsmi.amdsmi_get_temp_metric(h, amdsmi.AmdSmiTemperatureType.HOTSPOT,
                                                               amdsmi.AmdSmiTemperatureMetric.CURRENT),
        "power_w": lambda: amdsmi.amdsmi_get_power_info(h).get("current_socket_power")
        or amdsmi.amdsmi_get_power_info(h).get("average_socket_power"),
        "ecc_errors": lambda: amdsmi.amdsmi_get_gpu_total_ecc_count(h)["uncorrectable_count"],
    }
    for key, read in reads.items():
        try:
            out[key] = float(read())
        except Exception:
            pass
    try:
        status = amdsmi.amdsmi_get_gpu_metrics_info(h).get("throttle_status")
        if isinstance(status, (int, float)) and status:
            out["throttle"] = [f"throttle status {int(status):#x}"]
    except Exception:
        pass
    return out or None


def amd_driver() -> str | None:
    try:
        with open("/sys/module/amdgpu/version") as f:
            return f.read().strip() or None
    except OSError:
        return None


BACKEND = Rocm()
