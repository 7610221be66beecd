"""Compute-heavy element-wise operators and small convolutions at their own measured rates: the elementwise workload
(real runs, its checks catch wrong results), the trace's elements and kernel sizes, and the prices by hand."""

from __future__ import annotations

import pytest
import torch

from gapbench import results
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import predict
from gapbench.assess.work import Item, Work, WorkRecorder
from gapbench.devices import resolve
from gapbench.engine.variant import run_variant
from gapbench.workloads import get
from gapbench.workloads.base import Context
from gapbench.workloads.micro import elementwise as ew
from test_assess_speed import _m, rates_file


def _ew(op: str, elements: int, gelems: float, dtype: str = "fp32"):
    return _m("elementwise", {"op": op, "dtype": dtype, "elements": elements}, gelems, "Gelem/s")


def test_an_element_wise_operator_at_its_own_rate(tmp_path):
    rows = [_ew("gelu", 32768, 0.5), _ew("gelu", 262144, 1.0), _ew("_softmax", 32768, 0.25)]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10, extra=rows)))
    work = Work("x", [
        # 3 GELUs of 40,000 elements (nearest row: 32768, 0.5 Gelem/s): 80 µs each; their 320 kB at 10 GB/s is 32 µs
        Item("aten.gelu.default", "memory", "fp32", "forward", 0.0, 3.2e5, None, 3, elements=40_000),
        # a GELU whose bytes take longer than its arithmetic: 1e7 bytes at the 1e9-byte row's 1 GB/s is 10 ms
        Item("aten.gelu.default", "memory", "fp32", "forward", 0.0, 1e7, None, 1, elements=300_000),
        # _safe_softmax is priced as the measured _softmax: 10,000 elements at 0.25 Gelem/s = 40 µs
        Item("aten._safe_softmax.default", "memory", "fp32", "forward", 0.0, 8e4, None, 1, elements=10_000),
        # no row of its own: its bytes at the bandwidth, 100 kB at 10 GB/s
        Item("aten.add.Tensor", "memory", "fp32", "forward", 0.0, 1e5, None, 2, elements=12_500),
        # a gelu of a dtype without rows: bytes alone
        Item("aten.gelu.default", "memory", "bf16", "forward", 0.0, 1e5, None, 1, elements=25_000)])
    p, missing = predict([(work, a), (work, a)])
    assert not missing
    classes = {c.cls: c for c in p.source.classes}
    assert classes["elementwise"].seconds == pytest.approx(3 * 80e-6 + 10e-3 + 40e-6)
    assert classes["elementwise"].calls == 5 and classes["elementwise"].flops == 0
    assert classes["memory"].seconds == pytest.approx(2 * 10e-6 + 10e-6) and classes["memory"].calls == 3
    # and 8 calls at the forward-only (launch infer) per-operator time, 5 µs
    assert p.source.step_s == pytest.approx(3 * 80e-6 + 10e-3 + 40e-6 + 30e-6 + 8 * 5e-6)
    assert "elementwise gelu fp32 32768 elements" in classes["elementwise"].rates


def test_a_1x1_convolution_at_the_1x1_rows(tmp_path):
    def conv(kernel: int, c_in: int, tflops: float):
        return _m("conv", {"dtype": "fp32", "batch": 2, "c_in": c_in, "c_out": 64, "hw": 8, "kernel": kernel,
                           "pass": "forward"}, tflops, "TFLOP/s")

    # the same im2col GEMM (128 × 64 × 288), one a 3×3 of 32 channels and one a 1×1 of 288
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[conv(3, 32, 0.004), conv(1, 288, 0.001)])))
    one = Item("aten.convolution.default", "conv", "fp32", "forward", 1e6, 1e3, (128, 64, 256), 1, kernel=1)
    three = Item("aten.convolution.default", "conv", "fp32", "forward", 1e6, 1e3, (128, 64, 256), 1, kernel=9)
    p, _ = predict([(Work("x", [one, three]), a)] * 2)
    # 1 MFLOP at the 1×1 row's 1 GFLOP/s and 1 MFLOP at the 3×3 row's 4 GFLOP/s, both rows 128 × 64 × 288: the
    # kernel size chooses first
    assert {c.cls: c.seconds for c in p.source.classes}["conv"] == pytest.approx(1e-3 + 0.25e-3)
    # a pointwise convolution is a GEMM: nearer the 64³ GEMM row than any convolution row, that row prices it; a
    # 3×3 one of that shape stays with the convolution rows
    assert a.conv_rate("fp32", False, (64, 64, 64), 1).rate.source.startswith("gemm fp32 64")
    assert a.conv_rate("fp32", False, (64, 64, 64), 9).kernel == 9
    # without a 1×1 row, the nearest 3×3 one prices it
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[conv(3, 32, 0.004)])))
    p, _ = predict([(Work("x", [one]), b)] * 2)
    assert {c.cls: c.seconds for c in p.source.classes}["conv"] == pytest.approx(0.25e-3)


