"""The test accelerator: CPU tensors behind an accelerator's face, so that every accelerator branch of
gapbench runs in the test suite on a machine without one.

It is never chosen by `--device auto`; tests (or a curious user) ask for it by name: `--device test`.
What it emulates, each from something real on this machine:

- timing events: record() reads the host clock; the timer reports itself as device events;
- memory: a dispatch mode counts the bytes of every live tensor storage created while it is active (the
  worker activates it in set_current), keeps a peak, and raises an out-of-memory error of its own type when
  an allocation takes the total past the capacity (GAPBENCH_TEST_ACCELERATOR_MEMORY bytes, default 8 GiB);
- a last-level cache of GAPBENCH_TEST_ACCELERATOR_LLC bytes (default 4 MiB) for the cache flush;
- an energy counter: the process's CPU seconds times a nominal 50 W per busy core (a model, said so);
- telemetry for the host watch: its memory in use, and a throttle reason when GAPBENCH_TEST_ACCELERATOR_THROTTLE
  names one;
- its own dtype table: fp8 and TF32 present, int8 matmul absent;
- a GEMM tuner that behaves as TunableOp does: a shape without a result in its file is tuned on its first call
  (each candidate formulation of the product timed for up to 30 ms or 100 calls, the fastest kept) and the
  file rewritten; no Triton, no torch.compile code generator, no BLAS library choice, no host libraries;
- GAPBENCH_TEST_ACCELERATOR_COUNT devices (default 2), one per rank of a two-rank group, over gloo;
- a planted numerical fault: GAPBENCH_TEST_ACCELERATOR_PERTURB=OP:REL (e.g. `silu:1e-3`) multiplies every output
  of the ATen operator OP by 1 + REL, in every floating type but float64 (so a float64 reference computed in the
  same process stays exact), for a test that a numerics comparison names the operator's layer.
"""

from __future__ import annotations

import contextlib
import os
import time

from gapbench.devices.base import Backend, EnergyCounter, GemmTuning

WATTS_PER_BUSY_CORE = 50.0


def _env_int(name: str, default: int) -> int:
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


class TestAcceleratorOutOfMemory(RuntimeError):
    """The test accelerator's allocation failure (its allocator's own exception type)."""


class _Event:
    def __init__(self):
        self.t: float | None = None

    def record(self, stream=None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end: _Event) -> float:
        return (end.t - self.t) * 1e3


class _ModelledEnergy(EnergyCounter):
    source = "test-accelerator-model"

    def read(self) -> float:
        return time.process_time() * WATTS_PER_BUSY_CORE


def _perturbation() -> tuple[str, float] | None:
    """(operator name, relative change) from GAPBENCH_TEST_ACCELERATOR_PERTURB=OP:REL; None when unset or bad."""
    op, _, rel = os.environ.get("GAPBENCH_TEST_ACCELERATOR_PERTURB", "").partition(":")
    try:
        return (op, float(rel)) if op else None
    except ValueError:
        return None


