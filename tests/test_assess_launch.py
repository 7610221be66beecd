"""The micro workloads gapbench assess reads besides gemm and membw — launch (per-operator cost), conv and
attention (per dtype, shape and pass): real runs on the CPU, what they count, their checks."""

import pytest
import torch

from gapbench.devices import resolve
from gapbench.workloads import get
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.micro import launch


def _ctx():
    return Context(device=resolve("cpu"), preset="quick", budget_s=10, min_time_s=0.05, repeats=3)


def test_operators_of_counts_what_reaches_the_backend():
    a, b = torch.ones(3), torch.ones(3)
    assert launch.operators_of(lambda: torch.add(a, b)) == 1
    lin = torch.nn.Linear(4, 4)
    assert launch.operators_of(lambda: lin(torch.ones(2, 4))) == 3        # ones, t, addmm
    fn, _ = launch._module_step("cpu", train=True)
    n = launch.operators_of(fn)
    assert n == launch.operators_of(fn) and n > 40                        # the same operators on every call


def test_all_variants_measure_per_operator_time():
    w = get("launch")
    ctx = _ctx()
    res = {v.params["kind"]: w.run(v, ctx) for v in w.variants("quick", ctx)}
    assert set(res) == {"op", "train", "infer"}
    for kind, m in res.items():
        assert m.ok, (kind, m.reason)
        assert m.unit == "us" and not m.higher_is_better and 0 < m.value < 10_000 and m.stats.n >= 3
    assert res["op"].metrics["operators_per_call"] == 1 and res["train"].metrics["operators_per_call"] > 40
    t = res["train"]
    per_iteration = t.metrics["operators_per_call"] * t.metrics["calls_per_iteration"]
    assert t.metrics["time_per_iter_s"] == pytest.approx(t.value * 1e-6 * per_iteration, rel=0.3)


def test_the_check_catches_a_wrong_module():
    fn, check = launch._module_step("cpu", train=True)
    fn()
    assert check() == ""
    fn2, check2 = launch._module_step("cpu", train=False)
    fn2()
    assert check2() == ""
    model_fn, bad_check = launch._module_step("cpu", train=False)
    # a backend whose GELU is off: the same module, its output perturbed before the check reads it
    model_fn()
    closure = dict(zip(model_fn.__code__.co_freevars, (c.cell_contents for c in model_fn.__closure__), strict=True))
    closure["out"]["loss"] = closure["out"]["loss"] * 1.01
    assert "float64 gives" in bad_check()


def test_attention_runs_forward_and_backward_and_counts_like_the_trace():
    from gapbench.workloads.micro import attention

    w = get("attention")
    ctx = _ctx()
    variants = w.variants("tiny", Context(device=resolve("cpu"), preset="tiny", options={"dtype": "fp32"}))
    assert [v.params["pass"] for v in variants] == ["forward", "backward"]
    # the FLOPs of the forward are the two batched GEMMs, as torch.utils.flop_counter counts a model's attention
    assert variants[0].flops == 4 * 8 * 128 * 128 * 32
    for v in variants:
        m = w.run(v, ctx)
        assert m.ok and m.value > 0, m.reason
    q = torch.randn(1, 2, 16, 8)
    assert attention._check(q, q, q, torch.nn.functional.scaled_dot_product_attention(q, q, q), None, 1e-4) == ""
    wrong = torch.nn.functional.scaled_dot_product_attention(q, q, q) * 1.01
    assert "differs from float64" in attention._check(q, q, q, wrong, None, 1e-4)


def test_conv_counts_like_flop_counter_and_checks_its_gradient():
    from torch.utils.flop_counter import FlopCounterMode

    from gapbench.workloads.micro import conv

    w = get("conv")
    variants = w.variants("tiny", Context(device=resolve("cpu"), preset="tiny", options={"dtype": "fp32"}))
    x = torch.randn(1, 16, 16, 16, requires_grad=True)
    weight = torch.randn(16, 16, 3, 3, requires_grad=True)
    counter = FlopCounterMode(display=False)
    with counter:
        torch.nn.functional.conv2d(x, weight, padding=1).sum().backward()
    assert variants[0].flops + variants[1].flops == counter.get_total_flops()
    for v in variants:
        m = w.run(v, _ctx())
        assert m.ok and m.value > 0, m.reason
    out = torch.nn.functional.conv2d(x, weight, padding=1)
    assert conv._check(x, weight, out, None, 1e-4) == ""
    assert "differs from float64" in conv._check(x, weight, out * 1.01, None, 1e-4)


def test_a_depthwise_conv_row_counts_like_the_trace_and_checks_its_gradient():
    from gapbench.assess.work import WorkRecorder
    from gapbench.workloads.micro import conv

    w = get("conv")
    flops = {p: conv.conv_flops(2, 16, 16, 12, p == "backward", 7, 16) for p in conv.PASSES}
    # by hand: 2 images × 144 pixels × 16 channels × 49 taps × 2, the backward twice that (input and weight)
    assert flops == {"forward": 2 * 144 * 16 * 49 * 2, "backward": 2 * 2 * 144 * 16 * 49 * 2}
    x = torch.randn(2, 16, 12, 12, requires_grad=True)
    weight = torch.randn(16, 1, 7, 7, requires_grad=True)
    rec = WorkRecorder()
    with rec:
        torch.nn.functional.conv2d(x, weight, padding=3, groups=16).sum().backward()
    traced = {i.phase: i.flops for i in rec.work("x").items if i.cls == "conv"}
    assert traced == flops
    for p in conv.PASSES:
        v = Variant({"dtype": "fp32", "batch": 2, "c_in": 16, "c_out": 16, "hw": 12, "pass": p, "kernel": 7,
                     "groups": 16}, flops=flops[p])
        m = w.run(v, _ctx())
        assert m.ok and m.value > 0, m.reason
    out = torch.nn.functional.conv2d(x, weight, padding=3, groups=16)
    assert conv._check(x, weight, out, None, 1e-4) == ""
    assert "differs from float64" in conv._check(x, weight, out * 1.01, None, 1e-4)
    # the quick preset measures depthwise rows on a CPU, the kernel and groups in the variant
    quick = w.variants("quick", Context(device=resolve("cpu"), preset="quick", options={"dtype": "fp32"}))
    assert {(v.params.get("kernel", 3), v.params["c_in"]) for v in quick if v.params.get("groups")} >= {(7, 96), (3, 144)}
