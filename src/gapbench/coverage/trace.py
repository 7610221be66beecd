"""Which ATen operators a model uses in forward and backward, traced under fake tensors (no memory needed).

Two kinds of target:
  "mypkg.models:build"  a callable taking no arguments and returning (model, example_inputs); example_inputs
                        is a tuple/list of positional arguments, a dict of keyword arguments, or one tensor.
                        The step traced is: out = model(*inputs); loss = out.loss if present, else the sum of
                        the first tensor output; loss.backward().
  workload "NAME:PRESET" a built-in workload that implements build_step(preset, device) -> step(), a
                        zero-argument function running one forward+backward step at that preset's size.

With fake=True (the default) the builder itself runs under FakeTensorMode: parameters and inputs are fake,
so a model of any size traces in seconds on a laptop. Operators run outside autograd's backward pass
(the forward, the loss, an optimizer step a workload may take) count as forward.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections import Counter
from dataclasses import dataclass, field

import torch

from gapbench.coverage.dispatch import OpRecorder
from gapbench.errors import GapbenchError


@dataclass
class OpTrace:
    target: str
    forward: Counter = field(default_factory=Counter)  # overload -> calls outside backward
    backward: Counter = field(default_factory=Counter)  # overload -> calls inside autograd's backward
    dtypes: dict = field(default_factory=dict)  # overload -> dtypes of its first tensor argument
    fake: bool = True
    torch_version: str = field(default_factory=lambda: torch.__version__)

    def ops(self) -> list[str]:
        return sorted(set(self.forward) | set(self.backward))

    def to_dict(self) -> dict:
        return {"target": self.target, "torch": self.torch_version, "fake": self.fake,
                "ops": [{"op": o, "forward": self.forward.get(o, 0), "backward": self.backward.get(o, 0),
                         "dtypes": sorted(self.dtypes.get(o, ()))} for o in self.ops()]}


def _fake_mode(fake: bool):
    if not fake:
        return contextlib.nullcontext()
    from torch._subclasses.fake_tensor import FakeTensorMode

    return FakeTensorMode(allow_non_fake_inputs=True)


def load_callable(spec: str):
    """'pkg.mod:func' (or 'pkg.mod:obj.attr') -> the callable; GapbenchError with one line otherwise."""
    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise GapbenchError(f"bad target {spec!r}; expected MODULE:CALLABLE, e.g. mypkg.models:build")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the current folder's modules are importable
    try:
        obj = importlib.import_module(mod_name)
    except BaseException as e:  # an import that fails in any way, SystemExit included
        if isinstance(e, KeyboardInterrupt):
            raise
        raise GapbenchError(f"cannot import {mod_name!r}: {e.__class__.__name__}: {e}") from None
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise GapbenchError(f"{mod_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise GapbenchError(f"{spec} is not callable")
    return obj


def _loss_of(out):
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if isinstance(loss, torch.Tensor):
        return loss
    if isinstance(out, torch.Tensor):
        return out.sum()
    from torch.utils._pytree import tree_flatten

    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            return t.sum()
    return None


def trace_callable(spec: str, fake: bool = True, recorder: OpRecorder | None = None) -> OpTrace:
    """Trace `spec`'s (model, example_inputs), or the step it returns: a zero-argument callable (a training or
    inference step) is run once as it is. `recorder`: the dispatch mode to record with (default OpRecorder)."""
    fn = load_callable(spec)
    mode = _fake_mode(fake)
    rec = recorder if recorder is not None else OpRecorder()
    with mode:
        try:
            built = fn()
        except Exception as e:
            raise GapbenchError(f"{spec} raised {e.__class__.__name__}: {_short(e)}") from None
        step = built if callable(built) and not isinstance(built, torch.nn.Module) else None
        if step is None and not (isinstance(built, (tuple, list)) and len(built) == 2):
            raise GapbenchError(f"{spec} must return (model, example_inputs) or a step function; it returned "
                                f"{type(built).__name__}")
        model, inputs = (None, None) if step is not None else built
        if step is None and not callable(model):
            raise GapbenchError(f"{spec}: the model it returned is not callable ({type(model).__name__})")
        try:
            with rec:
                if step is not None:
                    step()
                else:
                    _forward_backward(model, inputs, rec)
        except GapbenchError:
            raise
        except Exception as e:
            hint = " (try --real: the model may need real data)" if fake else ""
            raise GapbenchError(f"running {spec} failed: {e.__class__.__name__}: {_short(e)}{hint}") from None
    return OpTrace(target=spec, forward=rec.forward, backward=rec.backward, dtypes=rec.dtypes, fake=fake)


def _forward_backward(model, inputs, rec: OpRecorder) -> None:
    if isinstance(inputs, dict):
        out = model(**inputs)
    elif isinstance(inputs, (tuple, list)):
        out = model(*inputs)
    else:
        out = model(inputs)
    loss = _loss_of(out)
    if loss is not None and loss.requires_grad:
        rec.backward_call = True
        loss.backward()
        rec.backward_call = False


def trace_workload(spec: str, device: str = "cpu", fake: bool = True) -> OpTrace:
    from gapbench import workloads

    name, preset = workloads.parse_spec(spec)
    w = workloads.get(name)
    preset = preset or w.default_preset
    if preset not in w.presets:
        raise GapbenchError(f"workload {name} has no preset {preset!r}; presets: {', '.join(w.presets)}")
    if not callable(getattr(w, "build_step", None)):
        raise GapbenchError(f"workload {name} cannot be traced: it has no build_step(preset, device) method")
    mode = _fake_mode(fake)
    rec = OpRecorder()
    with mode:
        try:
            step = w.build_step(preset, torch.device(device))
            with rec:
                step()
        except GapbenchError:
            raise
        except Exception as e:
            raise GapbenchError(f"tracing workload {name}:{preset} failed: {e.__class__.__name__}: {_short(e)}") \
                from None
    return OpTrace(target=f"{name}:{preset}", forward=rec.forward, backward=rec.backward, dtypes=rec.dtypes,
                   fake=fake)


def trace_ops(target: str | None = None, workload: str | None = None, device: str = "cpu",
              fake: bool = True) -> OpTrace:
    """Trace a `module:callable` target or a built-in `workload` ('llm-train:tiny'); see the module doc."""
    if bool(target) == bool(workload):
        raise GapbenchError("give either MODULE:CALLABLE or --workload NAME:PRESET")
    return trace_workload(workload, device, fake) if workload else trace_callable(target, fake)


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return text[:300] + ("…" if len(text) > 300 else "")


# ---- the trace against a coverage audit -------------------------------------------------------------------

@dataclass
class Verdict:
    statuses: dict  # overload -> {"entry", "status", "reason", "phase"}
    not_native: list  # overloads audited and found not native
    unknown: list  # overloads the audit says nothing about (no OpInfo entry reaches them, or not audited)
    warnings: list
    where: str
    line: str


def against(trace: OpTrace, coverage_file: str, index: dict | None = None) -> Verdict:
    """Each traced operator's status in a coverage results file, matched through the OpInfo index."""
    from gapbench import results
    from gapbench.coverage.index import load_index

    rs = results.load(coverage_file)
    cov = rs.coverage
    if not cov or not isinstance(cov.get("ops"), list):
        raise GapbenchError(f"{coverage_file}: no coverage section (make one with gapbench coverage)")
    warns = []
    if cov.get("torch") and cov["torch"] != trace.torch_version:
        warns.append(f"{coverage_file} was audited with torch {cov['torch']}, this is {trace.torch_version}: "
                     "operators are matched by name")
    index = index or load_index()
    rows: dict[tuple[str, str], list[dict]] = {}
    for r in cov["ops"]:
        rows.setdefault((r["op"], r.get("variant") or ""), []).append(r)
    statuses = {o: operator_status(o, trace, rows, index, bool(cov.get("grad"))) for o in trace.ops()}
    where = rs.name
    bad = [o for o in trace.ops() if statuses[o]["status"] not in ("native", "skipped", "unknown")]
    unknown = [o for o in trace.ops() if statuses[o]["status"] == "unknown"]
    line = f"uses {len(trace.ops())} ops; {len(bad)} not native on {where}" + (f": {_listing(bad, statuses)}"
                                                                                 if bad else "")
    if unknown:
        line += f"; {len(unknown)} not covered by the audit: {_listing(unknown, None)}"
    return Verdict(statuses=statuses, not_native=bad, unknown=unknown, warnings=warns, where=where, line=line)


