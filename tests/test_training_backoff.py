"""The shared model-workload helpers: OOM back-off with allocations that really fail, precision choice,
loss check, FLOP formulas against hand-computed values."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import env_with_default_threads
from gapbench import devices
from gapbench.workloads.models.flops import infer_flops_per_token, mfu, train_flops_per_token
from gapbench.workloads.models.memory import (
    PeakMemory,
    auto_batch_ceiling,
    is_oom,
    largest_batch,
)
from gapbench.workloads.models.precision import (
    attention_choice,
    choose_precision,
    is_unavailable_kernel,
    precision_unsupported,
    sdpa_context,
)
from gapbench.workloads.models.prepare import missing_dependency
from gapbench.workloads.models.train import losses_fall

CPU = devices.resolve("cpu")


def test_absurd_allocation_is_an_oom_and_backoff_finds_the_largest_batch_that_fits():
    """Batches above 5 ask the allocator for petabytes: a real allocation failure, not a raised stand-in."""
    seen = []

    def try_batch(b: int) -> None:
        seen.append(b)
        size = 2**52 if b > 5 else b * 1024
        torch.empty(size, dtype=torch.uint8).fill_(1)

    with pytest.raises(RuntimeError) as info:
        torch.empty(2**52, dtype=torch.uint8)
    assert is_oom(info.value)

    found = largest_batch(try_batch, 64, refine=5)
    assert found.batch_size == 5
    assert seen[:4] == [64, 32, 16, 8]  # halving until 4 fits, then bisecting between 4 and 8
    assert (4, True) in found.tried and (8, False) in found.tried and (6, False) in found.tried
    assert found.tried[-1] == (5, True)


def test_backoff_reraises_when_even_the_minimum_does_not_fit_and_passes_other_errors_through():
    with pytest.raises(RuntimeError, match="allocate"):
        largest_batch(lambda b: torch.empty(2**52 * b, dtype=torch.uint8), 8)

    def broken(b: int) -> None:
        raise ValueError("not a memory problem")

    with pytest.raises(ValueError):
        largest_batch(broken, 8)


def test_is_oom_recognises_the_backends_messages_and_nothing_else():
    assert is_oom(MemoryError())
    assert is_oom(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert is_oom(RuntimeError("HIP out of memory"))
    assert is_oom(RuntimeError("XPU out of memory, please use `empty_cache`"))
    assert not is_oom(RuntimeError("shape mismatch"))
    assert not is_oom(ValueError("out of memory"))


_RLIMIT_SCRIPT = textwrap.dedent("""
    import json, resource, torch
    from gapbench.workloads.models.memory import is_oom, largest_batch

    def vm_size():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024

    unit = 64 * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (vm_size() + 20 * unit, resource.RLIM_INFINITY))

    def try_batch(b):
        torch.empty(b * unit, dtype=torch.uint8).fill_(1)   # touch every page

    found = largest_batch(try_batch, 64, refine=8)
    b = found.batch_size
    try_batch(b)
    try:
        try_batch(b + 1)
        next_fits = True
    except Exception as e:
        next_fits = not is_oom(e)
    print(json.dumps({"batch": b, "tried": found.tried, "next_fits": next_fits}))
""")


def test_backoff_under_an_address_space_limit_finds_the_exact_boundary():
    """A real process with RLIMIT_AS: allocations beyond the limit fail inside torch's allocator."""
    # torch's default thread count, not the test run's share of the cores: the script's limit is set before torch
    # starts its OpenMP threads, whose stacks and arenas then take part of it; with one thread the largest batch
    # lands exactly on the limit and allocating it again can fail (a fragility of the script, not of the back-off)
    out = subprocess.run([sys.executable, "-c", _RLIMIT_SCRIPT], capture_output=True, text=True, timeout=120,
                         env=env_with_default_threads())
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["tried"][0] == [64, False]  # the first, too large, try really failed
    assert 1 <= res["batch"] < 20
    assert res["next_fits"] is False  # the answer is the largest: one more does not fit


