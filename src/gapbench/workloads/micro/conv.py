"""2-D convolution: `torch.nn.functional.conv2d` (3×3, stride 1, padding 1, as UNets and VAEs use it, and 1×1,
their channel projections and shortcuts), forward and backward apart, per dtype and shape. The backend picks its
algorithm (cuDNN, MIOpen, oneDNN), whose rate at few channels is far from a square GEMM's: this is the rate a
model's convolutions run at there.

FLOPs: torch.utils.flop_counter's convolution formulas (forward 2·N·H·W·C_out·C_in·K², K the kernel side; backward
the gradients of the input and the weight, twice that), the count a model trace uses. Bytes: input and weight read,
output written (forward); the output gradient, input and weight read, both gradients written (backward). Each
variant checks the output (forward) or the input gradient (backward) against float64 on the CPU.

Precision: fp32 rows run with TF32 off (cuDNN's default is on: an fp32 convolution on NVIDIA would silently be a
TF32 one), tf32 rows with it on, through the device's math mode; a tf32 row is `unsupported` where the stack's
convolutions have no TF32 switch (MIOpen under torch, a CPU).
"""

from __future__ import annotations

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.micro.operator import Op, OperatorWorkload, relative_error

TOLERANCE = {"fp32": 1e-4, "tf32": 4e-3, "bf16": 3e-2, "fp16": 5e-3}  # of max |error| over max |reference|
PASSES = ("forward", "backward")
# (batch, input channels, output channels, height = width[, kernel side: 3 unless given])
_SHAPES = {
    "tiny": {"cpu": [(1, 16, 16, 16)], "accelerator": [(1, 16, 16, 16)]},
    # the few-channel ends of a UNet or VAE (latents in, image out) run far below the rest: measured apart
    "quick": {"cpu": [(2, 32, 32, 64), (2, 64, 64, 32), (2, 32, 32, 128), (2, 128, 128, 16), (2, 256, 256, 8),
                      (2, 64, 64, 8), (2, 32, 32, 16), (1, 4, 32, 32), (1, 32, 3, 128),
                      # the smallest UNet level and its 1×1 projections (channels change between blocks)
                      (2, 128, 64, 8), (2, 32, 64, 8, 1), (2, 128, 64, 8, 1), (2, 64, 32, 16, 1)],
              "accelerator": [(2, 320, 320, 128), (2, 640, 640, 64), (2, 1280, 1280, 32), (1, 128, 128, 512),
                              (2, 4, 320, 128), (1, 128, 3, 1024), (2, 320, 640, 64, 1), (2, 640, 1280, 32, 1)]},
}


def gemm_equivalent(batch: int, c_in: int, c_out: int, hw: int, kernel: int = 3) -> tuple[int, int, int]:
    """(m, n, k) of the im2col GEMM with the convolution's FLOPs: output pixels, output channels, C_in × K × K."""
    return batch * hw * hw, c_out, c_in * kernel * kernel


def conv_flops(batch: int, c_in: int, c_out: int, hw: int, backward: bool, kernel: int = 3) -> float:
    m, n, k = gemm_equivalent(batch, c_in, c_out, hw, kernel)
    return 2.0 * m * n * k * (2 if backward else 1)


class Conv(OperatorWorkload):
    name = "conv"
    unit = "TFLOP/s"
    unit_help = "torch.utils.flop_counter's convolution FLOPs (2·N·H·W·C_out·C_in·K² forward, twice that backward) per s"
    description = "3×3 and 1×1 conv2d forward and backward per dtype and shape, the backend's own algorithm"
    presets = {"tiny": "one shape (16 channels at 16×16) per dtype and pass (tests)",
               "quick": "32–256 channels at 8²–128² pixels, the few-channel ends (4 in, 3 out) and 1×1 projections "
                        "(CPU) / UNet-sized 320–1280 channels, the same ends and 1×1 projections (accelerator)"}
    shapes = _SHAPES
    dtypes = ("fp32", "tf32", "bf16", "fp16")
    tf32_op = "conv"

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        shapes = self.shapes_for(preset, ctx)
        out = []
        for d in ctx.dtypes(self.dtypes):
            size = DTYPES[d].itemsize
            for b, ci, co, hw, *ks in shapes:
                kernel = ks[0] if ks else 3
                io = b * hw * hw * (ci + co) * size + co * ci * kernel * kernel * size
                for p in PASSES:
                    back = p == "backward"
                    params = {"dtype": d, "batch": b, "c_in": ci, "c_out": co, "hw": hw, "pass": p}
                    if kernel != 3:  # 3×3 rows keep the variant they always had, so older results files still match
                        params["kernel"] = kernel
                    out.append(Variant(params, flops=conv_flops(b, ci, co, hw, back, kernel),
                                       bytes=float(io * (2 if back else 1))))
        return out

    def build(self, variant: Variant, ctx: Context) -> Op:
        p = variant.params
        dev, dt = ctx.device.torch_device, ctx.device.torch_dtype(p["dtype"])
        g = torch.Generator().manual_seed(0)
        back = p["pass"] == "backward"
        x = torch.randn(p["batch"], p["c_in"], p["hw"], p["hw"], generator=g).to(dev, dt).requires_grad_(back)
        ks = p.get("kernel", 3)
        w = (torch.randn(p["c_out"], p["c_in"], ks, ks, generator=g) / (p["c_in"] * ks * ks) ** 0.5).to(dev, dt)
        w.requires_grad_(back)
        conv = torch.nn.functional.conv2d
        pad = ks // 2
        tol = TOLERANCE[p["dtype"]]
        if not back:
            def fn():
                with torch.no_grad():
                    return conv(x, w, padding=pad)

            return Op(fn, lambda: _check(x, w, fn(), None, tol), f"{p['dtype']} conv2d")
        graph = []  # the output and its gradient, made by the first call (which fails where no kernel exists)

        def backward():
            if not graph:
                out = conv(x, w, padding=pad)
                graph.extend([out, torch.randn(out.shape, generator=g).to(dev, dt)])
            x.grad = w.grad = None
            graph[0].backward(graph[1], retain_graph=True)

        return Op(backward, lambda: _check(x, w, x.grad, graph[1], tol), f"{p['dtype']} conv2d")


def _check(x, w, got, grad, tol: float) -> str:
    """The output (or, with grad, the input gradient) of the first image against float64 on the CPU."""
    xd = x.detach()[:1].to("cpu", torch.float64).requires_grad_(grad is not None)
    ref = torch.nn.functional.conv2d(xd, w.detach().to("cpu", torch.float64), padding=w.shape[-1] // 2)
    if grad is not None:
        ref.backward(grad[:1].to("cpu", torch.float64))
        ref = xd.grad
    return relative_error(got[:1], ref, tol, "input gradient" if grad is not None else "output")
