"""bert-finetune: the tiny preset end to end, parameter and FLOP formulas against real models and the flop
counter, the learnable labels."""

from __future__ import annotations

import dataclasses
import math

import torch
from torch.utils.flop_counter import FlopCounterMode

from gapbench import devices
from gapbench.workloads import get
from gapbench.workloads.base import Context
from gapbench.workloads.models import bert_finetune as bf

CPU = devices.resolve("cpu")


def run_one(preset="tiny", **options):
    w = bf.BertFinetune()
    c = Context(device=CPU, preset=preset, budget_s=300, min_time_s=0.05, repeats=3, options=options)
    (v,) = w.variants(preset, c)
    return v, w.run(v, c)


def test_registered_name_resolves_to_this_workload():
    assert isinstance(get("bert-finetune"), bf.BertFinetune)


def test_tiny_end_to_end():
    v, m = run_one()
    assert m.status == "ok", m.reason
    assert m.unit == "samples/s" and m.value > 0
    assert m.metrics["batch_size"] == 8 and m.metrics["work_per_step"] == 8
    assert m.flops == bf.bert_train_flops(bf.TINY, 8, 64)
    losses = m.metrics["check_losses"]
    assert losses[-1] < losses[0] and all(math.isfinite(x) for x in losses)
    assert m.metrics["first_step_s"] > 0 and "mfu" in m.metrics


def test_loss_that_does_not_fall_is_wrong_result(monkeypatch):
    frozen = dict(bf.TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)  # loss exactly constant
    monkeypatch.setitem(bf.PRESETS, "tiny-frozen", dataclasses.replace(bf.PRESETS["tiny"], config=frozen, lr=0.0))
    _, m = run_one("tiny-frozen")
    assert m.status == "wrong_result" and "did not fall" in m.reason and m.value is None


def test_parameter_counts_match_built_models():
    model = bf.build_bert(bf.TINY, "eager", torch.device("cpu"))
    total, per_token, per_sequence = bf.bert_params(bf.TINY)
    assert total == sum(p.numel() for p in model.parameters())
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert per_token + per_sequence == linear
    large = bf.build_bert(bf.BERT_LARGE, "sdpa", torch.device("meta"))
    assert bf.bert_params(bf.BERT_LARGE)[0] == sum(p.numel() for p in large.parameters()) == 335_143_938
    assert (bf.BERT_LARGE["num_hidden_layers"], bf.BERT_LARGE["hidden_size"],
            bf.BERT_LARGE["num_attention_heads"]) == (24, 1024, 16)


def test_bert_large_flops_hand_computed():
    # per token: 6·24·(4·1024² + 2·1024·4096) + 12·24·1024·128; per sequence: 6·(1024² + 2·1024)
    per_token = 6 * 24 * (4 * 1024**2 + 2 * 1024 * 4096) + 12 * 24 * 1024 * 128
    assert per_token == 1_849_688_064
    assert bf.bert_train_flops(bf.BERT_LARGE, 32, 128) == 32 * 128 * per_token + 32 * 6 * (1024**2 + 2048)


def test_training_flop_formula_matches_the_flop_counter():
    model = bf.build_bert(bf.TINY, "eager", torch.device("cpu"))
    batch = bf.synthetic_batch(4, 32, bf.TINY["vocab_size"], "cpu")
    counter = FlopCounterMode(display=False)
    with counter:
        model(**batch).loss.backward()
    assert counter.get_total_flops() == bf.bert_train_flops(bf.TINY, 4, 32)


def test_the_check_batch_is_one_class_so_bert_large_can_fit_it_in_five_steps():
    b = bf.synthetic_batch(64, 16, 1000, "cpu", torch.Generator().manual_seed(3))
    assert b["labels"].dtype == torch.long and bool((b["labels"] == 1).all())
    assert b["input_ids"].min() >= 1 and b["input_ids"].max() < 1000


def test_build_step_under_fake_tensors():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        bf.BertFinetune().build_step("tiny", torch.device("cpu"))()


def test_cpu_memory_guard_reports_oom_instead_of_meeting_the_oom_killer():
    _, m = run_one("bert-large-384", batch_size=100_000)
    assert m.status == "oom" and "GiB" in m.reason
