"""Causal attention through every path a stack offers: SDPA left to choose, each SDPA kernel forced (flash,
memory-efficient, cuDNN, a stack's own fused kernel, the unfused math), and FlexAttention compiled by
torch.compile (Triton kernels on GPUs, C++ on a CPU); forward, and forward + backward.

FLOPs per call follow FlashAttention's benchmarks: forward 4·B·H·S²·D, halved for a causal mask; forward +
backward 3.5× that. Every path is checked against float64 attention on the host: the output (and the input
gradients) of one key/value head and the query heads that share it, with the textbook softmax and its
backward written out.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from gapbench.devices.dtypes import DTYPES as DTYPE_TABLE
from gapbench.results import Measurement
from gapbench.timing import TooSlow, time_fn
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.libs.base import PathWorkload
from gapbench.workloads.libs.paths import ATTENTION_PATHS, ATTENTION_WORKLOAD
from gapbench.workloads.options import DtypeOptions

DTYPES = ("fp32", "bf16", "fp16")
MODES = ("fwd", "fwd+bwd")
# forced SDPA kernels: gapbench's path -> torch's SDPBackend member
SDPA_KERNELS = {"flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION", "cudnn": "CUDNN_ATTENTION",
                "overrideable": "OVERRIDEABLE", "math": "MATH"}
# largest error against float64, relative to the largest reference magnitude, per tensor kind and dtype
TOLERANCE = {"out": {"fp32": 1e-4, "bf16": 2e-2, "fp16": 4e-3},
             "grad": {"fp32": 1e-3, "bf16": 6e-2, "fp16": 1.2e-2}}

# Llama-2 attention (heads, key/value heads, head dim): 7B multi-head, 70B grouped-query (8 KV heads)
LLAMA2_7B = (32, 32, 128)
LLAMA2_70B = (64, 8, 128)


@dataclass(frozen=True)
class Shape:
    batch: int
    heads: int
    kv_heads: int
    seq: int
    head_dim: int

    def params(self) -> dict:
        return {"batch": self.batch, "heads": self.heads, "kv_heads": self.kv_heads, "seq": self.seq,
                "head_dim": self.head_dim}


def shapes_for(preset: str, accelerator: bool) -> list[Shape]:
    if preset == "tiny":
        return [Shape(1, 4, 2, 128, 64)]
    if preset == "quick":
        return [Shape(4, *LLAMA2_7B[:2], 4096, LLAMA2_7B[2])] if accelerator else [Shape(1, *LLAMA2_7B[:2], 256,
                                                                                          LLAMA2_7B[2])]
    if preset == "standard":
        if accelerator:
            return [Shape(4, h, kv, 4096, d) for (h, kv, d) in (LLAMA2_7B, LLAMA2_70B)]
        return [Shape(1, *LLAMA2_7B[:2], 512, LLAMA2_7B[2])]
    raise ValueError(f"unknown preset {preset!r}")


def attention_flops(s: Shape, mode: str) -> float:
    fwd = 4.0 * s.batch * s.heads * s.seq * s.seq * s.head_dim / 2  # causal: half the score matrix
    return fwd if mode == "fwd" else 3.5 * fwd


def attention_bytes(s: Shape, mode: str, dtype: str) -> float:
    """Compulsory traffic: q and o, k and v once forward; backward reads q, o, dO, k, v and writes dq, dk, dv."""
    q = s.batch * s.heads * s.seq * s.head_dim
    kv = s.batch * s.kv_heads * s.seq * s.head_dim
    n = 2 * q + 2 * kv if mode == "fwd" else 2 * q + 2 * kv + 4 * q + 4 * kv
    return float(n * DTYPE_TABLE[dtype].itemsize)


class Unsupported(Exception):
    """The path cannot run this problem here (the message says why)."""


@dataclass
class Inputs:
    shape: Shape
    dtype: str
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    dout: torch.Tensor

    @classmethod
    def make(cls, s: Shape, dtype: str, device, grad: bool) -> Inputs:
        g = torch.Generator(device="cpu").manual_seed(4321)
        td = device.torch_dtype(dtype)

        def t(heads):
            x = torch.randn(s.batch, heads, s.seq, s.head_dim, generator=g).to(device=device.torch_device, dtype=td)
            return x.requires_grad_(grad)

        q, k, v = t(s.heads), t(s.kv_heads), t(s.kv_heads)
        dout = torch.randn(s.batch, s.heads, s.seq, s.head_dim, generator=g).to(device=device.torch_device, dtype=td)
        return cls(s, dtype, q, k, v, dout)

    @property
    def gqa(self) -> bool:
        return self.shape.heads != self.shape.kv_heads


def reference(inp: Inputs, grad: bool) -> dict[str, torch.Tensor]:
    """float64 causal attention of batch 0, key/value head 0 and the query heads sharing it: out (and dq,
    dk, dv), from the rounded inputs the device saw, on the host."""
    group = inp.shape.heads // inp.shape.kv_heads
    f64 = {"device": "cpu", "dtype": torch.float64}
    k, v = inp.k[0, 0].detach().to(**f64), inp.v[0, 0].detach().to(**f64)
    s, scale = k.shape[0], 1.0 / math.sqrt(k.shape[1])
    future = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
    outs, dqs = [], []
    dk, dv = torch.zeros_like(k), torch.zeros_like(v)
    for h in range(group):
        q = inp.q[0, h].detach().to(**f64)
        p = torch.softmax((q @ k.T * scale).masked_fill(future, float("-inf")), dim=-1)
        o = p @ v
        outs.append(o)
        if grad:
            do = inp.dout[0, h].to(**f64)
            ds = p * (do @ v.T - (do * o).sum(-1, keepdim=True))  # softmax backward
            dqs.append(ds @ k * scale)
            dk += ds.T @ q * scale
            dv += p.T @ do
    ref = {"out": torch.stack(outs)}
    if grad:
        ref.update(dq=torch.stack(dqs), dk=dk, dv=dv)
    return ref


def compare(got: dict[str, torch.Tensor], ref: dict[str, torch.Tensor], dtype: str) -> str | None:
    """None when each tensor's largest error, relative to its largest reference magnitude, is within tolerance."""
    for name, r in ref.items():
        x = got[name].detach().to("cpu", torch.float64)
        if not torch.isfinite(x).all():
            return f"{name} has non-finite values"
        err = (x - r).abs().max().item() / max(r.abs().max().item(), 1e-30)
        tol = TOLERANCE["out" if name == "out" else "grad"][dtype]
        if err > tol:
            return f"{name}: max error {err:.3g} of its largest value exceeds tolerance {tol:g}"
    return None


