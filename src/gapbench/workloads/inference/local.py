"""llm-infer's own engine: transformers with static batching and a static KV cache (generate.StaticGenerator).

One point = one batch of `batch_size` random prompts of `input_len` tokens, generating `output_len` tokens each,
greedy, without EOS. Every request of the batch starts together and ends together: static batching, not a serving
engine's continuous batching. The decode step runs as --decode says (decode_plan): replayed as a device graph, or
eagerly — dispatched from Python every token, which at small batches the host bounds, not the device; every row
says which (`metrics.decode`), and an eager row on an accelerator says it is host-bound (`metrics.bound`). The point is measured like the timing engine measures anything (measure.time_fn's
conventions): a cold run (allocation, compilation), the correctness check, a warm run, then repeats cut to the
budget (never fewer than its minimum); each repeat is one round of requests and gives one value per metric.
"""

from __future__ import annotations

import time

import torch

from gapbench.devices import available_host_memory
from gapbench.devices.dtypes import DTYPES
from gapbench.stats import quantile
from gapbench.timing import Budget, TooSlow, time_calls
from gapbench.workloads.inference import generate as gen
from gapbench.workloads.inference import metrics as im
from gapbench.workloads.models.flops import time_at_peak_s
from gapbench.workloads.models.memory import (
    PeakMemory,
    address_space_headroom,
    host_memory_shortfall,
    largest_batch,
    release_memory,
)
from gapbench.workloads.models.precision import (
    attention_choice,
    is_unavailable_kernel,
    no_kernel_reason,
    sdpa_context,
)
from gapbench.workloads.models.prepare import missing_dependency

LOCAL_DTYPES = ("fp32", "bf16", "fp16", "fp8")
# the rows an eager decode bounds by the host: all but the prefill's (its one forward of the whole prompt)
PREFILL_ROWS = ("ttft_ms", "prefill_tokens_per_s")
HOST_BOUND = ("eager decode: every token's step is dispatched from Python, layer by layer, with no graph capture; "
              "at small batches the host's dispatch rate bounds this figure, not the device (serving engines "
              "replay captured graphs: --decode graph)")
USABLE = 0.9  # share of free memory a batch may plan for
MAX_AUTO_BATCH = 4096


def usable_memory(device) -> float:
    """Bytes a batch may plan for: free device memory; where that is host memory, also what the worker's
    address-space limit and the host's available memory leave."""
    free = float(device.free_memory())
    if device.host_memory_is_device_memory:
        headroom = address_space_headroom()
        if headroom is not None:
            free = min(free, headroom)
        free = min(free, available_host_memory())
    return free * USABLE


def batch_bytes(cfg: dict, batch: int, input_len: int, output_len: int, dtype: str) -> float:
    # fp8 quantises each linear layer's input from a float32 copy: its activations are 4 bytes wide
    return gen.memory_estimate(cfg, batch, input_len, output_len, gen.model_bytes(cfg, dtype),
                               act_bytes=4 if dtype in ("fp32", "fp8") else 2, kv_bytes=4 if dtype == "fp32" else 2)


def compute_dtype(dtype: str) -> str:
    return "bf16" if dtype == "fp8" else dtype


def precision_problem(device, dtype: str) -> str:
    """'' when this device can run the model in `dtype`, else why not."""
    if dtype not in LOCAL_DTYPES:
        return f"dtype {dtype!r}: llm-infer runs {', '.join(LOCAL_DTYPES)}"
    if dtype == "fp8":
        why = device.matmul_unsupported("fp8")
        if why:
            return f"fp8 weights need an fp8 matmul (torch._scaled_mm): {why}"
    why = device.dtype_unsupported(compute_dtype(dtype))
    return f"{compute_dtype(dtype)}: {why}" if why else ""


def memory_shortfall(need: float, device) -> str:
    """'' when `need` bytes should fit, else the reason (the estimate and what the device has)."""
    if device.host_memory_is_device_memory:
        return host_memory_shortfall(need, device)
    total = device.total_memory
    if need > total:
        return (f"needs about {need / 2**30:.1f} GiB (weights, static KV cache, prefill activations); the device "
                f"has {total / 2**30:.1f} GiB")
    return ""


