"""Does the harness cost anything? llm-train's tokens/s next to a plain hand-written training loop of the
same model, batch, precision and optimizer, in the same process, interleaved so drift hits both alike.

    python benchmarks/harness_overhead.py [--preset tiny] [--rounds 5] [--seconds 3]

Prints one line per round, the median and best of each side with their ratios (harness / plain), and the
median of the per-round ratios (the figure least moved by other load on the machine: both sides of a round
run back to back).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from gapbench import devices
from gapbench.workloads.base import Context
from gapbench.workloads.models.llm_train import PRESETS, LlmTrain, synthetic_tokens


def plain_loop(preset: str, device: torch.device, dtype: str, seconds: float) -> float:
    """tokens/s of the textbook loop: forward under autocast, backward, AdamW step, zero_grad."""
    p = PRESETS[preset]
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(LlamaConfig(**p.config, attn_implementation="sdpa", use_cache=False))
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=p.lr, weight_decay=0.01, **({"fused": True}
                                                                                if device.type == "cuda" else {}))
    ids = synthetic_tokens(p.batch_size, p.seq_len, p.config["vocab_size"], device, torch.Generator().manual_seed(1))
    amp = dtype != "fp32"
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype)
    scaler = torch.amp.GradScaler(device.type) if dtype == "fp16" else None

    def step():
        with torch.autocast(device.type, dtype=low, enabled=amp):
            loss = model(input_ids=ids, labels=ids).loss
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        opt.zero_grad(set_to_none=True)

    sync = (lambda: torch.accelerator.synchronize()) if device.type != "cpu" else (lambda: None)
    for _ in range(5):  # warm-up, as the harness's check steps are
        step()
    sync()
    times = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end or len(times) < 5:
        t0 = time.perf_counter()
        step()
        sync()
        times.append(time.perf_counter() - t0)
    return p.batch_size * p.seq_len / statistics.median(times)


def harness(preset: str, device, seconds: float) -> tuple[float, str]:
    """tokens/s as gapbench measures it: the workload's own variant, checks and timing engine."""
    w = LlmTrain()
    ctx = Context(device=device, preset=preset, budget_s=max(60.0, 10 * seconds), min_time_s=seconds / 7,
                  repeats=7, options={})
    (v,) = w.variants(preset, ctx)
    m = w.run(v, ctx)
    if not m.ok:
        raise SystemExit(f"llm-train:{preset} did not measure: {m.status}: {m.reason}")
    return m.value, v.params["dtype"]



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=3.0, help="measured time per side per round")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = devices.resolve(args.device)
    ours, plain = [], []
    dtype = LlmTrain().variants(args.preset, Context(device=device, preset=args.preset))[0].params["dtype"]
    for r in range(args.rounds):
        if r % 2 == 0:  # alternate which side goes first, so a trend in machine load hits both alike
            h, _ = harness(args.preset, device, args.seconds)
            q = plain_loop(args.preset, device.torch_device, dtype, args.seconds)
        else:
            q = plain_loop(args.preset, device.torch_device, dtype, args.seconds)
            h, _ = harness(args.preset, device, args.seconds)
        ours.append(h)
        plain.append(q)
        print(f"round {r + 1}: harness {h:10.1f} tokens/s   plain loop {q:10.1f} tokens/s   ratio {h / q:.3f}")
    mh, mp = statistics.median(ours), statistics.median(plain)
    print(f"llm-train:{args.preset} on {device} ({dtype}, {torch.get_num_threads()} threads): harness median "
          f"{mh:.1f} tokens/s, plain loop median {mp:.1f} tokens/s, ratio {mh / mp:.3f}; best of each "
          f"{max(ours):.1f} vs {max(plain):.1f}, ratio {max(ours) / max(plain):.3f}; median of the per-round "
          f"ratios {statistics.median(h / q for h, q in zip(ours, plain, strict=True)):.3f}")


if __name__ == "__main__":
    main()
