"""Grouped GEMM: `torch._grouped_mm`, many independent matrix multiplies in one call, as mixture-of-experts layers
run their experts (each expert multiplies the tokens routed to it by its own weights). A stack's grouped kernel
is often far from its dense GEMM — a CPU loops over the groups, a GPU may lack a kernel for a dtype — so a model
whose experts run through it needs this rate, not the dense one.

Two layouts, the two that a grouped layer's training step calls:
  rows  the tokens of every group stacked, (G·m, k), times one (k, n) matrix per group, the offsets splitting
        the rows: the forward and the input gradient
  k     (m, G·k) times (G·k, n), the offsets splitting the shared dimension, one (m, n) product per group:
        the weight gradient

FLOPs 2·G·m·n·k per call (m, n, k per group; the groups equal; a listed call's 2·Σm·n·k or 2·m·n·Σk over its
groups' own sizes). The second operand is column-major, as the
accelerators' grouped kernels take it. Each variant checks its first and last group against float64 on the CPU.

The `listed` preset measures the calls of --grouped-shapes as a routed layer makes them: its groups are the tokens
its router sent each expert, uneven, and new on every step. A call runs first at the sizes given, then at a new split
of as many tokens each call (each token to a group with the given sizes' shares, ROUTED_DRAWS splits in turn). A
kernel that compiles or caches per shape pays for every new one: on a CPU, oneDNN's bf16 GEMMs ran a step's routed
calls at ~700 GFLOP/s with the sizes held and 150 or less with them redrawn. Its rows: `sizes`, the groups joined by
+; m for `rows`, k for `k`, the mean group.
"""

from __future__ import annotations

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.errors import GapbenchError
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.micro.operator import Op, OperatorWorkload, relative_error
from gapbench.workloads.micro.options import GroupedShapeOptions

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
ROUTED_DRAWS = 255  # a listed call's splits beyond its own, taken in turn: new sizes on every call of a repeat
LISTED_NEEDS = ("the listed preset measures the grouped GEMMs of --grouped-shapes SIZESxNxK|MxNxSIZES[,...]; none were "
                "given (`gapbench assess --real` names a traced step's own)")


