"""What the per-operator micro workloads share (attention, conv, elementwise): one operator per dtype and shape,
built on the device, called once (a kernel the device lacks is `unsupported` there, not inside the timing),
timed, checked against float64 on the CPU, and counted in its unit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import torch

from gapbench.results import Measurement
from gapbench.timing import TooSlow, time_fn
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.micro.options import ColdCacheOptions
from gapbench.workloads.options import DtypeOptions


@dataclass
class Op:
    """One operator ready to run: fn() runs it once; check() says what is wrong with its result ('' if nothing)."""

    fn: Callable[[], object]
    check: Callable[[], str]
    what: str  # how a failure of its first call is named ('bf16 conv2d')


class OperatorWorkload(Workload):
    category = "micro"
    options = DtypeOptions
    dtypes = ("fp32", "bf16", "fp16")
    scale: ClassVar[float] = 1e-12  # work per second -> the unit (TFLOP/s)
    shapes: ClassVar[dict[str, dict[str, list]]] = {}  # preset -> {"cpu": [...], "accelerator": [...]}
    default_preset = "quick"
    tf32_op: ClassVar[str | None] = None  # the operator a tf32 row switches to TF32 (Device.tf32_unsupported's op)

    def device_unsupported(self, dtype: str, ctx: Context) -> str:
        if dtype == "tf32" and self.tf32_op:  # a tf32 row is one only where this operator's fp32 follows the switch
            return ctx.device.tf32_unsupported(self.tf32_op)
        return super().device_unsupported(dtype, ctx)

    def shapes_for(self, preset: str, ctx: Context) -> list:
        """The preset's shapes for this kind of device."""
        if preset not in self.shapes:
            raise ValueError(f"unknown preset {preset!r}")
        return self.shapes[preset]["accelerator" if ctx.device.is_accelerator else "cpu"]

    def build(self, variant: Variant, ctx: Context) -> Op:
        raise NotImplementedError

    def work(self, variant: Variant) -> float:
        """The work one call counts in the unit (FLOPs by default)."""
        return float(variant.flops or 0.0)

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        # fp32 in full precision (even where TF32 is the stack's default: cuDNN's), tf32 as TF32, from the operator's
        # first call to its check
        with ctx.device.math_mode(variant.params["dtype"]):
            op = self.build(variant, ctx)
            try:
                op.fn()  # a kernel this device lacks fails here, not inside the timing
            except (RuntimeError, NotImplementedError) as e:
                return self.failed(variant, ctx, "unsupported", f"{op.what}: {e}")
            try:
                opts = self.opts(ctx)
                cold = isinstance(opts, ColdCacheOptions) and opts.flush_cache
                timing = time_fn(op.fn, ctx.device, ctx.budget(), agreement=ctx.agreement, flush_cache=cold)
            except TooSlow as e:
                return self.too_slow(variant, ctx, e.estimate_s, self.work(variant), self.scale)
            err = op.check()
        if err:
            return self.failed(variant, ctx, "wrong_result", err)
        return self.throughput(variant, ctx, timing, self.work(variant), self.scale)


def relative_error(got: torch.Tensor, ref: torch.Tensor, tol: float, what: str) -> str:
    """'' when `got` is within `tol` of the float64 reference, relative to the reference's largest value; else what
    is wrong (non-finite values, or the error and the tolerance)."""
    got = got.detach().to("cpu", torch.float64).reshape(ref.shape)
    if not torch.isfinite(got).all():
        return f"{what}: non-finite values"
    err = float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))
    return "" if err <= tol else f"{what} differs from float64 by {err:.3g} of its largest value (tolerance {tol:g})"
