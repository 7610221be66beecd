"""The shape trace behind the speed prediction: FLOPs as torch.utils.flop_counter counts them, bytes read and
written by hand, views free, the classes; built-in workloads traced as the iteration they measure."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from gapbench.assess.step import trace_entry, trace_like
from gapbench.assess.work import op_class

REPO = Path(__file__).resolve().parent / "fixtures" / "assess" / "repo"


@pytest.fixture()
def repo(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.chdir(REPO)
    yield REPO
    sys.modules.pop("model", None)


def _real_flops(fn) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def test_entry_trace_counts_flops_and_bytes(repo):
    trace, work = trace_entry("model:build")
    assert work.fake and work.has_backward
    gemm = [i for i in work.items if i.cls == "gemm"]
    # the forward addmm of Linear(16, 8) on 32 rows: bias 8, input 32×16, weight 16×8 read, 32×8 written, fp32
    first = next(i for i in gemm if i.op == "aten.addmm.default" and i.shape == (32, 8, 16))
    assert first.flops == 2 * 32 * 16 * 8 and first.bytes == (8 + 32 * 16 + 16 * 8 + 32 * 8) * 4
    assert first.phase == "forward" and first.dtype == "fp32"
    # every FLOP that torch.utils.flop_counter counts on a real step, and nothing more
    sys.modules.pop("model", None)
    import model

    m, (x,) = model.build()
    assert sum(i.flops * i.count for i in gemm) == _real_flops(lambda: m(x).sum().backward())
    views = [i for i in work.items if i.cls == "view"]
    assert views and all(i.bytes == 0 for i in views) and {"aten.t.default"} <= {i.op for i in views}
    assert set(trace.forward) >= {"aten.addmm.default", "aten.relu.default"}
    assert "aten.threshold_backward.default" in trace.backward
    assert work.calls == sum(trace.forward.values()) + sum(trace.backward.values())


def test_an_entry_may_return_its_own_step(repo):
    _, work = trace_entry("model:step")
    ops = {i.op for i in work.items}
    assert "aten.pow.Tensor_Scalar" in ops and "aten.mm.default" in ops
    assert any(i.phase == "forward" and "add" in i.op for i in work.items)   # SGD's update runs outside backward


def test_classes():
    aten = torch.ops.aten
    assert op_class(aten.mm.default) == "gemm" and op_class(aten.convolution.default) == "conv"
    assert op_class(aten.convolution_backward.default) == "conv"
    assert op_class(aten._scaled_dot_product_flash_attention_for_cpu.default) == "attention"
    assert op_class(aten.view.default) == "view" and op_class(aten.expand.default) == "view"
    assert op_class(aten.add.Tensor) == "memory" and op_class(aten.add_.Tensor) == "memory"
    assert op_class(aten._unsafe_view.default) == "view"


def test_a_convolution_is_its_im2col_gemm_forward_and_backward():
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gapbench.assess.work import WorkRecorder

    rec = WorkRecorder()
    with FakeTensorMode():
        conv = torch.nn.Conv2d(8, 16, 3, padding=1)
        x = torch.randn(2, 8, 10, 10, requires_grad=True)
        with rec:
            out = conv(x)
            rec.backward_call = True
            out.sum().backward()
    convs = {i.phase: i for i in rec.work("conv").items if i.cls == "conv"}
    # 2 images × 10 × 10 output pixels, 16 output channels, 8 input channels × 3 × 3
    assert convs["forward"].shape == convs["backward"].shape == (200, 16, 72)
    assert convs["forward"].flops == 2 * 200 * 16 * 72 and convs["backward"].flops == 2 * convs["forward"].flops


@pytest.mark.slow
def test_llm_train_is_traced_as_the_iteration_it_measures():
    from gapbench.workloads.models.llm_train import PRESETS, llama_train_flops_per_token

    _, work = trace_like("llm-train:tiny", {"dtype": "bf16"})
    assert work.dtype == "bf16" and work.variant["dtype"] == "bf16" and work.variant["batch_size"] == 4
    gemm = [i for i in work.items if i.cls in ("gemm", "attention")]
    assert {i.dtype for i in gemm if i.cls == "gemm"} == {"bf16"}     # autocast: the matmuls run in bf16
    attention = [i for i in work.items if i.cls == "attention"]
    assert {i.shape for i in attention} == {(16, 128, 32)}          # batch 4 × 4 heads, 128 tokens, head dim 32
    updates = {i.op for i in work.items if i.phase == "optimizer"}
    assert {"aten.lerp_.Scalar", "aten.addcdiv_.default"} <= updates    # AdamW's update is part of the iteration
    (adamw,) = work.optimizers                                          # and kept whole, with its parameters
    assert adamw.name == "adamw" and adamw.calls == work.optimizer_calls > 0
    assert not any(i.op.startswith("profiler.") for i in work.items)    # markers, not kernels
    p = PRESETS["tiny"]
    formula = p.batch_size * p.seq_len * llama_train_flops_per_token(p.config, p.seq_len)
    assert sum(i.flops * i.count for i in gemm) == pytest.approx(formula, rel=0.05)


@pytest.mark.slow
def test_diffusion_is_traced_as_the_whole_call():
    from gapbench.workloads.models.diffusion_infer import pipeline_flops

    _, work = trace_like("diffusion-infer:tiny", {"dtype": "fp32"})
    assert not work.has_backward
    flops = sum(i.flops * i.count for i in work.items)
    assert flops == pytest.approx(pipeline_flops("tiny", 1, 4), rel=0.01)   # text encoders, 4 UNet steps, VAE
    assert "aten.linear.default" not in {i.op for i in work.items}           # composites decomposed under inference_mode
