"""Mixed-precision training: the same small model trained in fp32, bf16 autocast and fp16 autocast + GradScaler.

Each precision is trained from the same initial weights on the same seeded batches for a fixed number
of steps; its loss curve must stay within a stated tolerance of the fp32 curve, or the result is
`wrong_result` (a speed bought with a diverging model is no speed). Then training steps are timed:
the value is training samples per second. The task is learnable on purpose: labels come from a fixed
random "teacher" network, so the fp32 loss falls well below its start and a broken precision shows.

Agreement (documented in docs/parity.md):
  * every loss of the mixed curve is finite;
  * max over steps of |loss_mixed - loss_fp32| <= CURVE_TOL × the initial fp32 loss;
  * |mean of the last FINAL_WINDOW losses, mixed - fp32| <= FINAL_TOL × that fp32 mean.
The fp32 run itself must bring the loss below LEARN_RATIO × its initial value.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from gapbench.devices.dtypes import DTYPES
from gapbench.results import Measurement
from gapbench.timing import TooSlow, time_fn, time_once
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.options import Options

CURVE_TOL = 0.05  # pointwise gap, as a fraction of the initial fp32 loss
FINAL_TOL = 0.10  # gap of the final-window means, as a fraction of the fp32 final-window mean
FINAL_WINDOW = 10
LEARN_RATIO = 0.7
TIMED_SHARE = 0.35  # of the budget: the steady-state timing (the loss curves take up to 60% before it)

PRECISIONS = ("fp32", "bf16", "fp16")  # fp32: no autocast; bf16 and fp16 autocast over fp32 weights


def autocast_dtype(precision: str) -> torch.dtype | None:
    return None if precision == "fp32" else DTYPES[precision].torch

PRESETS = {
    "tiny": dict(d_in=64, hidden=256, layers=2, classes=10, batch=128, steps=60, lr=3e-3, seed=0),
    "standard": dict(d_in=256, hidden=1024, layers=2, classes=16, batch=256, steps=100, lr=1e-3, seed=0),
}


def build_mlp(d_in: int, hidden: int, layers: int, classes: int) -> nn.Sequential:
    mods: list[nn.Module] = [nn.Linear(d_in, hidden), nn.GELU()]
    for _ in range(layers - 1):
        mods += [nn.Linear(hidden, hidden), nn.GELU()]
    mods.append(nn.Linear(hidden, classes))
    return nn.Sequential(*mods)


def teacher_batches(p: dict, device: torch.device) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Seeded inputs and the labels a fixed random teacher network gives them: a task a student can learn."""
    g = torch.Generator().manual_seed(p["seed"] + 1)
    w1 = torch.randn(p["d_in"], 2 * p["classes"], generator=g) / math.sqrt(p["d_in"])
    w2 = torch.randn(2 * p["classes"], p["classes"], generator=g)
    out = []
    for _ in range(p["steps"]):
        x = torch.randn(p["batch"], p["d_in"], generator=g)
        y = (torch.tanh(x @ w1) @ w2).argmax(1)
        out.append((x.to(device), y.to(device)))
    return out


def train_flops(model: nn.Module, batch: int) -> float:
    """Forward 2·weights·batch plus backward 4·weights·batch (linear layers; biases and activations ignored)."""
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    return 6.0 * weights * batch


class Trainer:
    """One model, optimiser and (for fp16) grad scaler; step() runs one autocast training step."""

    def __init__(self, model: nn.Module, precision: str, device_type: str, lr: float):
        self.model = model
        self.dtype = autocast_dtype(precision)
        self.device_type = device_type
        self.opt = torch.optim.AdamW(model.parameters(), lr=lr)
        self.scaler = torch.amp.GradScaler(device_type, enabled=precision == "fp16")

    def step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with torch.autocast(self.device_type, dtype=self.dtype or torch.float32, enabled=self.dtype is not None):
            loss = F.cross_entropy(self.model(x), y)
        self.opt.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.step(self.opt)
        self.scaler.update()
        return loss.detach()


