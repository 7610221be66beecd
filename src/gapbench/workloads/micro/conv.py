"""2-D convolution: `torch.nn.functional.conv2d` (3×3, stride 1, padding 1, as UNets and VAEs use it, and 1×1,
their channel projections and shortcuts; depthwise 3×3 and 7×7, one filter per channel, as MobileNets and ConvNeXts
use them), forward and backward apart, per dtype and shape; the `listed` preset measures the convolutions it is
given (a model step's own, as `gapbench assess` names them: any kernel, groups, stride and padding, on the input
that gives the output's side: (side − 1) × stride + K − 2 × padding). The backend picks its algorithm (cuDNN,
MIOpen, oneDNN),
whose rate at few channels is far from a square GEMM's, and a depthwise one's (K² multiply-adds per output element,
every input element read K² times) is memory-bound at a small fraction of it: this is the rate a model's
convolutions of each kind run at there.

FLOPs: forward 2·N·H·W·C_out·(C_in/groups)·K², K the kernel side; backward the gradients of the input and the
weight, twice that: torch.utils.flop_counter's formulas for a dense convolution, and the count a model trace uses
(gapbench.assess.work counts a grouped one's backward itself: the counter takes its weight gradient for a dense one's). Bytes: input and weight read,
output written (forward); the output gradient, input and weight read, both gradients written (backward). Each
variant checks the output (forward) or the input gradient (backward) against float64 on the CPU.

Precision: fp32 rows run with TF32 off (cuDNN's default is on: an fp32 convolution on NVIDIA would silently be a
TF32 one), tf32 rows with it on, through the device's math mode; a tf32 row is `unsupported` where the stack's
convolutions have no TF32 switch (MIOpen under torch, a CPU).
"""

from __future__ import annotations

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.errors import GapbenchError
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.micro.operator import Op, OperatorWorkload, relative_error
from gapbench.workloads.micro.options import ConvShapeOptions, default_padding

TOLERANCE = {"fp32": 1e-4, "tf32": 4e-3, "bf16": 3e-2, "fp16": 5e-3}  # of max |error| over max |reference|
PASSES = ("forward", "backward")
# (batch, input channels, output channels, height = width[, kernel side: 3 unless given[, groups: 1 unless given]])
# groups = channels: a depthwise convolution
_SHAPES = {
    "tiny": {"cpu": [(1, 16, 16, 16)], "accelerator": [(1, 16, 16, 16)]},
    # the few-channel ends of a UNet or VAE (latents in, image out) run far below the rest: measured apart
    "quick": {"cpu": [(2, 32, 32, 64), (2, 64, 64, 32), (2, 32, 32, 128), (2, 128, 128, 16), (2, 256, 256, 8),
                      (2, 64, 64, 8), (2, 32, 32, 16), (1, 4, 32, 32), (1, 32, 3, 128),
                      # the smallest UNet level and its 1×1 projections (channels change between blocks)
                      (2, 128, 64, 8), (2, 32, 64, 8, 1), (2, 128, 64, 8, 1), (2, 64, 32, 16, 1),
                      # depthwise: a ConvNeXt's 7×7 and a MobileNet's 3×3, wide-and-small and narrow-and-large
                      (4, 96, 96, 32, 7, 96), (4, 384, 384, 8, 7, 384), (4, 144, 144, 32, 3, 144),
                      (4, 576, 576, 8, 3, 576)],
              "accelerator": [(2, 320, 320, 128), (2, 640, 640, 64), (2, 1280, 1280, 32), (1, 128, 128, 512),
                              (2, 4, 320, 128), (1, 128, 3, 1024), (2, 320, 640, 64, 1), (2, 640, 1280, 32, 1),
                              (32, 256, 256, 56, 7, 256), (32, 1024, 1024, 14, 7, 1024), (32, 144, 144, 56, 3, 144),
                              (32, 576, 576, 14, 3, 576)]},
}


LISTED_NEEDS = ("the listed preset measures the convolutions of --conv-shapes NxCINxCOUTxHW[xK[xG[xS[xP]]]][,...]; none "
                "were "
                "given (`gapbench assess` names a traced step's own)")


def in_side(hw: int, kernel: int, stride: int = 1, pad: int | None = None) -> int:
    """The input's side that gives an output of side `hw` at this kernel, stride and padding (default_padding unless
    given)."""
    pad = default_padding(kernel) if pad is None else pad
    return (hw - 1) * stride + kernel - 2 * pad


def gemm_equivalent(batch: int, c_in: int, c_out: int, hw: int, kernel: int = 3,
                    groups: int = 1) -> tuple[int, int, int]:
    """(m, n, k) of the im2col GEMM with the convolution's FLOPs: output pixels, output channels,
    C_in / groups × K × K."""
    return batch * hw * hw, c_out, c_in // groups * kernel * kernel


def conv_flops(batch: int, c_in: int, c_out: int, hw: int, backward: bool, kernel: int = 3, groups: int = 1) -> float:
    m, n, k = gemm_equivalent(batch, c_in, c_out, hw, kernel, groups)
    return 2.0 * m * n * k * (2 if backward else 1)


