"""gemm and membw on the CPU: real runs, and their correctness checks catch wrong results."""

import torch

from gapbench.devices import resolve
from gapbench.engine.variant import run_variant
from gapbench.workloads import get
from gapbench.workloads.base import Context
from gapbench.workloads.micro import gemm as gemm_mod
from gapbench.workloads.micro import membw as membw_mod


def _ctx(**opts):
    return Context(device=resolve("cpu"), preset="tiny", budget_s=5, min_time_s=0.01, repeats=3, options=opts)


def test_gemm_tiny_on_cpu_reports_each_dtype_honestly():
    w = get("gemm")
    ctx = _ctx()
    res = {v.params["dtype"]: run_variant(w, v, ctx) for v in w.variants("tiny", ctx)}  # as the worker runs them
    assert set(res) == {"fp32", "tf32", "bf16", "fp16", "fp8", "int8"}
    assert res["fp32"].ok and res["fp32"].value > 0
    assert res["tf32"].status == "unsupported" and "TF32" in res["tf32"].reason
    for d, m in res.items():
        assert m.status in ("ok", "unsupported", "too_slow"), (d, m.status, m.reason)
        assert m.status != "ok" or m.stats.n >= 3


def test_gemm_check_rejects_a_perturbed_product():
    op = gemm_mod._make_op("fp32", 64, 64, 64, resolve("cpu"))
    assert op.check() is None
    good = op.fn
    op.fn = lambda: good() * (1 + 1e-3)  # a kernel that is 0.1% off
    assert "exceeds tolerance" in op.check()


def test_int8_check_demands_exact_results():
    op = gemm_mod._make_op("int8", 32, 32, 32, resolve("cpu"))
    assert op.check() is None
    good = op.fn
    op.fn = lambda: good() + 1
    assert op.check() is not None


def test_membw_kernels_are_checked():
    a = torch.full((1024,), 0.1)
    b = torch.full((1024,), 0.2)
    c = torch.full((1024,), 0.1)
    dot = torch.tensor(0.0)
    torch.add(b, c, alpha=membw_mod.SCALAR, out=a)
    assert membw_mod._check("triad", a, b, c, dot, 1024) == ""
    a[7] = 0.5
    assert "1 of 1024" in membw_mod._check("triad", a, b, c, dot, 1024)
    a.fill_(0.1)
    dot.fill_(float(torch.dot(a, b)) * 1.1)
    assert "dot" in membw_mod._check("dot", a, b, c, dot, 1024)


def test_membw_tiny_runs_all_babelstream_kernels_ok():
    w = get("membw")
    ctx = _ctx()
    res = [w.run(v, ctx) for v in w.variants("tiny", ctx)]
    assert [m.variant["kernel"] for m in res] == ["copy", "scale", "add", "triad", "dot"]
    assert all(m.ok for m in res), [(m.status, m.reason) for m in res]


def test_too_slow_is_recorded_with_an_estimate_not_a_speed():
    w = get("gemm")
    ctx = Context(device=resolve("cpu"), preset="tiny", budget_s=0.0001, min_time_s=0.01, repeats=3)
    v = gemm_mod._variant("fp32", 512, 512, 512)
    m = w.run(v, ctx)
    assert m.status == "too_slow" and m.value is None
    assert m.metrics["estimated_value"] > 0 and "budget" in m.reason