def _accounting_mode(capacity: int):
    """A TorchDispatchMode that counts live storage bytes, with a peak and a capacity."""
    import torch
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Accounting(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.capacity = capacity
            self.live: dict[int, tuple[StorageWeakRef, int]] = {}
            self.in_use = 0
            self.peak = 0
            self.perturb = _perturbation()

        def sweep(self) -> None:
            for key, (ref, nbytes) in list(self.live.items()):
                if ref.expired():
                    del self.live[key]
                    self.in_use -= nbytes

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if self.perturb is not None and func.overloadpacket.__name__ == self.perturb[0]:
                out = _perturbed(out, self.perturb[1])
            grew = False
            for t in tree_flatten(out)[0]:
                if not isinstance(t, torch.Tensor) or t.device.type != "cpu":
                    continue
                st = t.untyped_storage()
                nbytes = st.nbytes()
                if nbytes == 0:
                    continue
                key = st.data_ptr()
                old = self.live.get(key)
                if old is not None and not old[0].expired():
                    continue
                if old is not None:
                    self.in_use -= old[1]
                self.live[key] = (StorageWeakRef(st), nbytes)
                self.in_use += nbytes
                grew = True
            if grew and self.in_use > self.peak:
                self.sweep()  # only live storages count towards a peak or a failure
                if self.in_use > self.capacity:
                    need = self.in_use
                    del out
                    self.sweep()
                    raise TestAcceleratorOutOfMemory(
                        f"test accelerator: out of memory ({need / 2**20:.1f} MiB needed, capacity "
                        f"{self.capacity / 2**20:.1f} MiB)")
                self.peak = max(self.peak, self.in_use)
            return out

    return Accounting()


def _perturbed(out, rel: float):
    import torch

    if isinstance(out, torch.Tensor) and out.is_floating_point() and out.dtype != torch.float64:
        return out * (1.0 + rel)
    return out


TUNING_MAX_MS = 30.0  # per candidate, as TunableOp's default PYTORCH_TUNABLEOP_MAX_TUNING_DURATION_MS
TUNING_MAX_CALLS = 100  # per candidate, as PYTORCH_TUNABLEOP_MAX_TUNING_ITERATIONS
ROW_BLOCKS = (64, 256)


def _gemm_solutions():
    """The tuner's candidates: the whole product in one call, or in blocks of rows (the same product)."""
    import torch

    def rows(block):
        return lambda a, b: torch.cat([torch.mm(a[i:i + block], b) for i in range(0, a.shape[0], block)])

    return {"Default": lambda a, b: torch.mm(a, b), **{f"RowBlocks_{r}": rows(r) for r in ROW_BLOCKS}}


def _tune(a, b, solutions) -> tuple[str, float]:
    """(the fastest solution, its mean milliseconds per call)."""
    best = ("Default", float("inf"))
    for name, fn in solutions.items():
        fn(a, b)
        calls, t0 = 0, time.perf_counter()
        while calls < TUNING_MAX_CALLS and (time.perf_counter() - t0) * 1e3 < TUNING_MAX_MS:
            fn(a, b)
            calls += 1
        ms = (time.perf_counter() - t0) * 1e3 / calls
        if ms < best[1]:
            best = (name, ms)
    return best


def _tuning_mode(table: dict, tune: bool):
    """A dispatch mode that routes aten.mm through the tuned table (tuning new shapes when `tune`)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    solutions = _gemm_solutions()

    class Tuner(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is not torch.ops.aten.mm.default or kwargs:
                return func(*args, **(kwargs or {}))
            a, b = args
            key = (f"GemmTunableOp_{str(a.dtype).removeprefix('torch.')}_NN", f"nn_{a.shape[0]}_{b.shape[1]}_{a.shape[1]}")
            if key not in table:
                if not tune:
                    return func(a, b)
                table[key] = _tune(a, b, solutions)
            return solutions[table[key][0]](a, b)

    return Tuner()


def _validators() -> dict[str, str]:
    import torch

    return {"PT_VERSION": torch.__version__, "GAPBENCH_TEST_ACCELERATOR": "1"}


def read_tuning_file(path: str) -> dict:
    """{(op, parameters): (solution, ms)} from a results file; {} when absent or written for another torch."""
    table, validators = {}, {}
    try:
        with open(path) as f:
            lines = [ln.strip().split(",") for ln in f if ln.strip()]
    except OSError:
        return {}
    for parts in lines:
        if parts[0] == "Validator" and len(parts) >= 3:
            validators[parts[1]] = parts[2]
        elif len(parts) >= 4:
            table[(parts[0], parts[1])] = (parts[2], float(parts[3]))
    return table if validators == _validators() else {}


def write_tuning_file(path: str, table: dict) -> None:
    lines = [f"Validator,{k},{v}" for k, v in _validators().items()]
    lines += [f"{op},{params},{sol},{ms:.6f}" for (op, params), (sol, ms) in sorted(table.items())]
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


class TestAccelerator(Backend):
    name = "test"
    device_type = "test"
    torch_type = "cpu"
    vendor = "gapbench"
    auto_select = False
    dist_backend = "gloo"
    collective_library = "gloo"
    energy_source_name = "a model of the test accelerator"
    unavailable_hint = "the test accelerator is always available"

    def __init__(self):
        self._mode = None

    def available(self) -> bool:
        return True

    def count(self) -> int:
        return max(1, _env_int("GAPBENCH_TEST_ACCELERATOR_COUNT", 2))

    def torch_device(self, index: int):
        import torch

        return torch.device("cpu")

    @property
    def capacity(self) -> int:
        return _env_int("GAPBENCH_TEST_ACCELERATOR_MEMORY", 8 * 2**30)

    def set_current(self, index: int) -> None:
        if self._mode is None:
            self._mode = _accounting_mode(self.capacity)
            self._mode.__enter__()  # for the rest of the worker's life, as a device context would be

    def new_event(self, index: int):
        return _Event()

    def reset_peak_memory(self, index: int) -> None:
        if self._mode is not None:
            self._mode.sweep()
            self._mode.peak = self._mode.in_use

    def peak_memory(self, index: int) -> int | None:
        return self._mode.peak if self._mode is not None else None

    def empty_cache(self, index: int) -> None:
        import gc

        gc.collect()
        if self._mode is not None:
            self._mode.sweep()

    def total_memory(self, index: int) -> int:
        return self.capacity

    def free_memory(self, index: int) -> int:
        if self._mode is None:
            return self.capacity
        self._mode.sweep()
        return max(self.capacity - self._mode.in_use, 0)

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, TestAcceleratorOutOfMemory) or super().is_oom(exc)

    def llc_bytes(self, index: int) -> int:
        return _env_int("GAPBENCH_TEST_ACCELERATOR_LLC", 4 * 2**20)

    def host_buffer(self, n: int, dtype, pinned: bool):
        import torch

        return torch.empty(n, dtype=dtype)  # pinning is emulated: the copy is a host copy either way

    def dtype_unsupported(self, index: int, dtype: str) -> str:
        if dtype == "int8":
            return "the test accelerator has no int8 matmul (its dtype table leaves int8 out)"
        return ""

    def semi_structured_unsupported(self, index: int) -> str:
        return "the test accelerator has no 2:4 semi-structured sparse kernels"

    def gemm_library(self, index: int, dtype: str) -> str:
        return "torch's CPU GEMM behind the test accelerator"

    def tunable_gemm_unsupported(self, index: int) -> str:
        return ""

    @contextlib.contextmanager
    def tunable_gemm(self, index: int, results_file: str, tune: bool):
        table = read_tuning_file(results_file)
        state = GemmTuning(results_file, known=len(table))
        try:
            with _tuning_mode(table, tune):
                yield state
        finally:
            state.new = len(table) - state.known
            if tune and state.new:
                write_tuning_file(results_file, table)

    def triton_unsupported(self, index: int) -> str:
        return "the test accelerator has no Triton code generator (its tensors are CPU tensors)"

    def compile_unsupported(self, index: int) -> str:
        return ("the test accelerator has no torch.compile code generator of its own (Inductor would compile its "
                "CPU tensors for the CPU)")

    def attention_kernels(self, index: int) -> dict[str, str]:
        return {"flash": "ATen's CPU flash-attention kernel behind the test accelerator",
                "math": "ATen math (matmul, softmax, matmul; unfused)"}

    def identity(self, index: int) -> dict:
        return {"vendor": self.vendor, "product": "gapbench test accelerator", "arch": "test",
                "memory_bytes": self.capacity, "driver": None, "runtime": {"emulated_on": "cpu"}}

    def energy_counter(self, index: int) -> EnergyCounter | None:
        return _ModelledEnergy()

    def telemetry(self, index: int) -> dict | None:
        """A reading for the host watch: the memory in use; a throttle reason when GAPBENCH_TEST_ACCELERATOR_THROTTLE
        names one (so that tests can see a throttled device flagged)."""
        out: dict = {"memory_used_bytes": float(self._mode.in_use) if self._mode is not None else 0.0}
        reason = os.environ.get("GAPBENCH_TEST_ACCELERATOR_THROTTLE")
        out["throttle"] = [reason] if reason else []
        return out


BACKEND = TestAccelerator()
