"""LLM training: a Llama-2-architecture causal LM (transformers, random weights) trained on a synthetic batch
with AdamW; one iteration is a full step (forward, backward, optimizer). Value: tokens/s.

FLOPs per step = tokens · (6·N + 12·L·h·s) with N the weights of the linear layers (docs/models.md).
The 70B slice runs a few decoder layers of the exact Llama-2-70B shape and also reports the per-device
throughput of the full 80-layer model that its achieved FLOP rate implies.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

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

LLAMA2_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096, rms_norm_eps=1e-5)
LLAMA2_13B = dict(LLAMA2_7B, hidden_size=5120, intermediate_size=13824, num_hidden_layers=40,
                  num_attention_heads=40, num_key_value_heads=40)
LLAMA2_70B = dict(LLAMA2_7B, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                  num_attention_heads=64, num_key_value_heads=8)
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=344, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5)

SLICE_LAYERS = 4
PERIOD = 16  # the synthetic sequences repeat a random block of this many tokens


@dataclass(frozen=True)
class LlmPreset:
    description: str
    config: dict  # LlamaConfig keyword arguments (num_hidden_layers is the depth actually built)
    seq_len: int
    batch_size: int
    lr: float
    low_memory_weights: bool = False  # bf16 parameters and AdamW states instead of fp32 master weights
    checkpointing: bool = False  # activation checkpointing (recompute), as single-device 7B/13B runs need
    full_config: dict | None = field(default=None)  # for a slice: the whole model it is a slice of


PRESETS: dict[str, LlmPreset] = {
    "tiny": LlmPreset("2 layers, hidden 128, GQA 4/2 heads, vocab 512, seq 128, batch 4 (seconds on a CPU)",
                      TINY, seq_len=128, batch_size=4, lr=1e-3),
    "llama2-7b": LlmPreset("Llama-2-7B (6.74e9 params), seq 4096, batch 1, bf16 weights+AdamW, checkpointing",
                           LLAMA2_7B, seq_len=4096, batch_size=1, lr=3e-4, low_memory_weights=True,
                           checkpointing=True),
    "llama2-13b": LlmPreset("Llama-2-13B (13.0e9 params), seq 4096, batch 1, bf16 weights+AdamW, checkpointing",
                            LLAMA2_13B, seq_len=4096, batch_size=1, lr=3e-4, low_memory_weights=True,
                            checkpointing=True),
    "llama2-70b-slice": LlmPreset(
        f"{SLICE_LAYERS} decoder layers of Llama-2-70B shape (hidden 8192, FFN 28672, 64/8 heads, vocab 32000), "
        "seq 4096, batch 1, bf16 weights+AdamW; plus the full-model per-device estimate",
        dict(LLAMA2_70B, num_hidden_layers=SLICE_LAYERS), seq_len=4096, batch_size=1, lr=3e-4,
        low_memory_weights=True, full_config=LLAMA2_70B),
}


def llama_params(cfg: dict) -> tuple[int, int]:
    """(total parameters, weights of the linear layers) of a Llama config with untied embeddings, no biases."""
    h, v, f, n_layers = cfg["hidden_size"], cfg["vocab_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    head_dim = h // cfg["num_attention_heads"]
    kv = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    attn = 2 * h * h + 2 * h * kv * head_dim  # q, o; k, v
    mlp = 3 * h * f  # gate, up, down
    matmul = n_layers * (attn + mlp) + v * h  # + lm_head
    total = matmul + v * h + n_layers * 2 * h + h  # + embedding table, 2 RMSNorms per layer, final norm
    return total, matmul


def llama_train_flops_per_token(cfg: dict, seq: int) -> float:
    _, matmul = llama_params(cfg)
    return train_flops_per_token(matmul, cfg["num_hidden_layers"], cfg["hidden_size"], seq)


def synthetic_tokens(batch: int, seq: int, vocab: int, device: torch.device | str,
                     generator: torch.Generator | None = None) -> torch.Tensor:
    """Each sequence repeats a random block of PERIOD tokens: learnable (copy from PERIOD back)."""
    block = torch.randint(0, vocab, (batch, PERIOD), generator=generator, device=device if generator is None else "cpu")
    ids = block.repeat(1, math.ceil(seq / PERIOD))[:, :seq]
    return ids.to(device)


def build_llama(cfg: dict, attention: str, device: torch.device, dtype: torch.dtype = torch.float32,
                checkpointing: bool = False) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**cfg, attn_implementation=attention, use_cache=False)
    with torch.device(device), creating_dtype(dtype):
        model = LlamaForCausalLM(config)
    if checkpointing:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


class LlmTrain(ModelWorkload):
    name = "llm-train"
    options = TrainingOptions
    unit = "tokens/s"
    unit_help = "training tokens (batch × sequence) per second; one step = forward + backward + AdamW"
    description = "Llama-2-architecture causal-LM training step (transformers, random weights, synthetic tokens)"
    presets = {k: p.description for k, p in PRESETS.items()}

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        p = _preset(preset)
        batch = batch_option(self.opts(ctx), p.batch_size)
        flops = None if batch == "auto" else batch * p.seq_len * llama_train_flops_per_token(p.config, p.seq_len)
        return [Variant(self.transformer_params(preset, p.config, p.seq_len, batch, ctx, precision)
                        | {"checkpointing": p.checkpointing}, flops=flops)
                for precision in self.precisions(ctx, low_memory_weights=p.low_memory_weights)]

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        prep = self.prepare(variant, ctx)
        if isinstance(prep, Measurement):
            return prep
        precision, attn_impl, backends = prep.precision, prep.attn_impl, prep.sdpa_backends
        p = _preset(ctx.preset)
        prm = variant.params
        cfg, seq, dev = p.config, p.seq_len, ctx.device.torch_device
        total, matmul = llama_params(cfg)
        flops_per_token = llama_train_flops_per_token(cfg, seq)
        act = activation_bytes_per_sample(seq, cfg["hidden_size"], cfg["num_hidden_layers"],
                                             cfg["num_attention_heads"], precision.weight_dtype.itemsize,
                                             cfg["vocab_size"], p.checkpointing,
                                             scores=prm["attention"] in ("eager", "math"))
        states = training_state_bytes(total, precision)
        if (refused := self.memory_refusal(variant, ctx, states, act)) is not None:
            return refused

        gen = torch.Generator().manual_seed(1234)
        tokens = {}

        def make_batch(b: int) -> dict:
            if b not in tokens:
                tokens.clear()
                tokens[b] = synthetic_tokens(b, seq, cfg["vocab_size"], dev, gen)
            return {"input_ids": tokens[b], "labels": tokens[b]}

        metrics = {"params": total, "matmul_params": matmul, "flops_per_token": flops_per_token,
                   "tokens_per_sequence": seq}
        job = TrainingJob(
            build_model=lambda: build_llama(cfg, attn_impl, dev, precision.weight_dtype, p.checkpointing),
            make_batch=make_batch,
            flops_per_step=lambda b: b * seq * flops_per_token,
            work_per_step=lambda b: b * seq,
            batch_size=prm["batch_size"],
            auto_ceiling=lambda: auto_batch_ceiling(act, states, ctx.device),
            precision=precision, lr=p.lr, sdpa_backends=backends, compile=prm["compile"], metrics=metrics)
        m = train(self, variant, ctx, job)
        if p.full_config is not None and m.ok:
            m.metrics.update(_full_model_estimate(p, m.metrics["achieved_tflops"] * 1e12))
        return m

    def build_step(self, preset: str, device: torch.device) -> Callable[[], None]:
        """One forward+backward of the preset's model and batch, every tensor created on `device`
        (works under FakeTensorMode: no data-dependent Python in the step)."""
        p = _preset(preset)
        model = build_llama(p.config, "sdpa", torch.device(device), checkpointing=False)
        model.train()
        ids = synthetic_tokens(p.batch_size, p.seq_len, p.config["vocab_size"], device)

        def step() -> None:
            model(input_ids=ids, labels=ids).loss.backward()

        return step

    def build_iteration(self, preset: str, device, options: dict | None = None) -> Callable[[], None]:
        """One measured iteration as run() times it — forward, backward and AdamW at the run's precision
        (`options` as `gapbench run` takes them: dtype, attention, batch_size) — on `device` (a gapbench Device).
        Works under FakeTensorMode: a step-time prediction traces it for shapes (gapbench assess)."""
        p = _preset(preset)
        precision, attn_impl, backends, batch = self.traced_setup(device, options, p.batch_size,
                                                                  low_memory_weights=p.low_memory_weights)
        dev = device.torch_device
        model = build_llama(p.config, attn_impl, dev, precision.weight_dtype, p.checkpointing)
        ids = synthetic_tokens(batch, p.seq_len, p.config["vocab_size"], dev)
        return TrainStep(model, {"input_ids": ids, "labels": ids}, device, precision, p.lr, backends)


def _full_model_estimate(p: LlmPreset, achieved_flops_per_s: float) -> dict:
    """Per-device tokens/s of the whole model if each device sustains the slice's model-FLOP rate."""
    full = p.full_config
    per_token = llama_train_flops_per_token(full, p.seq_len)
    total, _ = llama_params(full)
    return {"full_model_layers": full["num_hidden_layers"], "full_model_params": total,
            "full_model_flops_per_token": per_token,
            "full_model_tokens_per_s_per_device_estimate": achieved_flops_per_s / per_token}


def _preset(name: str) -> LlmPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown llm-train preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