def sample(inp: Inputs, out: torch.Tensor, grads: tuple | None) -> dict[str, torch.Tensor]:
    """The device's results for the reference's heads."""
    group = inp.shape.heads // inp.shape.kv_heads
    got = {"out": out[0, :group]}
    if grads is not None:
        got.update(dq=grads[0][0, :group], dk=grads[1][0, 0], dv=grads[2][0, 0])
    return got


def gqa_missing(gqa: bool, arguments: Iterable[str], version: str) -> str:
    """'' unless grouped-query heads meet an SDPA whose schema (`arguments`: its argument names) has no enable_gqa
    keyword (torch before 2.5, where passing it raises TypeError); then why the path cannot run."""
    if not gqa or "enable_gqa" in arguments:
        return ""
    return (f"torch {version}'s scaled_dot_product_attention has no enable_gqa (grouped-query attention needs "
            "torch 2.5)")


def sdpa_gqa_missing(gqa: bool) -> str:
    """gqa_missing for this torch's scaled_dot_product_attention."""
    names = [a.name for a in torch.ops.aten.scaled_dot_product_attention.default._schema.arguments]
    return gqa_missing(gqa, names, torch.__version__)


def sdp_choice_gqa_missing(gqa: bool) -> str:
    """gqa_missing for this torch's torch._fused_sdp_choice (SDPA's kernel choice, asked with the same keyword)."""
    names = [a.name for a in torch.ops.aten._fused_sdp_choice.default._schema.arguments]
    return gqa_missing(gqa, names, torch.__version__)


