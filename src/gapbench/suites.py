"""Named suites as data: which workload presets a suite runs, per device class.

A suite entry is "workload:preset", or a dict {"cpu": "workload:preset", "accelerator": "workload:preset"}
when the sensible size depends on the device class (a class left out of the dict runs nothing for that entry). Entries whose workload is not installed are skipped
with a note (for example the model workloads without `gapbench[models]` still run and report `unsupported`).
"""

from __future__ import annotations

from gapbench.errors import GapbenchError

SUITES: dict[str, dict] = {
    "quick": {
        "description": "GEMM and memory bandwidth, small: a first look in about a minute on a laptop CPU",
        "entries": ["gemm:quick", "membw:quick"],
    },
    "standard": {
        "description": "every micro-benchmark at full size, the model workloads sized for the device, the parity probes",
        "entries": [
            "gemm:standard",
            "membw:standard",
            {"cpu": "llm-train:tiny", "accelerator": "llm-train:llama2-7b"},
            {"cpu": "diffusion-infer:tiny", "accelerator": "diffusion-infer:sdxl"},
            {"cpu": "bert-finetune:tiny", "accelerator": "bert-finetune:bert-large-128"},
            "sparse:tiny",
            "dynamic-shapes:tiny",
            "amp-train:tiny",
        ],
    },
    "article": {
        "description": "the rows of the published MI300X-vs-H100 table: Llama-2-70B training (slice), SDXL, BERT-large, FP8 GEMM, memory bandwidth",
        "entries": [
            "llm-train:llama2-70b-slice",
            "diffusion-infer:sdxl",
            "bert-finetune:bert-large-128",
            "gemm:fp8",
            "membw:standard",
        ],
    },
    "inference": {
        "description": "LLM inference along the throughput-interactivity curve: TTFT, TPOT, ITL, tokens/s per batch "
                       "size (static batching); the tiny model on a CPU, Llama-2-7B and Llama-3-8B on accelerators",
        "entries": [
            {"cpu": "llm-infer:tiny", "accelerator": "llm-infer:llama3-8b"},
            {"accelerator": "llm-infer:llama2-7b"},
        ],
    },
    "collectives": {
        "description": "all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send/recv over a size sweep",
        "entries": [{"cpu": "collective:tiny", "accelerator": "collective:standard"}],
    },
    "libs": {
        "description": "one GEMM and one attention through every library path of the stack: vendor default, tuned, "
                       "portable (Triton, Inductor templates, FlexAttention), compiled, and libraries beside torch",
        "entries": ["gemm-libs:standard", "attention-libs:standard"],
    },
    "assess": {
        "description": "the rates gapbench assess predicts a model's step from: GEMM per dtype with the shape sweep, "
                       "grouped GEMM (mixture-of-experts layers), "
                       "convolution and attention per dtype and shape, memory bandwidth per dtype in cache and in memory, a whole "
                       "optimizer step per dtype, the per-operator cost",
        "entries": ["gemm:quick", "grouped-gemm:quick", "conv:quick", "attention:quick", "elementwise:quick",
                    "optimizer:quick", "membw:tiny-dtypes",
                    "membw:quick-dtypes",
                    "launch:quick"],
    },
    "parity": {
        "description": "the known weak spots: sparse, dynamic shapes, mixed-precision training, and the numerics of "
                       "whole models layer by layer against float64",
        "entries": ["sparse:standard", "dynamic-shapes:standard", "amp-train:standard",
                    {"cpu": "numerics:tiny", "accelerator": "numerics:mid"}],
    },
}


def names() -> list[str]:
    return list(SUITES)


def entries(suite: str, device_type: str) -> list[tuple[str, str | None]]:
    """The (workload, preset) pairs of a suite for a device type ('cpu', 'cuda', …)."""
    if suite not in SUITES:
        raise GapbenchError(f"--suite: unknown suite {suite!r}; known: {', '.join(SUITES)}")
    cls = "cpu" if device_type == "cpu" else "accelerator"
    out = []
    for e in SUITES[suite]["entries"]:
        spec = e.get(cls) if isinstance(e, dict) else e
        if not spec:
            continue
        name, _, preset = spec.partition(":")
        out.append((name, preset or None))
    return out
