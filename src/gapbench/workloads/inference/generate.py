"""Greedy generation with a static KV cache on a transformers Llama model with random weights, token by token
with a timestamp per token, and the checks that it generated what the model says.

- The model is built on the meta device and materialised one decoder layer at a time on the target device (random
  normal weights, the initializer_range transformers uses), so that a 70B model in fp8 never exists in bf16 at once.
- fp8 weights are real W8A8: each decoder Linear keeps its weight in the device's e4m3 encoding with a per-tensor
  scale; activations are quantised per tensor on the fly; the product is torch._scaled_mm with bf16 output (the
  scheme of vLLM's dynamic fp8). The LM head stays in bf16, as the engines keep it.
- Generation: a prefill of the prompt (only the last position's logits are computed), then output_len - 1 decode
  steps of one token each into a StaticCache. The tokens stay on the device, each step's input the last step's
  output, and reach the host once, after the last token: no host synchronisation between tokens. Each token is
  timed by a device event recorded after its step (TokenClock), read after the last; a device without events
  (a CPU, whose work is done when the call returns) by the host clock. No EOS: the output length is fixed. The
  prefill's logits must be finite, and each decode step's best logit (a NaN anywhere propagates into the maximum):
  kept on the device and checked once after the last token, so the check adds no work to a step.
- The decode step: eager (every layer's kernels dispatched from Python each token: at small batches the host's
  dispatch rate, not the device, bounds it), `compile=True` (torch.compile of the step), or `decode="graph"`: the
  step captured once as a device graph (Device.capture_graph) and replayed per token on static input and output
  buffers, or with `compile=True` torch.compile(mode="reduce-overhead"), which replays CUDA graphs itself. A
  capture that fails is said (`graph_failed`) and, where the caller allows, the step runs eagerly instead.
"""

from __future__ import annotations

import inspect
import math
import time
from dataclasses import dataclass

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.workloads.models.precision import creating_dtype

# a token passes the reference check when its logit in the reference pass is within this many standard
# deviations of the row's logits of the best logit there: ties and near-ties rounding may order either way
# bf16: the H200 runs of Llama-3-8B shapes (32 layers, 1,152 positions) left chosen tokens up to 0.17 of the logits'
# spread below the uncached pass's best (3 of 128 positions past 0.1); 0.25 holds that with room.
ARGMAX_TOLERANCE = {"fp32": 1e-3, "fp16": 0.05, "bf16": 0.25, "fp8": 0.5}
# Random weights give flat logits: over a 128k vocabulary the best two lie about a fifth of their spread apart, so
# the rounding of the cached path flips a few near-ties of a long generation. Up to this share of positions may
# sit past the tolerance, none past HARD_DEFICIT.
NEAR_TIE_SHARE = 0.02
HARD_DEFICIT = 1.0  # logits' spreads: a token this far below the best is wrong whatever the precision
FP8_CHECK_TOLERANCE = 1.6e-2  # fp8 product vs float64 of the same rounded operands, relative to sum |a||b| (gemm's)


# ---- the model --------------------------------------------------------------------------------------------

