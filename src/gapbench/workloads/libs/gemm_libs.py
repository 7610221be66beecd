"""The same GEMM through every path a stack offers: its default library, the same library by another entry,
tuned, a preferred library, portable generated kernels, torch.compile, and libraries beside torch.

One row per (dtype, shape, path); the path is in the variant, the library that ran in `metrics.library`.
Tuning and compiling happen once before the timing and are recorded apart (`metrics.tuning_s`,
`metrics.compile_s`). Every path's output is checked as in the `gemm` workload: a block of it (64 sampled rows ×
64 sampled columns) against the float64 product of those rows of A and columns of B (the same rounded inputs),
computed on the device where it has float64. What a stack lacks comes from its backend: unsupported, with the reason.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from gapbench.results import Measurement
from gapbench.timing import TooSlow, time_fn
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.libs.base import PathWorkload
from gapbench.workloads.libs.paths import BLAS_PREFIX, COMPILE_TEMPLATES, GEMM_PATHS, GEMM_WORKLOAD, path_kind
from gapbench.workloads.micro.gemm import (
    TOLERANCE,
    _reference_device,
    check_block,
    gemm_bytes,
    sample_indices,
    unsupported_reason,
)
from gapbench.workloads.micro.options import GemmOptions

DTYPES = ("fp32", "tf32", "bf16", "fp16")

# Llama-2 projections as GEMMs y = x·Wᵀ: (out, in) features. 7B: hidden 4096, MLP 11008; 70B: hidden 8192,
# MLP 28672, 8 KV heads of 128 (grouped-query attention), from the models' published configurations
LLAMA2_7B = ((4096, 4096), (11008, 4096), (4096, 11008))  # q/k/v/o, gate/up, down
LLAMA2_70B = ((8192, 8192), (1024, 8192), (28672, 8192), (8192, 28672))  # q/o, k/v, gate/up, down
TOKENS_ACCELERATOR = 16384  # tokens per GEMM: a training micro-batch of 4 × 4096, as `gemm` uses
TOKENS_CPU = 512


class Unsupported(Exception):
    """A path found, while setting up, that it cannot run this problem (the message says why)."""


def llama_shapes(models, tokens: int) -> list[tuple[int, int, int]]:
    return [(tokens, out_f, in_f) for model in models for (out_f, in_f) in model]


def shapes_for(preset: str, accelerator: bool) -> list[tuple[int, int, int]]:
    if preset == "tiny":
        return [(128, 128, 128)]
    if preset == "one":
        return [(4096, 4096, 4096)] if accelerator else [(1024, 1024, 1024)]
    if preset == "quick":
        if accelerator:
            return [(4096, 4096, 4096)] + llama_shapes([LLAMA2_7B], TOKENS_ACCELERATOR)
        return [(1024, 1024, 1024)] + llama_shapes([LLAMA2_7B[1:2]], TOKENS_CPU)
    if preset in ("standard", "full"):
        if accelerator:
            return [(s, s, s) for s in (1024, 2048, 4096, 8192)] + llama_shapes([LLAMA2_7B, LLAMA2_70B],
                                                                                TOKENS_ACCELERATOR)
        return [(s, s, s) for s in (512, 1024, 2048, 4096)] + llama_shapes([LLAMA2_7B], TOKENS_CPU)
    raise ValueError(f"unknown preset {preset!r}")


def dtypes_for(preset: str, ctx: Context) -> list[str]:
    """Those asked for with --dtype, else the preset's."""
    if preset == "full":
        default = list(DTYPES)
    elif preset in ("quick", "one") and ctx.device.is_accelerator:
        default = ["bf16"]
    else:
        default = list(DTYPES) if ctx.device.is_accelerator and preset == "standard" else ["fp32", "bf16"]
    return ctx.dtypes(DTYPES, default)


def paths_for(preset: str, ctx: Context) -> list[str]:
    """Every path, and the stack's own BLAS library choices; a CPU's standard run leaves out torch.compile's
    default and max-autotune mixes (minutes of C++ compiling per shape on a few cores; `full` has them)."""
    dev = ctx.device
    paths = list(GEMM_PATHS) + [BLAS_PREFIX + c for c in dev.blas_choices()]
    if preset in ("standard", "quick", "one") and not dev.is_accelerator:
        paths = [p for p in paths if path_kind(GEMM_WORKLOAD, p) != "compiler"]
    return paths