def loss_curve(model0: nn.Module, precision: str, batches, device_type: str, lr: float) -> tuple[list[float], dict]:
    """Train a copy of model0 over the batches; return the per-step losses and scaler facts."""
    tr = Trainer(copy.deepcopy(model0), precision, device_type, lr)
    losses, scales = [], []
    for x, y in batches:
        losses.append(float(tr.step(x, y)))
        if tr.scaler.is_enabled():
            scales.append(tr.scaler.get_scale())
    facts = {}
    if scales:
        facts["final_loss_scale"] = scales[-1]
        facts["skipped_steps"] = sum(1 for a, b in zip(scales[:-1], scales[1:], strict=True) if b < a)  # inf/nan grads
    return losses, facts


def curve_mismatch(mixed: list[float], ref: list[float], *, curve_tol: float = CURVE_TOL,
                   final_tol: float = FINAL_TOL, window: int = FINAL_WINDOW) -> tuple[str | None, dict]:
    """Why the mixed-precision loss curve disagrees with the fp32 one (None if it agrees), and the gaps."""
    for i, v in enumerate(mixed):
        if not math.isfinite(v):
            return f"diverged: loss is {v} at step {i}", {}
    if len(mixed) != len(ref) or not ref:
        return f"curve has {len(mixed)} steps, the fp32 curve {len(ref)}", {}
    worst = max(range(len(ref)), key=lambda i: abs(mixed[i] - ref[i]))
    max_gap = abs(mixed[worst] - ref[worst]) / ref[0]
    w = min(window, len(ref))
    fin_m, fin_r = sum(mixed[-w:]) / w, sum(ref[-w:]) / w
    final_gap = abs(fin_m - fin_r) / fin_r
    gaps = {"max_gap_rel_initial": max_gap, "max_gap_step": worst, "final_gap_rel": final_gap,
            "final_loss": fin_m, "final_loss_fp32": fin_r}
    if max_gap > curve_tol:
        return (f"loss at step {worst} is {mixed[worst]:.4g} vs fp32 {ref[worst]:.4g}: gap {max_gap:.3g} of the "
                f"initial loss exceeds {curve_tol:g}"), gaps
    if final_gap > final_tol:
        return f"final loss {fin_m:.4g} vs fp32 {fin_r:.4g}: relative gap {final_gap:.3g} exceeds {final_tol:g}", gaps
    return None, gaps