def operator_status(overload: str, trace: OpTrace, rows: dict, index: dict, grad: bool) -> dict:
    """One traced operator's status in an audit's rows: {entry, status, phase, reason[, dtypes]}."""
    from gapbench.coverage.index import match_entries

    hits, phase = match_entries(overload, index)
    audited = [e for e in hits if (e["op"], e.get("variant") or "") in rows]
    if not hits:
        return {"entry": None, "status": "unknown", "phase": "", "reason": "no OpInfo entry reaches this operator"}
    if not audited:
        own = _own_entry(overload, hits)
        return {"entry": _label(own) if own else None, "status": "unknown", "phase": phase,
                "reason": f"{_label(own)} is not in this coverage file" if own else
                "no OpInfo entry of its own is in this coverage file (other entries' tests reach it)"}
    # the best-named entry the audit actually ran, else the best-named one at all
    ran = [e for e in audited if any(r["status"] != "skipped" for r in rows[(e["op"], e.get("variant") or "")])]
    e = (ran or audited)[0]
    rs_rows = rows[(e["op"], e.get("variant") or "")]
    want = trace.dtypes.get(overload, set())
    chosen = [r for r in rs_rows if r["dtype"] in want] or rs_rows
    if phase == "backward" and not grad:
        return {"entry": _label(e), "status": "unknown", "phase": phase,
                "reason": "a backward kernel; the audit ran without --grad"}
    st, reason = _worst_of(chosen, backward=phase == "backward")
    if st == "skipped":  # audited but not run or not compared: the file does not know
        own = _own_entry(overload, [e])
        st, reason = "unknown", (f"{_label(own)} was skipped: {reason}" if own else
                                 f"the entry that reaches it ({_label(e)}) was skipped: {reason}")
    return {"entry": _label(e), "status": st, "phase": phase, "reason": reason,
            "dtypes": sorted(r["dtype"] for r in chosen)}


