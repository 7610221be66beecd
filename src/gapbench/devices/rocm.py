"""AMD GPUs through ROCm/HIP, which torch exposes as its `cuda` device type: events and the caching
allocator as on CUDA; gfx architecture names, the fnuz fp8 encoding of gfx942, the 256 MiB Infinity
Cache of MI300-class parts, amdsmi for energy, RCCL for collectives, `rocm-smi --showtopo` for XGMI.
"""

from __future__ import annotations

from gapbench.devices.base import EnergyCounter, FrameworkNames
from gapbench.devices.cuda import TorchGpu
from gapbench.devices.tools import run_tool

# MI300X/MI325X (gfx942) and MI355X (gfx950): a 256 MiB Infinity Cache beyond L2
INFINITY_CACHE_ARCHS = ("gfx942", "gfx950")
FNUZ_FP8_ARCHS = ("gfx942",)  # their fp8 units use the e4m3fnuz encoding (OCP e4m3fn from gfx950 on)


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
