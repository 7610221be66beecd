"""Dense matrix multiply at every precision: fp32, tf32, bf16, fp16, fp8 (e4m3), int8.

FLOPs per call = 2·M·N·K (int8 counts integer multiply-adds the same way). Inputs are random-normal
(speed and power depend on the data), drawn on the device itself from a generator of that device with a fixed
seed. Every variant checks a block of its output (64 sampled rows × 64 sampled columns) against a float64
reference computed from the same (rounded) inputs, on the device where it computes in float64.

Operand layouts: A is row-major everywhere. For fp8 and int8, B is column-major (made as an (n, k) contiguous
tensor and passed transposed): the layout the int8 and fp8 tensor-core kernels of cuBLASLt and hipBLASLt take
("TN", row × column); `torch._scaled_mm` requires it, and `torch._int_mm` runs several times slower without it.

fp8 accumulation: every fp8 row names the accumulation it measured in its variant's `accum`:
- `"fp32"`: `torch._scaled_mm(..., use_fast_accum=False)`, the products accumulated in fp32 (on Hopper,
  cuBLASLt promotes the tensor cores' partial sums to fp32 registers as it goes);
- `"fast"`: `use_fast_accum=True`, the tensor cores' own accumulator throughout, without that promotion:
  faster where the stack has it, and less exact.
Both are measured where the stack tells them apart. Which it does is asked of the stack itself, once per
device: a probe product with each flag (`FAST_ACCUM_PROBE`). Where `use_fast_accum=True` is refused, or gives
output bit-identical to `use_fast_accum=False` (an accepted flag without effect: ATen passes it to cuBLASLt
only, not to hipBLASLt, XPU's oneDNN or the CPU), only `"fp32"` rows are made and each says so in
`metrics.fast_accum`, never two rows of the same path. Every fp8 row records the flag it passed in
`metrics.use_fast_accum`. The sweep variant carries `accum` too (one sweep per accumulation measured).
"""

from __future__ import annotations

import warnings

import torch

from gapbench.devices.dtypes import DTYPES as TABLE
from gapbench.errors import GapbenchError
from gapbench.results import Measurement
from gapbench.timing import TooSlow, time_fn
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.micro.options import GemmShapeOptions

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")

# relative tolerance against sum_k |a_ik·b_kj| (the magnitude the rounding errors scale with)
TOLERANCE = {"fp32": 1e-5, "tf32": 4e-3, "bf16": 1.6e-2, "fp16": 2e-3, "fp8": 1.6e-2, "int8": 0.0}
# fp8 with use_fast_accum=True: the same 1.6e-2. A model of Hopper's fp8 tensor-core accumulator (each group of
# 32 products and the running sum aligned to the largest exponent and truncated to 13 fraction bits, the published
# model of its reduced-precision accumulation), simulated on N(0,1)/4 e4m3 inputs, gives a largest error of
# 1.7e-4 at K=4096 and 3.9e-4 at K=28672 (the largest K measured) against sum_k |a_ik·b_kj|; 2.5e-3 with 10
# fraction bits, 7e-3 with 8. 1.6e-2 leaves a 40x margin over the model, while a transposed or wrongly scaled
# operand still misses it by far at the sampled block's largest element.
FAST_ACCUM_TOLERANCE = 1.6e-2

# fp8 accumulation modes: the variant's `accum` → torch._scaled_mm's use_fast_accum
ACCUMULATIONS = {"fp32": False, "fast": True}
FAST_ACCUM_PROBE = (128, 128, 4096)  # m, n, k of the probe: a long k, where the two accumulations part
SEED = 1234  # of the operands (per device: each device's generator draws its own stream)
SAMPLE = 64  # rows and columns of the output checked

_SQUARE = (1024, 2048, 4096, 8192)
# shapes from transformer training: (tokens, out, in) of QKV/MLP projections at hidden 4096/8192
_LLM = ((16384, 4096, 4096), (16384, 11008, 4096), (16384, 4096, 11008), (8192, 8192, 8192),
        (16384, 28672, 8192), (16384, 8192, 28672))