def _worst_of(rows: list[dict], backward: bool) -> tuple[str, str]:
    """The worst status over an op's audited dtypes (of its forward, or of its backward) and its reason."""
    from gapbench.coverage.classify import worst

    parts = [(r.get("backward") or {}) for r in rows] if backward else rows
    st = worst(p.get("status", "skipped") for p in parts)
    return st, next((p.get("reason", "") for p in parts if p.get("status") == st), "")


def _listing(ops: list[str], statuses: dict | None, limit: int = 12) -> str:
    items = [f"{o} ({statuses[o]['status']})" if statuses else o for o in ops[:limit]]
    return ", ".join(items) + (f", … ({len(ops) - limit} more)" if len(ops) > limit else "")


def _own_entry(overload: str, entries: list[dict]) -> dict | None:
    """The first entry named like the operator (aten.add.Tensor: `add`), or None: an entry that merely reaches it
    inside its own test (aten.add.Scalar inside special.ndtr, aten.alias inside linalg.svd) is not its audit and
    is never named as the reason it was not audited."""
    from gapbench.coverage.index import _entry_names, base_name

    name = base_name(overload)
    return next((e for e in entries if name in _entry_names(e)), None)


def _label(e: dict) -> str:
    return e["op"] + (f".{e['variant']}" if e.get("variant") else "")
