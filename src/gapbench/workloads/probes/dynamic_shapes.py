"""Dynamic shapes: a small transformer block over a stream of varying batch sizes and sequence lengths.

Four variants: eager and `torch.compile` (dynamic=True), each over the varying stream and over the same
stream padded to one fixed shape (max batch × max length, with a key-padding mask; compiled static).
The value is real (unpadded) tokens per second over the whole stream in steady state, so padded and
varying rows compare directly. Compiled variants also record the cold first call and every
recompilation (counted from torch._dynamo's frame counters, costed as first-pass time minus steady time).
Compilation runs against an empty, temporary inductor cache so the cost is the cold cost.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from gapbench.results import Measurement
from gapbench.timing import TooSlow, time_fn, time_once
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.probes.options import DynamicShapesOptions

PRESETS = {
    # batch 1 is in both streams on purpose: torch.compile specialises sizes 0 and 1, the classic recompile
    "tiny": dict(d_model=64, heads=4, ff=256, items=8, batches=(1, 2, 4), min_len=16, max_len=96, seed=0),
    "standard": dict(d_model=256, heads=8, ff=1024, items=24, batches=(1, 2, 4, 8), min_len=32, max_len=256,
                     seed=0),
}

STEADY_MIN_SHARE = 0.3  # of the budget: what the steady-state timing keeps however long compiling took
TOLERANCE = 1e-4  # max |out - eager| relative to max |eager| (fp32; compiled kernels reorder sums)


class Block(nn.Module):
    """Pre-LayerNorm transformer encoder block: attention (SDPA) and a GELU MLP, residuals around both."""

    def __init__(self, d_model: int, heads: int, ff: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ff)
        self.fc2 = nn.Linear(ff, d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def shape_stream(items: int, batches: tuple[int, ...], min_len: int, max_len: int, seed: int) -> list[tuple[int, int]]:
    """The fixed, seeded stream of (batch, length) pairs every variant runs."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(items):
        b = batches[int(torch.randint(len(batches), (1,), generator=g))]
        t = int(torch.randint(min_len, max_len + 1, (1,), generator=g))
        out.append((b, t))
    if all(b != 1 for b, _ in out) and 1 in batches:
        out[items // 2] = (1, out[items // 2][1])
    return out


def block_flops(b: int, t: int, d: int, ff: int) -> float:
    """Forward FLOPs of one block call: projections 2·b·t·(4d² + 2·d·ff), attention 4·b·t²·d."""
    return 2.0 * b * t * (4 * d * d + 2 * d * ff) + 4.0 * b * t * t * d


class DynamicShapes(Workload):
    name = "dynamic-shapes"
    category = "probe"
    unit = "tokens/s"
    unit_help = ("real (unpadded) tokens of the whole shape stream per second of steady-state inference; "
                 "padded variants count the same real tokens")
    description = "a transformer block over varying batch/length, eager vs torch.compile(dynamic=True) vs padded"
    presets = {
        "tiny": "d_model 64, 8 calls over batches 1/2/4 and lengths 16..96 (a cold CPU compile is ~10-30 s)",
        "standard": "d_model 256, 24 calls over batches 1/2/4/8 and lengths 32..256",
    }
    default_preset = "tiny"
    options = DynamicShapesOptions

    def __init__(self):
        self._tps: dict[tuple, float] = {}  # (mode, shapes, preset, device) -> tokens/s, for cross-variant ratios

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}")
        p = PRESETS[preset]
        stream = shape_stream(p["items"], p["batches"], p["min_len"], p["max_len"], p["seed"])
        flops = sum(block_flops(b, t, p["d_model"], p["ff"]) for b, t in stream)
        common = {"d_model": p["d_model"], "heads": p["heads"], "ff": p["ff"], "calls": len(stream),
                  "distinct_shapes": len(set(stream)), "dtype": "fp32"}
        # padded first: the varying variants report their ratio against it
        backend = self.opts(ctx).compile_backend
        return [Variant({"mode": mode, "shapes": shapes, **common, **({"backend": backend} if mode == "compile" else {})},
                        flops=flops)
                for shapes in ("padded", "varying") for mode in ("eager", "compile")]

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        if variant.params["mode"] != "compile" or variant.params.get("backend", "inductor") != "inductor":
            return self._run(variant, ctx)
        with _cold_inductor_cache():  # kept for the whole variant: compiled artifacts live there
            return self._run(variant, ctx)

    def _run(self, variant: Variant, ctx: Context) -> Measurement:
        p = PRESETS[ctx.preset] if ctx.preset in PRESETS else PRESETS["tiny"]
        mode, shapes = variant.params["mode"], variant.params["shapes"]
        dev = ctx.device.torch_device
        stream = shape_stream(p["items"], p["batches"], p["min_len"], p["max_len"], p["seed"])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(p["seed"])
            model = Block(p["d_model"], p["heads"], p["ff"]).to(dev).eval()
        g = torch.Generator().manual_seed(p["seed"] + 1)
        xs = [torch.randn(b, t, p["d_model"], generator=g).to(dev) for b, t in stream]
        tokens = sum(b * t for b, t in stream)
        with torch.no_grad():
            refs = [model(x) for x in xs]
        if shapes == "padded":
            inputs, slices = padded_inputs(xs, p["d_model"])
        else:
            inputs, slices = [(x, None) for x in xs], [(x.shape[0], x.shape[1]) for x in xs]

        metrics: dict = {"real_tokens": tokens}
        if shapes == "padded":
            mb, mt = inputs[0][0].shape[:2]
            metrics["padded_shape"] = [mb, mt]
            metrics["padding_efficiency"] = tokens / (mb * mt * len(stream))
        fn = model
        if mode == "compile":
            compiled = self._compile_first_pass(model, inputs, shapes, ctx, variant.params.get("backend", "inductor"))
            if isinstance(compiled, str):
                status = "unsupported" if _toolchain_missing(compiled) else "error"
                return self.failed(variant, ctx, status, f"torch.compile failed: {compiled}")
            fn, outs, first = compiled
            metrics.update(first)
        else:
            with torch.no_grad():
                outs = [fn(x, m) for x, m in inputs]
        err = outputs_mismatch(outs, refs, slices)
        if err:
            return self.failed(variant, ctx, "wrong_result", f"{mode}/{shapes} vs eager: {err}", metrics=metrics)

        def one_pass():
            with torch.no_grad():
                for x, m in inputs:
                    fn(x, m)

        frames_before = _frames_ok()
        try:
            # compiling may eat the budget; steady state still gets a share (the runner's timeout has slack)
            left = max(ctx.budget_s - metrics.get("first_pass_s", 0.0), ctx.budget_s * STEADY_MIN_SHARE)
            timing = time_fn(one_pass, ctx.device, ctx.budget(left), agreement=ctx.agreement)
        except TooSlow as e:
            return self.too_slow(variant, ctx, e.estimate_s, tokens)
        if mode == "compile":
            metrics["recompiles_during_timing"] = _frames_ok() - frames_before
            with torch.no_grad():
                steady = [time_once(lambda x=x, m=m: fn(x, m), ctx.device) for x, m in inputs]
            metrics["steady_call_s"] = steady
            costs = [max(metrics["first_pass_call_s"][i] - steady[i], 0.0) for i in metrics["compile_at_calls"]]
            metrics["first_call_s"] = metrics["first_pass_call_s"][0]
            metrics["compile_first_s"] = costs[0] if costs else None
            metrics["recompile_s"] = costs[1:]
            metrics["recompile_total_s"] = sum(costs[1:])
        tps = tokens / timing.median_s
        key = (ctx.preset, str(ctx.device))
        self._tps[(mode, shapes, *key)] = tps
        if shapes == "varying":
            padded = self._tps.get((mode, "padded", *key))
            if padded:
                metrics["padded_tokens_per_s"] = padded
                metrics["speedup_vs_padded"] = tps / padded
        if mode == "compile":
            eager = self._tps.get(("eager", shapes, *key))
            if eager:
                metrics["speedup_vs_eager"] = tps / eager
        return self.throughput(variant, ctx, timing, tokens, metrics=metrics)

    def _compile_first_pass(self, model: nn.Module, inputs, shapes: str, ctx: Context, backend: str):
        """Compile cold and run the stream once, timing each call. Returns (fn, outputs, metrics) or the error."""
        import torch._dynamo

        dynamic = shapes == "varying"
        if backend == "inductor":
            try:
                import torch._inductor.compile_fx  # noqa: F401  (imports are process start-up, not compile cost)
            except Exception as e:  # a broken install
                return f"{e.__class__.__name__}: {e}"
        torch._dynamo.reset()
        outs, times, compile_calls, frames = [], [], [], []
        try:
            fn = torch.compile(model, dynamic=dynamic, backend=backend)
        except Exception as e:  # an unknown backend name fails here
            return f"{e.__class__.__name__}: {_first_line(str(e))}"
        t_all = time.perf_counter()
        try:
            with torch.no_grad():
                for i, (x, m) in enumerate(inputs):
                    before = _frames_ok()
                    ctx.device.synchronize()
                    t0 = time.perf_counter()
                    outs.append(fn(x, m))
                    ctx.device.synchronize()
                    times.append(time.perf_counter() - t0)
                    if _frames_ok() > before:
                        compile_calls.append(i)
                        frames.append(_frames_ok() - before)
        except torch.OutOfMemoryError:
            raise  # the worker records oom
        except Exception as e:
            torch._dynamo.reset()
            return f"{e.__class__.__name__}: {_first_line(str(e))}"
        first_pass = time.perf_counter() - t_all
        graph_breaks = _graph_breaks()
        metrics = {
            "dynamic": dynamic,
            "compile_events": len(compile_calls),
            "recompiles": max(len(compile_calls) - 1, 0),
            "recompile_at_shapes": [list(inputs[i][0].shape[:2]) for i in compile_calls[1:]],
            "frames_compiled": sum(frames),
            "graph_breaks": graph_breaks,
            "first_pass_s": first_pass,
            "first_pass_call_s": times,
            "backend": backend,
            "compile_cache": "cold (empty temporary inductor cache)" if backend == "inductor" else "n/a",
            "compile_at_calls": compile_calls,
        }
        return fn, outs, metrics


