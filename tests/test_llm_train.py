"""llm-train: the tiny preset end to end, the parameter and FLOP formulas against real models and the
flop counter, the correctness check failing when it should, the 70B-slice estimate, build_step."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from gapbench import devices
from gapbench.engine.variant import run_variant
from gapbench.workloads import get
from gapbench.workloads.base import Context
from gapbench.workloads.models import llm_train as lt

CPU = devices.resolve("cpu")


def ctx(preset="tiny", **options) -> Context:
    return Context(device=CPU, preset=preset, budget_s=300, min_time_s=0.05, repeats=3, options=options)


def run_one(preset="tiny", **options):
    w = lt.LlmTrain()
    c = ctx(preset, **options)
    (v,) = w.variants(preset, c)
    return v, run_variant(w, v, c)  # as the worker runs it


def test_registered_name_resolves_to_this_workload():
    assert isinstance(get("llm-train"), lt.LlmTrain)


def test_tiny_end_to_end():
    v, m = run_one()
    assert m.status == "ok", m.reason
    assert m.unit == "tokens/s" and m.value > 0
    assert m.stats.n >= 3
    tokens = 4 * 128
    assert m.metrics["work_per_step"] == tokens
    assert m.flops == v.flops == tokens * lt.llama_train_flops_per_token(lt.TINY, 128)
    losses = m.metrics["check_losses"]
    assert len(losses) == 5 and losses[-1] < losses[0] and all(math.isfinite(x) for x in losses)
    assert math.isfinite(m.metrics["final_loss"])
    assert 0.0 <= m.metrics["subnormal_grads"] < 0.01  # a healthy step: its gradients are normal floats
    assert m.metrics["first_step_s"] > 0 and m.metrics["steady_step_s"] > 0
    assert "mfu" in m.metrics  # None where gapbench does not know the peak
    assert m.metrics["achieved_tflops"] == pytest.approx(v.flops / m.metrics["steady_step_s"] * 1e-12)
    assert v.params["dtype"] in ("bf16", "fp32") and v.params["weights"] == "fp32"
    assert m.metrics["peak_memory_source"] in ("process-peak-rss", "process-max-rss-growth")
    if m.metrics["peak_memory_source"] == "process-peak-rss":
        assert m.peak_memory_bytes > 10 * 2**20


def test_fp32_and_eager_attention_options():
    v, m = run_one(dtype="fp32", attention="eager", batch_size=2)
    assert m.status == "ok", m.reason
    assert v.params["dtype"] == "fp32" and v.params["attention"] == "eager" and v.params["batch_size"] == 2
    assert m.metrics["work_per_step"] == 2 * 128


def test_an_attention_backend_without_a_kernel_is_unsupported():
    _, m = run_one(attention="cudnn")  # no cuDNN attention on a CPU
    assert m.status == "unsupported" and "cudnn" in m.reason


def test_fp8_is_unsupported_not_a_crash():
    _, m = run_one(dtype="fp8")
    assert m.status == "unsupported" and "fp8" in m.reason


def test_loss_that_does_not_fall_is_wrong_result(monkeypatch):
    monkeypatch.setitem(lt.PRESETS, "tiny-frozen", dataclasses.replace(lt.PRESETS["tiny"], lr=0.0))
    _, m = run_one("tiny-frozen")
    assert m.status == "wrong_result"
    assert "did not fall" in m.reason
    assert m.value is None


def test_low_memory_slice_path_and_full_model_estimate(monkeypatch):
    """The large presets' recipe (bf16 weights and AdamW states, checkpointing, slice estimate) at tiny size."""
    full = dict(lt.TINY, num_hidden_layers=8)
    preset = dataclasses.replace(lt.PRESETS["tiny"], low_memory_weights=True, checkpointing=True, full_config=full)
    monkeypatch.setitem(lt.PRESETS, "tiny-slice", preset)
    v, m = run_one("tiny-slice", dtype="bf16")
    assert m.status == "ok", m.reason
    assert v.params["weights"] == "bf16" and v.params["checkpointing"] is True
    est = m.metrics["full_model_tokens_per_s_per_device_estimate"]
    per_token_full = lt.llama_train_flops_per_token(full, 128)
    assert m.metrics["full_model_flops_per_token"] == per_token_full
    assert est == pytest.approx(m.metrics["achieved_tflops"] * 1e12 / per_token_full)
    assert est < m.value  # 8 layers cost more per token than the 2 that ran


def test_tiny_parameter_count_matches_the_built_model():
    model = lt.build_llama(lt.TINY, "eager", torch.device("cpu"))
    total, matmul = lt.llama_params(lt.TINY)
    assert total == sum(p.numel() for p in model.parameters())
    assert matmul == sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


