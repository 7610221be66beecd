"""llm-infer on vLLM's offline engine (`--engine vllm`): `vllm.LLM` with random weights (`load_format="dummy"`)
from the preset's config, prompts of random token ids, greedy, `ignore_eos` and a fixed output length: what
`vllm bench throughput` and `vllm bench latency` measure, on the same rows as every other stack.

Offline, vLLM hands back whole requests, not tokens. A point is therefore timed as optimum-benchmark times
generation: a call generating one token per request is the prefill (its time is the TTFT), a call generating
output_len tokens gives the end-to-end latency, and TPOT = (E2E − TTFT) / (output_len − 1). Gaps between single
tokens are not observable offline: the ITL rows say so (`vllm serve` with `--server` measures them).

The engine is given the preset's config in a temporary directory (vLLM reads a model directory; nothing is
downloaded and the directory is removed after the run); `--engine-args k=v,...` are passed to vllm.LLM and
recorded with vLLM's version in every row.
"""

from __future__ import annotations

import tempfile
import time

from gapbench.devices.dtypes import DTYPES
from gapbench.workloads.inference import metrics as im
from gapbench.workloads.inference.options import parse_engine_args
from gapbench.workloads.models.prepare import missing_dependency

VLLM_EAGER = ("eager decode (enforce_eager, gapbench's default for vLLM without --compile): every step dispatched from "
              "Python without vLLM's CUDA graphs; at small batches the host's dispatch rate bounds this figure, not "
              "the device (--compile lets vLLM capture its graphs)")
INSTALL_HINT = ("install vLLM for this device's stack: pip install vllm (CUDA); ROCm, XPU, TPU and CPU builds: "
                "https://docs.vllm.ai/en/latest/getting_started/installation/")


def vllm_missing() -> str:
    """'' when vLLM imports, else why not, with the install hint."""
    try:
        import vllm  # noqa: F401
    except Exception as e:  # a broken install is as unusable as a missing one
        why = "is not installed" if isinstance(e, ImportError) else f"fails to import ({type(e).__name__}: {e})"
        return f"--engine vllm: vllm {why}; {INSTALL_HINT}"
    return ""


def _vllm_dtype(dtype: str) -> str:
    """vLLM's dtype: the storage type's name; fp8 is bf16 activations with fp8-quantised linear layers."""
    return "bfloat16" if dtype == "fp8" else DTYPES[dtype].storage


def measure(w, variant, ctx, preset, opts) -> dict:
    missing = vllm_missing() or missing_dependency("transformers")
    if missing:
        return w.failure(variant, ctx, "unsupported", missing)
    prm = variant.params
    extra = parse_engine_args(opts.engine_args) if opts.engine_args else {}
    key = ("vllm", ctx.preset, prm["dtype"], prm["input_len"], prm["output_len"], prm["compile"], opts.engine_args)
    engine = w.models.get(key, lambda: _Engine(preset, prm, extra))
    return _measure(w, variant, ctx, engine)


class _Engine:
    """A vllm.LLM on the preset's config with dummy (random) weights, sized for the preset's largest batch."""

    def __init__(self, preset, prm: dict, extra: dict):
        import vllm
        from transformers import LlamaConfig

        self.args = dict(load_format="dummy", skip_tokenizer_init=True, dtype=_vllm_dtype(prm["dtype"]),
                         max_model_len=prm["input_len"] + prm["output_len"], max_num_seqs=preset.max_batch, seed=0,
                         enforce_eager=not prm["compile"])
        if prm["dtype"] == "fp8":
            self.args["quantization"] = "fp8"
        self.args.update(extra)
        self.vocab = preset.config["vocab_size"]
        with tempfile.TemporaryDirectory(prefix="gapbench-vllm-") as d:
            LlamaConfig(**preset.config, architectures=["LlamaForCausalLM"]).save_pretrained(d)
            self.llm = vllm.LLM(model=d, **self.args)
        self.info = {"name": "vllm", "version": vllm.__version__, "launch_args": dict(self.args),
                     "batching": "continuous (vLLM's scheduler), all prompts submitted at once"}

    def generate(self, prompts: list[list[int]], tokens: int) -> tuple[float, list[list[int]]]:
        from vllm import SamplingParams

        sp = SamplingParams(max_tokens=tokens, min_tokens=tokens, ignore_eos=True, temperature=0.0, detokenize=False)
        t0 = time.perf_counter()
        outs = self.llm.generate([{"prompt_token_ids": p} for p in prompts], sp, use_tqdm=False)
        return time.perf_counter() - t0, [list(o.outputs[0].token_ids) for o in outs]


