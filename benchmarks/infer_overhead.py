"""Does llm-infer's harness cost anything? Its output tokens/s next to a hand-written greedy generate loop of the
same model (same builder, same seed: the same weights), prompts, lengths and batch, in the same process, in
interleaved rounds so that drift in the machine's load hits both alike.

    python benchmarks/infer_overhead.py [--batch 4] [--input-len 128] [--output-len 32] [--rounds 5] [--threads 1]

The plain loop is what a user writes with transformers: a StaticCache, a prefill that keeps the last logits, then
one decode step per token, each token copied to the host, greedy. Prints one line per round, the medians of each
side and their ratio (harness / plain), and the median of the per-round ratios (the figure least moved by other
load on the machine: both sides of a round run back to back), with the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from transformers import StaticCache

from gapbench import devices
from gapbench.devices.dtypes import DTYPES
from gapbench.workloads.base import Context
from gapbench.workloads.inference import generate as gen
from gapbench.workloads.inference.llm_infer import PRESETS, LlmInfer
from gapbench.workloads.models.precision import default_dtype


def plain_loop(model, prompts: torch.Tensor, n_out: int, device, seconds: float) -> float:
    """Output tokens/s of the textbook static-cache greedy loop: the median over generations."""
    b, n_in = prompts.shape
    cache = StaticCache(config=model.config, max_cache_len=n_in + n_out)
    positions = torch.arange(n_in, device=prompts.device).unsqueeze(0).expand(b, -1)

    def generate() -> float:
        cache.reset()
        device.synchronize()
        t0 = time.perf_counter()
        out = model(input_ids=prompts, cache=cache, use_cache=True, position_ids=positions, logits_to_keep=1)
        token = out.logits[:, -1].argmax(-1)
        tokens = [token.cpu()]
        for i in range(n_out - 1):
            pos = torch.full((b, 1), n_in + i, device=prompts.device)
            out = model(input_ids=token[:, None], cache=cache, use_cache=True, position_ids=pos)
            token = out.logits[:, -1].argmax(-1)
            tokens.append(token.cpu())
        return time.perf_counter() - t0

    with torch.inference_mode():
        for _ in range(2):  # warm-up, as the harness's cold and warm runs are
            generate()
        times = []
        end = time.perf_counter() + seconds
        while time.perf_counter() < end or len(times) < 5:
            times.append(generate())
    return b * n_out / statistics.median(times)


def harness(device, batch: int, n_in: int, n_out: int, seconds: float, dtype: str) -> float:
    """Output tokens/s as gapbench measures it: the workload's own point, checks and repeats."""
    w = LlmInfer()
    ctx = Context(device=device, preset="tiny", budget_s=max(60.0, 10 * seconds), min_time_s=0.1, repeats=7,
                  options={"input_len": n_in, "output_len": n_out, "batch_size": [batch], "dtype": dtype})
    v = next(v for v in w.variants("tiny", ctx) if v.params["metric"] == "output_tokens_per_s")
    m = w.run(v, ctx)
    if not m.ok:
        raise SystemExit(f"llm-infer:tiny did not measure: {m.status}: {m.reason}")
    return m.value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="measured time of the plain loop per round")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = devices.resolve(args.device)
    device.set_current()
    dtype = default_dtype(device)
    torch.manual_seed(0)  # the harness builds its model the same way, with the same seed: the same weights
    model = gen.build_random_llama(PRESETS["tiny"].config, "sdpa", device.torch_device, DTYPES[dtype].torch)
    prompts = gen.random_prompts(args.batch, args.input_len, PRESETS["tiny"].config["vocab_size"]).to(
        device.torch_device)
    ours, plain = [], []
    print("load average at the start (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()), flush=True)
    for r in range(args.rounds):
        if r % 2 == 0:  # alternate which side goes first, so a trend in machine load hits both alike
            h = harness(device, args.batch, args.input_len, args.output_len, args.seconds, dtype)
            q = plain_loop(model, prompts, args.output_len, device, args.seconds)
        else:
            q = plain_loop(model, prompts, args.output_len, device, args.seconds)
            h = harness(device, args.batch, args.input_len, args.output_len, args.seconds, dtype)
        ours.append(h)
        plain.append(q)
        print(f"round {r + 1}: harness {h:9.1f} tokens/s   plain loop {q:9.1f} tokens/s   ratio {h / q:.3f}", flush=True)
    print("load average at the end (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    mh, mp = statistics.median(ours), statistics.median(plain)
    print(f"llm-infer:tiny batch {args.batch}, {args.input_len} in / {args.output_len} out on {device} ({dtype}, "
          f"{torch.get_num_threads()} threads): harness median {mh:.1f} output tokens/s, plain loop median "
          f"{mp:.1f}, ratio {mh / mp:.3f}; median of the per-round ratios "
          f"{statistics.median(h / q for h, q in zip(ours, plain, strict=True)):.3f}")


if __name__ == "__main__":
    main()
