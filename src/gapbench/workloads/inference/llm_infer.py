"""LLM inference: time to first token, time per output token, inter-token latency and throughput of a
Llama-architecture model with random weights, point by point along the throughput-interactivity curve.

A point is one batch size (static batching in transformers, the default), one offline vLLM call
(`--engine vllm`), or one concurrency against a running OpenAI-compatible server (`--server URL`), for one
input/output length pair. Each point is measured once, over several repeats, and gives one row per metric
(infer_metrics.METRICS): the rows of a point share the variant but for its `metric` key. The curve's frontier and
the gap at equal interactivity are compare's (compare.frontier). Definitions: docs/inference.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from gapbench.devices.dtypes import DTYPES
from gapbench.results import Measurement
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.inference import metrics as im
from gapbench.workloads.inference.options import InferOptions
from gapbench.workloads.models.llm_train import LLAMA2_7B, LLAMA2_70B
from gapbench.workloads.models.memory import release_memory
from gapbench.workloads.models.precision import attention_choice, default_dtype, sdpa_context

# Llama 3 / 3.1 / 3.3 shapes: 128256-token vocabulary, 8 KV heads, rope theta 500000
LLAMA3_8B = dict(vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=131072, rms_norm_eps=1e-5,
                 rope_theta=500000.0)
LLAMA3_70B = dict(LLAMA3_8B, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64)
# the llm-train tiny shape with an FFN width that is a multiple of 16 (fp8 matmuls need it) and room for prompts
TINY = dict(vocab_size=512, hidden_size=128, intermediate_size=352, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-5)

# InferenceMAX's input/output lengths: chat (1k/1k), reasoning (1k/8k), summarisation (8k/1k)
INFERENCEMAX_LENGTHS = ((1024, 1024), (1024, 8192), (8192, 1024))

POINT_KEYS = ("batch_size", "concurrency", "request_rate")  # what varies along one curve
# the point a shape trace (gapbench assess) stands for when the options give no batch size: a mid-sweep batch of
# the tiny preset, and the row whose value is the seconds of that iteration (one generate call of the batch)
TRACE_BATCH = 8
ITERATION_METRIC = "e2e_ms"
FAILED = "_failed"  # the key of a point's failure among its rows


@dataclass(frozen=True)
class InferPreset:
    description: str
    config: dict
    lengths: tuple[tuple[int, int], ...]
    max_batch: int  # the top of the batch-size sweep (1, 2, 4, … up to this, and up to memory)


PRESETS: dict[str, InferPreset] = {
    "tiny": InferPreset("2 layers, hidden 128, GQA 4/2 heads, vocab 512; 128 in / 32 out; batch 1…256 (seconds "
                        "per point on a CPU)", TINY, ((128, 32),), 256),
    "llama2-7b": InferPreset("Llama-2-7B (6.74e9 params), 1024 in / 1024 out (Llama-2's context is 4096); batch "
                             "1…256", LLAMA2_7B, ((1024, 1024),), 256),
    "llama2-70b": InferPreset("Llama-2-70B (69.0e9 params, GQA 64/8), 1024 in / 1024 out; batch 1…256 where it "
                              "fits (fp8 weights: 69 GB)", LLAMA2_70B, ((1024, 1024),), 256),
    "llama3-8b": InferPreset("Llama-3.1-8B shape (8.03e9 params, vocab 128256, GQA 32/8), InferenceMAX's 1k/1k, "
                             "1k/8k, 8k/1k; batch 1…256", LLAMA3_8B, INFERENCEMAX_LENGTHS, 256),
    "llama3-70b": InferPreset("Llama-3.x-70B shape (70.6e9 params), InferenceMAX's 1k/1k, 1k/8k, 8k/1k; batch "
                              "1…256 where it fits", LLAMA3_70B, INFERENCEMAX_LENGTHS, 256),
}


def metric_names(kind: str, slo: im.Slo) -> list[str]:
    """The rows a point of this kind gives: prefill/decode phases only where they are phases (static batches,
    offline engines); per-token gaps only where tokens are seen one by one; SLO rows only with limits."""
    out = [n for n in im.METRICS if n not in im.SLO_METRICS]
    if kind == "server":
        out = [n for n in out if n not in im.PHASE_METRICS]
    if slo.given:
        out += list(im.SLO_METRICS)
    return out


def point_of(params: dict) -> tuple:
    """The identity of the point a row belongs to (its variant without the metric)."""
    return tuple(sorted((k, str(v)) for k, v in params.items() if k != "metric"))


def series_params(params: dict) -> dict:
    """A variant without what varies along a curve: the identity of the curve (compare.frontier uses the same)."""
    return {k: v for k, v in params.items() if k not in POINT_KEYS and k != "metric"}


class LlmInfer(Workload):
    name = "llm-infer"
    category = "model"
    unit = "tokens/s"
    unit_help = ("one row per metric of each point (docs/inference.md): output tokens/s per device, tokens/s per "
                 "user, TTFT, TPOT, ITL p50/p90/p99, E2E, total/prefill/decode tokens/s")
    description = ("LLM inference along the throughput-interactivity curve: TTFT, TPOT, ITL, tokens/s (transformers "
                   "static batching, vLLM offline, or any OpenAI-compatible server)")
    presets = {k: p.description for k, p in PRESETS.items()}
    default_preset = "tiny"
    options = InferOptions
    dtypes = ("fp32", "bf16", "fp16", "fp8")  # fp8: fp8 weights and activations in the linear layers

    def __init__(self):
        self._point: tuple[tuple, dict[str, Measurement]] | None = None  # the last point measured, by metric
        self.models = ModelCache()

    def check(self, options: InferOptions, preset: str) -> None:
        p = _preset(preset)
        for i, o in options.pairs or ():
            if i + o > p.config["max_position_embeddings"]:
                raise ValueError(f"{preset}: {i} + {o} tokens exceed the model's context of "
                                 f"{p.config['max_position_embeddings']}")

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        p = _preset(preset)
        opts = self.opts(ctx)
        self.check(opts, preset)
        lengths = opts.pairs or p.lengths
        names = metric_names(opts.kind, opts.slo)
        out = []
        for base in _bases(preset, p, opts, ctx, lengths):
            for point in _points(p, opts, ctx, base):
                out += [Variant(dict(point, metric=n)) for n in names]
        return out

    def point_of(self, params: dict) -> tuple:
        return point_of(params)

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        key = self.point_of(variant.params)
        if self._point is None or self._point[0] != key:
            self._point = None  # the previous point's measurements are not needed any more
            self._point = (key, self._measure_or_fail(variant, ctx))
        rows = self._point[1]
        name = variant.params["metric"]
        if name in rows:
            return rows[name].replace(variant=variant.params)
        failed = rows.get(FAILED)
        if failed is not None:
            d = im.METRICS[name]
            return failed.replace(variant=variant.params, unit=d.unit, higher_is_better=d.higher_is_better,
                                  value=None, stats=None)
        why = (f"{name}: vLLM's offline engine returns whole requests, so gaps between single tokens are not "
               "observable (measure `vllm serve` with --server for them)" if name in im.ITL_METRICS and
               variant.params["engine"] == "vllm" else f"{name} is not measured by this engine")
        return self.failed(variant, ctx, "unsupported", why)

    def failed(self, variant: Variant, ctx: Context, status: str, reason: str, **extra) -> Measurement:
        """A failed row in its metric's unit (each row of a point is one metric)."""
        m = super().failed(variant, ctx, status, reason, **extra)
        d = im.METRICS.get(variant.params.get("metric"))
        return m if d is None else m.replace(unit=d.unit, higher_is_better=d.higher_is_better)

    def build_iteration(self, preset: str, device, options: dict | None = None) -> Callable[[], list]:
        """One measured generation for a shape trace (gapbench assess): the point's batch of random prompts
        (`batch_size` from the options, else TRACE_BATCH), prefill and greedy decode into the static KV cache up to
        the output length, as infer_local times it — from the cache reset to the last token's step (eager), the
        row `e2e_ms` (every request of a static batch starts and ends together). At the run's precision, on
        `device` (a gapbench Device); works under FakeTensorMode: the loop reads no values."""
        from gapbench.workloads.inference import generate as gen
        from gapbench.workloads.inference import local as infer_local

        p = _preset(preset)
        params = self.traced_variant(preset, device, options)
        dtype = params["dtype"]
        why = infer_local.precision_problem(device, dtype)
        if why:
            raise ValueError(why)
        attn_impl, backends = attention_choice(params)
        batch, n_in, n_out = params["batch_size"], params["input_len"], params["output_len"]
        dev = device.torch_device
        model = infer_local.build_model(p, dtype, attn_impl, device)  # the measured model (its weights when real)
        g = gen.StaticGenerator(model, batch, n_in, n_out, dev, DTYPES[infer_local.compute_dtype(dtype)].torch)
        prompts = infer_local.prompts_for(batch, n_in, p, device)

        def generate() -> list[torch.Tensor]:
            with sdpa_context(backends):
                steps = g.stream(prompts)
                columns = [next(steps) for _ in range(n_out)]  # up to the last token's step: the e2e row
                steps.close()
            return columns  # the tokens, one column per step (no operator: a trace records nothing more)

        return generate

    def traced_variant(self, preset: str, device, options: dict | None = None) -> dict:
        """The variant of the row build_iteration's generation is measured by: its point's `e2e_ms` row (seconds
        of one generate call of the batch). One point: the options' first length pair and batch size, else
        the preset's first lengths and TRACE_BATCH; the local transformers engine."""
        opts = self.options.model_validate(dict(options or {}))
        if opts.kind != "transformers":
            raise ValueError("only the transformers engine's generation can be traced (a server's or vLLM's "
                             "kernels are not PyTorch's eager operators)")
        if opts.batch == "auto":
            raise ValueError("--batch-size auto is found by running out of memory; give a number to trace")
        opts = opts.model_copy(update={"batch_size": opts.batch[0] if opts.batch else TRACE_BATCH})
        ctx = Context(device=device, preset=preset, options=opts)
        first = self.variants(preset, ctx)[0].params
        return dict(first, metric=ITERATION_METRIC)

    def _measure_or_fail(self, variant: Variant, ctx: Context) -> dict[str, Measurement]:
        """The point's rows; an exception fails the point once (`oom` when the device ran out of memory), not
        once per row: its other rows must not build and fail it again."""
        try:
            return self._measure_point(variant, ctx)
        except Exception as e:  # noqa: BLE001 - a point's failure is a finding, reported on each of its rows
            status = "oom" if ctx.device.is_oom(e) else "error"
            reason = f"{type(e).__name__}: {e}{_where(e)}"
        if status == "oom":
            self.models.drop()
        release_memory(ctx.device)  # outside the except block: only now is the failed try's memory garbage
        return self.failure(variant, ctx, status, reason)

    def _measure_point(self, variant: Variant, ctx: Context) -> dict[str, Measurement]:
        from gapbench.workloads.inference import local as infer_local
        from gapbench.workloads.inference import server as infer_server
        from gapbench.workloads.inference import vllm as infer_vllm

        kind = variant.params["engine"]
        measure = {"server": infer_server.measure, "vllm": infer_vllm.measure}.get(kind, infer_local.measure)
        return measure(self, variant, ctx, _preset(ctx.preset), self.opts(ctx))

    def rows(self, variant: Variant, ctx: Context, stats: dict, common: dict, detail: dict | None = None,
             **extra) -> dict[str, Measurement]:
        """One ok Measurement per metric that has Stats; `common` metrics go on every row, `detail` (the point's
        summary, request percentiles) on its first row only, `extra` (power, peak memory, …) on every row."""
        out = {}
        for name, s in stats.items():
            d = im.METRICS[name]
            metrics = dict(common, **(detail or {})) if not out else dict(common)
            out[name] = Measurement(workload=self.name, preset=ctx.preset, variant=variant.params, value=s.median,
                                    unit=d.unit, higher_is_better=d.higher_is_better, stats=s, status="ok",
                                    metrics=metrics, **extra)
        return out

    def failure(self, variant: Variant, ctx: Context, status: str, reason: str, **extra) -> dict[str, Measurement]:
        """A point that could not be measured: every row of it carries the status and the reason."""
        return {FAILED: self.failed(variant, ctx, status, reason, **extra)}