@dataclass
class Operands:
    """A (m×k) and B (k×n) of one dtype on the device, and B's transpose stored as a layer's weight (n×k)."""

    dtype: str
    a: torch.Tensor
    b: torch.Tensor
    w: torch.Tensor

    @classmethod
    def make(cls, dtype: str, m: int, n: int, k: int, device) -> Operands:
        g = torch.Generator(device="cpu").manual_seed(1234)
        td = device.torch_dtype(dtype)
        a = torch.randn(m, k, generator=g).to(device=device.torch_device, dtype=td)
        b = torch.randn(k, n, generator=g).to(device=device.torch_device, dtype=td)
        return cls(dtype, a, b, b.t().contiguous())

    def check(self, out: torch.Tensor, tol: float, ref_device: torch.device) -> str | None:
        """gemm.check_block on the sampled block (gemm.sample_indices) of the product `out`: only those rows of A
        and columns of B are read, each as float64 on `ref_device` (never all of B on the host)."""
        rows, cols = sample_indices(out.shape[0], out.shape[1])
        a = self.a.index_select(0, rows.to(self.a.device)).to(ref_device, torch.float64)
        b = self.b.index_select(1, cols.to(self.b.device)).to(ref_device, torch.float64)
        got = out.index_select(0, rows.to(out.device)).index_select(1, cols.to(out.device))
        return check_block(got, a, b, tol)


@dataclass
class Built:
    """One path made ready: `fn` computes the product once; `setup` runs once before the timing (tuning,
    compiling) and returns its metrics; `context` is entered around the timing and the check."""

    fn: Callable[[], object]
    library: str
    setup: Callable[[], dict] | None = None
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
    as_tensor: Callable[[object], torch.Tensor] = lambda out: out
    metrics: dict = field(default_factory=dict)


# ---- why a path cannot run here ------------------------------------------------------------------------

def path_unsupported(path: str, dtype: str, ctx: Context) -> str:
    """'' when the stack offers this path for this dtype, else why not (from the device's backend)."""
    dev = ctx.device
    if path == "tunableop":
        return dev.tunable_gemm_unsupported()
    if path.startswith(BLAS_PREFIX):
        choice = path.removeprefix(BLAS_PREFIX)
        return "" if choice in dev.blas_choices() else f"{dev.kind} offers no {choice} GEMM library"
    if path == "triton":
        return dev.triton_unsupported()
    if path.startswith("compile"):
        return _compile_unsupported(path, ctx)
    if path in ("numpy", "onednn"):
        return _host_library_unsupported(path, dtype, ctx)
    return ""


def _compile_unsupported(path: str, ctx: Context) -> str:
    dev = ctx.device
    why = dev.compile_unsupported()
    template = COMPILE_TEMPLATES.get(path)
    if why or template is None:
        return why
    if template not in dev.inductor_gemm_templates():
        return f"Inductor's {template} GEMM templates generate no code for {dev.kind} devices"
    return dev.triton_unsupported() if template == "TRITON" else ""


def _host_library_unsupported(path: str, dtype: str, ctx: Context) -> str:
    dev = ctx.device
    if path not in dev.host_gemm_libraries():
        return f"{path} multiplies nothing in {dev.kind} memory: no such library beside torch on this device"
    if path == "numpy" and dtype == "bf16":
        return "numpy has no bfloat16 type (ml_dtypes adds one, without a BLAS GEMM)"
    if path == "numpy" and dtype == "fp16":
        return "numpy multiplies float16 in its own loops, not through BLAS (BLAS has no half-precision GEMM)"
    return ""


def preflight(path: str, dtype: str, ctx: Context) -> str:
    """'' when the path runs a 32×32×32 product of this dtype, else the library's own words for why not."""
    try:
        built = build(path, Operands.make(dtype, 32, 32, 32, ctx.device), ctx)
        with built.context():
            built.fn()
        ctx.device.synchronize()
    except (RuntimeError, NotImplementedError, TypeError, ValueError) as e:
        return f"{path} cannot multiply {dtype} here: {' '.join(str(e).split())[:200]}"
    return ""


# ---- the paths ------------------------------------------------------------------------------------------

def _matmul(ops: Operands, ctx: Context) -> Built:
    a, b = ops.a, ops.b
    return Built(lambda: torch.matmul(a, b), ctx.device.gemm_library(ops.dtype))


def _linear(ops: Operands, ctx: Context) -> Built:
    a, w = ops.a, ops.w
    lib = ctx.device.gemm_library(ops.dtype)
    return Built(lambda: torch.nn.functional.linear(a, w), f"{lib}, through F.linear")


def _tunableop(ops: Operands, ctx: Context) -> Built:
    dev = ctx.device
    a, b = ops.a, ops.b
    path = dev.tuning_file()

    def fn():
        return torch.matmul(a, b)

    def setup() -> dict:
        t0 = time.perf_counter()
        with dev.tunable_gemm(path, tune=True) as state:
            fn()
            dev.synchronize()
        return {"tuning_s": time.perf_counter() - t0, "tuning_file": path, "tuned_new": state.new,
                "tuned_known": state.known}

    return Built(fn, f"TunableOp over {dev.gemm_library(ops.dtype)}", setup,
                 lambda: dev.tunable_gemm(path, tune=False))