SWEEP_PROBE_SHARE = 0.5  # of a sweep variant's budget: the short timing of every shape
SWEEP_FINAL_SHARE = 0.45  # the full timings of the best few shapes (the rest is set-up)
SWEEP_FINALISTS = 3  # shapes re-measured with full repeats: the probe's best three
_SWEEP_CPU = tuple((s, s, s) for s in (256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096)) + (
    (2048, 2048, 512), (4096, 1024, 1024), (1024, 4096, 1024))
_SWEEP_ACCEL = tuple((s, s, s) for s in (2048, 3072, 4096, 5120, 6144, 8192, 10240, 12288, 16384)) + (
    (8192, 8192, 16384), (16384, 16384, 8192), (32768, 8192, 8192))


def _unique(shapes) -> list[tuple[int, int, int]]:
    """Each shape once, in its first place (8192³ is both a square and an LLM shape)."""
    return list(dict.fromkeys(shapes))


def _standard_shapes(accel: bool) -> list[tuple[int, int, int]]:
    if not accel:
        return [(s, s, s) for s in (512, 1024, 2048)]
    return _unique([(s, s, s) for s in _SQUARE] + list(_LLM))


def plan(preset: str, accel: bool, dtypes: list[str], accums: tuple[str, ...] = ("fp32",)):
    """(the fixed shapes, the variants) of a preset: every fixed shape per dtype (fp8 once per accumulation mode
    in `accums`), then the sweeps (fp8's also once per accumulation mode)."""
    if preset == "tiny":
        shapes, sweep = [(256, 256, 256)], []
    elif preset == "quick":
        shapes = [(4096, 4096, 4096)] if accel else [(1024, 1024, 1024)]
        sweep = [d for d in ("fp32", "bf16") if d in dtypes]
    elif preset == "standard":
        shapes, sweep = _standard_shapes(accel), list(dtypes)
    elif preset == "shapes":
        shapes, sweep = _standard_shapes(accel), []
    elif preset == "fp8":
        dtypes = ["fp8"]
        shapes = _standard_shapes(True) if accel else [(1024, 1024, 1024)]
        sweep = ["fp8"]
    elif preset == "sweep":
        shapes, sweep = [], list(dtypes)
    else:
        raise ValueError(f"unknown preset {preset!r}")
    out = [_variant(d, m, n, k, a) for d in dtypes for a in _accums_of(d, accums)
           for (m, n, k) in (TINY_FP8 if preset == "tiny" and d == "fp8" else shapes)]
    out += [Variant({"dtype": d, "sweep": "max"} | ({"accum": a} if a else {}))
            for d in sweep for a in _accums_of(d, accums)]
    return shapes, out


# the tiny preset's fp8 shape: torch's CPU scaled matmul (the test accelerator's fp8 path) is a reference loop of a
# few tens of MFLOP/s where the CPU has no fp8 units, a second per 256³ call
TINY_FP8 = [(64, 64, 64)]

LISTED_NEEDS = ("the listed preset measures the shapes of --gemm-shapes MxNxK[,MxNxK]; none were given (`gapbench "
                "assess` names a traced step's own)")


def listed(shapes, dtypes: list[str]) -> list[Variant]:
    """The `listed` preset: each shape of --gemm-shapes once per dtype (fp8 with fp32 accumulation, the one every
    stack measures), as fixed-shape rows: a results file's rows at a model step's own shapes."""
    if not shapes:
        raise GapbenchError(LISTED_NEEDS)
    return [_variant(d, m, n, k, "fp32" if d == "fp8" else None) for d in dtypes
            for m, n, k in dict.fromkeys(tuple(s) for s in shapes)]


def _accums_of(dtype: str, accums: tuple[str, ...]) -> tuple[str | None, ...]:
    return tuple(accums) if dtype == "fp8" else (None,)


