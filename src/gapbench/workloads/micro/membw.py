"""Memory bandwidth: the BabelStream kernels on device arrays, and host<->device copies.

Bytes counted as BabelStream does: copy 2, mul ("scale") 2, add 3, triad 3, dot 2 arrays per pass
(reads plus writes, no write-allocate traffic). Array size: each array at least 4× the last-level
cache (BabelStream's rule), at least the preset's minimum, and all three arrays within a quarter of
the free memory.
"""

from __future__ import annotations

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.results import Measurement
from gapbench.timing import TooSlow, time_fn
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.options import DtypeOptions

KERNELS = {"copy": 2, "scale": 2, "add": 3, "triad": 3, "dot": 2}  # arrays touched per element
SCALAR = 0.4
START = (0.1, 0.2, 0.0)  # BabelStream's initial values of a, b, c

_MIN_ELEMENTS = {"tiny": 1 << 20, "quick": 1 << 24, "standard": 1 << 26}
_MIN_ELEMENTS_ACCEL = {"tiny": 1 << 20, "quick": 1 << 26, "standard": 1 << 28}
DTYPE_PRESETS = {"tiny-dtypes": "tiny", "quick-dtypes": "quick"}  # the same arrays in each of PRESET_DTYPES
PRESET_DTYPES = ("fp32", "bf16", "fp16")


class MemBandwidth(Workload):
    name = "membw"
    category = "micro"
    unit = "GB/s"
    unit_help = "BabelStream byte counts: copy/scale 2, add/triad 3, dot 2 arrays per element; 1 GB = 1e9 bytes"
    description = "device memory bandwidth (BabelStream copy/scale/add/triad/dot) and host<->device copies"
    presets = {
        "tiny": "4 MiB arrays (tests; fits in cache, so not a bandwidth figure)",
        "quick": "arrays of max(4×LLC, 64 MiB) (CPU) / max(4×LLC, 256 MiB) (accelerator)",
        "standard": "arrays of max(4×LLC, 256 MiB) (CPU) / max(4×LLC, 1 GiB) (accelerator), plus H2D/D2H",
        "tiny-dtypes": "the tiny arrays in fp32, bf16 and fp16 (narrow types are not always moved at fp32's rate: a "
                       "CPU converts each element to add or scale it)",
        "quick-dtypes": "the quick arrays in fp32, bf16 and fp16",
    }
    default_preset = "standard"
    options = DtypeOptions
    dtypes = ("fp32", "fp64", "bf16", "fp16")

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        base = DTYPE_PRESETS.get(preset, preset)
        if base not in _MIN_ELEMENTS:
            raise ValueError(f"unknown preset {preset!r}")
        # those asked for with --dtype, else the preset's (fp32, or the three of a -dtypes preset)
        dtypes = ctx.dtypes(self.dtypes, default=PRESET_DTYPES if preset in DTYPE_PRESETS else ["fp32"])
        out = []
        for dtype in dtypes:
            size = DTYPES[dtype].itemsize
            n = array_elements(base, ctx, size)
            out += [Variant({"kernel": k, "dtype": dtype, "elements": n}, flops=_flops(k, n),
                            bytes=float(a * n * size)) for k, a in KERNELS.items()
                    if not (k == "dot" and dtype == "fp16")]  # a half-precision sum of these arrays overflows
            if ctx.device.is_accelerator and dtype == dtypes[0]:  # host<->device copies: once
                for direction in ("h2d", "d2h"):
                    for memory in ("pinned", "pageable"):
                        out.append(Variant({"kernel": direction, "memory": memory, "dtype": dtype, "elements": n},
                                           bytes=float(n * size)))
        return out

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        p = variant.params
        dtype = ctx.device.torch_dtype(p["dtype"])
        n = p["elements"]
        dev = ctx.device.torch_device
        if p["kernel"] in ("h2d", "d2h"):
            return self._transfer(variant, ctx, dtype)
        a = torch.full((n,), START[0], dtype=dtype, device=dev)
        b = torch.full((n,), START[1], dtype=dtype, device=dev)
        c = torch.full((n,), START[2], dtype=dtype, device=dev)
        kernel = p["kernel"]
        calls = [0]
        dot_out = torch.empty((), dtype=dtype, device=dev)

        if kernel == "copy":
            def fn():
                c.copy_(a)
        elif kernel == "scale":
            def fn():
                torch.mul(c, SCALAR, out=b)
        elif kernel == "add":
            def fn():
                torch.add(a, b, out=c)
        elif kernel == "triad":
            def fn():
                torch.add(b, c, alpha=SCALAR, out=a)
        elif kernel == "dot":
            def fn():
                torch.dot(a, b, out=dot_out) if dtype != torch.bfloat16 else dot_out.copy_(torch.dot(a, b))
        else:
            raise ValueError(f"unknown kernel {kernel!r}")

        def counted():
            fn()
            calls[0] += 1

        # set the arrays to the state the kernel expects so that the check below is exact
        _prepare(kernel, a, b, c)
        try:
            timing = time_fn(counted, ctx.device, ctx.budget(), agreement=ctx.agreement)
        except TooSlow as e:
            return self.too_slow(variant, ctx, e.estimate_s, variant.bytes, 1e-9)
        err = _check(kernel, a, b, c, dot_out, n)
        if err:
            return self.failed(variant, ctx, "wrong_result", err)
        return self.throughput(variant, ctx, timing, variant.bytes, 1e-9,
                               metrics={"array_bytes": n * dtype.itemsize})

    def _transfer(self, variant: Variant, ctx: Context, dtype) -> Measurement:
        p = variant.params
        n = p["elements"]
        dev = ctx.device.torch_device
        pinned = p["memory"] == "pinned"
        try:
            host = ctx.device.host_buffer(n, dtype, pinned)
        except RuntimeError as e:
            return self.failed(variant, ctx, "unsupported", f"pinned host memory not available: {e}")
        host.copy_(torch.arange(n, dtype=torch.float32).remainder_(251).to(dtype))
        devbuf = torch.empty(n, dtype=dtype, device=dev)
        if p["kernel"] == "h2d":
            def fn():
                devbuf.copy_(host, non_blocking=pinned)
        else:
            devbuf.copy_(host)
            host.zero_()

            def fn():
                host.copy_(devbuf, non_blocking=pinned)
        try:
            timing = time_fn(fn, ctx.device, ctx.budget(), agreement=ctx.agreement)
        except TooSlow as e:
            return self.too_slow(variant, ctx, e.estimate_s, variant.bytes, 1e-9)
        ctx.device.synchronize()
        if not torch.equal(devbuf.cpu(), host):
            return self.failed(variant, ctx, "wrong_result", "copied data differs from the source")
        return self.throughput(variant, ctx, timing, variant.bytes, 1e-9)