# ---- the paths ------------------------------------------------------------------------------------------

def _sdpa(kernel: str | None) -> Callable[[Inputs], Callable]:
    def make(inp: Inputs) -> Callable:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        gqa = {"enable_gqa": True} if inp.gqa else {}  # from torch 2.5 on; run() says unsupported before

        def attend(q, k, v):
            ctx = sdpa_kernel(getattr(SDPBackend, SDPA_KERNELS[kernel])) if kernel else contextlib.nullcontext()
            with ctx:
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)

        return attend

    return make


def _flex(inp: Inputs) -> Callable:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    s = inp.shape.seq
    torch._dynamo.reset()
    mask = create_block_mask(causal, B=None, H=None, Q_LEN=s, KV_LEN=s, device=inp.q.device)
    compiled = torch.compile(flex_attention, dynamic=False)
    gqa = {"enable_gqa": True} if inp.gqa else {}

    def attend(q, k, v):
        return compiled(q, k, v, block_mask=mask, **gqa)

    return attend


PATHS: dict[str, Callable[[Inputs], Callable]] = {
    "sdpa": _sdpa(None), **{p: _sdpa(p) for p in SDPA_KERNELS}, "flex": _flex,
}


def step(attend: Callable, inp: Inputs, mode: str) -> Callable[[], tuple]:
    """One timed call: the forward (no autograd), or forward and backward (the three input gradients)."""
    q, k, v, dout = inp.q, inp.k, inp.v, inp.dout
    if mode == "fwd":
        def fwd():
            with torch.no_grad():
                return attend(q, k, v), None
        return fwd

    def fwd_bwd():
        out = attend(q, k, v)
        return out, torch.autograd.grad(out, (q, k, v), dout)

    return fwd_bwd


def _no_kernel(e: BaseException, caught: list) -> str | None:
    """SDPA's own words when a forced kernel cannot take the inputs (its error and the warnings that say why)."""
    text = " ".join(str(e).split())
    if isinstance(e, NotImplementedError) or "No available kernel" in text or "No viable backend" in text:
        why = "; ".join(dict.fromkeys(" ".join(str(w.message).split())[:200] for w in caught))
        return f"{text[:200]}{' — ' + why if why else ''}"
    return None


# ---- the workload -----------------------------------------------------------------------------------------

