"""Scaled-dot-product attention: `torch.nn.functional.scaled_dot_product_attention` as a model calls it, forward
and backward apart, per dtype and shape (batch × heads, sequence, head dimension). The backend picks its kernel
(flash, memory-efficient, the CPU's, math), so this is the rate a model's attention runs at there — which a GEMM
rate does not tell: on a CPU, bf16 attention at head dimension 32 runs slower than fp32.

FLOPs: torch.utils.flop_counter's SDPA formulas (forward 4·BH·S·KV·D, the two batched GEMMs; backward 2.5 times
that; a causal kernel counted in full), the same count a model trace uses. The `listed` preset measures a model
step's own attentions (--attention-shapes): the keys' sequence where it is not the query's (attention over a reduced
sequence, SegFormer's) and causal kernels (decoders), both of which change what the backend runs. Bytes: q, k, v read and the output written (forward); plus the output
gradient read and three gradients written (backward). Each variant checks the output (forward) or the query
gradient (backward) against float64 on the CPU.

Precision: fp32 rows run with TF32 off, tf32 rows with it on, through the device's math mode; a tf32 row is
`unsupported` where no attention kernel the backend picks follows the switch (on CUDA the fused kernels do not:
the memory-efficient one computes fp32 as 3×TF32 whatever it says), with the reason.
"""

from __future__ import annotations

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.errors import GapbenchError
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.micro.operator import Op, OperatorWorkload, relative_error
from gapbench.workloads.micro.options import AttentionShapeOptions

TOLERANCE = {"fp32": 1e-4, "tf32": 4e-3, "bf16": 3e-2, "fp16": 5e-3}  # of max |error| over max |reference|
PASSES = ("forward", "backward")
# (batch × heads, sequence, head dimension)
_SHAPES = {
    "tiny": {"cpu": [(8, 128, 32)], "accelerator": [(8, 128, 32)]},
    "quick": {"cpu": [(16, 128, 32), (16, 128, 64), (16, 512, 64), (8, 512, 128), (4, 1024, 128)],
              "accelerator": [(64, 1024, 64), (64, 1024, 128), (32, 4096, 128), (16, 8192, 128)]},
}


def sdpa_flops(bh: int, seq: int, d: int, backward: bool, kv: int | None = None) -> float:
    """torch.utils.flop_counter's count (a causal kernel counted in full, as a trace counts it)."""
    from torch.utils.flop_counter import sdpa_backward_flop_count, sdpa_flop_count

    q, k = (1, bh, seq, d), (1, bh, kv or seq, d)
    return float(sdpa_backward_flop_count(q, q, k, k) if backward else sdpa_flop_count(q, k, k))


LISTED_NEEDS = ("the listed preset measures the attentions of --attention-shapes BHxSxD[xKV][c][,...]; none were "
                "given (`gapbench assess` names a traced step's own)")


class Attention(OperatorWorkload):
    name = "attention"
    unit = "TFLOP/s"
    unit_help = "torch.utils.flop_counter's SDPA FLOPs (two batched GEMMs forward, their gradients backward) per second"
    description = "scaled_dot_product_attention forward and backward per dtype and shape, the backend's own kernel"
    presets = {"tiny": "one shape (8 heads × 128 tokens × 32) per dtype and pass (tests)",
               "quick": "head dimensions 32–128 at sequences of 128–1024 (CPU) / 1024–8192 (accelerator)",
               "listed": "the attentions of --attention-shapes per dtype and pass, keys' sequence and causal as given "
                         "(a model step's own: `gapbench assess` names them)"}
    shapes = _SHAPES
    options = AttentionShapeOptions
    dtypes = ("fp32", "tf32", "bf16", "fp16")
    tf32_op = "attention"

    def check(self, options, preset: str) -> None:
        if preset == "listed" and not options.attention_shapes:
            raise ValueError(LISTED_NEEDS)

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        if preset == "listed":
            shapes = list(dict.fromkeys(tuple(s) for s in self.opts(ctx).attention_shapes or ()))
            if not shapes:
                raise GapbenchError(LISTED_NEEDS)
        else:
            shapes = [(bh, seq, hd, seq, False) for bh, seq, hd in self.shapes_for(preset, ctx)]
        out = []
        for d in ctx.dtypes(self.dtypes):
            size = DTYPES[d].itemsize
            for bh, seq, hd, kv, causal in shapes:
                q, k = bh * seq * hd * size, bh * kv * hd * size
                # the keys' sequence and causal only where they are not the default: a row's identity stays
                extra = ({"kv": kv} if kv != seq else {}) | ({"causal": True} if causal else {})
                for p in PASSES:
                    back = p == "backward"
                    # forward: q, k, v read, the output written; backward: the output gradient too, and three
                    # gradients written
                    out.append(Variant({"dtype": d, "batch_heads": bh, "seq": seq, "head_dim": hd, "pass": p} | extra,
                                       flops=sdpa_flops(bh, seq, hd, back, kv),
                                       bytes=float(4 * q + 4 * k if back else 2 * q + 2 * k)))
        return out

    def build(self, variant: Variant, ctx: Context) -> Op:
        p = variant.params
        dev, dt = ctx.device.torch_device, ctx.device.torch_dtype(p["dtype"])
        g = torch.Generator().manual_seed(0)
        shape = (1, p["batch_heads"], p["seq"], p["head_dim"])
        kv_shape = (1, p["batch_heads"], p.get("kv", p["seq"]), p["head_dim"])
        causal = bool(p.get("causal", False))
        back = p["pass"] == "backward"
        q, k, v = (torch.randn(s, generator=g).to(dev, dt).requires_grad_(back) for s in (shape, kv_shape, kv_shape))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        tol, what = TOLERANCE[p["dtype"]], f"{p['dtype']} attention"
        if not back:
            def fn():
                with torch.no_grad():
                    return sdpa(q, k, v, is_causal=causal)

            return Op(fn, lambda: _check(q, k, v, fn(), None, tol, causal), what)
        graph = []  # the output and its gradient, made by the first call (which fails where no kernel exists)

        def backward():
            if not graph:
                graph.extend([sdpa(q, k, v, is_causal=causal), torch.randn(shape, generator=g).to(dev, dt)])
            q.grad = k.grad = v.grad = None
            graph[0].backward(graph[1], retain_graph=True)

        return Op(backward, lambda: _check(q, k, v, q.grad, graph[1], tol, causal), what)


def _check(q, k, v, got, grad, tol: float, causal: bool = False) -> str:
    """The output (or, with grad, the query gradient) against float64 math attention on the CPU, first head
    (causal: each query sees the keys up to its own position, aligned at the start as torch's is_causal)."""
    qd, kd, vd = (t.detach()[:, :1].to("cpu", torch.float64).requires_grad_(grad is not None) for t in (q, k, v))
    scores = qd @ kd.transpose(-1, -2) / qd.shape[-1] ** 0.5
    if causal:
        keep = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    ref = torch.softmax(scores, dim=-1) @ vd
    if grad is not None:
        ref.backward(grad[:, :1].to("cpu", torch.float64))
        ref = qd.grad
    return relative_error(got[:, :1], ref, tol, "query gradient" if grad is not None else "output")
