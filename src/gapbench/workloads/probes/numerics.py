"""Numerics parity: does a model compute the same here as in exact arithmetic, and as on another stack?

Each model (the model workloads' own builders: Llama, BERT, the SDXL-shaped UNet; or the user's `--entry`) gets
weights and inputs drawn on the CPU from seeded float64 generators, so every machine starts from bit-identical
tensors. The same model then runs twice in the worker: on the CPU in float64 (the reference) and on the device in
the variant's precision. Each run is one forward and backward on a fixed batch, fingerprinted, then `train_steps`
AdamW steps on that batch with the loss after each. A fingerprint, per module output (in execution order) and per
parameter gradient, is numel, sum, L2 norm, max |x| and a seeded sample of values (the same positions on every
machine); the device's side also holds its full relative error against the reference, ‖x − x₆₄‖₂ / ‖x₆₄‖₂, and
the reduction length its value went through (for the rounding bound compare applies). Both fingerprints go into
the measurement's metrics, so each file carries its own error against exact arithmetic and two files compare.

The value is the seconds the device's probe took (forward, backward and the training steps); the numbers that
matter are in `metrics["numerics"]` and are judged by `gapbench compare` (gapbench.compare.numerics).
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import math
import os
import sys
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import torch

from gapbench.devices.dtypes import DTYPES as TABLE
from gapbench.results import Measurement
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.models.precision import (
    Precision,
    attention_choice,
    is_unavailable_kernel,
    no_kernel_reason,
    precision_of,
    sdpa_context,
)
from gapbench.workloads.models.prepare import missing_dependency
from gapbench.workloads.probes.options import NumericsOptions

SAMPLE = 16  # values sampled per tensor: with numel, sum, L2 and max |x|, 20 numbers a fingerprint
SEED = 20240611
WEIGHT_STD_1D = 0.02  # non-constant one-dimensional parameters (biases drawn at random by their module)
# a small timestep: sin and cos of t·frequency lose |t·f|·u of their argument, which no reduction length describes
TIMESTEP = 20.0
FP8_UNIT_ROUNDOFF = {"e4m3": 2.0**-4, "e5m2": 2.0**-3}


@dataclass(frozen=True)
class ProbeModel:
    """One model of the probe: how it is built (on the CPU, in float32) and what one batch and its loss are."""

    family: str  # llm | bert | unet | entry
    description: str
    config: dict
    seq_len: int
    batch_size: int
    lr: float


def _llm(**changes) -> dict:
    from gapbench.workloads.models.llm_train import TINY

    return dict(TINY, **changes)


def _bert(**changes) -> dict:
    from gapbench.workloads.models.bert_finetune import TINY

    return dict(TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **changes)


def _unet(**changes) -> dict:
    from gapbench.workloads.models.diffusion_infer import TINY_UNET

    return dict(TINY_UNET, **changes)


def models() -> dict[str, ProbeModel]:
    return {
        "llm-tiny": ProbeModel("llm", "llm-train:tiny's Llama (2 layers, hidden 128), seq 128, batch 4",
                               _llm(), 128, 4, 1e-3),
        "bert-tiny": ProbeModel("bert", "bert-finetune:tiny's BERT (2 layers, hidden 128), seq 64, batch 8",
                                _bert(), 64, 8, 1e-3),
        "unet-tiny": ProbeModel("unet", "diffusion-infer:tiny's UNet (channels 32/64), 16x16 latents, batch 1",
                                _unet(), 16, 1, 1e-3),
        "llm-mid": ProbeModel("llm", "Llama, 8 layers, hidden 256, FFN 688, 8/4 heads, vocab 2048, seq 128, batch 2",
                              _llm(hidden_size=256, intermediate_size=688, num_hidden_layers=8, num_attention_heads=8,
                                   num_key_value_heads=4, vocab_size=2048), 128, 2, 1e-3),
        "bert-mid": ProbeModel("bert", "BERT, 12 layers, hidden 256, 4 heads, FFN 1024, seq 128, batch 4",
                               _bert(hidden_size=256, num_hidden_layers=12, num_attention_heads=4,
                                     intermediate_size=1024), 128, 4, 1e-3),
        "unet-mid": ProbeModel("unet", "the SDXL-shaped UNet at channels 64/128, 2 layers per block, 32x32 latents",
                               _unet(block_out_channels=[64, 128], layers_per_block=2, attention_head_dim=[4, 8],
                                     sample_size=32), 32, 1, 1e-3),
    }


MODEL_NAMES = ("llm-tiny", "bert-tiny", "unet-tiny", "llm-mid", "bert-mid", "unet-mid")
PRESETS = {"tiny": MODEL_NAMES[:3], "mid": MODEL_NAMES[3:], **{n: (n,) for n in MODEL_NAMES}}


# ---- deterministic tensors ------------------------------------------------------------------------------------
def _generator(name: str) -> torch.Generator:
    return torch.Generator().manual_seed(SEED + zlib.crc32(name.encode()))


def seeded_normal(name: str, shape, std: float) -> torch.Tensor:
    """float64 N(0, std²) from a generator seeded by `name` (float64 draws take the same path on every CPU)."""
    return torch.randn(tuple(shape), generator=_generator(name), dtype=torch.float64) * std


def reseed(model: torch.nn.Module) -> None:
    """Every parameter drawn again from its own seeded generator: N(0, 1/fan_in) for matrices and kernels,
    N(0, 0.02²) for other vectors; a parameter its module initialised to one constant (norm scales of 1, zero
    biases) keeps it, which is exact everywhere."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            flat = p.detach().reshape(-1)
            if flat.numel() == 0 or bool((flat == flat[0]).all()):
                continue
            std = 1.0 / math.sqrt(p[0].numel()) if p.dim() >= 2 else WEIGHT_STD_1D
            p.copy_(seeded_normal(name, p.shape, std))


