"""Element-wise and normalisation operators whose time is their arithmetic, not their bytes: GELU's erf and its
backward, dropout's random numbers (`bernoulli_`), SiLU's exponential, square roots, softmax and log-softmax, layer,
group and batch norm (training mode: statistics, then normalising), the three operators of an Adam-family optimizer's update (`lerp`, `addcmul`, `addcdiv`; a step runs
them in place, `lerp_` …, which a trace prices at these rows), and the plain arithmetic and copies a step is full of
(`mul`, `add`, `div`, `tanh`, `copy_`, `fill_`): on a CPU a bf16 or fp16 one converts every element to fp32 and
back, which a streaming kernel's bandwidth does not show. And pooling, forward and backward, whose every output
reads a window (`avg_pool2d` 3×3 at stride 1, PoolFormer's token mixer; `max_pool2d_with_indices` 3×3 at stride 2,
a ResNet's stem), at input planes of 32×32 pixels.
On a CPU these run far below the memory bandwidth a streaming copy reaches, so a model's step priced as their
bytes alone comes out short. Each is measured as the ATen operator a model dispatches, per dtype and tensor size,
in elements per second (the elements of its output), the rate gapbench assess prices that operator at:
max(elements / rate, bytes / bandwidth).

Three sizes per operator: 2^15 elements (a small model's activations; below PyTorch's intra-op grain of 32768
elements an operator runs on one thread), 2^18 (above it, every thread) and 2^21 (a layer's weights or a batch's
activations, out of the caches of most CPUs). Each variant checks its output against float64 on the CPU
(bernoulli_: values 0 or 1 and a kept fraction within six standard deviations of p; fill_: every element the value).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.micro.operator import Op, OperatorWorkload, relative_error
from gapbench.workloads.micro.options import ELEMENTWISE_OPS, ElementwiseOptions

TOLERANCE = {"fp32": 1e-5, "bf16": 2e-2, "fp16": 2e-3}  # of max |error| over max |reference|
OPS = ELEMENTWISE_OPS  # the ATen operators measured (their overload packet names, as a trace records them)
POOL_OPS = OPS[-4:]
SIDE = 32  # pooling: the input's height and width (the channels make up the size)
SIZES = {"tiny": (1 << 12,), "quick": (1 << 15, 1 << 18, 1 << 21)}
ROW = 128  # the last dimension (softmax, layer norm); group norm: 32 channels in 32 groups × (elements / 64)
KEEP = 0.9  # bernoulli_'s probability: dropout 0.1 keeps 90%
EPS = 1e-5


class Elementwise(OperatorWorkload):
    name = "elementwise"
    unit = "Gelem/s"
    scale = 1e-9
    unit_help = "10^9 output elements per second of one ATen operator (gelu, bernoulli_, softmax, …)"
    description = "compute-heavy element-wise and normalisation operators (erf, RNG, exp, sqrt, norms) per dtype"
    options = ElementwiseOptions
    presets = {"tiny": "each operator at 4096 elements (tests)",
               "quick": "each operator at 2^15, 2^18 and 2^21 elements (one thread's grain, above it, out of cache)"}

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        if preset not in SIZES:
            raise ValueError(f"unknown preset {preset!r}")
        asked = self.opts(ctx).elementwise_ops
        out = []
        for d in ctx.dtypes(self.dtypes):
            size = DTYPES[d].itemsize
            for op in (o for o in OPS if not asked or o in asked):
                for n in SIZES[preset]:
                    out.append(Variant({"op": op, "dtype": d, "elements": n}, bytes=float(n * size * _arrays(op))))
        return out

    def work(self, variant: Variant) -> float:
        return float(variant.params["elements"])

    def build(self, variant: Variant, ctx: Context) -> Op:
        p = variant.params
        fn, check = make_op(p["op"], p["elements"], ctx.device.torch_dtype(p["dtype"]), ctx.device.torch_device)
        return Op(fn, lambda: check(fn(), TOLERANCE[p["dtype"]]), f"{p['dtype']} {p['op']}")


def _arrays(op: str) -> int:
    """Tensors of the operator's size it reads and writes (BabelStream's counting: no write-allocate)."""
    return {"gelu_backward": 3, "bernoulli_": 1, "fill_": 1, "lerp": 3, "addcmul": 4, "addcdiv": 4, "mul": 3, "add": 3,
            "div": 3, "avg_pool2d_backward": 3, "max_pool2d_with_indices": 7,  # input 4×, values, indices (int64)
            "max_pool2d_with_indices_backward": 4}.get(op, 2)


def make_op(op: str, n: int, dtype: torch.dtype, dev) -> tuple[Callable[[], torch.Tensor], Callable]:
    """(fn, check): fn runs the operator once and returns its output; check(output, tolerance) -> '' or what is
    wrong."""
    g = torch.Generator().manual_seed(0)
    if op in POOL_OPS:
        return _pool_op(op, n, dtype, dev, g)
    x64 = torch.randn(n // ROW, ROW, generator=g, dtype=torch.float64)
    if op == "sqrt":
        x64 = x64.abs() + 0.1
    x = x64.to(dev, dtype)
    aten = torch.ops.aten
    if op == "bernoulli_":
        buf = torch.empty_like(x)
        return (lambda: buf.bernoulli_(KEEP)), _check_bernoulli
    if op in ("copy_", "fill_"):
        buf = torch.empty_like(x)
        fn = (lambda: buf.copy_(x)) if op == "copy_" else (lambda: buf.fill_(0.5))
        ref = x64 if op == "copy_" else torch.full_like(x64, 0.5)
        return fn, lambda got, tol: _compare(op, got, ref, tol)
    if op in ("mul", "add", "div"):
        y64 = torch.randn(x64.shape, generator=g, dtype=torch.float64)
        if op == "div":
            y64 = y64.abs() + 0.1
        y = y64.to(dev, dtype)
        f = {"mul": aten.mul, "add": aten.add, "div": aten.div}[op]
        ref = {"mul": torch.mul, "add": torch.add, "div": torch.div}[op](x64, y64)
        return (lambda: f(x, y)), lambda got, tol: _compare(op, got, ref, tol)
    if op == "gelu_backward":
        grad64 = torch.randn(x64.shape, generator=g, dtype=torch.float64)
        grad = grad64.to(dev, dtype)
        fn = lambda: aten.gelu_backward(grad, x)  # noqa: E731
        ref = _gelu_grad(grad64, x64)
    elif op == "native_layer_norm":
        w64, b64 = torch.randn(ROW, generator=g, dtype=torch.float64), torch.randn(ROW, generator=g, dtype=torch.float64)
        w, b = w64.to(dev, dtype), b64.to(dev, dtype)
        fn = lambda: aten.native_layer_norm(x, [ROW], w, b, EPS)[0]  # noqa: E731
        ref = torch.nn.functional.layer_norm(x64, [ROW], w64, b64, EPS)
    elif op == "native_group_norm":
        x64 = x64.reshape(1, 32, -1)
        x = x64.to(dev, dtype)
        w64, b64 = torch.randn(32, generator=g, dtype=torch.float64), torch.randn(32, generator=g, dtype=torch.float64)
        w, b = w64.to(dev, dtype), b64.to(dev, dtype)
        fn = lambda: aten.native_group_norm(x, w, b, 1, 32, x.shape[-1], 32, EPS)[0]  # noqa: E731
        ref = torch.nn.functional.group_norm(x64, 32, w64, b64, EPS)
    elif op == "native_batch_norm":  # training mode, as a convnet's step runs it: 32 channels of 4 images
        x64 = x64.reshape(4, 32, -1, 16)
        x = x64.to(dev, dtype)
        w64, b64 = torch.randn(32, generator=g, dtype=torch.float64), torch.randn(32, generator=g, dtype=torch.float64)
        w, b = w64.to(dev, dtype), b64.to(dev, dtype)
        mean, var = torch.zeros(32, device=dev, dtype=dtype), torch.ones(32, device=dev, dtype=dtype)
        fn = lambda: aten.native_batch_norm(x, w, b, mean, var, True, 0.1, EPS)[0]  # noqa: E731
        ref = torch.nn.functional.batch_norm(x64, None, None, w64, b64, True, 0.1, EPS)
    elif op in ("lerp", "addcmul", "addcdiv"):
        fn, ref = _update_op(op, x64, x, g, dev, dtype)
    else:
        f, r = {"gelu": (aten.gelu, torch.nn.functional.gelu), "silu": (aten.silu, torch.nn.functional.silu),
                "sqrt": (aten.sqrt, torch.sqrt), "tanh": (aten.tanh, torch.tanh),
                "_softmax": (lambda t: aten._softmax(t, -1, False), lambda t: torch.softmax(t, -1)),
                "_log_softmax": (lambda t: aten._log_softmax(t, -1, False), lambda t: torch.log_softmax(t, -1))}[op]
        fn = lambda: f(x)  # noqa: E731
        ref = r(x64)
    return fn, lambda got, tol: _compare(op, got, ref, tol)


def _update_op(op: str, x64, x, g, dev, dtype):
    """An optimizer update's operator, out of place (the same arithmetic per element as its in-place form), and
    its float64 reference: lerp(x, y, 0.1) (Adam's first moment), addcmul(x, y, z, value=0.001) (the second),
    addcdiv(x, y, |z| + 0.1, value=-0.001) (the parameter's step)."""
    aten = torch.ops.aten
    y64 = torch.randn(x64.shape, generator=g, dtype=torch.float64)
    z64 = torch.randn(x64.shape, generator=g, dtype=torch.float64)
    if op == "addcdiv":
        z64 = z64.abs() + 0.1
    y, z = y64.to(dev, dtype), z64.to(dev, dtype)
    if op == "lerp":
        return (lambda: aten.lerp(x, y, 0.1)), torch.lerp(x64, y64, 0.1)
    if op == "addcmul":
        return (lambda: aten.addcmul(x, y, z, value=0.001)), torch.addcmul(x64, y64, z64, value=0.001)
    return (lambda: aten.addcdiv(x, y, z, value=-0.001)), torch.addcdiv(x64, y64, z64, value=-0.001)


def _gelu_grad(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """d/dx of x·Φ(x) (erf GELU) times the incoming gradient, in float64."""
    cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return grad * (cdf + x * pdf)


def _pool_op(op: str, n: int, dtype: torch.dtype, dev, g) -> tuple[Callable[[], torch.Tensor], Callable]:
    """A pooling operator whose output has `n` elements: inputs of SIDE² pixels per channel (a max pool's output a
    quarter of that), and its float64 reference; a max pool's backward routes the gradient by the indices of the
    row's own forward in both, so that values tied by rounding cannot move it."""
    aten = torch.ops.aten
    strided = op == "max_pool2d_with_indices"  # its output is a quarter of its input
    channels = max(1, n // (SIDE * SIDE // (4 if strided else 1)))
    x64 = torch.randn(1, channels, SIDE, SIDE, generator=g, dtype=torch.float64)
    x = x64.to(dev, dtype)
    if op.startswith("avg_pool2d"):
        args = ([3, 3], [1, 1], [1, 1], False, False)  # kernel, stride, padding, ceil_mode, count_include_pad
        if op == "avg_pool2d":
            return (lambda: aten.avg_pool2d(x, *args)), lambda got, tol: _compare(op, got, aten.avg_pool2d(
                x64, *args), tol)
        grad64 = torch.randn(x64.shape, generator=g, dtype=torch.float64)
        grad = grad64.to(dev, dtype)
        ref = aten.avg_pool2d_backward(grad64, x64, *args, None)
        return (lambda: aten.avg_pool2d_backward(grad, x, *args, None)), lambda got, tol: _compare(op, got, ref, tol)
    args = ([3, 3], [2, 2], [1, 1], [1, 1], False)  # kernel, stride, padding, dilation, ceil_mode
    if op == "max_pool2d_with_indices":
        ref = aten.max_pool2d_with_indices(x64, *args)[0]
        return (lambda: aten.max_pool2d_with_indices(x, *args)[0]), lambda got, tol: _compare(op, got, ref, tol)
    _, idx = aten.max_pool2d_with_indices(x, *args)
    grad64 = torch.randn(1, channels, SIDE // 2, SIDE // 2, generator=g, dtype=torch.float64)
    grad = grad64.to(dev, dtype)
    ref = aten.max_pool2d_with_indices_backward(grad64, x64, *args, idx.to("cpu"))
    return (lambda: aten.max_pool2d_with_indices_backward(grad, x, *args, idx)), \
        lambda got, tol: _compare(op, got, ref, tol)


def _compare(op: str, got: torch.Tensor, ref: torch.Tensor, tol: float) -> str:
    return relative_error(got, ref, tol, op)


def _check_bernoulli(got: torch.Tensor, tol: float) -> str:
    v = got.detach().to("cpu", torch.float64).flatten()
    if not bool(((v == 0) | (v == 1)).all()):
        return "bernoulli_ gave values other than 0 and 1"
    n = v.numel()
    kept, sd = float(v.mean()), math.sqrt(KEEP * (1 - KEEP) / n)
    if abs(kept - KEEP) > 6 * sd:
        return f"bernoulli_({KEEP}) kept {kept:.4f} of {n} elements; expected {KEEP} ± {6 * sd:.4f}"
    return ""
