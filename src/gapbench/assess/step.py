"""The step whose operators and work an assessment judges: the user's own (`--entry`, opt-in: importing it runs
the user's code) or a built-in model workload of the same family (`--like WORKLOAD:PRESET`).

A workload with `build_iteration(preset, device, options)` is traced as one measured iteration (for training:
forward, backward and the optimizer, at the run's precision; for llm-infer: one point's generation, prefill and
every decode step), so that the prediction is of what `gapbench run` measures; one with only `build_step(preset, device)` is traced as its forward and backward in fp32.
"""

from __future__ import annotations

import contextlib

import torch

from gapbench.assess.work import Work, WorkRecorder
from gapbench.coverage.trace import OpTrace, trace_callable
from gapbench.errors import GapbenchError

TRACE_DEVICE = "cpu"  # shapes only (fake tensors): the device the step is built for while it is traced


def trace_entry(spec: str, fake: bool = True) -> tuple[OpTrace, Work]:
    """Trace MODULE:FUNCTION: a callable returning (model, example_inputs) — forward, loss, backward as
    `gapbench ops` runs it — or returning a step function, run once as it is."""
    rec = WorkRecorder()
    trace = trace_callable(spec, fake=fake, recorder=rec)
    work = rec.work(spec, fake=fake)
    return trace, work


def trace_like(spec: str, options: dict | None = None, fake: bool = True) -> tuple[OpTrace, Work]:
    """Trace a built-in workload 'NAME:PRESET' at `options` (dtype, attention, batch_size, steps)."""
    from gapbench import devices, workloads

    name, preset = workloads.parse_spec(spec)
    w = workloads.get(name)
    preset = preset or w.default_preset
    if preset not in w.presets:
        raise GapbenchError(f"workload {name} has no preset {preset!r}; presets: {', '.join(w.presets)}")
    opts = dict(options or {})
    iteration = callable(getattr(w, "build_iteration", None))
    if not iteration and not callable(getattr(w, "build_step", None)):
        raise GapbenchError(f"workload {name} cannot be traced: it has neither build_iteration(preset, device, "
                            "options) nor build_step(preset, device)")
    device = devices.resolve(TRACE_DEVICE)
    rec = WorkRecorder()
    with _fake_mode(fake):
        try:
            if iteration:
                step = w.build_iteration(preset, device, opts)
            else:
                step = w.build_step(preset, torch.device(TRACE_DEVICE))
            with rec:
                step()
        except GapbenchError:
            raise
        except Exception as e:
            raise GapbenchError(f"tracing workload {name}:{preset} failed: {e.__class__.__name__}: {_short(e)}") \
                from None
    target = f"{name}:{preset}"
    notes = [] if iteration else [f"{target} has no build_iteration: its forward and backward are traced in fp32, "
                                  "without the optimizer step"]
    variant = _traced_variant(w, preset, device, opts) if iteration else None
    dtype = (variant or {}).get("dtype") if iteration else "fp32"
    trace = OpTrace(target=target, forward=rec.forward, backward=rec.backward, dtypes=rec.dtypes, fake=fake)
    return trace, rec.work(target, dtype=dtype, variant=variant, fake=fake, notes=notes)


def _traced_variant(w, preset: str, device, options: dict) -> dict | None:
    """The variant parameters the workload records for one run at these options (its identity in results
    files): the workload's own `traced_variant(preset, device, options)` where it has one (a workload whose run
    gives several rows, llm-infer's one per metric of a point, names the row that times the iteration), else its
    only variant when it has exactly one."""
    from gapbench.workloads.base import Context

    own = getattr(w, "traced_variant", None)
    if callable(own):
        return dict(own(preset, device, options))
    try:
        variants = w.variants(preset, Context(device=device, preset=preset, options=options))
    except Exception:  # a workload that cannot plan here still traced; its variant is then not known
        return None
    return dict(variants[0].params) if len(variants) == 1 else None


def _fake_mode(fake: bool):
    if not fake:
        return contextlib.nullcontext()
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def _short(e: BaseException, limit: int = 300) -> str:
    text = " ".join(str(e).split())
    return text[:limit] + ("…" if len(text) > limit else "")