class Gemm(Workload):
    name = "gemm"
    category = "micro"
    unit = "TFLOP/s"
    unit_help = "2·M·N·K floating-point (or int8 multiply-add) operations per call, per second, ×1e-12"
    description = "dense matmul per precision: standard shapes and a sweep for the max achievable rate"
    presets = {
        "quick": "one 1024³ (CPU) / 4096³ (accelerator) matmul per dtype, and an fp32/bf16 sweep",
        "standard": "square 1024³…8192³ and LLM projection shapes per dtype (each shape once), plus a sweep per "
                    "dtype",
        "shapes": "the standard preset's fixed shapes per dtype, without any sweep (for a run that measures the "
                  "sweeps as a part of their own, with the sweep preset)",
        "fp8": "fp8 (e4m3) only: standard shapes and the sweep (the article's FP8 GEMM row)",
        "sweep": "only the max-achievable sweep, every dtype",
        "tiny": "one 256³ matmul per dtype, fp8 64³ (tests)",
        "listed": "the shapes of --gemm-shapes per dtype (a model step's own: `gapbench assess` names them)",
    }
    default_preset = "quick"
    options = GemmShapeOptions
    dtypes = DTYPES

    def __init__(self):
        self._fixed: dict[tuple, list[Measurement]] = {}  # ok fixed-shape rows of this run, by (dtype, accum)
        self._shapes: list[tuple[int, int, int]] = []  # the fixed shapes of the preset being run

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        dtypes = ctx.dtypes(self.dtypes)
        if preset == "listed":
            return listed(self.opts(ctx).gemm_shapes, dtypes)
        accums = fp8_accumulations(ctx.device)[0] if "fp8" in dtypes or preset == "fp8" else ("fp32",)
        shapes, out = plan(preset, ctx.device.is_accelerator, dtypes, accums)
        self._shapes = list(shapes)
        return out

    def check(self, options, preset: str) -> None:
        if preset == "listed" and not options.gemm_shapes:
            raise ValueError(LISTED_NEEDS)

    def device_unsupported(self, dtype: str, ctx: Context) -> str:
        return unsupported_reason(dtype, ctx)

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        dtype = variant.params["dtype"]
        if variant.params.get("sweep"):
            return self._sweep(variant, ctx)
        m, n, k = variant.params["m"], variant.params["n"], variant.params["k"]
        accum = variant.params.get("accum")
        with ctx.device.math_mode(dtype):
            op = _make_op(dtype, m, n, k, ctx.device, accum=accum)
            try:  # timing first: its probe iteration guards the budget before anything slow runs
                timing = time_fn(op, ctx.device, ctx.budget(), agreement=ctx.agreement,
                                 flush_cache=self.opts(ctx).flush_cache)
            except TooSlow as e:
                return self.too_slow(variant, ctx, e.estimate_s, variant.flops, 1e-12)
            err = op.check()
            if err is not None:
                return self.failed(variant, ctx, "wrong_result", err)
        m_ = self.throughput(variant, ctx, timing, variant.flops, 1e-12, metrics=_accum_metrics(accum, ctx))
        self._fixed.setdefault((dtype, accum), []).append(m_)
        return m_

    def _sweep(self, variant: Variant, ctx: Context) -> Measurement:
        """The max achievable rate: every candidate shape (the sweep's and the preset's fixed shapes) timed
        briefly, the best few timed again with full repeats, and the best of those — never below a fixed-shape
        row of the same dtype (and fp8 accumulation) measured in this run (the higher of the two is reported,
        and which shape won)."""
        dtype, accum = variant.params["dtype"], variant.params.get("accum")
        shapes = sorted(set(_SWEEP_ACCEL if ctx.device.is_accelerator else _SWEEP_CPU) | set(self._shapes),
                        key=lambda s: s[0] * s[1] * s[2])
        with ctx.device.math_mode(dtype):
            tried = self._probe_shapes(dtype, shapes, ctx, accum)
            if not tried:
                return self.failed(variant, ctx, "too_slow", "even the smallest sweep shape does not fit its "
                                   f"{ctx.budget_s * SWEEP_PROBE_SHARE / len(shapes):.2g} s share of the "
                                   f"{ctx.budget_s:.0f} s budget")
            finalists = sorted(tried, key=lambda r: -r["tflops"])[:SWEEP_FINALISTS]
            results = []
            for f in finalists:
                r = self._full(variant, ctx, f["m"], f["n"], f["k"], SWEEP_FINAL_SHARE / len(finalists))
                if not r.ok and r.status == "wrong_result":
                    return r
                results.append((f, r))
        measured = [(f, r) for f, r in results if r.ok]
        if not measured:
            return results[0][1]
        f, best = max(measured, key=lambda fr: fr[1].value)
        metrics = {"best_m": f["m"], "best_n": f["n"], "best_k": f["k"], "sweep": tried, "best_from": "sweep",
                   "finalists": [{**ff, "tflops_full": rr.value if rr.ok else None} for ff, rr in results]}
        fixed = max(self._fixed.get((dtype, accum), []), key=lambda m: m.value, default=None)
        if fixed is not None and fixed.value > best.value:
            p = fixed.variant
            metrics.update(best_m=p["m"], best_n=p["n"], best_k=p["k"], best_from="fixed-shape row of this run",
                           sweep_best_tflops=best.value)
            return fixed.replace(variant=variant.params, metrics=fixed.metrics | metrics)
        return best.replace(variant=variant.params, metrics=best.metrics | metrics)

    def _probe_shapes(self, dtype: str, shapes: list, ctx: Context, accum: str | None) -> list[dict]:
        share = SWEEP_PROBE_SHARE / len(shapes)
        tried = []
        for (m, n, k) in shapes:
            if not _fits(dtype, m, n, k, ctx):
                continue
            op = _make_op(dtype, m, n, k, ctx.device, accum=accum)
            try:
                t = time_fn(op, ctx.device, ctx.budget().fraction(share, min_time_s=min(
                    ctx.min_time_s, ctx.budget_s * share / 8), repeats=3), agreement=ctx.agreement,
                    measure_energy=False)
            except TooSlow:
                break  # bigger shapes will not fit either
            finally:
                del op
            tried.append({"m": m, "n": n, "k": k, "tflops": 2 * m * n * k / t.median_s * 1e-12})
        return tried

    def _full(self, variant: Variant, ctx: Context, m: int, n: int, k: int, share: float) -> Measurement:
        """One shape timed with full repeats and checked, as a measurement of the sweep variant."""
        dtype, accum = variant.params["dtype"], variant.params.get("accum")
        op = _make_op(dtype, m, n, k, ctx.device, accum=accum)
        v = Variant(variant.params, flops=2.0 * m * n * k, bytes=gemm_bytes(dtype, m, n, k))
        try:
            timing = time_fn(op, ctx.device, ctx.budget().fraction(share), agreement=ctx.agreement)
        except TooSlow as e:
            return self.too_slow(v, ctx, e.estimate_s, v.flops, 1e-12)
        err = op.check()
        if err is not None:
            return self.failed(v, ctx, "wrong_result", f"shape {m}x{n}x{k}: {err}")
        return self.throughput(v, ctx, timing, v.flops, 1e-12, metrics=_accum_metrics(accum, ctx))