class Conv(OperatorWorkload):
    name = "conv"
    unit = "TFLOP/s"
    unit_help = "convolution FLOPs (2·N·H·W·C_out·C_in/groups·K² forward, twice that backward) per s"
    description = ("3×3, 1×1 and depthwise conv2d forward and backward per dtype and shape, the backend's own "
                   "algorithm")
    presets = {"tiny": "one shape (16 channels at 16×16) per dtype and pass (tests)",
               "quick": "32–256 channels at 8²–128² pixels, the few-channel ends (4 in, 3 out), 1×1 projections and "
                        "depthwise 3×3 and 7×7 at 96–576 channels (CPU) / UNet-sized 320–1280 channels, the same ends "
                        "and 1×1 projections, depthwise 3×3 and 7×7 at 144–1024 channels (accelerator)",
               "listed": "the convolutions of --conv-shapes per dtype and pass (a model step's own: `gapbench assess` "
                         "names them)"}
    shapes = _SHAPES
    options = ConvShapeOptions
    dtypes = ("fp32", "tf32", "bf16", "fp16")
    tf32_op = "conv"

    def check(self, options, preset: str) -> None:
        if preset == "listed" and not options.conv_shapes:
            raise ValueError(LISTED_NEEDS)

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        if preset == "listed":
            shapes = list(dict.fromkeys(tuple(s) for s in self.opts(ctx).conv_shapes or ()))
            if not shapes:
                raise GapbenchError(LISTED_NEEDS)
        else:
            shapes = self.shapes_for(preset, ctx)
        out = []
        for d in ctx.dtypes(self.dtypes):
            size = DTYPES[d].itemsize
            for b, ci, co, hw, *rest in shapes:
                kernel, groups, stride = (list(rest) + [3, 1, 1][len(rest):])[:3]
                pad = rest[3] if len(rest) > 3 else default_padding(kernel)
                io = b * (in_side(hw, kernel, stride, pad) ** 2 * ci + hw * hw * co) * size \
                    + co * ci // groups * kernel * kernel * size
                for p in PASSES:
                    back = p == "backward"
                    params = {"dtype": d, "batch": b, "c_in": ci, "c_out": co, "hw": hw, "pass": p}
                    if kernel != 3:  # 3×3 rows keep the variant they always had, so older results files still match
                        params["kernel"] = kernel
                    if groups != 1:
                        params["groups"] = groups
                    if stride != 1:
                        params["stride"] = stride
                    if pad != default_padding(kernel):
                        params["padding"] = pad
                    out.append(Variant(params, flops=conv_flops(b, ci, co, hw, back, kernel, groups),
                                       bytes=float(io * (2 if back else 1))))
        return out

    def build(self, variant: Variant, ctx: Context) -> Op:
        p = variant.params
        dev, dt = ctx.device.torch_device, ctx.device.torch_dtype(p["dtype"])
        g = torch.Generator().manual_seed(0)
        back = p["pass"] == "backward"
        ks, groups, stride = p.get("kernel", 3), p.get("groups", 1), p.get("stride", 1)
        pad = p.get("padding", default_padding(ks))
        side = in_side(p["hw"], ks, stride, pad)
        x = torch.randn(p["batch"], p["c_in"], side, side, generator=g).to(dev, dt).requires_grad_(back)
        fan_in = p["c_in"] // groups * ks * ks
        w = (torch.randn(p["c_out"], p["c_in"] // groups, ks, ks, generator=g) / fan_in ** 0.5).to(dev, dt)
        w.requires_grad_(back)

        def conv(x, w, padding):
            return torch.nn.functional.conv2d(x, w, stride=stride, padding=padding, groups=groups)

        tol = TOLERANCE[p["dtype"]]
        if not back:
            def fn():
                with torch.no_grad():
                    return conv(x, w, padding=pad)

            return Op(fn, lambda: _check(x, w, fn(), None, tol, stride, pad), f"{p['dtype']} conv2d")
        graph = []  # the output and its gradient, made by the first call (which fails where no kernel exists)

        def backward():
            if not graph:
                out = conv(x, w, padding=pad)
                graph.extend([out, torch.randn(out.shape, generator=g).to(dev, dt)])
            x.grad = w.grad = None
            graph[0].backward(graph[1], retain_graph=True)

        return Op(backward, lambda: _check(x, w, x.grad, graph[1], tol, stride, pad), f"{p['dtype']} conv2d")


def _check(x, w, got, grad, tol: float, stride: int = 1, pad: int | None = None) -> str:
    """The output (or, with grad, the input gradient) of the first image against float64 on the CPU."""
    xd = x.detach()[:1].to("cpu", torch.float64).requires_grad_(grad is not None)
    groups = x.shape[1] // w.shape[1]
    pad = default_padding(w.shape[-1]) if pad is None else pad
    ref = torch.nn.functional.conv2d(xd, w.detach().to("cpu", torch.float64), stride=stride, padding=pad,
                                     groups=groups)
    if grad is not None:
        ref.backward(grad[:1].to("cpu", torch.float64))
        ref = xd.grad
    return relative_error(got[:1], ref, tol, "input gradient" if grad is not None else "output")