def _blas(choice: str) -> Callable[[Operands, Context], Built]:
    def make(ops: Operands, ctx: Context) -> Built:
        dev = ctx.device
        a, b = ops.a, ops.b
        return Built(lambda: torch.matmul(a, b), dev.blas_choices()[choice],
                     context=lambda: dev.prefer_blas(choice))

    return make


def _triton(ops: Operands, ctx: Context) -> Built:
    import triton

    from gapbench.workloads.libs import triton_gemm

    a, b = ops.a, ops.b
    out = torch.empty(a.shape[0], b.shape[1], device=a.device, dtype=a.dtype)
    tf32 = ops.dtype == "tf32"

    def fn():
        return triton_gemm.matmul(a, b, out, tf32=tf32)

    def setup() -> dict:
        t0 = time.perf_counter()
        fn()
        ctx.device.synchronize()
        return {"tuning_s": time.perf_counter() - t0, "triton_config": triton_gemm.chosen_config()}

    return Built(fn, f"Triton {triton.__version__}", setup)


class _Product(torch.nn.Module):
    """x @ b with b a frozen buffer: the product torch.compile sees as an inference layer."""

    def __init__(self, b: torch.Tensor):
        super().__init__()
        self.register_buffer("b", b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.b


_COMPILE_CONFIG = {
    "compile": {},
    "compile-max-autotune": {"max_autotune": True},
    **{p: {"max_autotune": True, "max_autotune_gemm_backends": t} for p, t in COMPILE_TEMPLATES.items()},
}


def _compiled(path: str) -> Callable[[Operands, Context], Built]:
    config = {"freezing": True, **_COMPILE_CONFIG[path]}

    def make(ops: Operands, ctx: Context) -> Built:
        import torch._inductor.config as inductor_config

        torch._dynamo.reset()  # a fresh compile per problem: no recompile limit, no guard left from the last one
        module = torch.compile(_Product(ops.b).eval(), dynamic=False)
        a = ops.a

        def fn():
            with torch.no_grad():
                return module(a)

        def setup() -> dict:
            t0 = time.perf_counter()
            try:
                with inductor_config.patch(config):
                    fn()
            except Exception as e:
                if _no_valid_choices(e):
                    raise Unsupported(f"Inductor has no {config.get('max_autotune_gemm_backends')} GEMM kernel for "
                                      f"this problem: {' '.join(str(e).split())[:200]}") from None
                raise
            ctx.device.synchronize()
            return {"compile_s": time.perf_counter() - t0}

        backends = config.get("max_autotune_gemm_backends") or ("its default mix" if config.get("max_autotune")
                                                                else "no autotuning")
        return Built(fn, f"torch.compile (Inductor, {backends})", setup, lambda: inductor_config.patch(config))

    return make


def _no_valid_choices(e: BaseException | None) -> bool:
    while e is not None:
        if type(e).__name__ == "NoValidChoicesError" or "NoValidChoicesError" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def _numpy(ops: Operands, ctx: Context) -> Built:
    import numpy as np

    a, b = ops.a.numpy(), ops.b.numpy()
    out = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
    threads = torch.get_num_threads()

    def fn():
        return np.matmul(a, b, out=out)

    def setup() -> dict:
        with numpy_threads(threads) as seen:
            fn()
        return {"threads": seen}

    return Built(fn, ctx.device.host_gemm_libraries()["numpy"], setup,
                 lambda: numpy_threads(threads), lambda o: torch.from_numpy(o))


@contextlib.contextmanager
def numpy_threads(n: int):
    """numpy's BLAS on `n` threads (torch's count) while inside; yields the thread counts the BLAS libraries
    report. Without threadpoolctl, or without a BLAS library it can see, the counts cannot be set: Unsupported."""
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        raise Unsupported("threadpoolctl is not installed: numpy's BLAS threads cannot be set to torch's") from None
    if not [lib for lib in threadpool_info() if lib.get("user_api") == "blas"]:
        raise Unsupported("threadpoolctl sees no BLAS library in this process: numpy's BLAS threads cannot be set "
                          "to torch's")
    with threadpool_limits(limits=n, user_api="blas"):
        yield sorted({int(lib["num_threads"]) for lib in threadpool_info() if lib.get("user_api") == "blas"})


def _onednn(ops: Operands, ctx: Context) -> Built:
    a = ops.a
    packed = torch.ops.mkldnn._reorder_linear_weight(ops.w, a.shape[0])  # once, as a frozen layer's weight

    def fn():
        return torch.ops.mkldnn._linear_pointwise(a, packed, None, "none", [], "")

    return Built(fn, ctx.device.host_gemm_libraries()["onednn"])


BUILDERS: dict[str, Callable[[Operands, Context], Built]] = {
    "matmul": _matmul, "linear": _linear, "tunableop": _tunableop, "triton": _triton, "numpy": _numpy,
    "onednn": _onednn, **{p: _compiled(p) for p in _COMPILE_CONFIG},
}


def build(path: str, ops: Operands, ctx: Context) -> Built:
    if path.startswith(BLAS_PREFIX):
        return _blas(path.removeprefix(BLAS_PREFIX))(ops, ctx)
    return BUILDERS[path](ops, ctx)


# ---- the workload -----------------------------------------------------------------------------------------

class GemmLibs(PathWorkload):
    name = GEMM_WORKLOAD
    category = "micro"
    unit = "TFLOP/s"
    unit_help = "2·M·N·K floating-point operations per call, per second, ×1e-12 (tuning and compiling excluded)"
    description = "one GEMM through every path of the stack: vendor library, tuned, portable kernels, compiled"
    presets = {
        "tiny": "128³, fp32 and bf16, every path (tests)",
        "one": "one square product, 1024³ (CPU) / 4096³ (accelerator), fp32 and bf16 (CPU) / bf16 (accelerator), "
               "every path: a library comparison that fits a minute",
        "quick": "1024³ and a Llama-2-7B MLP shape at 512 tokens, fp32 and bf16 (CPU) / 4096³ and the Llama-2-7B "
                 "projections at 16384 tokens, bf16 (accelerator)",
        "standard": "squares 512–4096 and the Llama-2-7B projections at 512 tokens, fp32 and bf16 (CPU) / squares "
                    "1024–8192 and the Llama-2-7B and 70B projections at 16384 tokens, fp32, tf32, bf16, fp16 "
                    "(accelerator)",
        "full": "standard's shapes, every dtype, and torch.compile's default mixes on a CPU too",
    }
    default_preset = "quick"
    options = GemmOptions
    dtypes = DTYPES
    # paths a subclass adds: name -> builder, each with its kind
    extra_paths: dict[str, tuple[str, Callable[[Operands, Context], Built]]] = {}

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        shapes = shapes_for(preset, ctx.device.is_accelerator)
        paths = paths_for(preset, ctx) + list(self.extra_paths)
        return [Variant({"dtype": d, "m": m, "n": n, "k": k, "path": p}, flops=2.0 * m * n * k,
                        bytes=gemm_bytes(d, m, n, k))
                for d in dtypes_for(preset, ctx) for (m, n, k) in shapes for p in paths]

    def kind(self, path: str) -> str:
        return self.extra_paths[path][0] if path in self.extra_paths else path_kind(self.name, path) or "vendor"

    def device_unsupported(self, dtype: str, ctx: Context) -> str:
        return unsupported_reason(dtype, ctx)

    def path_unsupported(self, path: str, dtype: str, ctx: Context) -> str:
        """'' when this stack offers `path` for `dtype` and a small product runs through it, else why not."""
        why = path_unsupported(path, dtype, ctx)
        if not why and (path in ("linear", "numpy", "onednn") or path.startswith(BLAS_PREFIX)):
            why = preflight(path, dtype, ctx)
        return why

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        p = variant.params
        dtype, path = p["dtype"], p["path"]
        extra = {"metrics": {"path_kind": self.kind(path)}}
        try:
            why = self.path_unsupported(path, dtype, ctx) if path not in self.extra_paths else ""
        except Unsupported as e:
            why = str(e)
        if why:
            return self.failed(variant, ctx, "unsupported", why, **extra)
        with ctx.device.math_mode(dtype):
            try:
                return self._measure(variant, ctx, extra["metrics"])
            except Unsupported as e:
                return self.failed(variant, ctx, "unsupported", str(e), **extra)

    def _measure(self, variant: Variant, ctx: Context, metrics: dict) -> Measurement:
        p = variant.params
        ops = Operands.make(p["dtype"], p["m"], p["n"], p["k"], ctx.device)
        maker = self.extra_paths[p["path"]][1] if p["path"] in self.extra_paths else None
        built = maker(ops, ctx) if maker else build(p["path"], ops, ctx)
        metrics.update(library=built.library, **built.metrics)
        if built.setup is not None:
            metrics.update(built.setup())
        with built.context():
            try:
                timing = time_fn(built.fn, ctx.device, ctx.budget(), agreement=ctx.agreement,
                                 flush_cache=self.opts(ctx).flush_cache)
            except TooSlow as e:
                m = self.too_slow(variant, ctx, e.estimate_s, variant.flops, 1e-12)
                m.metrics.update(metrics)
                return m
            err = ops.check(built.as_tensor(built.fn()), TOLERANCE[p["dtype"]], _reference_device(ctx.device))
        if err is not None:
            return self.failed(variant, ctx, "wrong_result", f"{p['path']}: {err}", metrics=metrics)
        return self.throughput(variant, ctx, timing, variant.flops, 1e-12, metrics=metrics)