class GroupedGemm(OperatorWorkload):
    name = "grouped-gemm"
    unit = "TFLOP/s"
    unit_help = "2·G·m·n·k floating-point operations per call (G groups of m×k by k×n), per second, ×1e-12"
    description = "grouped matrix multiplies (torch._grouped_mm) per dtype, shape and layout: the experts of a " \
                  "mixture-of-experts layer"
    presets = {"tiny": "two 32³ groups per dtype (tests)",
               "quick": "4–8 groups of 128–512 rows, 256–1024 wide, both layouts (CPU) / 8–64 groups of 256–2048 "
                        "rows, 1024–4096 wide (accelerator)",
               "listed": "the grouped GEMMs of --grouped-shapes per dtype, each group its own size (a routed "
                         "step's own: `gapbench assess --real` names them)"}
    shapes = _SHAPES
    options = GroupedShapeOptions
    dtypes = ("fp32", "bf16", "fp16")

    def check(self, options, preset: str) -> None:
        if preset == "listed" and not options.grouped_shapes:
            raise ValueError(LISTED_NEEDS)

    def device_unsupported(self, dtype: str, ctx: Context) -> str:
        if not hasattr(torch, "_grouped_mm"):
            return f"torch {torch.__version__} has no torch._grouped_mm"
        return super().device_unsupported(dtype, ctx)

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        out = []
        for d in ctx.dtypes(self.dtypes):
            size = DTYPES[d].itemsize
            for layout, sizes, m, n, k in self._calls(preset, ctx):
                g, total = len(sizes), sum(sizes)
                params = {"dtype": d, "groups": g, "m": m, "n": n, "k": k, "layout": layout}
                if preset == "listed":
                    params["sizes"] = "+".join(map(str, sizes))
                if layout == "rows":
                    flops, io = 2.0 * total * n * k, total * k + g * k * n + total * n
                else:
                    flops, io = 2.0 * m * n * total, m * total + total * n + g * m * n
                out.append(Variant(params, flops=flops, bytes=float(io * size)))
        return out

    def _calls(self, preset: str, ctx: Context) -> list[tuple[str, list[int], int, int, int]]:
        """(layout, the groups' sizes, m, n, k) per call: k is the mean group's share for a `k` layout, m the mean
        group's rows for a `rows` one (the listed preset's sizes as given, the others' equal)."""
        if preset != "listed":
            return [(layout, [m if layout == "rows" else k] * g, m, n, k)
                    for g, m, n, k, layout in self.shapes_for(preset, ctx)]
        given = list(dict.fromkeys((lay, tuple(sizes), a, b) for lay, sizes, a, b in
                                   self.opts(ctx).grouped_shapes or ()))
        if not given:
            raise GapbenchError(LISTED_NEEDS)
        out = []
        for layout, sizes, a, b in given:
            mean = max(1, round(sum(sizes) / len(sizes)))
            out.append((layout, list(sizes), mean, a, b) if layout == "rows" else (layout, list(sizes), a, b, mean))
        return out

    def build(self, variant: Variant, ctx: Context) -> Op:
        p = variant.params
        dev, dt = ctx.device.torch_device, ctx.device.torch_dtype(p["dtype"])
        g, m, n, k, layout = p["groups"], p["m"], p["n"], p["k"], p["layout"]
        sizes = [int(x) for x in str(p["sizes"]).split("+")] if "sizes" in p else \
            [m if layout == "rows" else k] * g
        total = sum(sizes)
        gen = torch.Generator().manual_seed(0)
        # equal groups: one split; a listed call's: its sizes first, then a new split of as many tokens each call
        splits = [sizes] + (redrawn(sizes, ROUTED_DRAWS, gen) if "sizes" in p else [])
        offs = [torch.tensor(_ends(s), dtype=torch.int32).to(dev) for s in splits]
        last = {"split": 0, "next": 0}
        if layout == "rows":
            a = torch.randn(total, k, generator=gen).to(dev, dt)
            b = torch.randn(g, n, k, generator=gen).to(dev, dt).transpose(-2, -1)  # (g, k, n), column-major

            def blocks(out, i, lo, hi):
                return out[lo:hi], a[lo:hi], b[i]
        else:
            a = torch.randn(m, total, generator=gen).to(dev, dt)
            b = torch.randn(n, total, generator=gen).to(dev, dt).t()  # (Σk, n), column-major

            def blocks(out, i, lo, hi):
                return out[i], a[:, lo:hi], b[lo:hi]

        def fn():
            i = last["split"] = last["next"]
            last["next"] = (i + 1) % len(offs)
            return torch._grouped_mm(a, b, offs=offs[i])

        def check():
            out = op.fn()  # the output of whatever op.fn runs, read at the split it ran with
            return _check(out, blocks, splits[last["split"]], TOLERANCE[p["dtype"]])

        op = Op(fn, lambda: "", f"{p['dtype']} grouped matmul ({layout} layout)")
        op.check = check
        return op


def redrawn(sizes: list[int], draws: int, gen: torch.Generator) -> list[list[int]]:
    """`draws` new splits of the same tokens over the same groups, each token sent to a group with the given
    sizes' shares (an empty group stays empty), as a router's choices change from step to step."""
    weights = torch.tensor(sizes, dtype=torch.float64)
    out = []
    for _ in range(draws):
        chosen = torch.multinomial(weights / weights.sum(), sum(sizes), replacement=True, generator=gen)
        out.append(torch.bincount(chosen, minlength=len(sizes)).tolist())
    return out


def _ends(sizes: list[int]) -> list[int]:
    return [sum(sizes[:i + 1]) for i in range(len(sizes))]


def _check(out, blocks, sizes: list[int], tol: float) -> str:
    """The first and the last non-empty group of `out` (split as `sizes`) against float64 products of their
    operands on the CPU."""
    ends = _ends(sizes)
    full = [i for i in range(len(sizes)) if sizes[i]]
    for i in dict.fromkeys(full[:1] + full[-1:]):
        got, x, w = blocks(out, i, ends[i] - sizes[i], ends[i])
        err = relative_error(got, x.to("cpu", torch.float64) @ w.to("cpu", torch.float64), tol, f"group {i}")
        if err:
            return err
    return ""