def _ids(name: str, shape, low: int, high: int) -> torch.Tensor:
    return torch.randint(low, high, tuple(shape), generator=_generator(name))


def build(model_name: str, spec: ProbeModel, attn_impl: str) -> tuple[torch.nn.Module, dict]:
    """(model on the CPU in float32, reseeded; the batch as CPU tensors)."""
    if spec.family == "llm":
        from gapbench.workloads.models.llm_train import PERIOD, build_llama

        model = build_llama(spec.config, attn_impl, torch.device("cpu"))
        block = _ids(model_name + "/ids", (spec.batch_size, PERIOD), 0, spec.config["vocab_size"])
        ids = block.repeat(1, math.ceil(spec.seq_len / PERIOD))[:, :spec.seq_len]
        batch = {"input_ids": ids, "labels": ids}
    elif spec.family == "bert":
        from gapbench.workloads.models.bert_finetune import build_bert

        model = build_bert(spec.config, attn_impl, torch.device("cpu"))
        ids = _ids(model_name + "/ids", (spec.batch_size, spec.seq_len), 1, spec.config["vocab_size"])
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
                 "labels": (ids[:, 1] >= spec.config["vocab_size"] // 2).long()}
    else:
        model, batch = _unet_probe(model_name, spec, attn_impl)
    reseed(model)
    _no_dropout(model)
    return model, batch


def _unet_probe(model_name: str, spec: ProbeModel, attn_impl: str) -> tuple[torch.nn.Module, dict]:
    from diffusers import UNet2DConditionModel
    from diffusers.models.attention_processor import AttnProcessor

    from gapbench.workloads.models.diffusion_infer import TINY_TEXT_1, TINY_TEXT_2

    cfg = spec.config
    unet = UNet2DConditionModel.from_config(cfg)
    if attn_impl == "eager":
        unet.set_attn_processor(AttnProcessor())
    b, lat = spec.batch_size, spec.seq_len
    batch = {
        "sample": seeded_normal(model_name + "/x", (b, cfg["in_channels"], lat, lat), 1.0),
        "timestep": torch.tensor(TIMESTEP, dtype=torch.float64),
        "encoder_hidden_states": seeded_normal(model_name + "/prompt",
                                               (b, TINY_TEXT_1["max_position_embeddings"], cfg["cross_attention_dim"]),
                                               1.0),
        "text_embeds": seeded_normal(model_name + "/pooled", (b, TINY_TEXT_2["projection_dim"]), 1.0),
        "time_ids": seeded_normal(model_name + "/time", (b, 6), 1.0),
        "target": seeded_normal(model_name + "/noise", (b, cfg["out_channels"], lat, lat), 1.0),
    }
    return _UnetLoss(unet), batch


class _UnetLoss(torch.nn.Module):
    """The UNet's noise prediction against a fixed target (the diffusion training loss), returning `.loss`."""

    def __init__(self, unet):
        super().__init__()
        self.unet = unet

    def forward(self, sample, timestep, encoder_hidden_states, text_embeds, time_ids, target):
        pred = self.unet(sample, timestep, encoder_hidden_states=encoder_hidden_states,
                         added_cond_kwargs={"text_embeds": text_embeds, "time_ids": time_ids}).sample
        return _Loss(torch.nn.functional.mse_loss(pred.float() if pred.dtype != target.dtype else pred, target))


@dataclass
class _Loss:
    loss: torch.Tensor


class _EntryLoss(torch.nn.Module):
    """A user's model with a loss: its own `.loss` when it returns one, else the mean square of its first output."""

    def __init__(self, model, args: list, kwargs: dict):
        super().__init__()
        self.model, self.arg_names = model, [f"arg{i}" for i in range(len(args))]
        self.kwarg_names = list(kwargs)

    def forward(self, **batch):
        out = self.model(*[batch[n] for n in self.arg_names], **{k: batch[k] for k in self.kwarg_names})
        loss = getattr(out, "loss", None)
        if loss is None:
            first = next(t for t in torch.utils._pytree.tree_flatten(out)[0] if isinstance(t, torch.Tensor)
                         and t.is_floating_point())
            loss = first.float().pow(2).mean() if first.dtype != torch.float64 else first.pow(2).mean()
        return _Loss(loss)


def build_entry(spec: str) -> tuple[torch.nn.Module, dict]:
    """The user's (model, example_inputs) from MODULE:CALLABLE, reseeded; floating inputs drawn again (seeded)."""
    mod_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    obj = importlib.import_module(mod_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    built = obj()
    if not (isinstance(built, (tuple, list)) and len(built) == 2 and isinstance(built[0], torch.nn.Module)):
        raise ValueError(f"{spec} must return (model, example_inputs)")
    model, inputs = built
    args = list(inputs) if isinstance(inputs, (tuple, list)) else ([] if isinstance(inputs, dict) else [inputs])
    kwargs = dict(inputs) if isinstance(inputs, dict) else {}
    named = {f"arg{i}": a for i, a in enumerate(args)} | kwargs
    batch = {k: seeded_normal(f"entry/{k}", v.shape, 1.0) if isinstance(v, torch.Tensor) and v.is_floating_point()
             else v for k, v in named.items()}
    wrapped = _EntryLoss(model.float(), args, kwargs)
    reseed(wrapped)
    _no_dropout(wrapped)
    return wrapped, batch


def _no_dropout(model: torch.nn.Module) -> None:
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0


# ---- fingerprints ---------------------------------------------------------------------------------------------
def sample_positions(name: str, numel: int, k: int = SAMPLE) -> torch.Tensor:
    """The same `k` positions of a tensor called `name` on every machine."""
    if numel <= k:
        return torch.arange(numel)
    return torch.randint(0, numel, (k,), generator=_generator("sample/" + name)).sort().values


def fingerprint(name: str, x: torch.Tensor) -> dict:
    """numel, sum, L2 norm, max |x| and the seeded sample of a tensor (read in float64 on the CPU)."""
    flat = x.detach().to("cpu", torch.float64).reshape(-1)
    return {"numel": flat.numel(), "sum": float(flat.sum()), "l2": float(flat.norm()),
            "max_abs": float(flat.abs().max()) if flat.numel() else 0.0,
            "sample": flat[sample_positions(name, flat.numel())].tolist()}


def difference(x: torch.Tensor, ref: torch.Tensor) -> dict:
    """{"diff": ‖x − ref‖₂, "err": ‖x − ref‖₂ / ‖ref‖₂} over every element, in float64 (None when the shapes
    differ; err None where the reference is all zeros)."""
    a = x.detach().to("cpu", torch.float64).reshape(-1)
    if a.shape != ref.shape:
        return {"diff": None, "err": None}
    denom = float(ref.norm())
    diff = float((a - ref).norm())
    return {"diff": diff, "err": diff / denom if denom > 0 else None}


def _first_float(out) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else None
    if isinstance(out, _Loss):
        return out.loss
    for t in torch.utils._pytree.tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t
    for v in getattr(out, "__dict__", {}).values():  # model outputs that pytree does not open
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            return v
    return None


def reduction_length(module: torch.nn.Module, out: torch.Tensor) -> int:
    """The length of the sums a module's output went through itself: a linear layer's inputs per output, a
    convolution's C/groups × kernel, a norm's normalised size, an attention block's keys (the P·V product)."""
    if isinstance(module, torch.nn.Linear):
        return module.in_features
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        return module.in_channels // module.groups * math.prod(module.kernel_size)
    kind = type(module).__name__
    if isinstance(module, torch.nn.GroupNorm):
        return module.num_channels // module.num_groups * math.prod(out.shape[2:])
    if isinstance(module, torch.nn.LayerNorm) or kind.endswith("RMSNorm"):
        return out.shape[-1]
    if "Attention" in kind and out.dim() >= 3:
        return out.shape[-2]
    return 0


class Recorder:
    """Forward hooks on every module: each output (its first floating tensor) by name, in execution order; a
    module called again is `name#2`. With `reference`, the device's side: each output is fingerprinted and its
    error against the reference's output taken at once, so only the reference's outputs are held."""

    def __init__(self, model: torch.nn.Module, reference: dict | None = None):
        self.reference, self.entries, self.tensors = reference, [], {}
        self.calls: dict[str, int] = {}
        self.n_cum = self.m_cum = 0
        self.handles = [m.register_forward_hook(self._hook(name)) for name, m in model.named_modules() if name]

    def _hook(self, name: str) -> Callable:
        def hook(module, args, out) -> None:
            x = _first_float(out)
            if x is None:
                return
            n = self.calls[name] = self.calls.get(name, 0) + 1
            key = name if n == 1 else f"{name}#{n}"
            n_own = reduction_length(module, x)
            self.n_cum += n_own
            self.m_cum += 1 if n_own else 0
            entry = {"name": key, "n": self.n_cum, "m": self.m_cum, "rows": max(1, x.numel() // max(1, x.shape[-1] if x.dim() else 1))}
            entry |= fingerprint(key, x)
            if self.reference is None:
                self.tensors[key] = x.detach().to("cpu", torch.float64).reshape(-1).clone()
            elif key in self.reference:
                entry |= difference(x, self.reference[key])
            self.entries.append(entry)
        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()


# ---- precision ------------------------------------------------------------------------------------------------
def _fake_quant(t: torch.Tensor, fp8: torch.dtype) -> torch.Tensor:
    """t rounded to fp8 with a per-tensor scale (its max at fp8's max), gradients passed straight through."""
    scale = (t.detach().abs().amax().float() / float(torch.finfo(fp8).max)).clamp(min=1e-12)
    q = (t.detach().float() / scale).to(fp8).float().mul(scale).to(t.dtype)
    return t + (q - t).detach()


@contextlib.contextmanager
def fp8_linears(model: torch.nn.Module, fp8: torch.dtype | None):
    """Within: every nn.Linear takes its input and weight rounded to fp8 (products in the autocast dtype)."""
    if fp8 is None:
        yield
        return
    patched = []
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            def forward(x, m=m):
                return torch.nn.functional.linear(_fake_quant(x, fp8), _fake_quant(m.weight, fp8), m.bias)
            m.forward = forward
            patched.append(m)
    try:
        yield
    finally:
        for m in patched:
            del m.forward


@dataclass(frozen=True)
class Side:
    """How one side of the probe computes: where, the precision, the SDPA backends, the math mode."""

    torch_device: torch.device
    device_type: str  # torch's type, for autocast and the grad scaler
    precision: Precision
    math_mode: Callable
    backends: list | None
    fp8: torch.dtype | None
    fused_optimizer: bool

    def context(self):
        stack = contextlib.ExitStack()
        stack.enter_context(sdpa_context(self.backends))
        stack.enter_context(self.math_mode())
        if self.precision.autocast:
            stack.enter_context(torch.autocast(device_type=self.device_type, dtype=self.precision.torch_dtype))
        return stack


def _float64_everywhere():
    """A TorchFunctionMode in which float32 means float64: a model's own casts (Llama's norms and rotary
    embedding, the loss's upcast of the logits) and float32 tensors it creates stay in float64, so the reference
    is float64 throughout, not float64 with float32 islands."""
    from torch.overrides import TorchFunctionMode

    f32, f64 = torch.float32, torch.float64

    class Float64Everywhere(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if kwargs.get("dtype") is f32:
                kwargs["dtype"] = f64
            if func is torch.Tensor.float:
                func = torch.Tensor.double
            elif func in (torch.Tensor.to, torch.Tensor.type):
                args = tuple(f64 if a is f32 else a for a in args)
            return func(*args, **kwargs)

    return Float64Everywhere()


def reference_side() -> Side:
    return Side(torch.device("cpu"), "cpu", Precision("fp64", "fp64", "reference"), _float64_everywhere, None,
                None, False)


def probe(model: torch.nn.Module, batch: dict, side: Side, steps: int, lr: float,
          reference: dict | None = None) -> dict:
    """One fingerprinted forward and backward, then `steps` AdamW steps on the same batch; the loss before each
    step and after the last. Returns the outputs' and gradients' fingerprints, the losses and the seconds."""
    model = copy.deepcopy(model).to(side.torch_device, side.precision.weight_dtype)
    model.train()
    batch = {k: v.to(side.torch_device, side.precision.weight_dtype) if v.is_floating_point() else
             v.to(side.torch_device) for k, v in batch.items()}
    kwargs = {"fused": True} if side.fused_optimizer else {}
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, **kwargs)
    scaler = torch.amp.GradScaler(side.device_type) if side.precision.grad_scaler else None
    rec = Recorder(model, reference and reference["tensors"])
    losses, grads, grad_tensors = [], [], {}
    start = time.perf_counter()
    with fp8_linears(model, side.fp8):
        for k in range(steps):
            with side.context():
                loss = model(**batch).loss
            if k == 0:
                rec.remove()
            (scaler.scale(loss) if scaler else loss).backward()
            if k == 0:
                if scaler:
                    scaler.unscale_(opt)
                grads, grad_tensors = _gradients(model, reference)
            (scaler.step(opt) if scaler else opt.step())
            if scaler:
                scaler.update()
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach().double()))
        with torch.no_grad(), side.context():
            losses.append(float(model(**batch).loss.double()))
    seconds = time.perf_counter() - start
    return {"outputs": rec.entries, "grads": grads, "losses": losses, "seconds": seconds, "tensors": rec.tensors,
            "grad_tensors": grad_tensors}


def _gradients(model: torch.nn.Module, reference: dict | None) -> tuple[list[dict], dict]:
    """Each parameter's gradient fingerprinted (the device's side: with its error against the reference's); the
    reference's side also keeps the gradients themselves, in float64."""
    entries, tensors = [], {}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        entry = {"name": name} | fingerprint("grad/" + name, p.grad)
        if reference is None:
            tensors[name] = p.grad.detach().to("cpu", torch.float64).reshape(-1).clone()
        elif name in reference["grad_tensors"]:
            entry |= difference(p.grad, reference["grad_tensors"][name])
        entries.append(entry)
    return entries, tensors


def _columns(entries: list[dict], keys: tuple[str, ...]) -> dict:
    """A list of entries as columns (a results file holds them compactly)."""
    return {k: [e.get(k) for e in entries] for k in keys}


FINGERPRINT_KEYS = ("numel", "sum", "l2", "max_abs", "sample")


class Numerics(Workload):
    name = "numerics"
    category = "probe"
    unit = "s"
    unit_help = "seconds of the device's probe: one fingerprinted forward and backward and the training steps"
    higher_is_better = False
    description = ("numerics parity: per-layer fingerprints of a forward, its gradients and a few training steps, "
                   "against a float64 reference on the CPU")
    presets = {"tiny": "llm-tiny, bert-tiny and unet-tiny (seconds each on a CPU)",
               "mid": "llm-mid, bert-mid and unet-mid (tens of seconds each on a 2-core CPU)",
               **{n: spec.description for n, spec in models().items()}}
    options = NumericsOptions
    dtypes = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        o = self.opts(ctx)
        names = [f"entry:{o.entry}"] if o.entry else list(PRESETS[preset])
        table = models()
        out = []
        for name in names:
            spec = table.get(name)
            for d in ctx.dtypes(self.dtypes, ["fp32"]):
                params = {"model": name, "dtype": d, "attention": o.attention, "tf32": d == "tf32",
                          "deterministic": o.deterministic, "train_steps": o.train_steps}
                if d == "fp8":
                    params["fp8_format"] = o.fp8_format
                if spec is not None:
                    params |= {"seq_len": spec.seq_len, "batch_size": spec.batch_size}
                out.append(Variant(params))
        return out

    def check(self, options: NumericsOptions, preset: str) -> None:
        if preset not in PRESETS:
            raise ValueError(f"unknown numerics preset {preset!r}; known: {', '.join(PRESETS)}")

    def device_unsupported(self, dtype: str, ctx: Context) -> str:
        return ctx.device.matmul_unsupported(dtype) if dtype in ("tf32", "fp8") else ctx.device.dtype_unsupported(dtype)

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        prm = variant.params
        family = "entry" if prm["model"].startswith("entry:") else models()[prm["model"]].family
        missing = missing_dependency(*(("diffusers",) if family == "unet" else ("transformers",) if family != "entry"
                                       else ()))
        if missing:
            return self.failed(variant, ctx, "unsupported", missing)
        try:
            with _deterministic(prm["deterministic"]):
                return self._measure(variant, ctx)
        except RuntimeError as e:
            if is_unavailable_kernel(e):
                return self.failed(variant, ctx, "unsupported", no_kernel_reason(prm["attention"], ctx.device))
            raise

    def _measure(self, variant: Variant, ctx: Context) -> Measurement:
        prm = variant.params
        attn_impl, backends = attention_choice(prm)
        if prm["model"].startswith("entry:"):
            model, batch = build_entry(prm["model"].removeprefix("entry:"))
            lr = 1e-3
        else:
            spec = models()[prm["model"]]
            model, batch = build(prm["model"], spec, attn_impl)
            lr = spec.lr
        start = [fingerprint("init/params", torch.cat([p.detach().reshape(-1).double() for p in model.parameters()])),
                 fingerprint("init/batch", torch.cat([v.reshape(-1).double() for v in batch.values()]))]
        ref = probe(model, batch, reference_side(), prm["train_steps"], lr)
        side = self._side(prm, ctx, backends)
        with ctx.device.math_mode("tf32" if prm["tf32"] else "fp32"):
            tf32_on = ctx.device.tf32_enabled()
        dev = probe(model, batch, side, prm["train_steps"], lr, reference=ref)
        metrics = {"numerics": self._document(prm, side, ref, dev, start), "tf32_effective": tf32_on,
                   "reference_s": ref["seconds"], "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                   "params": sum(p.numel() for p in model.parameters())}
        return self.result(variant, ctx, value=max(dev["seconds"], 1e-9), metrics=metrics)

    def _side(self, prm: dict, ctx: Context, backends) -> Side:
        d = prm["dtype"]
        if d == "fp8":
            precision = precision_of("bf16")
            fp8 = ctx.device.fp8_e4m3() if prm.get("fp8_format", "e4m3") == "e4m3" else torch.float8_e5m2
        else:
            precision, fp8 = (precision_of("fp32") if d == "tf32" else precision_of(d)), None
        mode = "tf32" if d == "tf32" else ("fp32" if TABLE[precision.weights].storage == "float32" else d)
        return Side(ctx.device.torch_device, ctx.device.type, precision, lambda: ctx.device.math_mode(mode), backends,
                    fp8, ctx.device.fused_optimizer)

    @staticmethod
    def _document(prm: dict, side: Side, ref: dict, dev: dict, start: list[dict]) -> dict:
        d = prm["dtype"]
        u = FP8_UNIT_ROUNDOFF[prm["fp8_format"]] if d == "fp8" else TABLE[d].unit_roundoff
        outs = ("name", "n", "m", "rows", *FINGERPRINT_KEYS)
        return {
            "version": 1, "sample": SAMPLE, "seed": SEED, "unit_roundoff": u,
            "accumulation_roundoff": TABLE["fp64" if d == "fp64" else "fp32"].unit_roundoff, "compute_dtype": side.precision.dtype,
            "weights": side.precision.weights, "start": start,
            "outputs": _columns(dev["outputs"], (*outs, "err", "diff")),
            "grads": _columns(dev["grads"], ("name", *FINGERPRINT_KEYS, "err", "diff")),
            "losses": dev["losses"],
            "reference": {"outputs": _columns(ref["outputs"], outs),
                          "grads": _columns(ref["grads"], ("name", *FINGERPRINT_KEYS)),
                          "losses": ref["losses"], "dtype": "fp64", "device": "cpu"},
        }


@contextlib.contextmanager
def _deterministic(on: bool):
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before)