@pytest.mark.parametrize("cfg, published", [(lt.LLAMA2_7B, 6.74e9), (lt.LLAMA2_13B, 13.0e9),
                                             (lt.LLAMA2_70B, 69.0e9)])
def test_llama2_parameter_counts(cfg, published):
    total, _ = lt.llama_params(cfg)
    assert total == pytest.approx(published, rel=0.005)


def test_llama2_7b_formula_equals_a_meta_built_model():
    model = lt.build_llama(lt.LLAMA2_7B, "sdpa", torch.device("meta"))
    assert lt.llama_params(lt.LLAMA2_7B)[0] == sum(p.numel() for p in model.parameters()) == 6_738_415_616


def test_slice_preset_is_the_exact_70b_layer_shape():
    cfg = lt.PRESETS["llama2-70b-slice"].config
    assert (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"],
            cfg["vocab_size"]) == (8192, 28672, 64, 8, 32000)
    assert cfg["num_hidden_layers"] == lt.SLICE_LAYERS < 80


def test_training_flop_formula_matches_the_flop_counter():
    """6·N + 12·L·h·s per token equals what torch's flop counter sees in forward+backward (eager attention,
    so the score and value matmuls are visible to it)."""
    b, s = 2, 64
    model = lt.build_llama(lt.TINY, "eager", torch.device("cpu"))
    ids = lt.synthetic_tokens(b, s, lt.TINY["vocab_size"], "cpu")
    counter = FlopCounterMode(display=False)
    with counter:
        model(input_ids=ids, labels=ids).loss.backward()
    assert counter.get_total_flops() == b * s * lt.llama_train_flops_per_token(lt.TINY, s)


def test_synthetic_tokens_repeat_with_the_period():
    ids = lt.synthetic_tokens(3, 50, 100, "cpu", torch.Generator().manual_seed(0))
    assert ids.shape == (3, 50)
    assert torch.equal(ids[:, lt.PERIOD:2 * lt.PERIOD], ids[:, :lt.PERIOD])


def test_build_step_runs_under_fake_tensors_and_for_real():
    from torch._subclasses.fake_tensor import FakeTensorMode

    w = lt.LlmTrain()
    with FakeTensorMode():
        step = w.build_step("tiny", torch.device("cpu"))
        step()
    step = w.build_step("tiny", torch.device("cpu"))
    step()


def test_unknown_preset_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown llm-train preset"):
        lt.LlmTrain().variants("llama2-999b", ctx())


_AUTO_SCRIPT = """
import json, resource, sys
from transformers import LlamaForCausalLM  # noqa: F401  (imported before the limit, as in a worker that already
                                           # built a model: its loss modules load scipy where it is installed)
from gapbench import devices
from gapbench.workloads.base import Context
from gapbench.workloads.models.llm_train import LlmTrain
vm = [int(line.split()[1]) * 1024 for line in open('/proc/self/status') if line.startswith('VmSize:')][0]
resource.setrlimit(resource.RLIMIT_AS, (vm + 400 * 2**20, resource.RLIM_INFINITY))
c = Context(device=devices.resolve("cpu"), preset="tiny", budget_s=300, min_time_s=0.05, repeats=3,
            options={"batch_size": "auto"})
w = LlmTrain()
(v,) = w.variants("tiny", c)
m = w.run(v, c)
print(json.dumps({"status": m.status, "reason": m.reason, "batch": m.metrics.get("batch_size"),
                  "tried": m.metrics.get("auto_batch_tried"), "flops": m.flops, "work": m.metrics.get("work_per_step")}))
"""


@pytest.mark.slow
def test_auto_batch_under_a_memory_limit():
    """`--batch-size auto` in a process with 400 MiB of address space left: a batch that fits, and the
    FLOPs and tokens of that batch."""
    import json
    import subprocess
    import sys

    # one torch thread: two on the two cores the other test worker shares stall each other's OpenMP barriers
    out = subprocess.run([sys.executable, "-c", _AUTO_SCRIPT], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["status"] == "ok", res["reason"]
    b = res["batch"]
    assert isinstance(b, int) and 1 <= b <= 256
    assert [b, True] in res["tried"]
    assert res["work"] == b * 128
    assert res["flops"] == b * 128 * lt.llama_train_flops_per_token(lt.TINY, 128)


@pytest.mark.slow
def test_fp16_trains_with_fp32_master_weights_and_a_grad_scaler():
    """The recipe for accelerators without bf16 (fp16 autocast + GradScaler), run on the CPU."""
    v, m = run_one(dtype="fp16", batch_size=1)
    assert m.status == "ok", m.reason
    assert (v.params["dtype"], v.params["weights"]) == ("fp16", "fp32")
    assert m.metrics["check_losses"][-1] < m.metrics["check_losses"][0]