def test_a_depthwise_convolution_at_the_depthwise_rows_only(tmp_path):
    def conv(c: int, groups: int, tflops: float, kernel: int = 7):
        return _m("conv", {"dtype": "fp32", "batch": 2, "c_in": c, "c_out": c, "hw": 8, "kernel": kernel,
                           "groups": groups, "pass": "forward"}, tflops, "TFLOP/s")

    # a depthwise 7×7 of 96 channels (im2col 128 × 96 × 49) and a dense 7×7 one of 1 channel (128 × 96 × 49 too)
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[conv(96, 96, 0.0005), conv(1, 1, 0.004)])))
    point = a.conv_rate("fp32", False, (128, 96, 49), 49, groups=96)
    assert point.groups == 96 and "depthwise 7×7 96 ch" in point.rate.source
    assert a.conv_rate("fp32", False, (128, 96, 49), 49).groups == 0  # a dense one at the dense row
    dw = Item("aten.convolution.default", "conv", "fp32", "forward", 1e6, 1e3, (128, 96, 49), 1, kernel=49,
              groups=96)
    p, missing = predict([(Work("x", [dw]), a)] * 2)
    assert not missing
    assert {c.cls: c.seconds for c in p.source.classes}["conv"] == pytest.approx(1e6 / 0.5e9)  # 2 ms, not 0.25
    # a file without depthwise rows does not price it at a dense one: the class is left unexplained, and said so
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[conv(1, 1, 0.004)])))
    assert b.conv_rate("fp32", False, (128, 96, 49), 49, groups=96) is None
    _, missing = predict([(Work("x", [dw]), b)] * 2)
    assert any("no fp32 forward depthwise convolution rows (conv)" in m for m in missing)


