"""The backend protocol: one class per accelerator stack, owning everything that differs between stacks.

A `Backend` answers for one kind of device (all CUDA GPUs, all ROCm GPUs, the host CPU, …); a `Device`
is one backend plus a device index, the handle workloads and the timing engine hold. Code outside
`gapbench.devices` asks the device; it never tests which vendor it is talking to.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import torch



class Timer:
    """Time between start() and stop(), after the device finished the work enqueued between them."""

    kind: ClassVar[str] = "host-sync"

    def start(self) -> None: ...

    def stop(self) -> float: ...


class HostTimer(Timer):
    """Host clock with a synchronize on both ends."""

    kind = "host-sync"

    def __init__(self, sync):
        self._sync = sync
        self._t0 = 0.0

    def start(self) -> None:
        self._sync()
        self._t0 = time.perf_counter()

    def stop(self) -> float:
        self._sync()
        return time.perf_counter() - self._t0


class EventTimer(Timer):
    """Device events: the time the device spent between two points of its stream."""

    kind = "device-events"

    def __init__(self, new_event):
        self._a = new_event()
        self._b = new_event()

    def start(self) -> None:
        self._a.record()

    def stop(self) -> float:
        self._b.record()
        self._b.synchronize()
        return self._a.elapsed_time(self._b) / 1e3


class EnergyCounter:
    """A cumulative energy counter of one device; `read()` is joules since some fixed point."""

    source: ClassVar[str] = ""

    def read(self) -> float:
        raise NotImplementedError


@dataclass
class GemmTuning:
    """What a GEMM tuner did inside one tuning context: the results file, the results it held on entry and
    how many shapes it tuned anew (set on exit)."""

    file: str
    known: int = 0
    new: int = 0


def tuning_dir() -> str:
    """Where GEMM tuning results are kept between runs: $GAPBENCH_TUNING_DIR, else
    $XDG_CACHE_HOME/gapbench/tuning, else ~/.cache/gapbench/tuning."""
    if os.environ.get("GAPBENCH_TUNING_DIR"):
        return os.environ["GAPBENCH_TUNING_DIR"]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "gapbench", "tuning")


def triton_missing() -> str:
    """'' when Triton is installed and torch finds a device it compiles for, else why not."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return "the triton package is not installed"
    from torch.utils._triton import has_triton

    return "" if has_triton() else "torch reports no device Triton compiles for (torch.utils._triton.has_triton)"


def scaled_mm_missing() -> str:
    """'' when torch._scaled_mm has the form gapbench's fp8 matmuls call (one tensor back: torch 2.5 and later),
    else why not (torch 2.4's returns (out, amax); torch 2.0 has none). See docs/torch-versions.md."""
    import torch

    if not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no torch._scaled_mm"
    if len(torch.ops.aten._scaled_mm.default._schema.returns) != 1:
        return (f"torch {torch.__version__}'s torch._scaled_mm returns (out, amax); gapbench's fp8 matmuls take the "
                "one-tensor form of torch 2.5 and later")
    return ""


def flex_attention_missing() -> str:
    """'' when this torch has FlexAttention (torch.nn.attention.flex_attention, torch 2.5 and later), else why not."""
    import importlib.util

    import torch

    try:
        found = importlib.util.find_spec("torch.nn.attention.flex_attention") is not None
    except (ImportError, ValueError):
        found = False
    return "" if found else (f"torch {torch.__version__} has no torch.nn.attention.flex_attention "
                             "(FlexAttention came with torch 2.5)")


