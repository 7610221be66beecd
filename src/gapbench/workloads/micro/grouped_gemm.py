"""Grouped GEMM: `torch._grouped_mm`, many independent matrix multiplies in one call, as mixture-of-experts layers
run their experts (each expert multiplies the tokens routed to it by its own weights). A stack's grouped kernel
is often far from its dense GEMM — a CPU loops over the groups, a GPU may lack a kernel for a dtype — so a model
whose experts run through it needs this rate, not the dense one.

Two layouts, the two that a grouped layer's training step calls:
  rows  the tokens of every group stacked, (G·m, k), times one (k, n) matrix per group, the offsets splitting
        the rows: the forward and the input gradient
  k     (m, G·k) times (G·k, n), the offsets splitting the shared dimension, one (m, n) product per group:
        the weight gradient

FLOPs 2·G·m·n·k per call (m, n, k per group; the groups equal). The second operand is column-major, as the
accelerators' grouped kernels take it. Each variant checks its first and last group against float64 on the CPU.
"""

from __future__ import annotations

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.micro.operator import Op, OperatorWorkload, relative_error

TOLERANCE = {"fp32": 1e-4, "bf16": 3e-2, "fp16": 5e-3}  # of max |error| over max |reference|
LAYOUTS = ("rows", "k")
# (groups, m, n, k per group, layout)
_SHAPES = {
    "tiny": {"cpu": [(2, 32, 32, 32, "rows")], "accelerator": [(2, 32, 32, 32, "rows")]},
    "quick": {"cpu": [(4, 256, 1024, 512, "rows"), (4, 256, 512, 1024, "rows"), (8, 128, 1024, 512, "rows"),
                      (4, 512, 1024, 256, "k"), (8, 512, 512, 128, "k")],
              "accelerator": [(8, 2048, 4096, 2048, "rows"), (8, 2048, 2048, 4096, "rows"),
                              (64, 256, 2048, 1024, "rows"), (8, 2048, 4096, 2048, "k"),
                              (64, 2048, 1024, 256, "k")]},
}


class GroupedGemm(OperatorWorkload):
    name = "grouped-gemm"
    unit = "TFLOP/s"
    unit_help = "2·G·m·n·k floating-point operations per call (G groups of m×k by k×n), per second, ×1e-12"
    description = "grouped matrix multiplies (torch._grouped_mm) per dtype, shape and layout: the experts of a " \
                  "mixture-of-experts layer"
    presets = {"tiny": "two 32³ groups per dtype (tests)",
               "quick": "4–8 groups of 128–512 rows, 256–1024 wide, both layouts (CPU) / 8–64 groups of 256–2048 "
                        "rows, 1024–4096 wide (accelerator)"}
    shapes = _SHAPES
    dtypes = ("fp32", "bf16", "fp16")

    def device_unsupported(self, dtype: str, ctx: Context) -> str:
        if not hasattr(torch, "_grouped_mm"):
            return f"torch {torch.__version__} has no torch._grouped_mm"
        return super().device_unsupported(dtype, ctx)

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        out = []
        for d in ctx.dtypes(self.dtypes):
            size = DTYPES[d].itemsize
            for g, m, n, k, layout in self.shapes_for(preset, ctx):
                params = {"dtype": d, "groups": g, "m": m, "n": n, "k": k, "layout": layout}
                io = g * (m * k + k * n + m * n) * size
                out.append(Variant(params, flops=2.0 * g * m * n * k, bytes=float(io)))
        return out

    def build(self, variant: Variant, ctx: Context) -> Op:
        p = variant.params
        dev, dt = ctx.device.torch_device, ctx.device.torch_dtype(p["dtype"])
        g, m, n, k = p["groups"], p["m"], p["n"], p["k"]
        gen = torch.Generator().manual_seed(0)
        if p["layout"] == "rows":
            a = torch.randn(g * m, k, generator=gen).to(dev, dt)
            b = torch.randn(g, n, k, generator=gen).to(dev, dt).transpose(-2, -1)  # (g, k, n), column-major
            offs = (torch.arange(1, g + 1, dtype=torch.int32) * m).to(dev)

            def fn():
                return torch._grouped_mm(a, b, offs=offs)

            def blocks(out, i):
                return out[i * m:(i + 1) * m], a[i * m:(i + 1) * m], b[i]
        else:
            a = torch.randn(m, g * k, generator=gen).to(dev, dt)
            b = torch.randn(n, g * k, generator=gen).to(dev, dt).t()  # (g·k, n), column-major
            offs = (torch.arange(1, g + 1, dtype=torch.int32) * k).to(dev)

            def fn():
                return torch._grouped_mm(a, b, offs=offs)

            def blocks(out, i):
                return out[i], a[:, i * k:(i + 1) * k], b[i * k:(i + 1) * k]
        tol = TOLERANCE[p["dtype"]]
        op = Op(fn, lambda: "", f"{p['dtype']} grouped matmul ({p['layout']} layout)")
        op.check = lambda: _check(op.fn(), blocks, g, tol)  # the output of whatever op.fn runs
        return op


def _check(out, blocks, groups: int, tol: float) -> str:
    """The first and the last group of `out` against float64 products of their operands on the CPU."""
    for i in (0, groups - 1):
        got, x, w = blocks(out, i)
        err = relative_error(got, x.to("cpu", torch.float64) @ w.to("cpu", torch.float64), tol, f"group {i}")
        if err:
            return err
    return ""