def test_a_grouped_convolution_of_many_channels_per_group_as_dense_ones_of_one_groups_shape(tmp_path):
    def conv(c_in: int, c_out: int, groups: int, tflops: float, hw: int = 16, kernel: int = 1):
        return _m("conv", {"dtype": "fp32", "batch": 2, "c_in": c_in, "c_out": c_out, "hw": hw, "kernel": kernel,
                           "groups": groups, "pass": "forward"}, tflops, "TFLOP/s")

    # dense 1×1 rows: im2col 512 × 96 × 96 at 8 GFLOP/s and 512 × 384 × 96 at 20; a depthwise 1×1 one at 0.5
    rows = [conv(96, 96, 1, 0.008), conv(96, 384, 1, 0.020), conv(384, 384, 384, 0.0005)]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10, extra=rows)))
    # 4 groups of 96 channels (SqueezeBERT's): one group's GEMM is 512 × 96 × 96, the 8 GFLOP/s row's
    point = a.conv_rate("fp32", False, (512, 384, 96), 1, groups=4)
    assert (point.groups, point.n, point.rate.value) == (0, 96, pytest.approx(8e9))
    grouped = Item("aten.convolution.default", "conv", "fp32", "forward", 1e6, 1e3, (512, 384, 96), 1, kernel=1,
                   groups=4)
    p, missing = predict([(Work("x", [grouped]), a)] * 2)
    assert not missing and {c.cls: c.seconds for c in p.source.classes}["conv"] == pytest.approx(1e6 / 8e9)
    # 4 channels per group stay with the grouped rows, as a depthwise one does; 8 (a RegNet's) go to the dense ones
    assert a.conv_rate("fp32", False, (512, 384, 4), 1, groups=96).groups == 384
    assert a.conv_rate("fp32", False, (512, 384, 8), 1, groups=48).groups == 0
    # a grouped row nearer in channels per group (conv:listed's own, 4 × 96) wins over the dense ones
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[*rows, conv(384, 384, 4, 0.004)])))
    assert b.conv_rate("fp32", False, (512, 384, 96), 1, groups=4).groups == 4
    # without dense rows, the grouped ones price it
    c = platform_rates(results.load(rates_file(tmp_path / "c.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[rows[2]])))
    assert c.conv_rate("fp32", False, (512, 384, 96), 1, groups=4).groups == 384


def test_the_trace_records_elements_and_kernel_sizes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    rec = WorkRecorder()
    with FakeTensorMode():
        x = torch.randn(2, 8, 5, 5)
        w1, w3 = torch.randn(4, 8, 1, 1), torch.randn(4, 8, 3, 3)
        with rec:
            torch.nn.functional.gelu(x)
            torch.nn.functional.conv2d(x, w1)
            torch.nn.functional.conv2d(x, w3, padding=1)
    items = rec.work("x").items
    gelu = next(i for i in items if i.op == "aten.gelu.default")
    assert (gelu.packet, gelu.elements, gelu.bytes) == ("gelu", 400, 2 * 400 * 4)
    assert sorted(i.kernel for i in items if i.cls == "conv") == [1, 9]
    assert all(i.groups == 0 for i in items if i.cls == "conv")


def test_the_trace_records_a_depthwise_convolutions_groups_forward_and_backward():
    rec = WorkRecorder()
    x = torch.randn(2, 8, 6, 6, requires_grad=True)
    w = torch.randn(8, 1, 7, 7, requires_grad=True)
    with rec:
        torch.nn.functional.conv2d(x, w, padding=3, groups=8).sum().backward()
    convs = [i for i in rec.work("x").items if i.cls == "conv"]
    assert {i.phase for i in convs} == {"forward", "backward"}
    assert all(i.groups == 8 and i.kernel == 49 and i.shape == (72, 8, 49) for i in convs)


def test_elementwise_tiny_runs_every_operator_ok():
    w = get("elementwise")
    ctx = Context(device=resolve("cpu"), preset="tiny", budget_s=5, min_time_s=0.005, repeats=3,
                  options={"dtype": "fp32"})
    res = [w.run(v, ctx) for v in w.variants("tiny", ctx)]
    assert [m.variant["op"] for m in res] == list(ew.OPS)
    assert all(m.ok and m.value > 0 and m.unit == "Gelem/s" for m in res), [(m.status, m.reason) for m in res]


@pytest.mark.parametrize("op", ew.OPS)
def test_elementwise_checks_catch_a_wrong_result(op):
    fn, check = ew.make_op(op, 4096, torch.float32, "cpu")
    out = fn()
    assert check(out, ew.TOLERANCE["fp32"]) == ""
    wrong = torch.ones_like(out) if op == "bernoulli_" else out * (1 + 1e-3)
    assert check(wrong, ew.TOLERANCE["fp32"]) != ""


def test_a_memory_bound_call_moves_at_its_own_dtypes_bandwidth(tmp_path):
    # bf16 rows at a third of fp32's rate (a CPU converts each element); no fp16 rows
    bf16 = [_m("membw", {"kernel": "add", "dtype": "bf16", "elements": 1000}, 10 / 3, "GB/s", bytes=6000.0),
            _m("gemm", {"dtype": "bf16", "m": 64, "n": 64, "k": 64}, 0.001, "TFLOP/s")]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10, extra=bf16)))
    work = Work("x", [
        Item("aten.add.Tensor", "memory", "fp32", "forward", 0.0, 1e4, None, 1, elements=800),  # 10 GB/s: 1 µs
        Item("aten.add.Tensor", "memory", "bf16", "forward", 0.0, 1e4, None, 1, elements=1600),  # 10/3 GB/s: 3 µs
        Item("aten.add.Tensor", "memory", "fp16", "forward", 0.0, 1e4, None, 1, elements=1600),  # fp32's: 1 µs
        # a bf16 GEMM's bytes are a bound on data movement alone: fp32's rows (1e4 B at 10 GB/s, 1 µs, more
        # than its 100 FLOPs at 1 GFLOP/s), not bf16's 3 µs
        Item("aten.mm.default", "gemm", "bf16", "forward", 1e2, 1e4, (64, 64, 64), 1)])
    assert a.bandwidth_at(1e4, "bf16").rate.value == pytest.approx(1e10 / 3)
    assert a.bandwidth_at(1e4, "fp16").rate.value == a.bandwidth_at(1e4).rate.value == pytest.approx(1e10)
    p, missing = predict([(work, a)] * 2)
    assert not missing
    classes = {c.cls: c.seconds for c in p.source.classes}
    assert classes["memory"] == pytest.approx(1e-6 + 3e-6 + 1e-6)
    assert classes["gemm"] == pytest.approx(1e-6)
    assert p.source.step_s == pytest.approx(5e-6 + 1e-6 + 4 * 5e-6)  # and 4 calls at the infer per-operator 5 µs