def _variant(dtype: str, m: int, n: int, k: int, accum: str | None = None) -> Variant:
    params = {"dtype": dtype, "m": m, "n": n, "k": k}
    if dtype == "fp8":
        params["accum"] = accum or "fp32"
    return Variant(params, flops=2.0 * m * n * k, bytes=gemm_bytes(dtype, m, n, k))


def _accum_metrics(accum: str | None, ctx: Context) -> dict:
    """What an fp8 row says of its accumulation: the flag it passed, and why it is the only one where it is."""
    if accum is None:
        return {}
    out = {"use_fast_accum": ACCUMULATIONS[accum]}
    note = fp8_accumulations(ctx.device)[1]
    if note and accum == "fp32":
        out["fast_accum"] = note
    return out


def gemm_bytes(dtype: str, m: int, n: int, k: int) -> float:
    """Bytes of A, B read and C written once (the roofline's compulsory traffic)."""
    row = TABLE[dtype]
    size_out = getattr(torch, row.accumulates_in).itemsize if row.accumulates_in else row.itemsize
    return float((m * k + k * n) * row.itemsize + m * n * size_out)


def _fits(dtype: str, m: int, n: int, k: int, ctx: Context) -> bool:
    need = gemm_bytes(dtype, m, n, k) * 2 + 64 * 2**20
    return need < ctx.device.free_memory() * 0.8