def _where(e: BaseException) -> str:
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return f" at {tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb is not None else ""


def _bases(preset: str, p: InferPreset, opts: InferOptions, ctx: Context, lengths) -> list[dict]:
    """The variant keys every point of one curve shares, one dict per dtype and length pair."""
    if opts.kind == "server":
        engines = [{"engine": "server", "batching": "server (the engine's own)",
                    "dtype": ",".join(opts.dtype or []) or "as served", "devices": opts.server_devices}]
    else:
        batching = "static" if opts.engine == "transformers" else "engine (vLLM's scheduler, all prompts at once)"
        engines = [{"engine": opts.engine, "batching": batching, "dtype": d, "attention": opts.attention,
                    "compile": opts.compile} for d in choose_dtypes(ctx)]
    return [{"model": preset, **engine, "input_len": i, "output_len": o} for engine in engines for i, o in lengths]


def choose_dtypes(ctx: Context) -> list[str]:
    """The dtypes asked for that llm-infer measures, else bf16 where the device has it (fp16 otherwise, fp32 on a
    CPU without bf16); fp8 means fp8 weights and activations in the linear layers."""
    return ctx.dtypes(LlmInfer.dtypes, [default_dtype(ctx.device)])


def _points(p: InferPreset, opts: InferOptions, ctx: Context, base: dict) -> list[dict]:
    if opts.kind == "server":
        rate = "inf" if opts.arrival_rate is None else opts.arrival_rate
        return [dict(base, concurrency=c, request_rate=rate) for c in opts.concurrencies]
    if opts.batch == "auto":
        return [dict(base, batch_size="auto")]
    sizes = opts.batch or batch_sweep(p, ctx, base)
    return [dict(base, batch_size=b) for b in sizes]


def batch_sweep(p: InferPreset, ctx: Context, base: dict) -> list[int]:
    """1, 2, 4, … up to the preset's top and up to what memory should hold (at least batch 1, which reports
    `oom` with the estimate when even that cannot fit)."""
    from gapbench.workloads.inference import local as infer_local

    free = infer_local.usable_memory(ctx.device)
    out, b = [], 1
    while b <= p.max_batch:
        if out and infer_local.batch_bytes(p.config, b, base["input_len"], base["output_len"], base["dtype"]) > free:
            break
        out.append(b)
        b *= 2
    return out


class ModelCache:
    """The model of the last points, kept while consecutive points share it (a 70B build is minutes)."""

    def __init__(self):
        self.key: tuple | None = None
        self.model = None

    def get(self, key: tuple, build):
        if self.key != key:
            self.model, self.key = None, None
            release_memory()
            self.model = build()
            self.key = key
        return self.model

    def drop(self) -> None:
        self.model, self.key = None, None


def _preset(name: str) -> InferPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown llm-infer preset {name!r}; known: {', '.join(PRESETS)}")
    return PRESETS[name]