def test_membw_measures_each_dtype_a_preset_or_the_user_asks_for():
    w = get("membw")
    cpu = resolve("cpu")

    def dtypes(preset, **options):
        vs = w.variants(preset, Context(device=cpu, preset=preset, options=options))
        return [(v.params["dtype"], v.params["kernel"]) for v in vs]

    assert {d for d, _ in dtypes("tiny")} == {"fp32"}
    assert {d for d, _ in dtypes("tiny", dtype=["bf16", "fp32", "int8"])} == {"bf16", "fp32", "int8"}
    # a dtype membw does not measure is a row that says so, as the worker records it, never a row measured in fp32
    c8 = Context(device=cpu, preset="tiny", options={"dtype": ["int8"]})
    rows = [run_variant(w, v, c8) for v in w.variants("tiny", c8)]
    assert rows and all(m.status == "unsupported" and "int8 is not among them" in m.reason for m in rows)
    both = dtypes("tiny-dtypes")
    assert [d for d in ("fp32", "bf16", "fp16") if any(x == d for x, _ in both)] == ["fp32", "bf16", "fp16"]
    assert ("fp16", "dot") not in both and ("bf16", "dot") in both  # a half-precision sum would overflow
    ctx = Context(device=cpu, preset="tiny-dtypes", budget_s=2, min_time_s=0.002, repeats=3, options={})
    res = [w.run(v, ctx) for v in w.variants("tiny-dtypes", ctx) if v.params["dtype"] == "fp16"]
    assert res and all(m.ok and m.value > 0 for m in res), [(m.status, m.reason) for m in res]


def test_an_optimizer_steps_updates_are_priced_at_their_own_rows(tmp_path):
    params = [torch.nn.Parameter(torch.randn(64, 64)) for _ in range(3)]
    for p in params:
        p.grad = torch.randn(64, 64)
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=False)
    opt.step()  # the state exists: the traced step is a steady one
    rec = WorkRecorder()
    with rec:
        opt.step()
    work = rec.work("adamw")
    packets = {i.packet for i in work.items}
    assert {"lerp_", "addcmul_", "addcdiv_"} <= packets
    rows = [_ew(op, 4096, 0.01) for op in ("lerp", "addcmul", "addcdiv")]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=1, extra=rows)))
    p, missing = predict([(work, a), (work, a)])
    assert not missing
    (ew_class,) = [c for c in p.source.classes if c.cls == "elementwise"]
    assert set(ew_class.rates) >= {f"elementwise {op} fp32 4096 elements" for op in ("lerp", "addcmul", "addcdiv")}
    # 4096 elements of each parameter at 0.01 Gelem/s: 409.6 µs a call, far above their bytes at the bandwidth
    assert ew_class.seconds == pytest.approx(3 * 3 * 4096 / 1e7, rel=1e-6)


def test_pooling_is_priced_at_its_own_rows_forward_and_backward(tmp_path):
    x = torch.randn(2, 8, 16, 16, requires_grad=True)
    rec = WorkRecorder()
    with rec:
        (torch.nn.functional.avg_pool2d(x, 3, 1, 1, count_include_pad=False).sum()
         + torch.nn.functional.max_pool2d(x, 3, 2, 1).sum()).backward()
    pools = {i.packet: i for i in rec.work("pool").items if "pool" in i.packet}
    assert set(pools) == set(ew.POOL_OPS)
    # elements of each output: the avg pool and both gradients the input's 4,096, the max pool's a quarter
    assert {p: i.elements for p, i in pools.items()} == {"avg_pool2d": 4096, "avg_pool2d_backward": 4096,
                                                         "max_pool2d_with_indices": 1024,
                                                         "max_pool2d_with_indices_backward": 4096}
    rows = [_ew(op, 4096, 0.001) for op in ew.POOL_OPS]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=1, extra=rows)))
    work = Work("pool", list(pools.values()))
    p, missing = predict([(work, a), (work, a)])
    assert not missing
    (cls,) = [c for c in p.source.classes if c.cls == "elementwise"]
    # 4096 + 4096 + 1024 + 4096 elements at 1 Melem/s, far above their bytes at the bandwidth
    assert cls.seconds == pytest.approx(13312 / 1e6, rel=1e-6) and cls.calls == 4
