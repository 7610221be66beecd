"""Sparse computation: sparse × dense matmul (CSR, COO, BSR, 2:4) against the dense GEMM, and embedding bags.

The figure users want is the speed-up (or slow-down) of each sparse format over the dense GEMM of the
same shape: `metrics["speedup_vs_dense"]`. Values count dense-equivalent FLOPs, 2·M·N·K per call, so a
sparse and a dense row compare directly; the FLOPs actually useful, 2·nnz·N, are in the metrics.
Conversion to the sparse layout is done once, before timing (a sparse weight is stored sparse).
Every result is compared with the dense product of the same matrix (float64 reference).
"""

from __future__ import annotations

import math
import statistics
import time
import warnings

import torch
import torch.nn.functional as F

from gapbench.results import Measurement
from gapbench.timing import TooSlow, time_fn
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.options import Options

FORMATS = ("csr", "coo", "bsr")

# relative tolerance of |out - ref| against sum_k |a_ik·b_kj| (what rounding errors scale with)
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
# shares of a variant's budget: timing the sparse op (more when the dense GEMM is already timed), timing the
# dense GEMM of the same shape, and the paired dense/sparse runs of the speed-up
SPARSE_SHARE, SPARSE_SHARE_DENSE_KNOWN, DENSE_SHARE, PAIRS_SHARE = 0.5, 0.7, 0.3, 0.3

PRESETS = {
    # m, k, n: A is m×k sparse, B is k×n dense
    "tiny": dict(m=512, k=512, n=64, densities=(0.01, 0.05, 0.1, 0.3), block=16,
                 bag=dict(num_embeddings=20_000, dim=64, bags=512, bag_size=32)),
    "standard": dict(m=4096, k=4096, n=512, densities=(0.01, 0.05, 0.1, 0.3), block=32,
                     bag=dict(num_embeddings=1_000_000, dim=128, bags=4096, bag_size=64)),
}



