"""PyTorch's OpInfo database as the coverage audit uses it: which entries, their samples and dtypes, the
skips and expected failures OpInfo itself declares, references on the CPU, gradients, and the index of
ATen overloads each entry reaches.

Imported only inside coverage child processes: importing the OpInfo database changes global torch flags.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys

import torch

from gapbench.coverage.classify import family_of, rules
from gapbench.coverage.dispatch import OpRecorder

TEST_NAMES_COMPARE = ("test_compare_cpu", "test_output_match")  # OpInfo's "device vs CPU" tests
TEST_NAMES_GRAD = ("test_output_grad_match",)
# the device types OpInfo declares dtypes for (its own vocabulary, read as data)
OPINFO_DEVICE_TYPES = ("cpu", "cuda", "xpu", "mps", "hpu")


def unit_key(name: str, variant: str, dtype: str) -> str:
    return f"{name}|{variant}|{dtype}"


def op_label(name: str, variant: str) -> str:
    return f"{name}.{variant}" if variant else name


def load_ops(extra: str | None) -> list:
    from torch.testing._internal.common_methods_invocations import op_db

    ops = list(op_db)
    if extra:
        ops += load_extra_ops(extra)
    return ops


def load_extra_ops(spec: str) -> list:
    """Test-only or user OpInfo entries: a module name or a .py path defining extra_ops() or EXTRA_OPS."""
    if spec.endswith(".py") or os.sep in spec:
        s = importlib.util.spec_from_file_location("gapbench_extra_ops", spec)
        mod = importlib.util.module_from_spec(s)
        sys.modules["gapbench_extra_ops"] = mod
        s.loader.exec_module(mod)
    else:
        mod = importlib.import_module(spec)
    if hasattr(mod, "extra_ops"):
        return list(mod.extra_ops())
    return list(mod.EXTRA_OPS)


def select_ops(ops: list, pattern: str | None) -> list:
    if not pattern:
        return ops
    rx = re.compile(pattern)
    return [o for o in ops if rx.fullmatch(o.name) or rx.fullmatch(op_label(o.name, o.variant_test_name))]


def declared_dtypes(op) -> set:
    """Every dtype OpInfo says the op supports on any device type: outside it, the op does not apply."""
    out: set = set()
    for dt in OPINFO_DEVICE_TYPES:
        try:
            out |= set(op.supported_dtypes(dt))
        except Exception:
            pass
    return out


def _skip_reason(decorator) -> str:
    name = getattr(decorator, "__name__", type(decorator).__name__)
    if name == "expectedFailure":
        return "expected failure"
    for cell in getattr(decorator, "__closure__", None) or ():
        try:
            v = cell.cell_contents
        except ValueError:
            continue
        if isinstance(v, str) and v:
            return f"skip: {v}"
    return "skip" if "skip" in getattr(decorator, "__qualname__", name) else ""


def opinfo_skip(op, device_type: str, dtype, test_names, kind: str = "skip") -> str:
    """Why OpInfo itself skips (kind 'skip') or expects failure of (kind 'xfail') this op in its
    device-vs-CPU test, or ''."""
    for d in (*getattr(op, "skips", ()), *getattr(op, "decorators", ())):
        if getattr(d, "test_name", None) not in test_names:
            continue
        if d.device_type not in (None, device_type):
            continue
        if d.dtypes is not None and dtype not in d.dtypes:
            continue
        active = d.active_if
        if callable(active):
            try:
                active = active({})
            except Exception:
                active = True
        if not active:
            continue
        for dec in d.decorators:
            why = _skip_reason(dec)
            if why and (why == "expected failure") == (kind == "xfail"):
                return f"OpInfo marks {d.test_name} for this op: {why}"
    return ""


def wide_dtype(dtype):
    if dtype.is_complex:
        return torch.complex128
    if dtype.is_floating_point:
        return torch.float64
    return dtype


def to_reference(sample, dtype, ref_dtype):
    """The same sample on the CPU, tensors of `dtype` upcast to `ref_dtype` (values unchanged)."""
    def f(t):
        if isinstance(t, torch.dtype):
            return ref_dtype if t == dtype else t
        rg = t.requires_grad
        t = t.detach()
        if t.dtype == dtype:
            t = t.to(ref_dtype)
        t = t.cpu().clone() if t.layout == torch.strided else t.cpu()
        return t.requires_grad_(rg) if rg else t
    return sample.transform(f)


def call(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def sample_numel(sample) -> int:
    from torch.utils._pytree import tree_flatten

    leaves = tree_flatten((sample.input, sample.args, sample.kwargs))[0]
    return sum(t.numel() for t in leaves if isinstance(t, torch.Tensor))


def seeds_itself(op) -> bool:
    code = getattr(op.op, "__code__", None)
    return code is not None and "wrapper_set_seed" in code.co_names


def nonunique(op) -> list[int] | None:
    """Output positions to compare for ops whose other outputs are not unique (rules.toml [nonunique])."""
    r = rules().get("nonunique", {}).get(op_label(op.name, op.variant_test_name)) or \
        rules().get("nonunique", {}).get(op.name)
    return list(r["compare"]) if r else None


def pick(out, positions):
    if positions is None or not isinstance(out, (tuple, list)):
        return out
    return [out[i] for i in positions if i < len(out)]


def ref_name(ref, dtype) -> str:
    return str(wide_dtype(dtype)).replace("torch.", "")


def grads_of(op, s):
    """Gradients of a fixed weighted sum of the op's differentiable outputs w.r.t. its tensor inputs."""
    from torch.utils._pytree import tree_flatten

    out = s.output_process_fn_grad(call(op, s))
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor) and t.requires_grad]
    inputs = [t for t in tree_flatten((s.input, s.args, s.kwargs))[0]
              if isinstance(t, torch.Tensor) and t.requires_grad]
    if not outs or not inputs:
        return None
    weights = []
    for t in outs:
        w = (torch.arange(t.numel(), dtype=torch.float64) % 7 + 1) / 7  # not constant: sums of softmax have 0 grad
        weights.append(w.reshape(t.shape).to(device=t.device, dtype=t.dtype))
    gs = torch.autograd.grad(outs, inputs, grad_outputs=weights, allow_unused=True)
    return [g if g is not None else torch.zeros(()) for g in gs]


def _packet(overload: str) -> str:
    parts = overload.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) >= 2 else overload


def index_entry(op, samples_per_op: int = 64) -> dict:
    declared = declared_dtypes(op)
    dtype = next((d for d in (torch.float32, torch.float64, torch.int64, torch.bool, torch.complex64)
                  if d in declared), None) or (sorted(declared, key=str)[0] if declared else None)
    entry = {"op": op.name, "variant": op.variant_test_name, "family": family_of(op.name, type(op).__name__),
             "aten_name": getattr(op, "aten_name", None) or "", "forward": [], "backward": []}
    if dtype is None:
        return entry
    grad = bool(op.supports_autograd) and (dtype.is_floating_point or dtype.is_complex)
    rec = OpRecorder()
    try:
        torch.manual_seed(0)
        gen = op.sample_inputs("cpu", dtype, requires_grad=grad)
        for i, s in enumerate(gen):
            if i >= samples_per_op:
                break
            try:
                with rec:
                    if grad:
                        grads_of(op, s)
                    else:
                        call(op, s)
            except Exception:
                continue
    except Exception:
        pass
    entry["forward"] = sorted(rec.forward)
    entry["backward"] = sorted(rec.backward)
    return entry
