"""The sparse workload: sparse × dense results checked against dense, the 2:4 and embedding-bag paths."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from gapbench import devices
from gapbench.workloads import Context, get
from gapbench.workloads.probes import sparse as sp


@pytest.fixture(autouse=True)
def _one_thread():
    """Behaviour, not speed, is tested: one thread keeps a shared 2-core CI box from stalling OpenMP."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _ctx(preset: str = "tiny") -> Context:
    return Context(device=devices.resolve("cpu"), preset=preset, budget_s=30, min_time_s=0.02, repeats=3)


@pytest.mark.parametrize("fmt", ["csr", "coo", "bsr"])
def test_sparse_product_matches_dense_and_a_perturbed_one_does_not(fmt):
    a = sp.sparse_matrix(128, 96, 0.1, block=16 if fmt == "bsr" else None, seed=4)
    b = torch.randn(96, 24, generator=torch.Generator().manual_seed(5))
    out = sp.spmm(sp.to_layout(a, fmt, 16), b)
    assert sp.matmul_mismatch(out, a, b, sp.TOLERANCE[torch.float32]) is None
    bad = out.clone()
    bad[3, 7] += 1e-2 * (a.abs() @ b.abs())[3, 7]
    assert "relative error" in sp.matmul_mismatch(bad, a, b, sp.TOLERANCE[torch.float32])
    nan = out.clone()
    nan[0, 0] = float("nan")
    assert sp.matmul_mismatch(nan, a, b, 1e-5) == "output has non-finite values"


def test_sparse_matrix_density_and_block_structure():
    a = sp.sparse_matrix(256, 256, 0.05, seed=1)
    assert 0.04 < torch.count_nonzero(a).item() / a.numel() < 0.06
    blk = sp.sparse_matrix(256, 256, 0.1, block=32, seed=1)
    tiles = (blk.reshape(8, 32, 8, 32) != 0).any(dim=(1, 3))
    full = (blk.reshape(8, 32, 8, 32) != 0).all(dim=(1, 3))
    assert tiles.any() and torch.equal(tiles, full)  # every tile is all zero or all non-zero


def test_two_four_pattern():
    a = sp.two_four_matrix(64, 128, seed=2)
    per_group = (a.reshape(64, 32, 4) != 0).sum(-1)
    assert torch.equal(per_group, torch.full_like(per_group, 2))


def test_embedding_bag_check_accepts_the_real_op_and_rejects_a_perturbed_one():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(1000, 16, generator=g)
    idx = torch.randint(0, 1000, (40 * 8,), generator=g)
    out = F.embedding_bag(idx, w, torch.arange(0, 320, 8), mode="sum")
    assert sp.embedding_bag_mismatch(out, w, idx, 8) is None
    bad = out.clone()
    bad[5, 3] += 0.01
    assert sp.embedding_bag_mismatch(bad, w, idx, 8) is not None
    assert sp.embedding_bag_mismatch(out[:-1], w, idx, 8).startswith("shape")


def test_tiny_preset_runs_every_variant_on_cpu():
    w = get("sparse")
    ctx = _ctx()
    vs = w.variants("tiny", ctx)
    results = {(v.params["op"], v.params.get("format"), v.params.get("density")): w.run(v, ctx) for v in vs}
    dense = results[("spmm", "dense", 1.0)]
    assert dense.ok and dense.unit == "TFLOP/s" and dense.value > 0
    for fmt in sp.FORMATS:
        for d in sp.PRESETS["tiny"]["densities"]:
            m = results[("spmm", fmt, d)]
            assert m.ok, m.reason
            assert m.metrics["speedup_vs_dense"] > 0
            if "speedup_pairs" in m.metrics:
                lo, hi = m.metrics["speedup_vs_dense_range"]
                assert lo <= m.metrics["speedup_vs_dense"] <= hi
            assert m.metrics["useful_flops"] == 2.0 * m.metrics["nnz"] * m.variant["n"]
            assert m.flops == 2.0 * m.variant["m"] * m.variant["n"] * m.variant["k"]
    semi = results[("spmm", "2:4", 0.5)]
    assert semi.status == "unsupported" and "CUDA" in semi.reason
    bag = results[("embedding_bag", None, None)]
    assert bag.ok and bag.unit == "GB/s" and bag.value > 0


def test_a_wrong_sparse_kernel_is_reported_as_wrong_result(monkeypatch):
    real = sp.spmm
    monkeypatch.setattr(sp, "spmm", lambda a, b: real(a, b) * 1.001)  # a kernel that is 0.1% off
    w = get("sparse")
    ctx = _ctx()
    v = next(v for v in w.variants("tiny", ctx) if v.params.get("format") == "csr")
    m = w.run(v, ctx)
    assert m.status == "wrong_result" and "relative error" in m.reason and m.value is None


def test_paired_ratios_put_the_slower_op_on_top():
    dev = devices.resolve("cpu")
    big = torch.randn(384, 384)
    small = torch.zeros(8)
    ratios, dense_times = sp.paired_ratios(lambda: small.add_(0), lambda: big @ big, dev, sparse_s=1e-6,
                                           dense_s=1e-3, min_time_s=0.01, pairs=3, budget_s=5.0)
    assert len(ratios) == 3 and len(dense_times) == 3
    assert all(r > 1 for r in ratios)
    assert sp.paired_ratios(lambda: None, lambda: None, dev, sparse_s=1.0, dense_s=1.0, min_time_s=0.01, pairs=3,
                            budget_s=0.5) == ([], [])  # no time for even one pair