def _measure(w, variant, ctx, engine: _Engine) -> dict:
    from gapbench.workloads.inference.generate import random_prompts

    prm = variant.params
    batch, n_in, n_out = prm["batch_size"], prm["input_len"], prm["output_len"]
    if batch == "auto":
        return w.failure(variant, ctx, "unsupported", "--batch-size auto: vLLM sizes its own batches; give sizes")
    prompts = random_prompts(batch, n_in, engine.vocab).tolist()
    budget = ctx.budget()
    eager = bool(engine.args.get("enforce_eager"))
    metrics = {"engine_info": engine.info, "batch_size": batch,
               "timer": "host clock around LLM.generate: 1 token per request (prefill), then output_len tokens",
               "decode": "eager" if eager else "graph", "decode_asked": "enforce_eager" if eager else "vLLM's own"}
    if eager:
        metrics["decode_note"] = VLLM_EAGER
    cold, reference = engine.generate(prompts, n_out)
    metrics["first_run_s"] = cold
    wrong = _wrong(reference, n_out, engine.vocab)
    if wrong:
        return w.failure(variant, ctx, "wrong_result", wrong, metrics=metrics)
    started = time.perf_counter()
    rounds = []
    while True:
        ttft, _ = engine.generate(prompts, 1)
        e2e, tokens = engine.generate(prompts, n_out)
        if tokens != reference:
            return w.failure(variant, ctx, "wrong_result", "the greedy tokens of a timed run differ from the "
                             "reference run's", metrics=metrics)
        rounds.append(_round(batch, n_in, n_out, ttft, e2e))
        spent = time.perf_counter() - started
        per = spent / len(rounds)
        if len(rounds) == 1 and per * budget.min_repeats > budget.seconds:
            return w.failure(variant, ctx, "too_slow", f"one point takes {per:.3g} s; {budget.min_repeats} "
                             f"repeats do not fit the {budget.seconds:.0f} s budget",
                             metrics=dict(metrics, estimated_time_per_iter_s=per))
        if len(rounds) >= budget.repeats or (len(rounds) >= budget.min_repeats and spent + per > budget.seconds):
            break
    stats = im.summarize(rounds)
    rows = w.rows(variant, ctx, stats, metrics, {"point": {n: {"median": s.median, "ci95": list(s.ci95)}
                                                           for n, s in stats.items()}})
    if eager and ctx.device.is_accelerator:
        from gapbench.workloads.inference.local import host_bound

        rows = host_bound(rows)
    return rows


def _wrong(tokens: list[list[int]], n_out: int, vocab: int) -> str:
    if any(len(t) != n_out for t in tokens):
        return f"a request returned {min(len(t) for t in tokens)} tokens instead of {n_out}"
    if any(x < 0 or x >= vocab for t in tokens for x in t):
        return "a token id outside the vocabulary"
    return ""


def _round(batch: int, n_in: int, n_out: int, ttft: float, e2e: float) -> dict:
    """A round's metrics from the two timed calls; inter-token gaps are not observable offline."""
    trace = im.RequestTrace(0.0, (ttft, e2e) if n_out > 1 else (ttft,), n_in, n_out)
    m = im.round_metrics([trace] * batch, phases=True)
    for k in im.ITL_METRICS:
        m.pop(k, None)
    return m
