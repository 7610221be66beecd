"""llm-infer in gapbench assess: its generation traced as the point it measures (prefill and every decode step into
the static KV cache), the same tokens as the measured loop when run for real, and its `e2e_ms` row found as the
measured time of the traced iteration."""

from __future__ import annotations

import torch

from gapbench import devices, results
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import predict
from gapbench.assess.step import trace_like
from gapbench.results import ResultSet
from gapbench.workloads.base import Context
from gapbench.workloads.inference import generate as gen
from gapbench.workloads.inference import llm_infer as li
from gapbench.workloads.inference import local as infer_local
from test_assess_speed import _m, rates_file

CPU = devices.resolve("cpu")
LAYERS = li.TINY["num_hidden_layers"]


def _trace(n_out: int, batch: int = 2):
    return trace_like("llm-infer:tiny", {"dtype": "fp32", "input_len": 16, "output_len": n_out,
                                         "batch_size": batch})[1]


def test_the_trace_counts_every_decode_step():
    w2, w4, w8 = (_trace(n) for n in (2, 4, 8))
    assert w8.variant == {"model": "tiny", "engine": "transformers", "batching": "static", "dtype": "fp32",
                          "attention": "sdpa", "compile": False, "input_len": 16, "output_len": 8, "batch_size": 2,
                          "metric": "e2e_ms"}
    assert not w8.has_backward and w8.notes == []
    # one prefill and n_out − 1 decode steps: each step adds the same operators
    step = (w4.calls - w2.calls) / 2
    assert step > 50 and w8.calls - w4.calls == 4 * step
    attention = [i for i in w8.items if i.cls == "attention"]
    assert sum(i.count for i in attention) == LAYERS * 8  # every forward, every layer
    # the prefill's queries are the prompt; a decode step's are one token per sequence (transformers folds the
    # query heads that share a KV head into the sequence: 2 queries per KV head)
    prefill = (2 * li.TINY["num_attention_heads"], 16, 32)
    decode = (2 * li.TINY["num_key_value_heads"], 2, 32)
    assert {i.shape: i.count for i in attention} == {prefill: LAYERS, decode: LAYERS * 7}
    # the KV cache grows in place: one index_copy_ per layer, key and value, per forward
    copies = sum(i.count for i in w8.items if i.op == "aten.index_copy_.default")
    assert copies == 2 * LAYERS * 8


def test_without_a_batch_size_the_trace_is_the_documented_point():
    v = li.LlmInfer().traced_variant("tiny", CPU, {"dtype": "bf16"})
    assert (v["batch_size"], v["input_len"], v["output_len"], v["metric"]) == (li.TRACE_BATCH, 128, 32, "e2e_ms")


def test_the_traced_iteration_is_the_measured_generation(tmp_path):
    """Run for real, build_iteration gives the tokens of the measured loop; the measured point's e2e row is found
    by the prediction as that iteration's seconds."""
    opts = {"dtype": "fp32", "input_len": 16, "output_len": 5, "batch_size": [2]}
    w = li.LlmInfer()
    columns = w.build_iteration("tiny", CPU, opts)()
    p = li.PRESETS["tiny"]
    model = infer_local.build_model(p, "fp32", "sdpa", CPU)
    g = gen.StaticGenerator(model, 2, 16, 5, CPU.torch_device, torch.float32)
    measured = g(infer_local.prompts_for(2, 16, p, CPU), lambda: None)
    assert torch.equal(torch.stack(columns, dim=1), measured.tokens)

    ctx = Context(device=CPU, preset="tiny", budget_s=30, min_time_s=0.05, repeats=3, options=opts)
    rows = [w.run(v, ctx) for v in w.variants("tiny", ctx)]
    e2e = next(m for m in rows if m.variant["metric"] == "e2e_ms")
    assert e2e.ok
    for m in rows:
        m.metrics["category"] = "model"  # as the engine records it
    work = trace_like("llm-infer:tiny", opts)[1]
    assert work.variant == e2e.variant
    sides = []
    for name, per_op in (("a", 10), ("b", 5)):
        attention = _m("attention", {"dtype": "fp32", "batch_heads": 8, "seq": 16, "head_dim": 32,
                                     "pass": "forward"}, 0.001, "TFLOP/s")
        path = rates_file(tmp_path / f"{name}.json", gemm_tflops=0.001, per_op_us=per_op, extra=[attention])
        rs = results.load(path)
        sides.append((work, platform_rates(ResultSet(host={}, device=rs.device,
                                                      measurements=rs.measurements + rows))))
    pred, missing = predict(sides, draws=200)
    assert pred is not None, missing
    assert pred.measured is not None, pred.measured_note
    assert pred.measured.measured_s == (e2e.value / 1e3, e2e.value / 1e3)