class AttentionLibs(PathWorkload):
    name = ATTENTION_WORKLOAD
    category = "micro"
    unit = "TFLOP/s"
    unit_help = ("causal attention FLOPs per call (FlashAttention's count: 4·B·H·S²·D/2 forward, 3.5× that forward "
                 "+ backward), per second, ×1e-12")
    description = "causal attention through every SDPA kernel and FlexAttention, forward and forward + backward"
    presets = {
        "tiny": "1×4 heads (2 KV heads)×128×64, fp32 and bf16 (tests)",
        "quick": "Llama-2-7B heads at 256 tokens, fp32 and bf16 (CPU) / at 4×4096 tokens, bf16 (accelerator)",
        "standard": "Llama-2-7B heads at 512 tokens, fp32 and bf16 (CPU) / Llama-2-7B and 70B (grouped-query) "
                    "heads at 4×4096 tokens, bf16 and fp16 (accelerator)",
    }
    default_preset = "quick"
    options = DtypeOptions
    dtypes = DTYPES
    # paths a subclass adds: name -> (kind, a maker of the attention function from the inputs)
    extra_paths: dict[str, tuple[str, Callable[[Inputs], Callable]]] = {}

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        accel = ctx.device.is_accelerator
        dtypes = ctx.dtypes(DTYPES, ["bf16"] if accel and preset == "quick" else ["bf16", "fp16"] if accel
                            else ["fp32", "bf16"])
        return [Variant({"dtype": d, **s.params(), "mode": mode, "path": p}, flops=attention_flops(s, mode),
                        bytes=attention_bytes(s, mode, d))
                for d in dtypes for s in shapes_for(preset, accel) for mode in MODES
                for p in list(ATTENTION_PATHS) + list(self.extra_paths)]

    def path_unsupported(self, path: str, dtype: str, ctx: Context) -> str:
        dev = ctx.device
        if path == "flex":
            return dev.compile_unsupported() or dev.flex_attention_unsupported()
        if path in SDPA_KERNELS and path not in dev.attention_kernels():
            return f"{dev.kind} has no {path} SDPA kernel (its kernels: {', '.join(dev.attention_kernels())})"
        return ""

    def kind(self, path: str) -> str:
        extra = self.extra_paths.get(path)
        return extra[0] if extra else ATTENTION_PATHS[path][0]

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        p = variant.params
        path, dtype = p["path"], p["dtype"]
        extra = self.extra_paths.get(path)
        metrics = {"path_kind": self.kind(path)}
        why = "" if extra else self.path_unsupported(path, dtype, ctx)
        if not why and path in PATHS and path != "flex":  # the SDPA paths pass enable_gqa for grouped-query heads
            why = sdpa_gqa_missing(p["heads"] != p["kv_heads"])
        if why:
            return self.failed(variant, ctx, "unsupported", why, metrics=metrics)
        try:
            return self._measure(variant, ctx, metrics)
        except Unsupported as e:
            return self.failed(variant, ctx, "unsupported", str(e), metrics=metrics)

    def _library(self, path: str, inp: Inputs, ctx: Context) -> str:
        kernels = ctx.device.attention_kernels()
        if path == "flex":
            return "FlexAttention (torch.compile)"
        if path in self.extra_paths:
            return path
        if path != "sdpa":
            return kernels.get(path, path)
        from torch.nn.attention import SDPBackend

        why = sdp_choice_gqa_missing(inp.gqa)
        if why:
            raise Unsupported(why)
        gqa = {"enable_gqa": True} if inp.gqa else {}
        chosen = SDPBackend(torch._fused_sdp_choice(inp.q, inp.k, inp.v, is_causal=True, **gqa)).name
        name = next((k for k, v in SDPA_KERNELS.items() if v == chosen), chosen.lower())
        return f"SDPA's choice: {kernels.get(name, name)}"

    def _measure(self, variant: Variant, ctx: Context, metrics: dict) -> Measurement:
        p = variant.params
        shape = Shape(p["batch"], p["heads"], p["kv_heads"], p["seq"], p["head_dim"])
        grad = p["mode"] != "fwd"
        inp = Inputs.make(shape, p["dtype"], ctx.device, grad)
        maker = self.extra_paths[p["path"]][1] if p["path"] in self.extra_paths else PATHS[p["path"]]
        fn = step(maker(inp), inp, p["mode"])
        metrics["library"] = self._library(p["path"], inp, ctx)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                fn()
            except (RuntimeError, NotImplementedError) as e:
                why = _no_kernel(e, caught)
                if why is None:
                    raise
                raise Unsupported(why) from None
        ctx.device.synchronize()
        if p["path"] == "flex":
            metrics["compile_s"] = time.perf_counter() - t0
        try:
            timing = time_fn(fn, ctx.device, ctx.budget(), agreement=ctx.agreement)
        except TooSlow as e:
            m = self.too_slow(variant, ctx, e.estimate_s, variant.flops, 1e-12)
            m.metrics.update(metrics)
            return m
        out, grads = fn()
        err = compare(sample(inp, out, grads), reference(inp, grad), p["dtype"])
        if err is not None:
            return self.failed(variant, ctx, "wrong_result", f"{p['path']} {p['mode']}: {err}", metrics=metrics)
        return self.throughput(variant, ctx, timing, variant.flops, 1e-12, metrics=metrics)
