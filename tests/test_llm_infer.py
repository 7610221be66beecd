"""llm-infer: the static-KV-cache generate loop on the tiny model against transformers' own generate, a point
end to end with its rows, fp8 weights, the accelerator branch on the test accelerator, a missing vLLM, and the
run → compare path of the CLI."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from gapbench import devices
from gapbench.engine.variant import run_variant
from gapbench.workloads import get
from gapbench.workloads.base import Context
from gapbench.workloads.inference import generate as gen
from gapbench.workloads.inference import llm_infer as li
from gapbench.workloads.inference import metrics as im

CPU = devices.resolve("cpu")
ROOT = Path(__file__).resolve().parents[1]


def ctx(preset="tiny", budget=60, **options) -> Context:
    return Context(device=CPU, preset=preset, budget_s=budget, min_time_s=0.05, repeats=3, options=options)


def point(w, c, batch=2):
    """Every row of the first point with this batch size, measured as the worker does (gapbench.engine.variant)."""
    return [run_variant(w, v, c) for v in w.variants(c.preset, c) if v.params["batch_size"] == batch]


def test_registered_name_resolves_to_this_workload():
    assert isinstance(get("llm-infer"), li.LlmInfer)


def test_variants_sweep_batches_and_give_a_row_per_metric():
    w = li.LlmInfer()
    vs = w.variants("tiny", ctx())
    batches = sorted({v.params["batch_size"] for v in vs})
    assert batches == [1, 2, 4, 8, 16, 32, 64, 128, 256]  # the tiny preset's sweep, memory permitting
    metrics = [v.params["metric"] for v in vs if v.params["batch_size"] == 1]
    assert metrics == [n for n in im.METRICS if n not in im.SLO_METRICS]
    p = vs[0].params
    assert (p["engine"], p["batching"], p["input_len"], p["output_len"]) == ("transformers", "static", 128, 32)
    slo = w.variants("tiny", ctx(batch_size=[1], slo_ttft_ms=100))
    assert {v.params["metric"] for v in slo} >= set(im.SLO_METRICS)
    with pytest.raises(ValueError, match="exceed the model's context"):
        w.variants("tiny", ctx(input_len=4000, output_len=200))
    with pytest.raises(ValueError, match="engine"):
        w.variants("tiny", ctx(engine="tgi"))


def test_the_static_cache_loop_generates_what_transformers_generate_does():
    torch.manual_seed(0)
    model = gen.build_random_llama(li.TINY, "sdpa", torch.device("cpu"), torch.float32)
    prompts = gen.random_prompts(2, 16, li.TINY["vocab_size"], seed=3)
    g = gen.StaticGenerator(model, 2, 16, 8, torch.device("cpu"), torch.float32)
    run = g(prompts, lambda: None)
    assert run.tokens.shape == (2, 8) and run.finite and len(run.token_times) == 8
    with torch.inference_mode():
        ref = model.generate(prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=8, min_new_tokens=8,
                             do_sample=False, pad_token_id=0)
    assert torch.equal(run.tokens, ref[:, 16:])  # transformers' generate with its dynamic cache agrees
    assert gen.greedy_mismatches(model, prompts, run.tokens, "fp32") == []
    again = g(prompts, lambda: None)  # the cache is reset between runs
    assert torch.equal(again.tokens, run.tokens)
    wrong = run.tokens.clone()
    wrong[1, 3] = (wrong[1, 3] + 1) % li.TINY["vocab_size"]
    bad = gen.greedy_mismatches(model, prompts, wrong, "fp32")
    assert len(bad) == 1 and "sequence 1: token 3" in bad[0] and "of the logits' spread below the best" in bad[0]


def test_a_long_generation_may_flip_a_few_near_ties_but_no_clear_choice():
    d = torch.zeros(128)
    d[[5, 90]] = torch.tensor([0.3, 0.2])  # two near-ties flipped by rounding: 2 of 128 is within 2%
    assert gen.argmax_misses(d, 0.1) == ([], 0.0)
    d[100] = 0.15  # a third: more than 2% of the positions
    assert gen.argmax_misses(d, 0.1) == ([5, 90, 100], pytest.approx(0.3))
    one = torch.zeros(128)
    one[7] = 1.2  # one clear choice missed: wrong however few
    assert gen.argmax_misses(one, 0.1) == ([7], pytest.approx(1.2))
    short = torch.zeros(8)
    short[2] = 0.2  # a short generation allows none
    assert gen.argmax_misses(short, 0.1)[0] == [2]


def test_a_point_end_to_end():
    w = li.LlmInfer()
    rows = point(w, ctx(input_len=16, output_len=6, batch_size=[2]))
    by = {m.variant["metric"]: m for m in rows}
    assert all(m.status == "ok" for m in rows), [(m.variant["metric"], m.reason) for m in rows]
    assert set(by) == {n for n in im.METRICS if n not in im.SLO_METRICS}
    for name, m in by.items():
        assert m.unit == im.METRICS[name].unit and m.higher_is_better == im.METRICS[name].higher_is_better
        assert m.stats.n >= 3 and m.value > 0
    # per round, decode tokens/s = batch × (O − 1) / (E2E − TTFT) = batch × tokens/s per user: exactly
    assert by["decode_tokens_per_s"].value == pytest.approx(2 * by["tokens_per_s_per_user"].value)
    assert by["ttft_ms"].value < by["e2e_ms"].value
    assert by["itl_p50_ms"].value <= by["itl_p90_ms"].value <= by["itl_p99_ms"].value
    meta = by["output_tokens_per_s"].metrics
    assert meta["batch_size"] == 2 and meta["engine_info"]["name"] == "transformers"
    assert meta["runs"] >= 3 and meta["first_run_s"] > 0
    assert set(meta["point"]) == set(by)


def test_fp8_weights_are_real_and_checked():
    w = li.LlmInfer()
    rows = point(w, ctx(input_len=16, output_len=4, batch_size=[1], dtype="fp8"), batch=1)
    m = rows[0]
    assert m.status == "ok", m.reason
    assert m.variant["dtype"] == "fp8" and m.metrics["weights"].startswith("fp8 e4m3 W8A8")
    assert m.metrics["fp8_matmul_rel_error"] <= gen.FP8_CHECK_TOLERANCE
    bf16 = gen.build_random_llama(li.TINY, "sdpa", torch.device("cpu"), torch.bfloat16)
    assert m.metrics["weight_bytes"] < gen.weight_bytes(bf16)
    assert any(isinstance(x, gen.Fp8Linear) for x in w.models.model.modules())


def test_a_dtype_without_a_path_is_unsupported_for_every_row():
    w = li.LlmInfer()
    rows = point(w, ctx(input_len=16, output_len=4, batch_size=[1], dtype="int8"), batch=1)
    assert {m.status for m in rows} == {"unsupported"} and "int8" in rows[0].reason
    assert {m.unit for m in rows} == {"tokens/s", "tokens/s/user", "ms"}


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_missing_vllm_is_unsupported_with_the_install_hint():
    w = li.LlmInfer()
    rows = point(w, ctx(engine="vllm", input_len=16, output_len=4, batch_size=[1]), batch=1)
    assert {m.status for m in rows} == {"unsupported"}
    assert "vllm is not installed" in rows[0].reason and "pip install vllm" in rows[0].reason
    assert rows[0].variant["engine"] == "vllm"


def _run(args, env=None, timeout=240):
    """`gapbench run` in a subprocess, one torch thread (two threads on two busy cores wait on each other)."""
    e = dict(os.environ, PYTHONPATH=str(ROOT / "src"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "gapbench", "run", "--no-history", "-q", "--threads", "1", *args],
                          capture_output=True, text=True, timeout=timeout, env=e, cwd=ROOT)


@pytest.mark.slow
def test_the_accelerator_branch_on_the_test_accelerator(tmp_path):
    """Memory from the device: the sweep stops where the test accelerator's capacity ends, fp8 takes the
    accelerator's matmul path, the largest batch is found by out-of-memory back-off, peak memory is the
    device allocator's. (fp8 on a short prompt: torch's CPU scaled matmul, which the test accelerator runs,
    is a reference loop of a few tens of MFLOP/s on CPUs without fp8 units.)"""
    capacity = {"GAPBENCH_TEST_ACCELERATOR_MEMORY": str(24 * 2**20)}
    fp8 = tmp_path / "fp8.json"
    p = _run(["--device", "test", "-w", "llm-infer", "--lengths", "8:2", "--batch-size", "1", "--dtype", "fp8",
              "--variant-budget", "10", "-o", str(fp8)], env=capacity)
    assert p.returncode == 0, p.stderr[-2000:]
    m = next(m for m in json.loads(fp8.read_text())["measurements"]
             if m["variant"]["metric"] == "output_tokens_per_s")
    assert m["status"] == "ok", m["reason"]
    assert 0 < m["metrics"]["fp8_matmul_rel_error"] < 1.6e-2  # the product came from torch._scaled_mm, checked
    out = tmp_path / "test.json"
    p = _run(["--device", "test", "-w", "llm-infer", "--lengths", "512:2", "--dtype", "bf16", "--variant-budget",
              "10", "-o", str(out)], env=capacity)
    assert p.returncode == 0, p.stderr[-2000:]
    rs = json.loads(out.read_text())
    ms = [m for m in rs["measurements"] if m["variant"]["metric"] == "output_tokens_per_s"]
    batches = [m["variant"]["batch_size"] for m in ms]
    assert len(batches) > 1 and max(batches) < 32, batches  # cut by the 24 MiB capacity, below the preset's top
    # the estimate plans the sweep; where it was too low the device's own out-of-memory error says so
    assert ms[0]["status"] == "ok" and {m["status"] for m in ms} <= {"ok", "oom"}, [m["reason"] for m in ms]
    assert all("test accelerator: out of memory" in m["reason"] for m in ms if m["status"] == "oom")
    assert all(0 < m["peak_memory_bytes"] <= 24 * 2**20 for m in ms if m["status"] == "ok")
    auto = tmp_path / "auto.json"
    p = _run(["--device", "test", "-w", "llm-infer", "--lengths", "512:2", "--batch-size", "auto",
              "--variant-budget", "10", "-o", str(auto)], env=capacity)
    assert p.returncode == 0, p.stderr[-2000:]
    m = next(m for m in json.loads(auto.read_text())["measurements"]
             if m["variant"]["metric"] == "output_tokens_per_s")
    assert m["status"] == "ok", m["reason"]
    assert m["variant"]["batch_size"] == "auto" and m["metrics"]["batch_size"] >= 1
    tried = m["metrics"]["auto_batch_tried"]
    assert [m["metrics"]["batch_size"], True] in tried


@pytest.mark.slow
def test_run_then_compare_at_equal_interactivity(tmp_path):
    out = tmp_path / "cpu.json"
    p = _run(["--device", "cpu", "-w", "llm-infer", "--input-len", "16", "--output-len", "4", "--batch-size", "1,2",
              "--variant-budget", "6", "-o", str(out)])
    assert p.returncode == 0, p.stderr[-2000:]
    rs = json.loads(out.read_text())
    assert len(rs["measurements"]) == 2 * 11 and all(m["status"] == "ok" for m in rs["measurements"])
    xs = [m["value"] for m in rs["measurements"] if m["variant"]["metric"] == "tokens_per_s_per_user"]
    level = sorted(xs)[0]
    c = subprocess.run([sys.executable, "-m", "gapbench", "compare", str(out), str(out), "--label", "a", "--label",
                        "b", "--interactivity", str(level), "--json"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), cwd=ROOT)
    assert c.returncode == 0, c.stderr
    gaps = json.loads(c.stdout)["frontiers"]["gaps"]
    at = [g for g in gaps if g["at_tokens_per_s_per_user"] is not None]
    assert at and at[0]["gaps"]["b"]["gap_pct"] == pytest.approx(0.0, abs=1e-9)


_OOM_SCRIPT = """
import json, resource, time
import torch
from transformers import LlamaForCausalLM  # noqa: F401  (before the limit, as in a worker that built a model)
from gapbench import devices
from gapbench.workloads.inference import llm_infer as li
from gapbench.workloads.base import Context

