"""A portable GEMM: one Triton kernel, C = A·B, tiled and grouped for L2 reuse as in Triton's matrix
multiplication tutorial, with @triton.autotune choosing the tile shape per (M, N, K, dtype).

Imported only where the device's backend says Triton compiles for it. fp32 inputs are multiplied in full
IEEE precision (Triton's NVIDIA default would be TF32); tf32 asks for TF32 explicitly. The accumulator is
fp32 for every input type.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

# (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps): the tutorial's search space and larger tiles for
# big-register parts; configurations that exceed a device's shared memory are dropped by the autotuner
_CONFIGS = (
    (128, 256, 64, 8, 3, 8), (256, 128, 64, 8, 3, 8), (128, 128, 64, 8, 3, 8), (64, 256, 32, 8, 4, 4),
    (128, 128, 32, 8, 4, 4), (128, 64, 32, 8, 4, 4), (64, 128, 32, 8, 4, 4), (128, 32, 32, 8, 4, 4),
    (64, 32, 32, 8, 5, 2), (32, 64, 32, 8, 5, 2), (128, 128, 64, 8, 2, 8), (256, 256, 32, 8, 2, 8),
)


def configs() -> list[triton.Config]:
    return [triton.Config({"BLOCK_M": m, "BLOCK_N": n, "BLOCK_K": k, "GROUP_M": g}, num_stages=s, num_warps=w)
            for (m, n, k, g, s, w) in _CONFIGS]


@triton.autotune(configs=configs(), key=["M", "N", "K", "PRECISION"])
@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr):
    # programs walk the output in groups of GROUP_M tile rows, so neighbouring programs share B tiles in L2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    group_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % group_m
    pid_n = (pid % in_group) // group_m
    rows = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    cols = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    ks = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rows[:, None] * stride_am + ks[None, :] * stride_ak
    b_ptrs = b_ptr + ks[:, None] * stride_bk + cols[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kk in range(0, tl.cdiv(K, BLOCK_K)):
        left = K - kk * BLOCK_K
        a = tl.load(a_ptrs, mask=ks[None, :] < left, other=0.0)
        b = tl.load(b_ptrs, mask=ks[:, None] < left, other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    out_rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    out_cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + out_rows[:, None] * stride_cm + out_cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(out_rows[:, None] < M) & (out_cols[None, :] < N))


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, tf32: bool = False) -> torch.Tensor:
    """out = a @ b with the autotuned kernel (a: M×K, b: K×N, out: M×N, one dtype)."""
    m, k = a.shape
    _, n = b.shape

    def grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    _matmul_kernel[grid](a, b, out, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), out.stride(0),
                         out.stride(1), PRECISION="tf32" if tf32 else "ieee")
    return out


def chosen_config() -> dict:
    """The tile configuration the autotuner picked for the last shape it tuned ({} before any)."""
    best = getattr(_matmul_kernel, "best_config", None)
    if best is None:
        return {}
    return {**best.kwargs, "num_stages": best.num_stages, "num_warps": best.num_warps}