class AmpTrain(Workload):
    name = "amp-train"
    category = "probe"
    unit = "samples/s"
    unit_help = ("training samples per second (forward, backward, AdamW step, GradScaler for fp16); "
                 "FLOPs per step = 6·weights·batch")
    description = "MLP training in fp32 / bf16 autocast / fp16 autocast+GradScaler: speed and loss-curve agreement"
    presets = {
        "tiny": "64→256→256→10 MLP, batch 128, 60-step loss curves (seconds on a CPU)",
        "standard": "256→1024→1024→16 MLP, batch 256, 100-step loss curves",
    }
    default_preset = "tiny"
    options = Options

    def __init__(self):
        self._fp32: dict[tuple, tuple[list[float], float | None]] = {}  # (preset, device) -> (curve, samples/s)

    def variants(self, preset: str, ctx: Context) -> list[Variant]:
        if preset not in PRESETS:
            raise ValueError(f"unknown preset {preset!r}")
        p = PRESETS[preset]
        flops = train_flops(build_mlp(p["d_in"], p["hidden"], p["layers"], p["classes"]), p["batch"])
        common = {k: p[k] for k in ("d_in", "hidden", "layers", "classes", "batch", "steps")}
        return [Variant({"precision": prec, **common}, flops=flops) for prec in PRECISIONS]

    def run(self, variant: Variant, ctx: Context) -> Measurement:
        p = PRESETS[ctx.preset] if ctx.preset in PRESETS else PRESETS["tiny"]
        precision = variant.params["precision"]
        dev = ctx.device
        why = unsupported_reason(precision, dev)
        if why:
            return self.failed(variant, ctx, "unsupported", why)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(p["seed"])
            model0 = build_mlp(p["d_in"], p["hidden"], p["layers"], p["classes"]).to(dev.torch_device)
        batches = teacher_batches(p, dev.torch_device)
        key = (ctx.preset, str(dev))

        # budget guard before the curves: the fastest of two warm steps (after a cold one) says how long a curve takes
        probe = Trainer(copy.deepcopy(model0), precision, dev.type, p["lr"])
        cold_s = time_once(lambda: probe.step(*batches[0]), dev)
        step_s = min(time_once(lambda: probe.step(*batches[0]), dev) for _ in range(2))
        curves_needed = 1 if precision == "fp32" or key in self._fp32 else 2
        estimate = step_s * p["steps"] * curves_needed
        if estimate > ctx.budget_s * 0.6:
            return self.failed(variant, ctx, "too_slow", f"{curves_needed} loss curve(s) of {p['steps']} steps take "
                               f"≈{estimate:.3g} s ({step_s:.3g} s per step, ≈{p['batch'] / step_s:.4g} samples/s); "
                               f"more than 60% of the {ctx.budget_s:.3g} s budget",
                               metrics={"estimated_time_per_iter_s": step_s, "estimated_value": p["batch"] / step_s})

        losses, facts = loss_curve(model0, precision, batches, dev.type, p["lr"])
        metrics: dict = {"loss_curve": [float(f"{v:.6g}") for v in losses], "native_bf16": dev.has_native_bf16(),
                         "first_step_s": cold_s, **facts,
                         "tolerance": {"curve": CURVE_TOL, "final": FINAL_TOL, "window": FINAL_WINDOW}}
        if precision == "fp32":
            ref = losses
            w = min(FINAL_WINDOW, len(ref))
            final = sum(ref[-w:]) / w
            if not all(math.isfinite(v) for v in ref) or not final < LEARN_RATIO * ref[0]:
                return self.failed(variant, ctx, "wrong_result", f"the fp32 run did not learn: loss {ref[0]:.4g} -> "
                                   f"{final:.4g} over {len(ref)} steps (needs < {LEARN_RATIO:g}× the start)",
                                   metrics=metrics)
            metrics["final_loss"] = final
        else:
            ref = self._fp32.get(key, (None, None))[0]
            if ref is None:
                ref, _ = loss_curve(model0, "fp32", batches, dev.type, p["lr"])
                self._fp32[key] = (ref, None)
            err, gaps = curve_mismatch(losses, ref)
            metrics.update(gaps)
            if err:
                return self.failed(variant, ctx, "wrong_result", f"{precision} vs fp32: {err}", metrics=metrics)

        trainer = Trainer(copy.deepcopy(model0), precision, dev.type, p["lr"])
        i = [0]

        def step():
            x, y = batches[i[0] % len(batches)]
            i[0] += 1
            trainer.step(x, y)

        try:
            timing = time_fn(step, dev, ctx.budget().fraction(TIMED_SHARE), agreement=ctx.agreement)
        except TooSlow as e:
            return self.too_slow(variant, ctx, e.estimate_s, p["batch"])
        sps = p["batch"] / timing.median_s
        if precision == "fp32":
            self._fp32[key] = (losses, sps)
        else:
            fp32_sps = self._fp32.get(key, (None, None))[1]
            if fp32_sps:
                metrics["speedup_vs_fp32"] = sps / fp32_sps
        metrics["flops_per_s"] = variant.flops / timing.median_s if variant.flops else None
        return self.throughput(variant, ctx, timing, p["batch"], metrics=metrics)


def unsupported_reason(precision: str, dev) -> str:
    """Why this device cannot train in `precision` at all ('' when a tiny autocast step runs)."""
    if precision == "fp32":
        return ""
    dtype = autocast_dtype(precision)
    why = dev.dtype_unsupported(precision)
    if why:
        return why
    avail = getattr(torch.amp, "is_autocast_available", None)
    if avail is not None and not avail(dev.type):
        return f"torch {torch.__version__} has no autocast for device type {dev.type}"
    try:
        m = nn.Linear(8, 8).to(dev.torch_device)
        tr = Trainer(m, precision, dev.type, 1e-3)
        if precision == "fp16" and not tr.scaler.is_enabled():
            return f"torch.amp.GradScaler is not available for {dev.type}"
        with torch.autocast(dev.type, dtype=dtype):
            got = m(torch.ones(2, 8, device=dev.torch_device)).dtype
        if got != dtype:
            return f"autocast to {precision} on {dev.type} leaves linear layers in {got}"
        tr.step(torch.ones(2, 8, device=dev.torch_device), torch.zeros(2, dtype=torch.long, device=dev.torch_device))
        dev.synchronize()
    except (RuntimeError, NotImplementedError, TypeError, ValueError, AssertionError) as e:
        return f"{precision} autocast training is not available on {dev.type}: {' '.join(str(e).split())[:200]}"
    return ""
