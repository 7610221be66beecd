"""BERT fine-tuning: BERT-large sequence classification (transformers, random weights) on synthetic labelled
batches with AdamW; one iteration is a full step (forward, backward, optimizer). Value: samples/s.

FLOPs per step = b·s·(6·N_tok + 12·L·h·s) + b·6·N_seq, with N_tok the encoder's linear weights (applied to
every token) and N_seq the pooler and classifier weights (applied to the [CLS] token only); docs/models.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from gapbench.results import Measurement
from gapbench.workloads.base import Context, Variant
from gapbench.workloads.models.base import ModelWorkload
from gapbench.workloads.models.flops import train_flops_per_token
from gapbench.workloads.models.memory import (
    activation_bytes_per_sample,
    auto_batch_ceiling,
    training_state_bytes,
)
from gapbench.workloads.models.options import TrainingOptions
from gapbench.workloads.models.precision import (
    batch_option,
    creating_dtype,
)
from gapbench.workloads.models.train import TrainingJob, TrainStep, train

BERT_LARGE = dict(vocab_size=30522, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096, max_position_embeddings=512, type_vocab_size=2, num_labels=2)
TINY = dict(vocab_size=1024, hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512,
            max_position_embeddings=128, type_vocab_size=2, num_labels=2)


@dataclass(frozen=True)
class BertPreset:
    description: str
    config: dict  # BertConfig keyword arguments
    seq_len: int
    batch_size: int
    lr: float


PRESETS: dict[str, BertPreset] = {
    "tiny": BertPreset("2 layers, hidden 128, 2 heads, seq 64, batch 8 (seconds on a CPU)", TINY, 64, 8, 1e-3),
    "bert-large-128": BertPreset("BERT-large (24 layers, hidden 1024, 16 heads, 335M params), seq 128, batch 32",
                                 BERT_LARGE, 128, 32, 1e-4),
    "bert-large-384": BertPreset("BERT-large, seq 384 (SQuAD length), batch 16", BERT_LARGE, 384, 16, 1e-4),
}


def bert_params(cfg: dict) -> tuple[int, int, int]:
    """(total parameters, linear weights applied per token, linear weights applied per sequence)."""
    h, i, n_layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    labels = cfg.get("num_labels", 2)
    embeddings = (cfg["vocab_size"] + cfg["max_position_embeddings"] + cfg["type_vocab_size"]) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h  # attention, LN, FFN, LN
    head = (h * h + h) + (h * labels + labels)  # pooler, classifier
    total = embeddings + n_layers * layer + head
    per_token = n_layers * (4 * h * h + 2 * h * i)
    per_sequence = h * h + h * labels
    return total, per_token, per_sequence


def bert_train_flops(cfg: dict, batch: int, seq: int) -> float:
    _, per_token, per_sequence = bert_params(cfg)
    per_tok = train_flops_per_token(per_token, cfg["num_hidden_layers"], cfg["hidden_size"], seq)
    return batch * seq * per_tok + batch * 6.0 * per_sequence


def synthetic_batch(batch: int, seq: int, vocab: int, device: torch.device | str,
                    generator: torch.Generator | None = None) -> dict:
    """Random token ids, every label class 1: a batch five AdamW steps can fit from random weights, so the check
    (the loss falls) holds at full size. Two balanced classes do not: on BERT-large from random weights, five
    steps at 1e-4, 2e-5, 1e-5 or 5e-6 left the loss at or above its start whichever token the label was read
    from (Adam's first steps move every weight by the learning rate, and samples of two classes pull apart);
    one class fell from 0.64 to 0.005 in one step at 1e-4. The cost of a step does not depend on the labels."""
    where = "cpu" if generator is not None else device
    ids = torch.randint(1, vocab, (batch, seq), generator=generator, device=where)
    labels = torch.ones(batch, dtype=torch.long, device=where)
    return {"input_ids": ids.to(device), "attention_mask": torch.ones_like(ids).to(device),
            "token_type_ids": torch.zeros_like(ids).to(device), "labels": labels.to(device)}


def build_bert(cfg: dict, attention: str, device: torch.device, dtype: torch.dtype = torch.float32):
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig(**cfg, attn_implementation=attention)
    with torch.device(device), creating_dtype(dtype):
        return BertForSequenceClassification(config)


class BertFinetune(ModelWorkload):
    name = "bert-finetune"
    options = TrainingOptions
    unit = "samples/s"
    unit_help = "labelled sequences per second; one step = forward + backward + AdamW"
    description = "BERT-large sequence-classification fine-tuning step (transformers, random weights)"
    presets = {k: p.description for k, p in PRESETS.items()}

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        p = _preset(preset)
        batch = batch_option(self.opts(ctx), p.batch_size)
        flops = None if batch == "auto" else bert_train_flops(p.config, batch, p.seq_len)
        return [Variant(self.transformer_params(preset, p.config, p.seq_len, batch, ctx, precision), flops=flops)
                for precision in self.precisions(ctx)]

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        prep = self.prepare(variant, ctx)
        if isinstance(prep, Measurement):
            return prep
        precision, attn_impl, backends = prep.precision, prep.attn_impl, prep.sdpa_backends
        p = _preset(ctx.preset)
        prm = variant.params
        cfg, seq, dev = p.config, p.seq_len, ctx.device.torch_device
        total, per_token, per_sequence = bert_params(cfg)
        act = activation_bytes_per_sample(seq, cfg["hidden_size"], cfg["num_hidden_layers"],
                                             cfg["num_attention_heads"], precision.weight_dtype.itemsize,
                                             scores=prm["attention"] in ("eager", "math"))
        states = training_state_bytes(total, precision)
        if (refused := self.memory_refusal(variant, ctx, states, act)) is not None:
            return refused

        gen = torch.Generator().manual_seed(1234)
        batches: dict[int, dict] = {}

        def make_batch(b: int) -> dict:
            if b not in batches:
                batches.clear()
                batches[b] = synthetic_batch(b, seq, cfg["vocab_size"], dev, gen)
            return batches[b]

        job = TrainingJob(
            build_model=lambda: build_bert(cfg, attn_impl, dev, precision.weight_dtype),
            make_batch=make_batch,
            flops_per_step=lambda b: bert_train_flops(cfg, b, seq),
            work_per_step=lambda b: b,
            batch_size=prm["batch_size"],
            auto_ceiling=lambda: auto_batch_ceiling(act, states, ctx.device),
            precision=precision, lr=p.lr, sdpa_backends=backends, compile=prm["compile"],
            metrics={"params": total, "matmul_params_per_token": per_token,
                     "matmul_params_per_sequence": per_sequence, "tokens_per_sequence": seq})
        return train(self, variant, ctx, job)

    def build_step(self, preset: str, device: torch.device) -> Callable[[], None]:
        """One forward+backward of the preset's model and batch, every tensor created on `device`."""
        p = _preset(preset)
        model = build_bert(p.config, "sdpa", torch.device(device))
        model.train()
        batch = synthetic_batch(p.batch_size, p.seq_len, p.config["vocab_size"], device)

        def step() -> None:
            model(**batch).loss.backward()

        return step

    def build_iteration(self, preset: str, device, options: dict | None = None) -> Callable[[], None]:
        """One measured iteration as run() times it — forward, backward and AdamW at the run's precision — on
        `device` (a gapbench Device); works under FakeTensorMode (the shape trace of gapbench assess)."""
        p = _preset(preset)
        precision, attn_impl, backends, batch = self.traced_setup(device, options, p.batch_size)
        dev = device.torch_device
        model = build_bert(p.config, attn_impl, dev, precision.weight_dtype)
        return TrainStep(model, synthetic_batch(batch, p.seq_len, p.config["vocab_size"], dev), device, precision,
                            p.lr, backends)


def _preset(name: str) -> BertPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown bert-finetune preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
