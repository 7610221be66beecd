"""Convolution rows at a model step's own convolutions: `conv:listed --conv-shapes`, refused without shapes or
with a bad one before anything runs; the trace names each convolution as conv:listed measures it (forward and
backward as one), assess names those a side has no row near and prices them at the listed rows once they are
there."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tests.test_assess_speed import _m, rates_file
from tests.test_gemm_listed import _gapbench

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import assess_unseen  # noqa: E402

from gapbench import results
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import predict, unmeasured_conv
from gapbench.assess.work import Item, Work, WorkRecorder


def test_listed_measures_exactly_the_convolutions_given(tmp_path):
    out = tmp_path / "listed.json"
    shapes = "1x4x8x6x1,1x4x8x6x1x1,1x8x8x5x7x8,1x4x8x3x2x1x2,1x8x8x4x3x8x1x0"
    p = _gapbench("run", "--device", "cpu", "-w", "conv:listed", "--conv-shapes", shapes,
                  "--dtype", "fp32", "--no-history", "--variant-budget", "1", "--repeats", "3", "-o", str(out),
                  cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())["measurements"]
    got = [(r["variant"]["c_in"], r["variant"]["c_out"], r["variant"]["hw"], r["variant"].get("kernel", 3),
            r["variant"].get("groups", 1), r["variant"]["pass"]) for r in rows]
    assert got == [(4, 8, 6, 1, 1, "forward"), (4, 8, 6, 1, 1, "backward"),
                   (8, 8, 5, 7, 8, "forward"), (8, 8, 5, 7, 8, "backward"),
                   (4, 8, 3, 2, 1, "forward"), (4, 8, 3, 2, 1, "backward"),
                   (8, 8, 4, 3, 8, "forward"), (8, 8, 4, 3, 8, "backward")]
    assert [r["variant"].get("stride", 1) for r in rows] == [1, 1, 1, 1, 2, 2, 1, 1]
    # a pre-padded depthwise 3×3 (padding 0, as a model padding its input itself calls it) is a row of its own
    assert [r["variant"].get("padding") for r in rows] == [None] * 6 + [0, 0]
    assert all(r["status"] == "ok" and r["variant"]["dtype"] == "fp32" for r in rows)
    # the FLOPs of a depthwise 7×7 row: 2·N·H·W·C_out·(C_in/groups)·K², twice that backward
    assert [r["flops"] for r in rows[2:4]] == [2 * 1 * 5 * 5 * 8 * 1 * 49, 2 * 2 * 1 * 5 * 5 * 8 * 1 * 49]


def test_listed_with_flush_cache_times_each_convolution_after_a_cache_overwrite(tmp_path):
    out = tmp_path / "cold.json"
    p = _gapbench("run", "--device", "cpu", "-w", "conv:listed", "--conv-shapes", "1x4x8x6x1", "--dtype", "fp32",
                  "--flush-cache", "--no-history", "--variant-budget", "1", "--repeats", "3", "-o", str(out),
                  cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())["measurements"]
    assert [r["variant"]["pass"] for r in rows] == ["forward", "backward"]
    assert all(r["status"] == "ok" and r["metrics"]["cache_flush_bytes"] >= 1 << 20 for r in rows)


def test_a_listed_rows_input_gives_an_output_of_the_rows_side():
    from gapbench.workloads.micro.conv import in_side
    from gapbench.workloads.micro.options import default_padding

    for kernel in range(1, 8):
        for stride in range(1, 5):
            for pad in {default_padding(kernel), 0, kernel // 2}:
                for hw in (1, 5, 8):
                    side = in_side(hw, kernel, stride, pad)
                    if side < 1:    # no input gives that output: --conv-shapes refuses it
                        continue
                    out = torch.nn.functional.conv2d(torch.zeros(1, 1, side, side), torch.zeros(1, 1, kernel, kernel),
                                                     stride=stride, padding=pad)
                    assert out.shape[-2:] == (hw, hw), (kernel, stride, pad, hw)


def test_listed_without_shapes_or_with_a_bad_one_is_one_line_and_exit_2(tmp_path):
    for extra, said in (((), "none were given"),
                        (("--conv-shapes", "2x3x4"), "'2x3x4' is not a convolution shape"),
                        (("--conv-shapes", "0x4x4x4"), "0x4x4x4: a convolution shape"),
                        (("--conv-shapes", "1x96x90x8x3x96"), "the groups (96) must divide"),
                        (("--conv-shapes", "1x8x8x1x2x1x1x1"), "no input gives an output of side 1")):
        out = tmp_path / "never.json"
        p = _gapbench("run", "--device", "cpu", "-w", "conv:listed", *extra, "--no-history", "-o", str(out),
                      cwd=tmp_path)
        assert p.returncode == 2 and said in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and not out.exists()


def _traced_step():
    """A 3×3 (stride 1), a stride-2 1×1, a depthwise 7×7 convolution and a pre-padded depthwise 3×3 (padding 0),
    forward and backward, traced."""
    rec = WorkRecorder()
    x = torch.randn(2, 8, 10, 10, requires_grad=True)
    w3 = torch.randn(16, 8, 3, 3, requires_grad=True)
    w1 = torch.randn(32, 16, 1, 1, requires_grad=True)
    dw = torch.randn(32, 1, 7, 7, requires_grad=True)
    with rec:
        y = torch.nn.functional.conv2d(x, w3, padding=1)
        y = torch.nn.functional.conv2d(y, w1, stride=2)
        y = torch.nn.functional.conv2d(y, dw, padding=3, groups=32)
        torch.nn.functional.conv2d(torch.nn.functional.pad(y, (1, 1, 1, 1)), dw[:, :, :3, :3], groups=32).sum().backward()
    return rec.work("x")


def test_the_trace_names_each_convolution_as_conv_listed_measures_it():
    work = _traced_step()
    specs = {(i.phase, i.conv_spec) for i in work.items if i.cls == "conv"}
    assert specs == {(p, s) for p in ("forward", "backward") for s in ("2x8x16x10x3x1", "2x16x32x5x1x1x2",
                                                                        "2x32x32x5x7x32", "2x32x32x5x3x32x1x0")}
    assert all(i.conv_spec is None for i in work.items if i.cls != "conv")
    # the accuracy benchmark measures those that carry 99% of the step's convolution FLOPs, the largest first
    flops = {}
    for i in work.items:
        if i.conv_spec:
            flops[i.conv_spec] = flops.get(i.conv_spec, 0) + i.flops * i.count
    assert assess_unseen.step_convs([work]) == sorted(flops, key=lambda s: -flops[s])


def test_the_benchmark_also_measures_the_convolutions_that_carry_the_steps_bytes():
    # a depthwise 3x3 moves as many bytes as the pointwise convolution beside it for a hundredth of its FLOPs
    def conv(spec_shape, kernel, groups, flops, nbytes):
        return Item("aten.convolution.default", "conv", "fp32", "forward", flops, nbytes, shape=spec_shape,
                    kernel=kernel, groups=groups, images=8, stride=1, padding=kernel // 9)
    pointwise = conv((8 * 32 * 32, 192, 48), 1, 0, 1.5e8, 8e6)
    depthwise = conv((8 * 16 * 16, 56, 9), 9, 56, 1.0e6, 1.2e6)
    work = Work("step", items=[pointwise, depthwise])
    assert assess_unseen._carrying([work], lambda it: it.conv_spec) == [pointwise.conv_spec]  # by FLOPs alone
    assert assess_unseen.step_convs([work]) == [pointwise.conv_spec, depthwise.conv_spec]


def test_a_convolution_no_square_row_has_is_named_for_no_listed_row():
    rec = WorkRecorder()
    x2, w3 = torch.randn(2, 8, 9, 9), torch.randn(8, 8, 3, 3)
    with rec:
        # a causal depthwise 1-D convolution (Mamba's), a 1×7, a dilated and a transposed 2-D one
        torch.nn.functional.conv1d(torch.randn(2, 8, 16), torch.randn(8, 1, 4), padding=3, groups=8)
        torch.nn.functional.conv2d(x2, torch.randn(8, 8, 1, 7), padding=(0, 3))
        torch.nn.functional.conv2d(x2, w3, padding=2, dilation=2)
        torch.nn.functional.conv_transpose2d(x2, w3)
    convs = [i for i in rec.work("x").items if i.cls == "conv"]
    assert len(convs) == 4 and all(i.conv_spec is None for i in convs)


def test_a_pointwise_1d_convolution_is_named_as_a_1x1_over_the_square_nearest_its_positions():
    rec = WorkRecorder()
    x = torch.randn(2, 16, 128, requires_grad=True)
    with rec:
        # SqueezeBERT's position-wise layers: 1-D convolutions of kernel 1, grouped and not
        y = torch.nn.functional.conv1d(x, torch.randn(32, 4, 1), groups=4)
        torch.nn.functional.conv1d(y, torch.randn(16, 32, 1)).sum().backward()
    specs = {(i.phase, i.conv_spec) for i in rec.work("x").items if i.cls == "conv"}
    # 128 positions: an 11×11 square (121), the nearest
    assert specs == {(p, s) for p in ("forward", "backward") for s in ("2x16x32x11x1x4", "2x32x16x11x1x1")}


def _conv_row(spec: str, pass_: str, tflops: float):
    vals = list(map(int, spec.split("x")))
    b, ci, co, hw, k, g, st, pad = vals + [1, -1][len(vals) - 6:]
    v = {"dtype": "fp32", "batch": b, "c_in": ci, "c_out": co, "hw": hw, "pass": pass_}
    v |= ({"kernel": k} if k != 3 else {}) | ({"groups": g} if g != 1 else {}) | ({"stride": st} if st != 1 else {})
    v |= {"padding": pad} if pad >= 0 else {}
    return _m("conv", v, tflops, "TFLOP/s")


def test_assess_names_the_convolutions_a_side_has_no_row_near_and_prices_them_at_listed_rows(tmp_path):
    work = _traced_step()
    # rows of each kind, far from the step's: a 3×3 and a 1×1 at 64 channels on 32², a depthwise 3×3 of 576
    far_rows = [_conv_row(s, p, 0.01) for s in ("4x64x64x32x3x1", "4x64x64x32x1x1", "4x576x576x8x3x576",
                                               "4x96x96x32x7x96") for p in ("forward", "backward")]
    far = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=1,
                                                 extra=far_rows)))
    named, share = unmeasured_conv(work, far)
    assert {s for _, s in named} == {"2x8x16x10x3x1", "2x16x32x5x1x1x2", "2x32x32x5x7x32", "2x32x32x5x3x32x1x0"}
    assert share == 1.0
    # listed rows at the step's own convolutions: none is named any more, and each is priced at its own row
    listed = [_conv_row(s, p, 0.0005) for _, s in named for p in ("forward", "backward")]
    near = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.001, per_op_us=1,
                                                  extra=far_rows + listed)))
    assert unmeasured_conv(work, near) == ((), 0.0)
    for it in (i for i in work.items if i.cls == "conv"):
        point = near.conv_rate(it.dtype, "backward" in it.op, it.shape, it.kernel, it.groups, it.stride, it.padding)
        assert (point.m, point.n, point.k) == it.shape and point.rate.value == 0.0005e12
    # a stride-2 convolution at the stride-2 row, not at a stride-1 row of the same im2col shape (faster here)
    strided = next(i for i in work.items if i.cls == "conv" and i.stride == 2 and i.phase == "forward")
    both = platform_rates(results.load(rates_file(tmp_path / "c.json", gemm_tflops=0.001, per_op_us=1, extra=listed
                                                  + [_conv_row("2x16x32x5x1x1", "forward", 0.002)])))
    assert both.conv_rate("fp32", False, strided.shape, strided.kernel, strided.groups, 2).stride == 2
    assert both.conv_rate("fp32", False, strided.shape, strided.kernel, strided.groups, 1).rate.value == 0.002e12
    # the conv class costs the listed rows' time: its FLOPs over 0.5 GFLOP/s
    pred, missing = predict([(work, near), (work, near)])
    assert not missing
    conv_s = next(c for c in pred.source.classes if c.cls == "conv").seconds
    flops = sum(i.flops * i.count for i in work.items if i.cls == "conv")
    assert abs(conv_s - flops / 0.5e9) / conv_s < 1e-6