def time_floor_s(cfg: dict, batch: int, input_len: int, output_len: int, dtype: str, device) -> float | None:
    """A lower bound on one generation: the prefill's matmuls at the dense peak plus a read of every weight per
    decode step at the memory bandwidth (None where gapbench knows neither)."""
    from gapbench.workloads.models.llm_train import llama_params

    _, matmul = llama_params(cfg)
    prefill = time_at_peak_s(2.0 * matmul * batch * input_len, device, dtype)
    bandwidth = None
    try:
        from gapbench.specs import peak_bandwidth_tbs

        bandwidth = peak_bandwidth_tbs(device.identity())
    except Exception:  # a spec problem must not fail a measurement
        bandwidth = None
    decode = gen.decode_floor_s(gen.model_bytes(cfg, dtype), output_len, bandwidth)
    if prefill is None and decode is None:
        return None
    return (prefill or 0.0) + (decode or 0.0)


def decode_plan(asked: str, device, compile: bool) -> tuple[str, str]:
    """(the decode step to run, why not a graph): graph where asked for or where auto finds the device captures
    graphs; eager where asked for, or where auto finds it cannot (the reason kept for the row). A graph asked for
    on a device without one gives its reason: the point is `unsupported`."""
    why = device.graph_unsupported() or (device.compile_unsupported() if compile else "")
    if asked == "eager":
        return "eager", ""
    if asked == "graph":
        return "graph", why
    return ("eager", why) if why else ("graph", "")


def measure(w, variant, ctx, preset, opts) -> dict:
    """Every row of one point (a dict metric -> Measurement), or the point's failure."""
    prm = variant.params
    missing = missing_dependency("transformers")
    if missing:
        return w.failure(variant, ctx, "unsupported", missing)
    why = precision_problem(ctx.device, prm["dtype"])
    if why:
        return w.failure(variant, ctx, "unsupported", why)
    plan = decode_plan(opts.decode, ctx.device, prm["compile"])
    if plan[0] == "graph" and plan[1]:
        return w.failure(variant, ctx, "unsupported", f"--decode graph: {plan[1]}",
                         metrics={"decode": "graph", "decode_asked": opts.decode})
    cfg, batch = preset.config, prm["batch_size"]
    n_in, n_out = prm["input_len"], prm["output_len"]
    short = memory_shortfall(batch_bytes(cfg, 1 if batch == "auto" else batch, n_in, n_out, prm["dtype"]),
                             ctx.device)
    if short:
        return w.failure(variant, ctx, "oom", short)
    budget = ctx.budget()
    if batch != "auto":
        floor = time_floor_s(cfg, batch, n_in, n_out, prm["dtype"], ctx.device)
        if floor is not None and floor * (budget.min_repeats + 2) > budget.seconds:
            return w.failure(variant, ctx, "too_slow",
                             f"even at the device's peaks one generation takes {floor:.3g} s; measuring it needs "
                             f"{budget.min_repeats + 2} and the budget is {budget.seconds:.0f} s",
                             metrics={"estimated_time_per_iter_s": floor, "estimate_basis": "dense peak and memory "
                                      "bandwidth", "estimated_value": batch * n_out / floor})
    attn_impl, backends = attention_choice(prm)
    try:  # fp32: every matmul outside TF32, from the model's build to its check
        with sdpa_context(backends), ctx.device.math_mode(compute_dtype(prm["dtype"])):
            return _measure(w, variant, ctx, preset, budget, attn_impl, (*plan, opts.decode))
    except RuntimeError as e:
        if is_unavailable_kernel(e):
            return w.failure(variant, ctx, "unsupported", no_kernel_reason(prm["attention"], ctx.device))
        raise


def build_model(preset, dtype: str, attn_impl: str, device) -> torch.nn.Module:
    """The point's model: random weights (seed 0) at the run's precision."""
    torch.manual_seed(0)
    fp8 = device.fp8_e4m3() if dtype == "fp8" else None
    return gen.build_random_llama(preset.config, attn_impl, device.torch_device,
                                  DTYPES[compute_dtype(dtype)].torch, fp8)