def padded_inputs(xs: list[torch.Tensor], d_model: int):
    """Each input zero-padded to (max batch, max length) with a boolean key-padding mask (True = attend)."""
    mb = max(x.shape[0] for x in xs)
    mt = max(x.shape[1] for x in xs)
    out, slices = [], []
    for x in xs:
        b, t, _ = x.shape
        xp = x.new_zeros(mb, mt, d_model)
        xp[:b, :t] = x
        mask = torch.ones(mb, 1, 1, mt, dtype=torch.bool, device=x.device)
        mask[:b, :, :, t:] = False  # rows beyond b are filler: they attend everything and are never read
        out.append((xp, mask))
        slices.append((b, t))
    return out, slices


def outputs_mismatch(outs, refs, slices, tol: float = TOLERANCE) -> str | None:
    """Why the outputs (each cut to its real batch × length) differ from the eager ones, or None."""
    if len(outs) != len(refs):
        return f"{len(outs)} outputs for {len(refs)} calls"
    for i, (o, r, (b, t)) in enumerate(zip(outs, refs, slices, strict=True)):
        got = o[:b, :t].to("cpu", torch.float64)
        ref = r.to("cpu", torch.float64)
        if got.shape != ref.shape:
            return f"call {i}: shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
        scale = ref.abs().max().clamp_min(1e-30)
        err = ((got - ref).abs().max() / scale).item()
        if not err <= tol:  # NaN fails too
            return f"call {i} (batch {b}, length {t}): max relative error {err:.3g} exceeds {tol:g}"
    return None


def _frames_ok() -> int:
    """Frames torch._dynamo compiled successfully so far in this process (one per compile or recompile)."""
    from torch._dynamo.utils import counters

    return int(counters["frames"]["ok"])


def _graph_breaks() -> int:
    from torch._dynamo.utils import counters

    return int(sum(counters["graph_break"].values()))


@contextlib.contextmanager
def _cold_inductor_cache():
    """Point inductor (and triton) at an empty temporary cache so compile times are cold, then restore."""
    with tempfile.TemporaryDirectory(prefix="gapbench-inductor-") as d:
        saved = {k: os.environ.get(k) for k in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = d
        os.environ["TRITON_CACHE_DIR"] = os.path.join(d, "triton")
        clear = None
        try:
            from torch._inductor.utils import clear_caches as clear
        except Exception:
            pass
        try:
            if clear:
                clear()
            yield
        finally:
            if clear:
                clear()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


def _toolchain_missing(reason: str) -> bool:
    text = reason.lower()
    return any(s in text for s in ("invalidcxxcompiler", "no working c++ compiler", "compiler not found",
                                   "cannot find a working triton", "triton", "not supported on"))


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""