class Fp8Linear(torch.nn.Module):
    """A bias-free Linear in W8A8 fp8: e4m3 weight and per-tensor scale, dynamic per-tensor activation scale."""

    def __init__(self, weight: torch.Tensor, fp8_dtype: torch.dtype, out_dtype: torch.dtype = torch.bfloat16):
        super().__init__()
        self.fp8_dtype, self.out_dtype = fp8_dtype, out_dtype
        self.fp8_max = float(torch.finfo(fp8_dtype).max)
        w = weight.detach().float()
        scale = (w.abs().amax() / self.fp8_max).clamp(min=1e-12)
        # (out, in) row-major; its transpose is the column-major (in, out) operand _scaled_mm wants
        self.register_buffer("weight_fp8", (w / scale).to(fp8_dtype).contiguous())
        self.register_buffer("weight_scale", scale.reshape(()).to(torch.float32))
        self.in_features, self.out_features = weight.shape[1], weight.shape[0]

    def quantize_input(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x2 = x.reshape(-1, self.in_features).float()
        scale = (x2.abs().amax() / self.fp8_max).clamp(min=1e-12)
        return (x2 / scale).to(self.fp8_dtype), scale.reshape(()).to(torch.float32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xq, sx = self.quantize_input(x)
        out = torch._scaled_mm(xq, self.weight_fp8.t(), scale_a=sx, scale_b=self.weight_scale,
                               out_dtype=self.out_dtype)
        return out.reshape(*x.shape[:-1], self.out_features)


def fp8_linear_error(layer: Fp8Linear, x: torch.Tensor) -> float:
    """Worst error of layer(x) on its first rows against float64 arithmetic on the same quantised operands,
    relative to sum |a||b| (the scale rounding errors grow with), as the gemm workload checks fp8."""
    rows = x.reshape(-1, layer.in_features)[:8]
    out = layer(rows).to("cpu", torch.float64)
    xq, sx = layer.quantize_input(rows)
    a = xq.to("cpu", torch.float64) * float(sx)
    b = layer.weight_fp8.to("cpu", torch.float64) * float(layer.weight_scale)
    ref = a @ b.t()
    scale = a.abs() @ b.abs().t()
    return float(((out - ref).abs() / scale.clamp(min=1e-30)).max())


def build_random_llama(cfg: dict, attention: str, device: torch.device, dtype: torch.dtype,
                       fp8_dtype: torch.dtype | None = None) -> torch.nn.Module:
    """A LlamaForCausalLM with random weights, materialised on `device` one block at a time (decoder Linears
    replaced by Fp8Linear as they are made when fp8_dtype is given). Under FakeTensorMode (a shape trace: gapbench
    assess) the same modules are built at once on the device: fake tensors cost no memory, and cannot be
    materialised from the meta device."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**cfg, attn_implementation=attention)
    if fake_mode_active():
        with torch.device(device), creating_dtype(dtype):
            model = LlamaForCausalLM(config)
        if fp8_dtype is not None:
            with torch.no_grad():
                for part in [model.model.embed_tokens, *model.model.layers, model.model.norm]:
                    _quantize_linears(part, fp8_dtype, dtype)
        model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config).to(device)  # as below
        return model.eval()
    with torch.device("meta"):
        model = LlamaForCausalLM(config).to(dtype)
    std = config.initializer_range
    rotary = model.model.rotary_emb
    parts = [model.model.embed_tokens, *model.model.layers, model.model.norm, model.lm_head]
    with torch.no_grad():
        for part in parts:
            part.to_empty(device=device)
            for m in part.modules():
                if isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
                    m.weight.normal_(0.0, std)
                elif hasattr(m, "weight") and isinstance(m.weight, torch.Tensor) and m.weight.dim() == 1:
                    m.weight.fill_(1.0)  # RMSNorm
            if fp8_dtype is not None and part is not model.lm_head:
                _quantize_linears(part, fp8_dtype, dtype)
    # the rotary frequencies are computed, not parameters: rebuild them on the device
    model.model.rotary_emb = type(rotary)(config=model.config).to(device)
    return model.eval()


def fake_mode_active() -> bool:
    """Whether a FakeTensorMode is active (tensors made now have shapes and no values)."""
    return torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is not None


def _quantize_linears(module: torch.nn.Module, fp8_dtype: torch.dtype, out_dtype: torch.dtype) -> None:
    for name, child in list(module.named_children()):
        if isinstance(child, torch.nn.Linear) and child.bias is None:
            setattr(module, name, Fp8Linear(child.weight, fp8_dtype, out_dtype))
            del child
        else:
            _quantize_linears(child, fp8_dtype, out_dtype)


def first_fp8_layer(model: torch.nn.Module) -> Fp8Linear | None:
    return next((m for m in model.modules() if isinstance(m, Fp8Linear)), None)


def weight_bytes(model: torch.nn.Module) -> int:
    return sum(t.numel() * t.element_size() for t in list(model.parameters()) + list(model.buffers()))


# ---- generation ------------------------------------------------------------------------------------------

@dataclass
class Generation:
    """One batch generated: the tokens (batch × output_len, on the host) and when each column was ready."""

    tokens: torch.Tensor
    start: float
    token_times: list[float]
    finite: bool  # the prefill's and the last step's logits were all finite


class TokenClock:
    """When each token of a generation was ready, on the host's clock (time.perf_counter). With the device's
    events: one recorded after each step on its stream, all read after the last token, so that no token waits for
    the host; without them: the host clock after a synchronize per token (nothing to wait for on a CPU)."""

    def __init__(self, count: int, device=None, synchronize=None):
        first = device.new_event() if device is not None else None
        self.events = [first] + [device.new_event() for _ in range(count)] if first is not None else None
        self.sync = device.synchronize if device is not None else (synchronize or (lambda: None))
        self.kind = ("device events after each token, read after the last (one synchronize per generation)"
                     if self.events else "host clock when each token is ready (a synchronize per token)")
        self.t0, self.n, self.host = 0.0, 0, []

    def start(self) -> float:
        self.sync()
        self.t0, self.n, self.host = time.perf_counter(), 0, []
        if self.events:
            self.events[0].record()
        return self.t0

    def mark(self) -> None:
        self.n += 1
        if self.events:
            self.events[self.n].record()
        else:
            self.sync()
            self.host.append(time.perf_counter())

    def times(self) -> list[float]:
        if not self.events:
            return list(self.host)
        self.events[self.n].synchronize()
        return [self.t0 + self.events[0].elapsed_time(e) / 1e3 for e in self.events[1:self.n + 1]]


def _forward_names(model) -> dict[str, str | None]:
    """What this transformers version calls the cache, the logits-to-keep and the cache-position arguments."""
    names = set(inspect.signature(model.forward).parameters)
    inner = set(inspect.signature(model.model.forward).parameters)
    return {"cache": "cache" if "cache" in names else "past_key_values",
            "keep": next((n for n in ("logits_to_keep", "num_logits_to_keep") if n in names), None),
            "cache_position": "cache_position" if "cache_position" in names | inner else None}


def new_static_cache(model, batch: int, max_len: int, device: torch.device, dtype: torch.dtype):
    from transformers import StaticCache

    params = set(inspect.signature(StaticCache.__init__).parameters)
    if "max_batch_size" in params:  # transformers 4.x: allocated up front
        return StaticCache(config=model.config, max_batch_size=batch, max_cache_len=max_len, device=device,
                           dtype=dtype)
    return StaticCache(config=model.config, max_cache_len=max_len)  # allocated at the first update


class StaticGenerator:
    """Greedy decoding of `batch` prompts of `input_len` tokens into `output_len` tokens each.

    `timing` (a gapbench Device) times the tokens by its events and captures the decode step where `decode` is
    "graph"; a capture that fails (or a compiled step whose CUDA graphs torch.compile skipped) runs eagerly from
    then on, the reason in `graph_failed`: the caller says whether that is a fallback or a failure."""

    def __init__(self, model, batch: int, input_len: int, output_len: int, device: torch.device,
                 cache_dtype: torch.dtype, compile: bool = False, decode: str = "eager", timing=None):
        self.model, self.batch, self.input_len, self.output_len = model, batch, input_len, output_len
        self.names = _forward_names(model)
        self.cache = new_static_cache(model, batch, input_len + output_len, device, cache_dtype)
        self.prefill_positions = torch.arange(input_len, device=device).unsqueeze(0).expand(batch, -1)
        self.positions = [torch.full((batch, 1), input_len + i, device=device, dtype=torch.long)
                          for i in range(output_len - 1)]
        self.timing, self.compiled = timing, compile
        self.graph = decode == "graph"
        self.graph_failed = ""  # why the step is not replayed as a graph after all ('' while it is, or eager)
        self.replay = None  # the captured step (decode="graph" without compile), after the first decode step
        mode = {"mode": "reduce-overhead"} if self.graph and compile else {}
        self.decode = torch.compile(self._decode, dynamic=False, **mode) if compile else self._decode
        self.skips = cudagraph_skips()  # torch.compile's count of graphs it did not capture, before this one
        self.clock = TokenClock(output_len, timing)

    @property
    def decode_mode(self) -> str:
        """What the decode step ran as: "graph" (replayed) or "eager" (dispatched from the host every token)."""
        return "graph" if self.graph and not self.graph_failed else "eager"

    def _logits(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        kw = {self.names["cache"]: self.cache, "use_cache": True, "position_ids": positions}
        if self.names["keep"]:
            kw[self.names["keep"]] = 1
        if self.names["cache_position"]:
            kw["cache_position"] = positions[0]
        return self.model(input_ids=ids, **kw).logits[:, -1]

    def _decode(self, token: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        best, token = self._logits(token, positions).max(-1)  # NaN propagates into the maximum
        return token, best

    def _capture(self, token: torch.Tensor, pos: torch.Tensor) -> None:
        """The decode step captured on static buffers: the input token column and position, the output token and
        best logit. The capture's warm-up steps write the cache at the first decode position, which the first
        replay writes again before it reads it."""
        self.static_in = (token[:, None].clone(), pos.clone())
        counters = [(t, t.clone()) for t in self._counters()]
        try:
            self.replay, self.static_out = self.timing.capture_graph(lambda: self._decode(*self.static_in))
        except Exception as e:  # noqa: BLE001 - a step that cannot be captured is a finding, said in the row
            self.graph_failed = f"the decode step could not be captured as a graph: {type(e).__name__}: {e}"
            self.replay = None
        for t, before in counters:  # the warm-up steps advanced them; the first replay is the first step
            t.copy_(before)

    def _counters(self) -> list[torch.Tensor]:
        """The cache's position counters: integer tensors of one element on its layers (transformers 5's
        cumulative_length, the slot each update writes at, advanced on the device by every step run)."""
        return [v for layer in getattr(self.cache, "layers", ()) for v in vars(layer).values()
                if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.is_floating_point()]

    def step(self, token: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One decode step: the next token column and its best logits, on the device."""
        if self.graph and not self.compiled and not self.graph_failed:
            if self.replay is None:
                self._capture(token, pos)
            if self.replay is not None:
                self.static_in[0].copy_(token[:, None])
                self.static_in[1].copy_(pos)
                self.replay()
                return self.static_out[0].clone(), self.static_out[1].clone()  # the next replay overwrites them
        token, top = self.decode(token[:, None], pos)
        if self.graph and self.compiled:  # CUDA graph trees reuse their output memory at the next replay
            return token.clone(), top.clone()
        return token, top

    def reset(self) -> None:
        if hasattr(self.cache, "reset"):
            with torch.inference_mode():  # the cache's tensors were made under inference mode
                self.cache.reset()

    def prefill_only(self, prompt: torch.Tensor) -> None:
        """The prefill with the whole cache allocated: this batch's memory peak (for the batch-size search)."""
        self.reset()
        with torch.inference_mode():
            self._logits(prompt, self.prefill_positions).argmax(-1).cpu()

    def stream(self, prompt: torch.Tensor):
        """Yields each generated token column (one token per sequence, on the device) as soon as its step is
        enqueued; finally returns a boolean tensor: whether every step's logits were finite (read on the host by
        the caller, so that the loop also runs on fake tensors, which have no values: gapbench assess traces it)."""
        self.reset()
        with torch.inference_mode():
            logits = self._logits(prompt, self.prefill_positions)
            token = logits.argmax(-1)
            yield token
            finite = torch.isfinite(logits).all()
            best = []  # each step's best logit, kept on the device: checked once at the end, no work per step
            for pos in self.positions:
                token, top = self.step(token, pos)
                yield token
                best.append(top)
            if best:
                finite = finite & torch.isfinite(torch.stack(best)).all()
        return finite

    def __call__(self, prompt: torch.Tensor, synchronize=None) -> Generation:
        """One generation, each token timed (TokenClock); the tokens reach the host once, after the last."""
        if self.timing is None and synchronize is not None:
            self.clock.sync = synchronize
        start = self.clock.start()
        columns = []
        steps = self.stream(prompt)
        while True:
            try:
                columns.append(next(steps))
            except StopIteration as done:
                finite = done.value
                break
            self.clock.mark()
        times = self.clock.times()
        if self.graph and self.compiled and not self.graph_failed and cudagraph_skips() > self.skips:
            self.graph_failed = ("torch.compile(mode=\"reduce-overhead\") skipped CUDA graphs for the decode step "
                                 "(TORCH_LOGS=perf_hints says why): it ran compiled, dispatched from the host")
        return Generation(torch.stack(columns, dim=1).cpu(), start, times, bool(finite))


def cudagraph_skips() -> int:
    """How many graphs torch.compile's reduce-overhead mode has declined to capture in this process."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["inductor"]["cudagraph_skips"])
    except Exception:  # noqa: BLE001 - a torch without the counter: nothing to compare
        return 0


def random_prompts(batch: int, input_len: int, vocab: int, seed: int = 0) -> torch.Tensor:
    """Random token ids (no prefix shared between prompts, as the serving benchmarks' random datasets)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (batch, input_len), generator=g)


# ---- the check -------------------------------------------------------------------------------------------

def greedy_mismatches(model, prompt: torch.Tensor, tokens: torch.Tensor, dtype: str, rows: int = 2) -> list[str]:
    """Each generated token checked against one uncached forward of prompt + generated tokens (teacher forcing):
    position j's token must be the argmax of that pass's logits at j, up to ARGMAX_TOLERANCE of the logits' spread
    (near-ties); of a sequence's positions, NEAR_TIE_SHARE may lie past that tolerance, none past HARD_DEFICIT.
    The first `rows` sequences are checked. Returns what is wrong, one line per sequence."""
    bad: list[str] = []
    n_in = prompt.shape[1]
    tol = ARGMAX_TOLERANCE.get(dtype, 0.1)
    with torch.inference_mode():
        for r in range(min(rows, prompt.shape[0])):
            gen = tokens[r].to(prompt.device)
            ids = torch.cat([prompt[r], gen[:-1]]).unsqueeze(0)
            logits = model(input_ids=ids, use_cache=False).logits[0, n_in - 1:].float()
            if not bool(torch.isfinite(logits).all()):
                bad.append(f"sequence {r}: the reference pass has non-finite logits")
                continue
            chosen = logits.gather(-1, gen.long().unsqueeze(-1)).squeeze(-1)
            off, worst = argmax_misses((logits.max(-1).values - chosen) / logits.std(-1).clamp(min=1e-6), tol)
            if off:
                j = off[0]
                bad.append(f"sequence {r}: token {j} is {int(gen[j])} but the uncached pass prefers "
                           f"{int(logits[j].argmax())} ({len(off)} of {len(gen)} positions differ; the furthest "
                           f"{worst:.2g} of the logits' spread below the best)")
    return bad


def argmax_misses(deficit: torch.Tensor, tol: float) -> tuple[list[int], float]:
    """(the positions past the tolerance, the largest deficit) when they make the generation wrong: more of them
    than NEAR_TIE_SHARE of the positions, or one past HARD_DEFICIT; else ([], 0). `deficit`: per position, how far
    the chosen token's logit lies below the best, in the logits' spread."""
    off = (deficit > tol).nonzero().flatten().tolist()
    worst = float(deficit.max()) if off else 0.0
    if off and (len(off) > int(NEAR_TIE_SHARE * deficit.numel()) or worst > HARD_DEFICIT):
        return off, worst
    return [], 0.0


def memory_estimate(cfg: dict, batch: int, input_len: int, output_len: int, weight_bytes_: float,
                    kv_bytes: int = 2, act_bytes: int = 2) -> float:
    """Bytes one batch needs: weights, the static KV cache of every sequence, the prefill's activations."""
    layers, h = cfg["num_hidden_layers"], cfg["hidden_size"]
    kv_heads = cfg.get("num_key_value_heads") or cfg["num_attention_heads"]
    head_dim = h // cfg["num_attention_heads"]
    kv = 2 * layers * kv_heads * head_dim * (input_len + output_len) * kv_bytes
    act = input_len * (4 * h + 3 * cfg["intermediate_size"]) * act_bytes + cfg["vocab_size"] * 4
    return weight_bytes_ + batch * (kv + act)


def model_bytes(cfg: dict, dtype: str) -> float:
    """Weight bytes of the model in this precision (fp8: decoder Linears 1 byte, the rest bf16)."""
    from gapbench.workloads.models.llm_train import llama_params

    total, matmul = llama_params(cfg)
    lm_head = cfg["vocab_size"] * cfg["hidden_size"]
    if dtype == "fp8":
        decoder = matmul - lm_head
        return decoder * 1 + (total - decoder) * 2
    return total * DTYPES[dtype].itemsize


def decode_floor_s(weight_bytes_: float, output_len: int, bandwidth_tbs: float | None) -> float | None:
    """A lower bound on the decode time: every step reads every weight once from memory."""
    if not bandwidth_tbs:
        return None
    return weight_bytes_ * max(output_len - 1, 0) / (bandwidth_tbs * 1e12)


def isfinite_number(x: float) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)