def unsupported_reason(dtype: str, ctx: Context) -> str:
    """Why this device cannot run the dtype at all ('' when it can: a tiny matmul ran)."""
    dev = ctx.device
    why = dev.matmul_unsupported(dtype)
    if why:
        return why
    try:
        with dev.math_mode(dtype):
            op = _make_op(dtype, 32, 32, 32, dev)
            op()
        dev.synchronize()
    except (RuntimeError, NotImplementedError, TypeError) as e:
        return f"{dtype} matmul is not available on {dev.kind}: {_short(e)}"
    return ""


def _short(e: BaseException) -> str:
    return " ".join(str(e).split())[:200]


_ACCUMULATIONS_SEEN: dict[str, tuple[tuple[str, ...], str]] = {}


def fp8_accumulations(dev) -> tuple[tuple[str, ...], str]:
    """The fp8 accumulation modes worth a row each on this device, and ('' or) why only "fp32" is: the answer of
    a probe product (FAST_ACCUM_PROBE) run once per device and process with use_fast_accum=False and True on
    the same operands. "fast" is a mode of its own only where the outputs differ."""
    key = str(dev)
    if key not in _ACCUMULATIONS_SEEN:
        _ACCUMULATIONS_SEEN[key] = _probe_fast_accum(dev)
    return _ACCUMULATIONS_SEEN[key]


def _probe_fast_accum(dev) -> tuple[tuple[str, ...], str]:
    if dev.matmul_unsupported("fp8"):
        return ("fp32",), ""  # no fp8 rows measure anything here: their own check says why
    m, n, k = FAST_ACCUM_PROBE
    try:
        full = _make_op("fp8", m, n, k, dev, accum="fp32")()
    except (RuntimeError, NotImplementedError, TypeError):
        return ("fp32",), ""  # fp8 itself fails here: the rows' check says why
    try:
        with warnings.catch_warnings():  # a stack that ignores the flag may warn that it does
            warnings.simplefilter("ignore")
            fast = _make_op("fp8", m, n, k, dev, accum="fast")()
        same = bool(torch.equal(full, fast))
    except (RuntimeError, NotImplementedError, TypeError) as e:
        return ("fp32",), f"use_fast_accum=True is refused here ({_short(e)}): one accumulation is measured"
    if same:
        return ("fp32",), (f"use_fast_accum=True gave output bit-identical to use_fast_accum=False in a "
                           f"{m}x{n}x{k} probe: the flag has no effect here, so one accumulation is measured")
    return ("fp32", "fast"), ""


class _Op:
    """One prepared matmul: call it to run, check() to compare a sampled block of the output with float64.

    a is A (m, k) and b is B (k, n) as the product takes them (B may be a transposed view); scale_a and scale_b
    turn their values into the ones the product multiplies (fp8's per-tensor scales); the reference is computed on
    `ref_device` (the device itself where it computes in float64)."""

    def __init__(self, fn, a, b, tol, *, scale_a=1.0, scale_b=1.0, ref_device=None, generator=None):
        self.fn, self.a, self.b, self.tol = fn, a, b, tol
        self.scale_a, self.scale_b = scale_a, scale_b
        self.ref_device = ref_device if ref_device is not None else a.device
        self.generator = generator

    def __call__(self):
        return self.fn()

    def check(self) -> str | None:
        out = self.fn()
        rows, cols = sample_indices(out.shape[0], out.shape[1])
        r, c = rows.to(out.device), cols.to(out.device)
        a = _take(self.a, 0, r).to(self.ref_device).to(torch.float64) * self.scale_a
        b = _take(self.b, 1, c).to(self.ref_device).to(torch.float64) * self.scale_b
        return check_block(out.index_select(0, r).index_select(1, c), a, b, self.tol)


def _take(t: torch.Tensor, dim: int, index: torch.Tensor) -> torch.Tensor:
    """t.index_select(dim, index); one-byte floats (fp8) through their bytes, which every stack can index."""
    if t.is_floating_point() and t.element_size() == 1:
        return t.view(torch.uint8).index_select(dim, index).view(t.dtype)
    return t.index_select(dim, index)