vm = [int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:")][0]
resource.setrlimit(resource.RLIMIT_AS, (vm + 256 * 2**20, resource.RLIM_INFINITY))
w = li.LlmInfer()
c = Context(device=devices.resolve("cpu"), preset="tiny", budget_s=60, repeats=3,
            options={"lengths": "1024:2", "batch_size": [512], "dtype": "fp32"})
out = []
for v in w.variants("tiny", c):
    t0 = time.perf_counter()
    m = w.run(v, c)
    out.append([m.status, m.reason, time.perf_counter() - t0])
print(json.dumps({"rows": out, "model_dropped": w.models.model is None}))
"""


@pytest.mark.slow
def test_running_out_of_memory_fails_the_point_once_as_oom():
    """A real allocation failure (the address-space limit a CPU worker runs under) while the point runs: every
    row is `oom` with the reason, the point is not measured again for each row, the model is let go."""
    p = subprocess.run([sys.executable, "-c", _OOM_SCRIPT], capture_output=True, text=True, timeout=180,
                       env=dict(os.environ, PYTHONPATH=str(ROOT / "src")), cwd=ROOT)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(p.stdout.strip().splitlines()[-1])
    rows = res["rows"]
    assert len(rows) == 11 and {s for s, _, _ in rows} == {"oom"}, rows[0]
    assert all(t < 0.05 for _, _, t in rows[1:])  # the failure is the point's, found once
    assert res["model_dropped"]
