"""The models of benchmarks/data/assess_models.toml — transformers architectures gapbench does not ship — as
training steps that `gapbench assess --entry` traces and `gapbench run --workload-file` measures.

One training step is the same code in both: forward, the model's own loss, backward and AdamW, with the
gradients set to None before each step. Each model is built from its config with random weights under the
file's seed, at its input shape, in fp32 or bf16 (parameters, inputs and optimizer state in that dtype).

    gapbench assess REPO --target cpu --entry benchmarks.assess_models:vit            # fp32 step of one model
    gapbench assess REPO --target cpu --entry benchmarks.assess_models:vit_bf16       # the same in bf16
    gapbench run --device cpu --workload-file benchmarks/assess_models.py -w assess-model:vit --dtype fp32

Entry functions (no arguments, returning the step function): one per model, NAME and NAME_bf16. `step(name,
dtype, scale)` builds one at a reduced size (scale < 1 shrinks widths, depths, batch and sequence; for tests).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import sys
from collections.abc import Callable
from pathlib import Path

import torch

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from gapbench.results import Measurement  # noqa: E402
from gapbench.results.records import SUBNORMAL_LIMIT  # noqa: E402,F401 (gapbench's rule for a step on subnormal gradients)
from gapbench.timing import TooSlow, time_fn  # noqa: E402
from gapbench.workloads.base import Context, Variant, Workload  # noqa: E402
from gapbench.workloads.models.train import subnormal_share  # noqa: E402
from gapbench.workloads.options import DtypeOptions  # noqa: E402

MODELS_FILE = ROOT / "benchmarks" / "data" / "assess_models.toml"
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
LR = 1e-4


def load(path: Path = MODELS_FILE) -> dict:
    with open(path, "rb") as f:
        return tomllib.load(f)


def models(path: Path = MODELS_FILE) -> dict[str, dict]:
    return {m["name"]: m for m in load(path)["model"]}


def split_by_rule(names: list[str]) -> dict[str, str]:
    """The file's rule: names sorted by the SHA-256 hex digest of the name; 1st, 3rd, 5th … development, the
    others held-aside."""
    order = sorted(names, key=lambda n: hashlib.sha256(n.encode()).hexdigest())
    return {n: "development" if i % 2 == 0 else "held-aside" for i, n in enumerate(order)}


# ---- building ------------------------------------------------------------------------------------------------
# config keys that are widths, depths or counts, shrunk by `scale` for a reduced build (tests)
_WIDTHS = {"hidden_size", "intermediate_size", "n_embd", "d_model", "d_ff", "embedding_size", "vocab_size", "ffn_dim",
           "encoder_ffn_dim", "decoder_ffn_dim",
           "word_embed_proj_dim", "embed_dim", "attention_hidden_size"}
_DEPTHS = {"num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers", "encoder_layers", "decoder_layers"}


def _scaled_config(spec: dict, scale: float) -> dict:
    cfg = dict(spec["config"])
    if scale >= 1:
        return cfg
    # a list of heads per stage (Swin) divides the scaled stage widths as it is
    heads = [k for k in ("num_attention_heads", "n_head", "num_heads") if isinstance(cfg.get(k), int)]
    for k in list(cfg):
        if k in _WIDTHS:
            cfg[k] = max(16, int(cfg[k] * scale) // 16 * 16)
        elif k in _DEPTHS:
            cfg[k] = min(cfg[k], 2)  # two: a model that spreads a schedule over its layers (RWKV) divides by depth-1
        elif k == "hidden_sizes" and "stage_out_channels" not in cfg:  # HGNet's are its stages' outputs
            cfg[k] = [max(8, int(h * scale) // 8 * 8) for h in cfg[k]]
        elif k == "depths":
            cfg[k] = [1 for _ in cfg[k]]
    for k in heads:  # keep the head dimension a whole number (kv heads divide the heads)
        width = cfg.get("hidden_size") or cfg.get("n_embd") or cfg.get("d_model")
        h = cfg[k]
        while h > 1 and width % h:
            h -= 1
        cfg[k] = h
        kv = cfg.get("num_key_value_heads")
        if kv is not None:
            while h % kv:
                kv -= 1
            cfg["num_key_value_heads"] = kv
    if "num_groups" in cfg:  # GroupNorm's groups divide every scaled width, a bottleneck's too (BiT)
        hidden = list(cfg.get("hidden_sizes", []))
        widths = [cfg[k] for k in ("embedding_size",) if k in cfg] + hidden + [int(h * 0.25) for h in hidden]
        cfg["num_groups"] = math.gcd(cfg["num_groups"], *widths)
    if "d_kv" in cfg:
        cfg["d_kv"] = max(8, cfg["d_model"] // cfg["num_heads"])
    if isinstance(cfg.get("image_size"), int):  # a list of sides (Hiera) is set from the input's side in build
        cfg["image_size"] = max(cfg.get("patch_size", 16) * 2, int(cfg["image_size"] * scale) // 16 * 16)
    return cfg


def _scaled_input(spec: dict, scale: float) -> dict:
    inp = dict(spec["input"])
    if scale >= 1:
        return inp
    inp["batch"] = max(2, math.ceil(inp["batch"] * scale))  # BatchNorm on a pooled map needs two samples
    for k in ("seq", "target_seq"):
        if k in inp:
            inp[k] = max(8, int(inp[k] * scale))
    if "image" in inp:
        cfg = spec["config"]
        # a windowed model (Swin) needs a whole window at its last stage
        least = cfg["patch_size"] * cfg["window_size"] * 2 ** (len(cfg["depths"]) - 1) if "window_size" in cfg else 32
        inp["image"] = max(least, int(inp["image"] * scale) // 16 * 16)
    return inp


def build(name: str, dtype: str = "fp32", scale: float = 1.0, device: str | torch.device = "cpu",
          path: Path = MODELS_FILE) -> tuple[torch.nn.Module, dict]:
    """(model in train mode, keyword inputs with labels) for one model of the file."""
    import transformers
    from transformers.initialization import no_init_weights

    spec = models(path)[name]
    cfg = _scaled_config(spec, scale)
    inp = _scaled_input(spec, scale)
    arch = spec["architecture"]
    config_cls = getattr(transformers, arch).config_class  # the model class's own (MarianMTModel: MarianConfig)
    extra = {"num_labels": spec["labels"]} if "labels" in spec else {}
    if "image_size" in cfg and "image" in inp:
        side = inp["image"]
        cfg["image_size"] = [side, side] if isinstance(cfg["image_size"], list) else side
    config = config_cls(**cfg, **extra)
    torch.manual_seed(spec["seed"])
    before = torch.get_default_dtype()
    torch.set_default_dtype(DTYPES[dtype])
    try:
        # under a fake trace the weights have no values to initialise (and trunc_normal_ reads some)
        with no_init_weights() if _fake_active() else contextlib.nullcontext():
            model = getattr(transformers, arch)(config)
    finally:
        torch.set_default_dtype(before)
    if torch.device(device).type != "cpu":  # built on the CPU: moved only elsewhere (a fake trace cannot move it)
        model = model.to(device)
    model.train()
    g = torch.Generator().manual_seed(spec["seed"] + 1)
    b = inp["batch"]
    if "image" in inp:
        pixels = torch.randn(b, inp["channels"], inp["image"], inp["image"], generator=g)
        inputs = {"pixel_values": pixels.to(device, DTYPES[dtype]),
                  "labels": torch.randint(0, spec["labels"], (b,), generator=g).to(device)}
    else:
        vocab = config.vocab_size
        ids = torch.randint(1, vocab, (b, inp["seq"]), generator=g).to(device)
        inputs = {"input_ids": ids}
        if "target_seq" in inp:
            inputs["labels"] = torch.randint(1, vocab, (b, inp["target_seq"]), generator=g).to(device)
        elif inp.get("targets") == "random":  # a model whose residual path copies its input would learn nothing
            inputs["labels"] = torch.randint(1, vocab, (b, inp["seq"]), generator=g).to(device)
        else:
            inputs["labels"] = ids
    return model, inputs


def _fake_active() -> bool:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return any(isinstance(m, FakeTensorMode) for m in _get_current_dispatch_mode_stack())


def step(name: str, dtype: str = "fp32", scale: float = 1.0, device: str | torch.device = "cpu",
         path: Path = MODELS_FILE) -> Callable[[], torch.Tensor]:
    """One training step of the model, as a function: forward, loss, backward, AdamW; returns the loss."""
    model, inputs = build(name, dtype, scale, device, path)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, foreach=False)

    def one_step() -> torch.Tensor:
        for p in params:
            p.grad = None
        loss = model(**inputs).loss
        loss.backward()
        opt.step()
        return loss.detach()

    one_step.model = model  # type: ignore[attr-defined]
    return one_step


def _entry(name: str, dtype: str) -> Callable[[], Callable[[], torch.Tensor]]:
    def entry() -> Callable[[], torch.Tensor]:
        return step(name, dtype)

    entry.__name__ = entry.__qualname__ = name if dtype == "fp32" else f"{name}_{dtype}"
    entry.__doc__ = f"the {name} training step at {dtype} (benchmarks/data/assess_models.toml)"
    return entry


for _name in models():
    for _d in DTYPES:
        _f = _entry(_name, _d)
        globals()[_f.__name__] = _f


def entry_spec(name: str, dtype: str = "fp32") -> str:
    """The --entry of a model at a dtype."""
    return f"benchmarks.assess_models:{name if dtype == 'fp32' else f'{name}_{dtype}'}"


# ---- measuring: the same step as a gapbench workload -----------------------------------------------------------
class AssessModel(Workload):
    name = "assess-model"
    category = "model"
    unit = "steps/s"
    unit_help = "training steps per second: forward, loss, backward and AdamW of one batch"
    description = "transformers models gapbench does not ship (benchmarks/data/assess_models.toml), one step"
    presets = {n: f"{m['architecture']}, input {m['input']}, seed {m['seed']}" for n, m in models().items()}
    default_preset = next(iter(presets))
    options = DtypeOptions
    dtypes = tuple(DTYPES)

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        if preset not in self.presets:
            raise ValueError(f"unknown preset {preset!r}")
        return [Variant({"model": preset, "dtype": d}) for d in ctx.dtypes(DTYPES, default=["fp32"])]

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        fn = step(variant.params["model"], variant.params["dtype"], device=ctx.device.torch_device)
        try:
            timing = time_fn(fn, ctx.device, ctx.budget(), agreement=ctx.agreement, measure_energy=False)
        except TooSlow as e:
            return self.too_slow(variant, ctx, e.estimate_s, 1.0)
        loss = float(fn())
        if not math.isfinite(loss):
            return self.failed(variant, ctx, "wrong_result", f"the loss is {loss}")
        subnormal = round(subnormal_share(fn.model.parameters()), 6)
        return self.throughput(variant, ctx, timing, 1.0,
                               metrics={"category": "model", "loss": loss, "subnormal_grads": subnormal})