def _measure(w, variant, ctx, preset, budget: Budget, attn_impl: str, plan: tuple) -> dict:
    prm, device = variant.params, ctx.device
    dtype = prm["dtype"]
    memory = PeakMemory(device)
    built = time.perf_counter()
    model = w.models.get((ctx.preset, dtype, attn_impl, str(device)),
                         lambda: build_model(preset, dtype, attn_impl, device))
    build_s = time.perf_counter() - built
    common = {"params": sum(p.numel() for p in model.parameters()), "weight_bytes": gen.weight_bytes(model),
              "weights": "fp8 e4m3 W8A8, per-tensor scales (decoder linears), bf16 elsewhere" if dtype == "fp8"
              else dtype, "kv_cache_dtype": compute_dtype(dtype), "model_build_s": build_s,
              "engine_info": _engine_info()}
    if dtype == "fp8":
        err = gen.fp8_linear_error(gen.first_fp8_layer(model),
                                   torch.randn(8, preset.config["hidden_size"], device=device.torch_device))
        common["fp8_matmul_rel_error"] = err
        if not err <= gen.FP8_CHECK_TOLERANCE:
            return w.failure(variant, ctx, "wrong_result", f"fp8 linear layer error {err:.3g} relative to Σ|a||b| "
                             f"exceeds {gen.FP8_CHECK_TOLERANCE}", metrics=common)
    batch = prm["batch_size"]
    if batch == "auto":
        batch, tried = _largest_batch(model, preset, prm, device)
        common["auto_batch_tried"] = tried
    memory.reset()
    return _measure_batch(w, variant, ctx, model, preset, batch, budget, memory, common, plan)


def _largest_batch(model, preset, prm: dict, device) -> tuple[int, list]:
    """The largest batch whose prefill (with the whole static cache allocated) runs: the offline point."""
    n_in, n_out = prm["input_len"], prm["output_len"]
    cdt = DTYPES[compute_dtype(prm["dtype"])].torch
    # the model is built: what is free is for the batches (the estimate per sequence, without the weights)
    per_sequence = batch_bytes(preset.config, 1, n_in, n_out, prm["dtype"]) - gen.model_bytes(preset.config,
                                                                                             prm["dtype"])
    fits = 1
    while fits * 2 <= MAX_AUTO_BATCH and (fits * 2) * per_sequence <= usable_memory(device):
        fits *= 2
    # where an OOM is a clean exception the search may start above the estimate; on the host it must not
    start = fits if device.host_memory_is_device_memory else min(fits * 2, MAX_AUTO_BATCH)

    def try_batch(b: int) -> None:
        g = gen.StaticGenerator(model, b, n_in, n_out, device.torch_device, cdt)
        try:
            g.prefill_only(prompts_for(b, n_in, preset, device))
            device.synchronize()
        finally:
            del g

    search = largest_batch(try_batch, start, device=device)
    release_memory(device)
    return search.batch_size, [list(t) for t in search.tried]


def prompts_for(batch: int, n_in: int, preset, device) -> torch.Tensor:
    """The point's random prompts (seed 0) on the device."""
    return gen.random_prompts(batch, n_in, preset.config["vocab_size"]).to(device.torch_device)