class Sparse(Workload):
    name = "sparse"
    category = "probe"
    unit = "TFLOP/s"
    unit_help = ("dense-equivalent: 2·M·N·K per sparse×dense call, per second, ×1e-12 (useful FLOPs 2·nnz·N "
                 "in metrics); embedding-bag rows report GB/s of gathered rows (indices·dim·itemsize)")
    description = "sparse × dense matmul (CSR, COO, BSR, 2:4) vs dense GEMM at several densities; embedding bags"
    presets = {
        "tiny": "512×512 sparse × 512×64 dense at 1/5/10/30% density; 20k×64 embedding bag (seconds on a CPU)",
        "standard": "4096×4096 sparse × 4096×512 dense at 1/5/10/30% density; 1M×128 embedding bag",
    }
    default_preset = "tiny"
    options = Options

    def __init__(self):
        # dense GEMM medians, keyed by shape/dtype/device: every sparse variant reports its speed-up against one
        self._dense_s: dict[tuple, float] = {}

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}")
        p = PRESETS[preset]
        m, k, n = p["m"], p["k"], p["n"]
        flops = 2.0 * m * n * k
        out = [Variant({"op": "spmm", "format": "dense", "density": 1.0, "m": m, "k": k, "n": n,
                        "dtype": "fp32"}, flops=flops, bytes=4.0 * (m * k + k * n + m * n))]
        for fmt in FORMATS:
            for d in p["densities"]:
                params = {"op": "spmm", "format": fmt, "density": d, "m": m, "k": k, "n": n, "dtype": "fp32"}
                if fmt == "bsr":
                    params["block"] = p["block"]
                out.append(Variant(params, flops=flops))
        out.append(Variant({"op": "spmm", "format": "2:4", "density": 0.5, "m": m, "k": k, "n": n,
                            "dtype": "fp16"}, flops=flops))
        bag = p["bag"]
        gathered = bag["bags"] * bag["bag_size"] * bag["dim"] * 4.0
        out.append(Variant({"op": "embedding_bag", "mode": "sum", "dtype": "fp32", **bag}, bytes=gathered))
        return out

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        p = variant.params
        if p["op"] == "embedding_bag":
            return self._embedding_bag(variant, ctx)
        if p["format"] == "2:4":
            return self._semi_structured(variant, ctx)
        dtype = torch.float32
        dev = ctx.device.torch_device
        m, k, n = p["m"], p["k"], p["n"]
        a_dense = sparse_matrix(m, k, p["density"], block=p.get("block"), seed=1)
        b = torch.randn(k, n, generator=torch.Generator().manual_seed(2))
        if p["format"] == "dense":
            a_dev, b_dev = a_dense.to(dev), b.to(dev)
            return self._dense(variant, ctx, a_dense, b, lambda: torch.mm(a_dev, b_dev), dtype)
        try:
            a_sp = to_layout(a_dense.to(dev), p["format"], p.get("block"))
        except torch.OutOfMemoryError:
            raise  # the worker records oom
        except (RuntimeError, NotImplementedError, TypeError) as e:
            return self.failed(variant, ctx, "unsupported", f"{p['format'].upper()} tensors are not offered on "
                               f"{ctx.device.type}: {e}")
        b_dev = b.to(dev)
        nnz = int(torch.count_nonzero(a_dense))

        def op():
            return spmm(a_sp, b_dev)

        try:
            op()
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, NotImplementedError) as e:
            return self.failed(variant, ctx, "unsupported", f"{p['format'].upper()} × dense matmul is not "
                               f"offered on {ctx.device.kind}: {e}")
        return self._timed(variant, ctx, op, a_dense, b, dtype, nnz,
                           dense_key=(m, k, n, dtype, str(ctx.device)),
                           dense_op=_dense_op(a_dense, b, dev, dtype),
                           storage_bytes=sparse_storage_bytes(a_sp))

    # ---- variants ----------------------------------------------------------------------------
    def _dense(self, variant, ctx, a_dense, b, op, dtype) -> Measurement:
        try:
            timing = time_fn(op, ctx.device, ctx.budget(), agreement=ctx.agreement)
        except TooSlow as e:
            return self.too_slow(variant, ctx, e.estimate_s, variant.flops, 1e-12)
        err = matmul_mismatch(op(), a_dense, b, TOLERANCE[dtype])
        if err:
            return self.failed(variant, ctx, "wrong_result", f"dense GEMM: {err}")
        p = variant.params
        self._dense_s[(p["m"], p["k"], p["n"], dtype, str(ctx.device))] = timing.median_s
        return self.throughput(variant, ctx, timing, variant.flops, 1e-12, metrics={"speedup_vs_dense": 1.0})

    def _timed(self, variant, ctx, op, a_dense, b, dtype, nnz, dense_key, dense_op, storage_bytes=None,
               extra_metrics=None) -> Measurement:
        """Time a sparse op, check it against dense, and relate it to the dense GEMM of the same shape."""
        started = time.perf_counter()
        share = SPARSE_SHARE if dense_key not in self._dense_s else SPARSE_SHARE_DENSE_KNOWN
        try:
            timing = time_fn(op, ctx.device, ctx.budget().fraction(share), agreement=ctx.agreement)
        except TooSlow as e:
            return self.too_slow(variant, ctx, e.estimate_s, variant.flops, 1e-12)
        err = matmul_mismatch(op(), a_dense, b, TOLERANCE[dtype])
        if err:
            return self.failed(variant, ctx, "wrong_result", f"{variant.params['format']} vs dense: {err}")
        p = variant.params
        metrics = {"nnz": nnz, "actual_density": nnz / (p["m"] * p["k"]),
                   "useful_flops": 2.0 * nnz * p["n"],
                   "useful_tflops_per_s": 2.0 * nnz * p["n"] / timing.median_s * 1e-12}
        if storage_bytes is not None:
            metrics["sparse_storage_bytes"] = storage_bytes
        metrics.update(extra_metrics or {})
        dense_s = self._dense_s.get(dense_key)
        if dense_s is None:
            try:
                t = time_fn(dense_op, ctx.device, ctx.budget().fraction(DENSE_SHARE, repeats=max(3, ctx.repeats // 2)),
                            agreement=ctx.agreement, measure_energy=False)
                dense_s = self._dense_s[dense_key] = t.median_s
            except TooSlow:
                metrics["dense_note"] = "dense GEMM did not fit the rest of the budget; no speed-up"
        if dense_s is not None:
            left = min(ctx.budget_s - (time.perf_counter() - started), ctx.budget_s * PAIRS_SHARE)
            ratios, dense_times = paired_ratios(op, dense_op, ctx.device, sparse_s=timing.median_s, dense_s=dense_s,
                                                min_time_s=ctx.min_time_s, pairs=ctx.repeats, budget_s=left)
            if ratios:
                metrics["speedup_vs_dense"] = statistics.median(ratios)
                metrics["speedup_vs_dense_range"] = [min(ratios), max(ratios)]
                metrics["speedup_pairs"] = len(ratios)
                metrics["dense_time_s"] = statistics.median(dense_times)
            else:  # no time left for pairs: the ratio of the two separate medians
                metrics["speedup_vs_dense"] = dense_s / timing.median_s
                metrics["dense_time_s"] = dense_s
        return self.throughput(variant, ctx, timing, variant.flops, 1e-12, metrics=metrics)

    def _semi_structured(self, variant: Variant, ctx: Context) -> Measurement:
        why = semi_structured_unsupported(ctx.device)
        if why:
            return self.failed(variant, ctx, "unsupported", why)
        p = variant.params
        m, k, n = p["m"], p["k"], p["n"]
        dtype = torch.float16
        dev = ctx.device.torch_device
        a_dense = two_four_matrix(m, k, seed=1).to(dtype)
        b = torch.randn(k, n, generator=torch.Generator().manual_seed(2)).to(dtype)
        b_dev = b.to(dev)
        try:
            from torch.sparse import to_sparse_semi_structured

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                a_sp = to_sparse_semi_structured(a_dense.to(dev))

            def op():
                return torch.mm(a_sp, b_dev)

            op()
        except torch.OutOfMemoryError:
            raise
        except (RuntimeError, NotImplementedError, ValueError, TypeError, AssertionError) as e:
            return self.failed(variant, ctx, "unsupported", f"2:4 semi-structured sparsity failed on this device: {e}")
        return self._timed(variant, ctx, op, a_dense, b, dtype, int(torch.count_nonzero(a_dense)),
                           dense_key=(m, k, n, dtype, str(ctx.device)),
                           dense_op=_dense_op(a_dense, b, dev, dtype),
                           extra_metrics={"backend": type(a_sp).__name__})

    def _embedding_bag(self, variant: Variant, ctx: Context) -> Measurement:
        p = variant.params
        dev = ctx.device.torch_device
        g = torch.Generator().manual_seed(3)
        weight = torch.randn(p["num_embeddings"], p["dim"], generator=g)
        n_idx = p["bags"] * p["bag_size"]
        indices = torch.randint(0, p["num_embeddings"], (n_idx,), generator=g)
        offsets = torch.arange(0, n_idx, p["bag_size"])
        w_dev, i_dev, o_dev = weight.to(dev), indices.to(dev), offsets.to(dev)

        def op():
            return F.embedding_bag(i_dev, w_dev, o_dev, mode=p["mode"])

        try:
            timing = time_fn(op, ctx.device, ctx.budget(), agreement=ctx.agreement)
        except TooSlow as e:  # not self.too_slow(): its estimate would be worded in the workload's TFLOP/s
            return self.failed(variant, ctx, "too_slow", f"one lookup batch takes {e.estimate_s:.3g} s; estimate "
                               f"≈{variant.bytes / e.estimate_s * 1e-9:.4g} GB/s does not fit the "
                               f"{ctx.budget_s:.0f} s budget", metrics={"estimated_time_per_iter_s": e.estimate_s})
        err = embedding_bag_mismatch(op(), weight, indices, p["bag_size"], p["mode"])
        if err:
            return self.failed(variant, ctx, "wrong_result", f"embedding_bag vs gather-and-sum: {err}")
        return self.throughput(variant, ctx, timing, variant.bytes, 1e-9, unit="GB/s",
                               metrics={"indices": n_idx, "lookups_per_s": n_idx / timing.median_s})


# ---- building blocks (public: the tests use them) ---------------------------------------------------

def sparse_matrix(m: int, k: int, density: float, *, block: int | None = None, seed: int = 0) -> torch.Tensor:
    """A dense m×k float32 matrix with about `density` non-zeros: unstructured, or whole block×block tiles."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(m, k, generator=g)
    if density >= 1.0:
        return values
    if block:
        tiles = torch.rand(m // block, k // block, generator=g) < density
        if not tiles.any():
            tiles[0, 0] = True
        mask = tiles.repeat_interleave(block, 0).repeat_interleave(block, 1)
    else:
        mask = torch.rand(m, k, generator=g) < density
    return values * mask


def two_four_matrix(m: int, k: int, seed: int = 0) -> torch.Tensor:
    """A float32 m×k matrix with the 2:4 pattern: in every group of four along a row, two are zero."""
    g = torch.Generator().manual_seed(seed)
    values = torch.randn(m, k, generator=g)
    keep = torch.rand(m, k // 4, 4, generator=g).argsort(dim=-1) < 2
    return values * keep.reshape(m, k)


def to_layout(a: torch.Tensor, fmt: str, block: int | None = None) -> torch.Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta" is not a finding
        warnings.simplefilter("ignore")
        if fmt == "csr":
            return a.to_sparse_csr()
        if fmt == "coo":
            return a.to_sparse_coo().coalesce()
        if fmt == "bsr":
            return a.to_sparse_bsr((block, block))
    raise ValueError(f"unknown sparse format {fmt!r}")


def spmm(a_sparse: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Sparse × dense -> dense, through the entry point each layout is meant to be used with."""
    if a_sparse.layout == torch.sparse_coo:
        return torch.sparse.mm(a_sparse, b)
    return a_sparse @ b


def sparse_storage_bytes(a: torch.Tensor) -> int:
    if a.layout == torch.sparse_coo:
        parts = (a.indices(), a.values())
    elif a.layout in (torch.sparse_csr, torch.sparse_bsr):
        parts = (a.crow_indices(), a.col_indices(), a.values())
    else:
        parts = (a,)
    return int(sum(t.numel() * t.element_size() for t in parts))


def matmul_mismatch(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, tol: float) -> str | None:
    """Why `out` is not a @ b (float64 reference, error relative to |a|@|b|), or None when it is."""
    if out.layout != torch.strided:
        out = out.to_dense()
    got = out.to("cpu", torch.float64)
    a64, b64 = a.to(torch.float64), b.to(torch.float64)
    if got.shape != (a.shape[0], b.shape[1]):
        return f"shape {tuple(got.shape)}, expected {(a.shape[0], b.shape[1])}"
    if not torch.isfinite(got).all():
        return "output has non-finite values"
    ref = a64 @ b64
    scale = (a64.abs() @ b64.abs()).clamp_min(1e-30)
    err = ((got - ref).abs() / scale).max().item()
    if err > tol:
        return f"max relative error {err:.3g} exceeds tolerance {tol:g}"
    return None


def embedding_bag_mismatch(out: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor, bag_size: int,
                           mode: str = "sum") -> str | None:
    """Why `out` is not the per-bag reduction of the gathered rows (float64), or None."""
    rows = weight.to(torch.float64)[indices].reshape(-1, bag_size, weight.shape[1])
    ref = rows.sum(1) if mode == "sum" else rows.mean(1) if mode == "mean" else rows.max(1).values
    got = out.to("cpu", torch.float64)
    if got.shape != ref.shape:
        return f"shape {tuple(got.shape)}, expected {tuple(ref.shape)}"
    scale = rows.abs().sum(1).clamp_min(1e-30)
    err = ((got - ref).abs() / scale).max().item()
    if not err <= 1e-5:  # also catches NaN
        return f"max relative error {err:.3g} exceeds tolerance 1e-05"
    return None


def semi_structured_unsupported(device) -> str:
    """Why 2:4 semi-structured sparsity cannot run on this device ('' when it may)."""
    try:
        from torch.sparse import to_sparse_semi_structured  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no torch.sparse.to_sparse_semi_structured"
    return device.semi_structured_unsupported()


def paired_ratios(sparse_op, dense_op, device, *, sparse_s: float, dense_s: float, min_time_s: float, pairs: int,
                  budget_s: float) -> tuple[list[float], list[float]]:
    """Dense-time / sparse-time ratios, each from a dense and a sparse run back to back.

    Pairing makes the speed-up robust to a machine whose speed drifts (shared CPUs, clocks): both sides of
    each ratio saw the same conditions. Returns the ratios and the dense seconds per call of each pair.
    """
    it_s = max(1, math.ceil(min_time_s / max(sparse_s, 1e-9)))
    it_d = max(1, math.ceil(min_time_s / max(dense_s, 1e-9)))
    per_pair = it_s * sparse_s + it_d * dense_s
    pairs = min(pairs, int(budget_s / max(per_pair, 1e-9)))
    timer = device.new_timer()
    ratios, dense_times = [], []
    for _ in range(max(pairs, 0)):
        timer.start()
        for _ in range(it_d):
            dense_op()
        td = timer.stop() / it_d
        timer.start()
        for _ in range(it_s):
            sparse_op()
        ts = timer.stop() / it_s
        ratios.append(td / ts)
        dense_times.append(td)
    return ratios, dense_times


def _dense_op(a_dense: torch.Tensor, b: torch.Tensor, dev: torch.device, dtype: torch.dtype):
    a_dev, b_dev = a_dense.to(dev, dtype), b.to(dev, dtype)
    return lambda: torch.mm(a_dev, b_dev)
