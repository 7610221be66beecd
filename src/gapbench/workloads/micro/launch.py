"""Per-operator cost: what one operator costs when its work is negligible — the floor under every small kernel.

Three variants, each in µs per operator:
  op     one element-wise add of two 8-element tensors, back to back: the framework's dispatch and the kernel
         launch (on an accelerator the host and the device overlap, so this is the larger of the two)
  train  one forward and backward of a small module (4 × Linear(8, 8), LayerNorm, GELU on a 4 × 8 batch),
         divided by the ATen operators it dispatches: the cost per operator of an eager training step —
         autograd's bookkeeping, the module calls and the dispatch included
  infer  the same module's forward without autograd, per operator

On a CPU these are microseconds of framework time; small models spend most of their step there, which is why a
step-time prediction needs them (gapbench assess). Each checks its result against float64.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from gapbench.results import Measurement
from gapbench.stats import Stats
from gapbench.timing import TooSlow, time_fn
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.options import Options

KINDS = ("op", "train", "infer")
WIDTH, BATCH, BLOCKS = 8, 4, 4
# calls per timed iteration: microsecond calls are timed in bunches, so that one preempted call on a busy host
# is one of many and the timer's own cost vanishes
BUNCH = {"op": 100, "train": 5, "infer": 20}
SKIPPED = ("prim.", "profiler.")  # metadata queries and profiler markers: not kernels a backend runs


def is_composite(func) -> bool:
    """An operator made of other operators (CompositeImplicitAutograd): backends run its parts, not it. Under
    inference_mode such operators reach a dispatch mode whole; counted as their parts everywhere."""
    try:
        return torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), "CompositeImplicitAutograd")
    except (AttributeError, RuntimeError):
        return False


class _Count(TorchDispatchMode):
    """Counts the ATen kernels that reach the backend (composites as their parts; metadata queries and profiler
    markers excepted), as gapbench assess's trace counts them."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if is_composite(func):
            with self:
                out = func.decompose(*args, **kwargs)
            if out is not NotImplemented:
                return out
        if not str(func).startswith(SKIPPED):
            self.n += 1
        return func(*args, **kwargs)


def operators_of(fn: Callable[[], object]) -> int:
    """How many ATen kernels one call of fn dispatches."""
    counter = _Count()
    with counter:
        fn()
    return counter.n


def small_module(device) -> torch.nn.Module:
    g = torch.Generator().manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(BLOCKS):
        lin = torch.nn.Linear(WIDTH, WIDTH)
        with torch.no_grad():
            lin.weight.copy_(torch.randn(WIDTH, WIDTH, generator=g) / WIDTH**0.5)
            lin.bias.copy_(torch.randn(WIDTH, generator=g) * 0.1)
        layers += [lin, torch.nn.LayerNorm(WIDTH), torch.nn.GELU()]
    return torch.nn.Sequential(*layers).to(device)


class Launch(Workload):
    name = "launch"
    category = "micro"
    unit = "us"
    unit_help = "µs per ATen operator: a bare add, and per operator of a small module's training step and forward"
    higher_is_better = False
    description = "per-operator cost: a tiny op's dispatch and launch, and per operator of an eager step"
    presets = {"quick": "the three variants (op, train, infer) at their one size: 8-element tensors, a 4×8 batch"}
    default_preset = "quick"
    options = Options

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        if preset not in self.presets:
            raise ValueError(f"unknown preset {preset!r}")
        return [Variant({"kind": k}) for k in KINDS]

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        kind = variant.params["kind"]
        dev = ctx.device.torch_device
        one, check = _bare_add(dev) if kind == "op" else _module_step(dev, train=kind == "train")
        bunch = BUNCH[kind]
        ops = (1 if kind == "op" else operators_of(one)) * bunch

        def fn():
            for _ in range(bunch):
                one()

        try:
            timing = time_fn(fn, ctx.device, ctx.budget(), agreement=ctx.agreement, measure_energy=False)
        except TooSlow as e:
            return self.failed(variant, ctx, "too_slow", f"one call takes {e.estimate_s:.3g} s")
        err = check()
        if err:
            return self.failed(variant, ctx, "wrong_result", err)
        stats = Stats.from_samples([t / ops * 1e6 for t in timing.samples])
        return self.result(variant, ctx, value=stats.median, stats=stats, host_watch=timing.host_watch, metrics={
            "operators_per_call": ops // bunch, "calls_per_iteration": bunch, "time_per_iter_s": timing.median_s,
            "iterations_per_repeat": timing.iterations, "timer": timing.timer})


def _bare_add(dev) -> tuple[Callable[[], object], Callable[[], str]]:
    a = torch.arange(8, dtype=torch.float32, device=dev)
    b = torch.full((8,), 0.5, device=dev)
    c = torch.empty(8, device=dev)

    def fn():
        torch.add(a, b, out=c)

    def check() -> str:
        want = torch.arange(8, dtype=torch.float64) + 0.5
        got = c.to("cpu", torch.float64)
        return "" if torch.equal(got, want) else f"add gave {got.tolist()}, expected {want.tolist()}"

    return fn, check


def _module_step(dev, train: bool) -> tuple[Callable[[], object], Callable[[], str]]:
    model = small_module(dev)
    x = torch.randn(BATCH, WIDTH, generator=torch.Generator().manual_seed(1)).to(dev)
    params = list(model.parameters())
    out: dict = {}

    if train:
        def fn():
            for p in params:
                p.grad = None  # set, not zeroed: no operator, so every call dispatches the same ones
            loss = model(x).sum()
            loss.backward()
            out["loss"] = loss
    else:
        def fn():
            with torch.inference_mode():
                out["loss"] = model(x).sum()

    def check() -> str:
        ref = small_module("cpu").double()
        want = ref(x.to("cpu", torch.float64)).sum()
        w = float(want.detach())
        got = float(out["loss"].detach().to("cpu", torch.float64))
        if abs(got - w) > 1e-4 * max(1.0, abs(w)):
            return f"the module's output sums to {got:.6g}, float64 gives {w:.6g}"
        if train:
            want.backward()
            g = params[0].grad.to("cpu", torch.float64)
            r = ref[0].weight.grad
            if not torch.allclose(g, r, rtol=1e-4, atol=1e-5):
                return f"the first weight's gradient differs from float64's by {float((g - r).abs().max()):.3g}"
        return ""

    return fn, check