def fp32_switches() -> list[tuple[str, object, object]]:
    """torch's process-wide switches of fp32 math as (name, read, write): the legacy ones first (writing one moves
    the per-operator ones of torch 2.9+ with it), then those per-operator ones, so that restoring them in this
    order gives back exactly the state read."""
    import torch

    b = torch.backends
    out = [("cuda.matmul.allow_tf32", lambda: b.cuda.matmul.allow_tf32,
            lambda v: setattr(b.cuda.matmul, "allow_tf32", v)),
           ("float32_matmul_precision", torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
           ("cudnn.allow_tf32", lambda: b.cudnn.allow_tf32, lambda v: setattr(b.cudnn, "allow_tf32", v))]
    for name in FINE_SWITCHES:
        obj = _fine_switch(name)
        if obj is not None:
            out.append((f"{name}.fp32_precision" if name else "fp32_precision", lambda o=obj: o.fp32_precision,
                        lambda v, o=obj: setattr(o, "fp32_precision", v)))
    return out


# torch 2.9+'s per-backend, per-operator fp32 precision ("ieee", "tf32", "bf16", or "none": the parent's), by the
# torch.backends path that holds it: generic, then cuDNN (its "all") and its operators, cuBLAS, oneDNN
FINE_SWITCHES = ("", "cudnn", "cudnn.conv", "cudnn.rnn", "cuda.matmul", "mkldnn", "mkldnn.matmul", "mkldnn.conv",
                 "mkldnn.rnn")
# what a math mode sets, operator by operator: cuBLAS (hipBLASLt on ROCm), cuDNN and oneDNN (an Intel GPU's TF32; a
# CPU without TF32 units computes fp32 either way)
TF32_OPERATORS = ("cuda.matmul", "cudnn.conv", "cudnn.rnn", "mkldnn.matmul", "mkldnn.conv", "mkldnn.rnn")


def _fine_switch(path: str):
    """The torch.backends object holding `path`'s fp32_precision; None on a torch without that switch."""
    import torch

    obj = torch.backends
    try:
        for part in [p for p in path.split(".") if p]:
            obj = getattr(obj, part)
        obj.fp32_precision  # noqa: B018 - raises on a torch that predates the per-operator switches
    except (AttributeError, RuntimeError):
        return None
    return obj


@contextlib.contextmanager
def fp32_math(on: bool):
    """fp32 matmuls, convolutions and RNNs as TF32 (on=True) or in full fp32: float32 matmul precision "high" or
    "highest", torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32 (True by default: fp32
    convolutions on NVIDIA would silently run as TF32), and on torch 2.9+ the cuBLAS and cuDNN operators' own
    fp32_precision ("tf32" or "ieee", so that no parent's setting leaks in). Every switch is restored on exit."""
    import torch

    saved = []
    for name, read, write in fp32_switches():
        try:
            saved.append((name, read(), write))
        except RuntimeError:  # a mix of torch's legacy and per-operator settings it refuses to read as one
            pass
    try:
        torch.set_float32_matmul_precision("high" if on else "highest")
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on
        for path in TF32_OPERATORS:
            obj = _fine_switch(path)
            if obj is not None:
                try:
                    obj.fp32_precision = "tf32" if on else "ieee"
                except RuntimeError:  # a torch whose per-operator names differ: the legacy switches hold
                    pass
        yield
    finally:
        for _, value, write in saved:
            try:
                write(value)
            except RuntimeError:
                pass


def tf32_switch(path: str = "cuda.matmul") -> bool:
    """Whether torch's switches let fp32 `path` (cuda.matmul, cudnn.conv) run as TF32 right now: the per-operator
    setting resolved through its parents on torch 2.9+, the legacy flag before."""
    import torch

    if _fine_switch(path) is not None:
        for parent in (path, "cudnn", ""):  # the operator, then torch's "cuda" backend (cudnn's all), then generic
            p = _fine_switch(parent).fp32_precision
            if p != "none":
                return p == "tf32"
        return False
    return bool(torch.backends.cudnn.allow_tf32 if path.startswith("cudnn") else torch.backends.cuda.matmul.allow_tf32)


@dataclass(frozen=True)
class FrameworkNames:
    """How other deep-learning frameworks name this kind of device (for the framework support matrix).

    torch_modules: modules to import before PyTorch can see the device (torch_npu).
    jax: JAX platform names, first found wins. tensorflow: TF physical device kinds. paddle: "gpu" for
    Paddle's CUDA/ROCm build, or Paddle custom-device names. mindspore: MindSpore's device target.
    onnxruntime: execution providers, in order of preference.
    """

    torch_modules: tuple[str, ...] = ()
    jax: tuple[str, ...] = ()
    tensorflow: tuple[str, ...] = ()
    paddle: tuple[str, ...] = ()
    paddle_xpu_build: bool = False
    mindspore: str | None = None
    onnxruntime: tuple[str, ...] = ()


class Backend:
    """One accelerator stack. Subclasses set the class attributes and override what differs.

    The defaults describe a device with nothing special: host-clock timing, no allocator statistics, every
    dtype available, no energy counter, gloo for torch.distributed.
    """

    name: ClassVar[str] = ""  # gapbench's name of the stack: cuda, rocm, xpu, npu, mps, cpu, test
    device_type: ClassVar[str] = ""  # what `--device` takes and the results file records as device.type
    torch_type: ClassVar[str] = ""  # torch.device type the tensors live on
    aliases: ClassVar[tuple[str, ...]] = ()  # other `--device` names that select this backend
    vendor: ClassVar[str] = ""
    is_accelerator: ClassVar[bool] = True
    auto_select: ClassVar[bool] = True  # picked by `--device auto` when available (never the test accelerator)
    indexed: ClassVar[bool] = True  # devices are told apart by an index (cuda:1); False: one device (cpu, mps)
    dist_backend: ClassVar[str] = "gloo"
    collective_library: ClassVar[str] = "gloo"  # the library named in results (nccl, rccl, hccl, oneCCL)
    energy_source_name: ClassVar[str] = ""  # what reads its energy counter (NVML, amdsmi, RAPL, …)
    unavailable_hint: ClassVar[str] = "not available here"
    fallback_env: ClassVar[dict[str, str]] = {}  # set in a coverage worker so that missing ops fall back loudly
    fallback_patterns: ClassVar[tuple[str, ...]] = ()  # warning text of a CPU fallback; group 1 names the op
    fallback_source: ClassVar[str] = ""
    frameworks: ClassVar[FrameworkNames] = FrameworkNames()
    fused_optimizer: ClassVar[bool] = False  # AdamW(fused=True) as users run it on this stack
    host_memory_is_device_memory: ClassVar[bool] = False  # an allocation past memory is the kernel's OOM killer

    # ---- presence ------------------------------------------------------------------------------
    def available(self) -> bool:
        return False

    def count(self) -> int:
        return 1

    def torch_device(self, index: int) -> torch.device:
        import torch

        return torch.device(self.torch_type, index) if self.indexed else torch.device(self.torch_type)

    def spec(self, index: int) -> str:
        """The device as `--device` names it, which a child process resolves back to this backend."""
        return f"{self.device_type}:{index}" if self.indexed else self.device_type

    def set_current(self, index: int) -> None:
        """Make this device the current one of the process (called once in every worker)."""

    def device_for_local_rank(self, local_rank: int) -> int:
        """The device index a rank with this local rank drives."""
        return local_rank if self.indexed else 0

    def max_ranks_per_host(self) -> int | None:
        """How many ranks --nproc may start on one host: one per device, or None when ranks share one."""
        return self.count() if self.is_accelerator else None

    def dist_backend_missing(self) -> str:
        """'' when this torch has the stack's own torch.distributed backend (`dist_backend`), else why not."""
        return ""

    # ---- execution -----------------------------------------------------------------------------
    def synchronize(self, index: int) -> None:
        """Wait until the device finished everything enqueued."""

    def new_event(self, index: int):
        """A timing event (record / synchronize / elapsed_time in ms); None when the stack has none."""
        return None

    def new_timer(self, index: int) -> Timer:
        if self.new_event(index) is None:
            return HostTimer(lambda: self.synchronize(index))
        return EventTimer(lambda: self.new_event(index))

    # ---- memory --------------------------------------------------------------------------------
    def reset_peak_memory(self, index: int) -> None:
        pass

    def peak_memory(self, index: int) -> int | None:
        """Peak bytes allocated on the device since the last reset; None where the stack does not count."""
        return None

    def empty_cache(self, index: int) -> None:
        pass

    def total_memory(self, index: int) -> int:
        from gapbench.devices.host import host_memory

        return host_memory()

    def free_memory(self, index: int) -> int:
        return self.total_memory(index)

    def is_oom(self, exc: BaseException) -> bool:
        """Whether an exception is this stack's allocation failure (its own type, or its allocator's words)."""
        from gapbench.devices.host import is_oom_text

        return is_oom_text(exc)

    def llc_bytes(self, index: int) -> int:
        """The last-level cache a flush must overwrite. Unknown: a generous 256 MiB."""
        return 256 * 2**20

    def host_buffer(self, n: int, dtype, pinned: bool):
        """A host tensor to copy to and from the device; pinned (page-locked) when asked and possible."""
        import torch

        return torch.empty(n, dtype=dtype, pin_memory=pinned)

    # ---- element types -------------------------------------------------------------------------
    def dtype_unsupported(self, index: int, dtype: str) -> str:
        """'' when the device can compute in `dtype` (a DTYPE_NAMES entry) at all, else why not."""
        return ""

    def matmul_unsupported(self, index: int, dtype: str) -> str:
        """'' when the device has a matmul path for `dtype` (tf32 inputs, fp8 scaled mm, int8 mm), else why not."""
        import torch

        if dtype == "fp8" and scaled_mm_missing():
            return scaled_mm_missing()
        if dtype == "int8" and not hasattr(torch, "_int_mm"):
            return f"torch {torch.__version__} has no torch._int_mm"
        return self.dtype_unsupported(index, dtype)

    def has_native_bf16(self, index: int) -> bool:
        return True

    def fp8_e4m3(self, index: int):
        """The e4m3 encoding this device's fp8 units use."""
        import torch

        return torch.float8_e4m3fn

    def tf32(self, on: bool):
        """A context in which fp32 matmuls, convolutions and attention may (on=True) or may not run as TF32: every
        one of torch's process-wide fp32 switches set alike (fp32_switches), each restored on exit, an exception
        too. A switch acts only where its library runs (cuDNN's on cuDNN, cuBLAS's on cuBLAS); setting it elsewhere
        is harmless, and it keeps one definition of the math mode for every stack."""
        return fp32_math(on)

    def tf32_enabled(self) -> bool:
        """Whether fp32 matmuls may run as TF32 right now (MFU is then taken against the TF32 peak)."""
        return False

    def tf32_unsupported(self, index: int, op: str) -> str:
        """'' when fp32 `op` (matmul, conv, attention) can be switched to TF32 and back here (a tf32 row of it
        measures TF32), else why not."""
        return self.dtype_unsupported(index, "tf32")

    def semi_structured_unsupported(self, index: int) -> str:
        """'' when 2:4 semi-structured sparse matmuls may run here, else why not."""
        return f"2:4 semi-structured sparsity has no kernels on {self.name}"

    # ---- libraries: what runs a GEMM or an attention here, and the switches between them ----------
    def gemm_library(self, index: int, dtype: str) -> str:
        """The library torch.matmul runs for `dtype` (a DTYPE_NAMES entry) here, by its maker's name."""
        return f"torch's {self.name} matmul"

    def blas_choices(self, index: int) -> dict[str, str]:
        """GEMM libraries torch can be told to prefer here: {choice: the library's name}; {} without a choice."""
        return {}

    def prefer_blas(self, index: int, choice: str):
        """A context in which GEMMs prefer the library `choice` (a key of blas_choices)."""
        raise ValueError(f"{self.name} offers no choice of GEMM library ({choice!r} asked for)")

    def tunable_gemm_unsupported(self, index: int) -> str:
        """'' when TunableOp (PyTorch's online GEMM tuner) runs here, else why not."""
        return (f"TunableOp (torch.cuda.tunable, PyTorch's GEMM tuner) runs on CUDA and ROCm builds only; "
                f"{self.name} has none")

    def tunable_gemm(self, index: int, results_file: str, tune: bool):
        """A context in which GEMMs run through the tuner, with the results of `results_file`; with tune=True
        a shape it has no result for is tuned on its first call and the file rewritten on exit. Yields a
        GemmTuning."""
        raise NotImplementedError(self.tunable_gemm_unsupported(index))

    def tuning_file(self, index: int) -> str:
        """This device's GEMM tuning results file (its folder created): one per stack, product and torch."""
        import torch

        product = str(self.identity(index).get("product") or self.name)
        slug = re.sub(r"[^A-Za-z0-9.]+", "-", f"{self.name}-{product}-torch{torch.__version__}").strip("-")
        os.makedirs(tuning_dir(), exist_ok=True)
        return os.path.join(tuning_dir(), f"{slug}.csv")

    def triton_unsupported(self, index: int) -> str:
        """'' when Triton kernels compile for this device, else why not."""
        return f"Triton has no code generator for {self.name} devices"

    def compile_unsupported(self, index: int) -> str:
        """'' when torch.compile (Inductor) generates code for this device, else why not."""
        return ""

    def graph_unsupported(self, index: int) -> str:
        """'' when a step of work can be captured once as a device graph and replayed (capture_graph; and
        torch.compile's mode="reduce-overhead" replays graphs), else why not."""
        return (f"{self.name} devices have no graph capture torch exposes here (CUDA and HIP graphs): every step is "
                "dispatched from the host")

    def capture_graph(self, index: int, fn):
        """fn() captured as a device graph after a warm-up: (replay, fn's outputs). A replay reruns fn's kernels on
        the same memory: fn's inputs are read from, and its outputs written to, the tensors of the capture."""
        raise NotImplementedError(self.graph_unsupported(index))

    def inductor_gemm_templates(self, index: int) -> dict[str, str]:
        """Inductor's GEMM template families that generate code for this device, by the names
        `max_autotune_gemm_backends` takes (TRITON, CPP, CK, ...): what each one is. {} where torch.compile
        has no code generator for the device."""
        return {}

    def host_gemm_libraries(self, index: int) -> dict[str, str]:
        """GEMM libraries beside torch's own that multiply this device's tensors where they are, by gapbench's
        path name (numpy, onednn): the library, named with its version."""
        return {}

    def attention_kernels(self, index: int) -> dict[str, str]:
        """SDPA's kernels on this device, by torch's backend names (flash, efficient, cudnn, overrideable,
        math): the library behind each. A kernel not listed has no implementation here."""
        return {"math": "ATen math (matmul, softmax, matmul; unfused)"}

    def flex_attention_unsupported(self, index: int) -> str:
        """'' when torch.compile generates FlexAttention kernels for this device, else why not."""
        return f"torch.compile generates no FlexAttention kernels for {self.name} devices"

    # ---- identity, energy, topology --------------------------------------------------------------
    def identity(self, index: int) -> dict:
        """product, arch, memory, driver, runtime and library versions (merged over the common fields)."""
        return {}

    def energy_counter(self, index: int) -> EnergyCounter | None:
        return None

    def telemetry(self, index: int) -> dict | None:
        """One reading of the device's state for the host watch: numbers (sm_mhz, mem_mhz, temperature_c,
        power_w, ecc_errors, …) and `throttle`, the list of active throttle reasons; None when unreadable."""
        return None

    def topology(self) -> dict | None:
        """The links between this host's devices as the vendor tool shows them (NVLink, XGMI, HCCS)."""
        return None


@dataclass(frozen=True)
class Device:
    """One device: a backend and an index. What workloads and the timing engine hold."""

    backend: Backend
    index: int = 0

    def __str__(self) -> str:
        return self.backend.spec(self.index)

    @property
    def kind(self) -> str:
        """gapbench's device type: what `--device` takes and results record (cuda, xpu, npu, mps, cpu, test)."""
        return self.backend.device_type

    @property
    def type(self) -> str:
        """torch's device type of the tensors (for torch.autocast, GradScaler, torch.device)."""
        return self.backend.torch_type

    @property
    def torch_device(self) -> torch.device:
        return self.backend.torch_device(self.index)

    @property
    def is_accelerator(self) -> bool:
        return self.backend.is_accelerator

    @property
    def count(self) -> int:
        return self.backend.count()

    def set_current(self) -> None:
        self.backend.set_current(self.index)

    def synchronize(self) -> None:
        self.backend.synchronize(self.index)

    def new_timer(self) -> Timer:
        return self.backend.new_timer(self.index)

    def new_event(self):
        """A timing event of the device's stream (record / synchronize / elapsed_time in ms); None without one."""
        return self.backend.new_event(self.index)

    @property
    def timer_kind(self) -> str:
        return self.new_timer().kind

    def reset_peak_memory(self) -> None:
        self.backend.reset_peak_memory(self.index)

    def peak_memory(self) -> int | None:
        return self.backend.peak_memory(self.index)

    def empty_cache(self) -> None:
        self.backend.empty_cache(self.index)

    @property
    def total_memory(self) -> int:
        return self.backend.total_memory(self.index)

    def free_memory(self) -> int:
        return self.backend.free_memory(self.index)

    def is_oom(self, exc: BaseException) -> bool:
        return self.backend.is_oom(exc)

    @property
    def llc_bytes(self) -> int:
        return self.backend.llc_bytes(self.index)

    # ---- element types ----------------------------------------------------------------------------
    def dtype_unsupported(self, dtype: str) -> str:
        """'' when this device computes in `dtype` (a gapbench dtype name) at all, else why not."""
        return self.backend.dtype_unsupported(self.index, dtype)

    def matmul_unsupported(self, dtype: str) -> str:
        return self.backend.matmul_unsupported(self.index, dtype)

    def has_native_bf16(self) -> bool:
        return self.backend.has_native_bf16(self.index)

    def fp8_e4m3(self):
        return self.backend.fp8_e4m3(self.index)

    def torch_dtype(self, dtype: str):
        """The torch dtype tensors of `dtype` are kept in here (fp8: this device's e4m3 flavour)."""
        from gapbench.devices.dtypes import dtype as row

        return self.fp8_e4m3() if dtype == "fp8" else row(dtype).torch

    def math_mode(self, dtype: str):
        """The context a computation in `dtype` runs in: fp32 matmuls and convolutions as TF32 for tf32, in full
        fp32 for fp32 (a stack's TF32 default does not turn an fp32 row into a TF32 speed); nothing for the rest."""
        from gapbench.devices.dtypes import dtype as row

        if row(dtype).storage != "float32":
            return contextlib.nullcontext()
        return self.backend.tf32(row(dtype).math == "tf32")

    def tf32_enabled(self) -> bool:
        """Whether fp32 matmuls may run as TF32 right now (MFU is then taken against the TF32 peak)."""
        return self.backend.tf32_enabled()

    def tf32_unsupported(self, op: str) -> str:
        """'' when a tf32 row of fp32 `op` (matmul, conv, attention) measures TF32 here, else why not."""
        return self.backend.tf32_unsupported(self.index, op)

    def semi_structured_unsupported(self) -> str:
        return self.backend.semi_structured_unsupported(self.index)

    # ---- memory as the host sees it -------------------------------------------------------------------
    @property
    def host_memory_is_device_memory(self) -> bool:
        """Where an allocation past memory is the kernel's OOM killer rather than the device's own error."""
        return self.backend.host_memory_is_device_memory

    def host_buffer(self, n: int, dtype, pinned: bool):
        return self.backend.host_buffer(n, dtype, pinned)

    @property
    def fused_optimizer(self) -> bool:
        """Whether users run AdamW(fused=True) here."""
        return self.backend.fused_optimizer

    # ---- libraries --------------------------------------------------------------------------------
    def gemm_library(self, dtype: str) -> str:
        return self.backend.gemm_library(self.index, dtype)

    def blas_choices(self) -> dict[str, str]:
        return self.backend.blas_choices(self.index)

    def prefer_blas(self, choice: str):
        return self.backend.prefer_blas(self.index, choice)

    def tunable_gemm_unsupported(self) -> str:
        return self.backend.tunable_gemm_unsupported(self.index)

    def tunable_gemm(self, results_file: str, tune: bool):
        return self.backend.tunable_gemm(self.index, results_file, tune)

    def tuning_file(self) -> str:
        return self.backend.tuning_file(self.index)

    def triton_unsupported(self) -> str:
        return self.backend.triton_unsupported(self.index)

    def compile_unsupported(self) -> str:
        return self.backend.compile_unsupported(self.index)

    def graph_unsupported(self) -> str:
        return self.backend.graph_unsupported(self.index)

    def capture_graph(self, fn):
        return self.backend.capture_graph(self.index, fn)

    def inductor_gemm_templates(self) -> dict[str, str]:
        return self.backend.inductor_gemm_templates(self.index)

    def host_gemm_libraries(self) -> dict[str, str]:
        return self.backend.host_gemm_libraries(self.index)

    def attention_kernels(self) -> dict[str, str]:
        return self.backend.attention_kernels(self.index)

    def flex_attention_unsupported(self) -> str:
        return self.backend.flex_attention_unsupported(self.index)

    # ---- identity, energy, topology -----------------------------------------------------------------
    def energy_counter(self) -> EnergyCounter | None:
        return self.backend.energy_counter(self.index)

    def telemetry(self) -> dict | None:
        return self.backend.telemetry(self.index)

    def topology(self) -> dict | None:
        return self.backend.topology()

    def max_ranks_per_host(self) -> int | None:
        return self.backend.max_ranks_per_host()

    @property
    def dist_backend(self) -> str:
        """This stack's torch.distributed backend (nccl, xccl, hccl; gloo on the CPU)."""
        return self.backend.dist_backend

    def dist_backend_missing(self) -> str:
        """'' when this torch has the stack's own torch.distributed backend, else why its ranks cannot use it."""
        return self.backend.dist_backend_missing()

    @property
    def fallback_patterns(self) -> tuple[str, ...]:
        """The warning texts by which this stack says an operator fell back to the CPU (the coverage audit)."""
        return self.backend.fallback_patterns

    def identity(self) -> dict:
        from gapbench.devices.host import common_identity

        ident = common_identity(self)
        ident.update(self.backend.identity(self.index))
        return ident