def sample_indices(m: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows and the columns of an m×n product that the check compares (SAMPLE of each, or all), the same
    every time (a fixed seed)."""
    g = torch.Generator().manual_seed(0)
    rows = torch.randperm(m, generator=g)[: min(m, SAMPLE)]
    cols = torch.randperm(n, generator=g)[: min(n, SAMPLE)]
    return rows, cols


def check_block(got, a, b, tol: float) -> str | None:
    """Compare a block `got` of a product with the float64 product a @ b (a: those rows of A, b: those columns of
    B, float64 on one device): None when every element's error, relative to sum_k |a_ik·b_kj|, is within `tol`,
    else what is wrong."""
    got = got.to(a.device).to(torch.float64)
    if not torch.isfinite(got).all():
        return "output has non-finite values"
    ref = a @ b
    scale = a.abs() @ b.abs()
    err = ((got - ref).abs() / scale.clamp_min(1e-30)).max().item()
    if err > tol:
        return f"max relative error {err:.3g} exceeds tolerance {tol:g}"
    return None


def check_sample(out, ref_a, ref_b, tol: float) -> str | None:
    """check_block on the sampled block (sample_indices) of a product `out`, for a caller that holds its inputs
    as ref_a(rows), those rows of A, and ref_b(), all of B, as float64 CPU tensors of the rounded inputs the device
    saw (only the sampled columns of B enter the product)."""
    rows, cols = sample_indices(out.shape[0], out.shape[1])
    a = ref_a(rows)
    b = ref_b().index_select(1, cols.to(a.device))
    got = out.index_select(0, rows.to(out.device)).index_select(1, cols.to(out.device))
    return check_block(got, a, b, tol)


def _reference_device(dev) -> torch.device:
    """Where the float64 reference of a check is computed: the device, unless it has no float64 (MPS)."""
    return torch.device("cpu") if dev.dtype_unsupported("fp64") else dev.torch_device


def _generator(device: torch.device) -> torch.Generator | None:
    """A seeded generator of the device itself, so that the operands are drawn where they are used (drawing a
    16384×28672 operand on the host and copying it dominated the run); None for meta tensors,
    which hold no values."""
    if device.type == "meta":
        return None
    return torch.Generator(device=device).manual_seed(SEED)


def _make_op(dtype: str, m: int, n: int, k: int, dev, accum: str | None = None) -> _Op:
    device = dev.torch_device
    g = _generator(device)
    tol = TOLERANCE[dtype]
    ref = _reference_device(dev)
    if dtype in ("fp32", "tf32", "bf16", "fp16"):
        td = dev.torch_dtype(dtype)
        a = torch.randn(m, k, generator=g, device=device, dtype=td)
        b = torch.randn(k, n, generator=g, device=device, dtype=td)
        c = torch.empty(m, n, device=device, dtype=td)

        def fn():
            return torch.mm(a, b, out=c)

        return _Op(fn, a, b, tol, ref_device=ref, generator=g)
    if dtype == "int8":
        a = torch.randint(-128, 128, (m, k), generator=g, device=device, dtype=torch.int8)
        bt = torch.randint(-128, 128, (n, k), generator=g, device=device, dtype=torch.int8)
        b = bt.t()  # column-major: the int8 tensor-core kernels' layout (row-major B runs several times slower)

        def fn():
            return torch._int_mm(a, b)

        return _Op(fn, a, b, tol, ref_device=ref, generator=g)
    if dtype == "fp8":
        f8 = dev.fp8_e4m3()
        fast = ACCUMULATIONS[accum or "fp32"]
        # N(0,1) inputs scaled by 1/4 stay well inside e4m3's range (max 448; 240 for fnuz)
        a = (torch.randn(m, k, generator=g, device=device, dtype=torch.bfloat16) * 0.25).to(f8)
        bt = (torch.randn(n, k, generator=g, device=device, dtype=torch.bfloat16) * 0.25).to(f8)
        b = bt.t()  # column-major, as _scaled_mm requires
        sa = torch.tensor(4.0, device=device)
        sb = torch.tensor(4.0, device=device)

        def fn():
            return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast)

        return _Op(fn, a, b, FAST_ACCUM_TOLERANCE if fast else tol, scale_a=4.0, scale_b=4.0,
                   ref_device=ref, generator=g)
    raise ValueError(f"unknown dtype {dtype!r}")