def _measure_batch(w, variant, ctx, model, preset, batch: int, budget: Budget, memory, common: dict,
                   plan: tuple) -> dict:
    prm, device = variant.params, ctx.device
    n_in, n_out = prm["input_len"], prm["output_len"]
    prompts = prompts_for(batch, n_in, preset, device)
    mode, why_not_graph, asked = plan
    g = gen.StaticGenerator(model, batch, n_in, n_out, device.torch_device,
                            DTYPES[compute_dtype(prm["dtype"])].torch, compile=prm["compile"], decode=mode,
                            timing=device)
    metrics = dict(common, batch_size=batch, timer=g.clock.kind, decode=mode, decode_asked=asked)
    try:  # a compilation is a one-off, in first_run_s, not held to the budget
        calls = time_calls(lambda: g(prompts), device, budget, agreement=ctx.agreement,
                           first_counts=not prm["compile"])
    except TooSlow as e:
        return w.failure(variant, ctx, "too_slow", f"one generation takes {e.estimate_s:.3g} s; {budget.min_repeats} "
                         f"repeats do not fit the {budget.seconds:.0f} s budget",
                         metrics=dict(metrics, estimated_time_per_iter_s=e.estimate_s,
                                      estimated_value=batch * n_out / e.estimate_s))
    cold = calls.first
    metrics["first_run_s"] = cold.token_times[-1] - cold.start
    metrics.update(decode_metrics(g, asked, why_not_graph, device))
    if asked == "graph" and g.graph_failed:
        return w.failure(variant, ctx, "unsupported", f"--decode graph: {g.graph_failed}", metrics=metrics)
    wrong = _check(model, prompts, cold, prm["dtype"])
    if wrong:
        return w.failure(variant, ctx, "wrong_result", wrong, metrics=metrics)
    for i, r in enumerate(calls.results):
        if not torch.equal(r.tokens, cold.tokens):
            wrong = _check(model, prompts, r, prm["dtype"])
            if wrong:
                return w.failure(variant, ctx, "wrong_result", f"timed run {i + 1}: {wrong}", metrics=metrics)
        if not r.finite:
            return w.failure(variant, ctx, "wrong_result", f"timed run {i + 1}: non-finite logits", metrics=metrics)
    rounds = [[im.RequestTrace(r.start, tuple(r.token_times), n_in, n_out, f"{k}") for k in range(batch)]
              for r in calls.results]
    return _rows(w, variant, ctx, rounds, metrics, memory, calls.timing)


def decode_metrics(g: gen.StaticGenerator, asked: str, why_not_graph: str, device) -> dict:
    """What the decode step ran as, what was asked, and why not a graph where it was not one."""
    out = {"decode": g.decode_mode, "decode_asked": asked}
    fallback = g.graph_failed or why_not_graph
    if g.decode_mode == "eager" and fallback:
        out["decode_fallback"] = fallback
    if g.decode_mode == "eager":
        out["decode_note"] = HOST_BOUND if device.is_accelerator else (
            "eager decode on the host itself: dispatch and compute share its cores")
    return out


def host_bound(rows: dict) -> dict:
    """An eager decode's rows on an accelerator, but the prefill's, marked bound by the host (compare says so)."""
    for name, m in rows.items():
        if name not in PREFILL_ROWS:
            rows[name] = m.replace(metrics=dict(m.metrics, bound="host"))
    return rows


def _check(model, prompts, run: gen.Generation, dtype: str) -> str:
    if not run.finite:
        return "the logits of the prefill or of a decode step are not finite"
    bad = gen.greedy_mismatches(model, prompts, run.tokens, dtype)
    return "; ".join(bad) + " (the greedy tokens do not follow the model)" if bad else ""


def _rows(w, variant, ctx, rounds, metrics: dict, memory, timing) -> dict:
    per_round = [im.round_metrics(r, phases=True) for r in rounds]
    stats = im.summarize(per_round)
    all_requests = [t for r in rounds for t in r]
    metrics.update(runs=len(rounds), peak_memory_source=memory.source)
    gaps = [g for t in all_requests for g in t.itls]
    detail = {"request_percentiles": im.request_percentiles(all_requests),
              "itl_pooled_ms": {f"p{q}": quantile(gaps, q / 100) * 1e3 for q in (50, 90, 99)} if gaps else None,
              "point": {n: {"median": s.median, "ci95": list(s.ci95)} for n, s in stats.items()}}
    if timing.energy_source:
        metrics["energy_source"] = timing.energy_source
    rows = w.rows(variant, ctx, stats, metrics, detail, peak_memory_bytes=memory.peak(), host_watch=timing.host_watch)
    for name in ("output_tokens_per_s", "total_tokens_per_s"):  # rates per watt: the throughput rows
        if name in rows and timing.power_w:
            rows[name] = rows[name].replace(power_w=timing.power_w, energy_j=timing.energy_j_per_iter)
    if metrics.get("decode") == "eager" and ctx.device.is_accelerator:
        rows = host_bound(rows)
    return rows


def _engine_info() -> dict:
    import transformers

    return {"name": "transformers", "version": transformers.__version__, "torch": torch.__version__,
            "batching": "static"}