def array_elements(preset: str, ctx: Context, itemsize: int) -> int:
    """max(4×LLC, preset minimum), shrunk so that three arrays use at most a quarter of free memory."""
    table = _MIN_ELEMENTS_ACCEL if ctx.device.is_accelerator else _MIN_ELEMENTS
    n = table[preset]
    if preset != "tiny":
        n = max(n, 4 * ctx.device.llc_bytes // itemsize)
    cap = ctx.device.free_memory() // 4 // (3 * itemsize)
    n = min(n, cap)
    return int(n // 1024 * 1024)


def _flops(kernel: str, n: int) -> float:
    return float({"copy": 0, "scale": n, "add": n, "triad": 2 * n, "dot": 2 * n}[kernel])


def _prepare(kernel, a, b, c):
    """Arrays hold BabelStream's start values; each kernel then computes an exactly known result."""
    a.fill_(START[0])
    b.fill_(START[1])
    c.fill_(START[2])
    if kernel == "scale":
        c.fill_(START[0])
    elif kernel == "triad":
        c.fill_(START[0])


def _check(kernel, a, b, c, dot_out, n) -> str:
    """Each kernel is idempotent on these inputs, so the result after any number of calls is known.

    Element-wise kernels must match to a few units of rounding; dot within the worst-case bound of
    recursive summation in the array's precision (n·u, capped at 5%: a float32 dot over 2^25 terms
    legitimately loses about 1%).
    """
    t = a.dtype
    u = torch.finfo(t).eps / 2
    va, vb = (torch.tensor(v, dtype=t).item() for v in START[:2])
    if kernel == "dot":
        want = va * vb * n
        val = float(dot_out)
        rel = abs(val - want) / abs(want)
        tol = min(0.05, max(n * u, 1e-12))
        return "" if rel <= tol else f"dot = {val:.6g}, expected {want:.6g} (relative error {rel:.2g} > {tol:.2g})"
    got, want = {
        "copy": (c, va),
        "scale": (b, SCALAR * va),
        "add": (c, va + vb),
        "triad": (a, vb + SCALAR * va),
    }[kernel]
    rel = ((got.double() - want).abs() / abs(want)).max().item()
    if rel > 4 * u:
        bad = ((got.double() - want).abs() / abs(want) > 4 * u).sum().item()
        return f"{bad} of {got.numel()} elements differ from {want:.6g} (max relative error {rel:.2g})"
    return ""
