"""llm-infer against a running OpenAI-compatible server (`--server URL`): one point per concurrency, swept the
InferenceMAX way (prompts = 10 × concurrency, random token prompts, no prefix reuse), optionally at a Poisson
request rate and against TTFT/TPOT limits (SLO attainment and goodput, as MLPerf Inference's Server scenario
counts requests within its latency limits).

Each repeat is one round of all the point's prompts; its metrics are on the client's clock (serve_client). The
per-device rows divide by `--server-devices` (the devices the server uses), as InferenceMAX reports per GPU.
"""

from __future__ import annotations

import time

from gapbench.workloads.inference import client as sc
from gapbench.workloads.inference import metrics as im

PER_DEVICE = ("output_tokens_per_s", "total_tokens_per_s", "goodput_requests_per_s")
PROMPTS_PER_CONCURRENCY = 10  # prompts per round = 10 × concurrency, as InferenceMAX runs it


def measure(w, variant, ctx, preset, opts) -> dict:
    prm = variant.params
    target = sc.Target(opts.server, opts.served_model)
    try:
        model, info = sc.probe(target)
    except (sc.ServerError, ValueError) as e:
        return w.failure(variant, ctx, "error", f"server {opts.server}: {e}")
    info.update(served_model=model, launch_args=opts.engine_args or "not given (--engine-args records them)")
    conc, n_in, n_out = prm["concurrency"], prm["input_len"], prm["output_len"]
    n = opts.num_prompts or PROMPTS_PER_CONCURRENCY * conc
    vocab = preset.config["vocab_size"]
    metrics = {"engine_info": info, "prompts_per_round": n, "length_range": opts.length_range,
               "timer": "client clock: request sent, each streamed chunk with text received"}
    budget = ctx.budget()
    started = time.perf_counter()
    warm = sc.run_round(target, model, *sc.random_requests(1, n_in, n_out, vocab, opts.length_range, seed=99), 1)
    if warm.failures:
        return w.failure(variant, ctx, "error", f"warm-up request failed: {warm.failures[0]}", metrics=metrics)
    rounds: list[sc.Round] = []
    while True:
        prompts, outs = sc.random_requests(n, n_in, n_out, vocab, opts.length_range, seed=len(rounds))
        r = sc.run_round(target, model, prompts, outs, conc, opts.arrival_rate, seed=len(rounds))
        if r.failures:
            return w.failure(variant, ctx, "error", f"{len(r.failures)} of {n} requests failed; first: "
                             f"{r.failures[0]}", metrics=metrics)
        short = [(t.output_tokens, o) for t, o in zip(r.traces, outs, strict=True) if t.output_tokens < o]
        if short:
            return w.failure(variant, ctx, "unsupported", f"the server ended {len(short)} of {n} requests early "
                             f"({short[0][0]} of {short[0][1]} tokens): it does not honour ignore_eos/min_tokens, "
                             "so fixed output lengths cannot be measured", metrics=metrics)
        rounds.append(r)
        left = budget.seconds - (time.perf_counter() - started)
        if len(rounds) == 1 and r.duration_s * budget.min_repeats > left + r.duration_s:
            return w.failure(variant, ctx, "too_slow", f"one round of {n} requests takes {r.duration_s:.3g} s; "
                             f"{budget.min_repeats} do not fit the {budget.seconds:.0f} s budget",
                             metrics=dict(metrics, estimated_time_per_iter_s=r.duration_s))
        if len(rounds) >= budget.repeats or (len(rounds) >= budget.min_repeats and r.duration_s > left):
            break
    return _rows(w, variant, ctx, rounds, opts, metrics)


def _rows(w, variant, ctx, rounds: list[sc.Round], opts, metrics: dict) -> dict:
    devices = variant.params.get("devices", 1)
    per_round = []
    for r in rounds:
        m = im.round_metrics(r.traces, slo=opts.slo)
        for k in PER_DEVICE:
            if k in m:
                m[k] /= devices
        per_round.append(m)
    stats = im.summarize(per_round)
    requests = [t for r in rounds for t in r.traces]
    metrics.update(rounds=len(rounds), requests=len(requests),
                   slo={"ttft_ms": opts.slo.ttft_ms, "tpot_ms": opts.slo.tpot_ms} if opts.slo.given else None)
    detail = {"request_percentiles": im.request_percentiles(requests),
              "point": {n: {"median": s.median, "ci95": list(s.ci95)} for n, s in stats.items()}}
    return w.rows(variant, ctx, stats, metrics, detail)