def test_auto_ceiling_respects_the_address_space_limit():
    assert auto_batch_ceiling(1e6, 0, CPU, cap=4096) >= 1
    code = ("import resource; from gapbench import devices; from gapbench.workloads.models.memory import address_space_headroom, auto_batch_ceiling\n"
            "h = address_space_headroom(); cur = resource.getrlimit(resource.RLIMIT_AS)[0]\n"
            "vm = [int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmSize:')][0]\n"
            "resource.setrlimit(resource.RLIMIT_AS, (vm + 2**30, resource.RLIM_INFINITY))\n"
            "print(auto_batch_ceiling(2**20, 0, devices.resolve('cpu')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    # about 1 GiB of headroom at 1 MiB a sample, halved on the CPU, rounded down to a power of two
    assert 128 <= int(out.stdout.strip()) <= 512


def test_precision_defaults_and_overrides():
    expected = "bf16" if CPU.has_native_bf16() else "fp32"
    p = choose_precision(CPU, {})
    assert p.dtype == expected and p.source == "default"
    assert p.weights == "fp32"  # mixed precision keeps fp32 master weights
    assert p.autocast == (expected == "bf16")
    q = choose_precision(CPU, {"dtype": "bf16"}, low_memory_weights=True)
    assert q.weights == "bf16" and not q.autocast
    h = choose_precision(CPU, {"dtype": "fp16"}, low_memory_weights=True)
    assert h.weights == "fp32" and h.grad_scaler  # fp16 always trains with fp32 masters and a scaler
    assert choose_precision(CPU, {"dtype": "fp16"}, training=False).weights == "fp16"
    f8 = choose_precision(CPU, {"dtype": "fp8"})
    assert "model workloads run" in precision_unsupported(CPU, f8)
    assert precision_unsupported(CPU, p) == ""


def test_losses_fall_check_can_fail():
    assert losses_fall([2.0, 1.5, 1.0]) == ""
    assert "did not fall" in losses_fall([2.0, 2.0, 2.0])
    assert "not finite" in losses_fall([2.0, math.nan, 1.0])
    assert "not finite" in losses_fall([2.0, 1.0, math.inf])


def test_flop_formulas_against_hand_computed_values():
    # Llama-2-7B: N = 32·(4·4096² + 3·4096·11008) + 32000·4096 = 6,607,077,376 matmul weights
    n = 6_607_077_376
    assert train_flops_per_token(n, 32, 4096, 4096) == 6 * n + 12 * 32 * 4096 * 4096 == 46_084_915_200
    assert infer_flops_per_token(100, 2, 8, 16) == 200 + 4 * 2 * 8 * 16
    assert mfu(50e12, 100.0) == pytest.approx(0.5)
    assert mfu(50e12, None) is None


def test_attention_choices():
    assert attention_choice({}) == ("sdpa", None)
    assert attention_choice({"attention": "eager"}) == ("eager", None)
    impl, backends = attention_choice({"attention": "math"})
    assert impl == "sdpa" and len(backends) == 1
    with pytest.raises(ValueError):
        attention_choice({"attention": "bogus"})
    q = torch.randn(1, 2, 8, 4)
    with pytest.raises(RuntimeError) as info, sdpa_context(attention_choice({"attention": "cudnn"})[1]):
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert is_unavailable_kernel(info.value)


def test_peak_memory_on_cpu_sees_a_large_allocation():
    mem = PeakMemory(CPU)
    mem.reset()
    x = torch.ones(64 * 2**20, dtype=torch.uint8)  # 64 MiB, touched
    peak = mem.peak()
    del x
    assert mem.source in ("process-peak-rss", "process-max-rss-growth")
    if mem.source == "process-peak-rss":
        assert peak >= 64 * 2**20


def test_missing_dependency_reason_names_the_install_command():
    assert missing_dependency("torch") is None
    why = missing_dependency("gapbench_no_such_module_xyz")
    assert "pip install 'gapbench[models]'" in why and "gapbench_no_such_module_xyz" in why
