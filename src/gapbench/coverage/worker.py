"""Inside a coverage worker process: import the OpInfo database, run operators, write one JSON line each.

Run as `python -m gapbench.coverage.worker CONFIG.json`. Importing the OpInfo database changes global
torch flags, which is why it only ever happens here, never in the gapbench process itself.

Protocol (JSON lines on the original stdout; the op's own prints go to stderr):
  {"event": "hello", "torch": ..., "pid": ...}
  {"event": "start", "unit": KEY}        before each (op, dtype) unit: the parent's per-op timeout starts here
  {"event": "row", "unit": KEY, "row": {...}}
  {"event": "op", ...} / {"event": "index", ...}   in the list / index modes
  {"event": "end"}
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import re
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

from gapbench.coverage.classify import (
    aggregate,
    classify_exception,
    compare_outputs,
    fallback_ops,
    family_of,
    gradient_scale,
    one_line,
    rules,
    worst,
)
from gapbench.coverage.dispatch import OpRecorder

_OUT = None

TEST_NAMES_COMPARE = ("test_compare_cpu", "test_output_match")  # OpInfo's "device vs CPU" tests
TEST_NAMES_GRAD = ("test_output_grad_match",)
DEVICE_TYPES_DECLARED = ("cpu", "cuda", "xpu", "mps", "hpu")


def emit(obj: dict) -> None:
    _OUT.write(json.dumps(obj, default=str) + "\n")
    _OUT.flush()


def unit_key(name: str, variant: str, dtype: str) -> str:
    return f"{name}|{variant}|{dtype}"


def op_label(name: str, variant: str) -> str:
    return f"{name}.{variant}" if variant else name


# ---- the OpInfo database -------------------------------------------------------------------------------

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
    for dt in DEVICE_TYPES_DECLARED:
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


# ---- running one sample --------------------------------------------------------------------------------

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


class Runner:
    def __init__(self, device: str, max_samples: int, time_target_s: float):
        """max_samples 0: every sample OpInfo has."""
        self.device = torch.device(device)
        self.max_samples = max_samples
        self.time_target_s = time_target_s
        self.has_fallback_rules = self.device.type in ("mps", "xpu", "npu")
        self.fell_back: set[str] = set()  # backends warn once per op; remember every op they named

    # device plumbing
    def sync(self, device=None):
        d = device or self.device
        if d.type == "cpu":
            return
        mod = getattr(torch, d.type, None)
        if mod is not None and hasattr(mod, "synchronize"):
            mod.synchronize()

    def run_on_device(self, fn):
        """Run fn; return (value, fallback ops named or reached) — raises what fn raises."""
        rec = OpRecorder() if self.has_fallback_rules else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if rec is not None:
                with rec:
                    out = fn()
            else:
                out = fn()
            self.sync()
        named = fallback_ops([str(w.message) for w in caught], self.device.type)
        self.fell_back.update(n for n in named if n != "<unnamed>")
        hit = list(named)
        if rec is not None:
            hit += sorted(n for n in (_packet(o) for o in rec.all_ops) if n in self.fell_back)
        return out, sorted(set(hit))

    def time_call(self, fn, device) -> float | None:
        try:
            fn()
            self.sync(device)
            times, total = [], 0.0
            while len(times) < 5 or (total < self.time_target_s and len(times) < 50):
                t0 = time.perf_counter()
                fn()
                self.sync(device)
                dt = time.perf_counter() - t0
                times.append(dt)
                total += dt
            return statistics.median(times)
        except Exception:
            return None

    # one (op, dtype)
    def audit(self, op, dtype, grad: bool) -> dict:
        row = {"op": op.name, "variant": op.variant_test_name, "family": family_of(op.name, type(op).__name__),
               "dtype": str(dtype).replace("torch.", ""), "status": "skipped", "reason": "", "max_error": None,
               "device_time_s": None, "cpu_time_s": None, "samples": 0, "backward": None}
        if dtype not in declared_dtypes(op):
            row["reason"] = f"not applicable: OpInfo declares no {row['dtype']} support for this op on any device"
            return row
        # OpInfo's own skips and expected failures of its device-vs-CPU test: the op still runs (a crash is
        # contained by the worker), but a difference from the reference is known, not counted as wrong
        known = (opinfo_skip(op, self.device.type, dtype, TEST_NAMES_COMPARE)
                 or opinfo_skip(op, self.device.type, dtype, TEST_NAMES_COMPARE, kind="xfail"))
        fwd = self.forward(op, dtype)
        _known_difference(fwd, known)
        row.update(fwd)
        if grad:
            row["backward"] = self.backward(op, dtype)
            b = row["backward"]
            _known_difference(b, known)
            if b["status"] != "skipped" and worst([row["status"], b["status"]]) == b["status"] != row["status"]:
                row["status"], row["reason"] = b["status"], f"backward: {b['reason']}"
        return row

    def samples(self, op, dtype, requires_grad: bool):
        """Up to max_samples of the op's samples: spread over its list (the first ones are often empty
        tensors), always with the largest."""
        torch.manual_seed(0)
        pool = []
        # making samples runs ops on the device too; a backend warns once per op, so a fallback it reports
        # here must be remembered or the op's own run would look native
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for s in op.sample_inputs(self.device, dtype, requires_grad=requires_grad):
                pool.append(s)
                if self.max_samples and len(pool) >= 4 * self.max_samples:
                    break
        self.fell_back.update(n for n in fallback_ops([str(w.message) for w in caught], self.device.type)
                              if n != "<unnamed>")
        if not self.max_samples or len(pool) <= self.max_samples:
            return pool
        step = len(pool) / self.max_samples
        picked = [pool[int(i * step)] for i in range(self.max_samples)]
        largest = max(pool, key=sample_numel)
        if all(p is not largest for p in picked):
            picked[-1] = largest
        return picked

    def forward(self, op, dtype) -> dict:
        try:
            samples = self.samples(op, dtype, False)
        except Exception as e:
            status, reason = classify_exception(e)
            return {"status": status, "reason": f"making samples: {reason}"}
        if not samples:
            return {"status": "skipped", "reason": "OpInfo has no samples for this dtype"}
        results, max_err, ran = [], None, []
        ref_dtype = wide_dtype(dtype)
        for s in samples:
            status, reason, err = self.one_sample(op, s, dtype, ref_dtype)
            results.append((status, reason))
            if err is not None:
                max_err = err if max_err is None else max(max_err, err)
            if status in ("native", "cpu_fallback", "wrong_result") or (status == "skipped" and "random" in reason):
                ran.append(s)
        status, reason = aggregate(results)
        out = {"status": status, "reason": reason, "max_error": max_err, "samples": len(samples)}
        if ran:
            big = max(ran, key=sample_numel)
            out["device_time_s"] = self.time_call(lambda: call(op, big), self.device)
            if self.device.type == "cpu":
                out["cpu_time_s"] = out["device_time_s"]  # on the CPU device both are the CPU: one timing
            else:
                try:
                    cpu_s = to_reference(big, dtype, dtype)
                    out["cpu_time_s"] = self.time_call(lambda: call(op, cpu_s), torch.device("cpu"))
                except Exception:
                    out["cpu_time_s"] = None
        return out

    def one_sample(self, op, s, dtype, ref_dtype) -> tuple[str, str, float | None]:
        ref = to_reference(s, dtype, ref_dtype)
        torch.manual_seed(0)
        try:
            actual, fell = self.run_on_device(lambda: call(op, s))
        except Exception as e:
            status, reason = classify_exception(e)
            return status, reason, None
        if fell:
            return "cpu_fallback", f"{self.device.type} ran {', '.join(fell)} on the CPU", None
        if op.name in rules().get("undefined_output", {}).get("ops", []):
            return "skipped", "ran, but the output is uninitialised memory: not compared", None
        expected, how = self.reference(op, ref, s, dtype)
        if expected is None:
            return "native", "", None  # no reference to compare against; ran natively
        only = nonunique(op)
        c = compare_outputs(pick(actual, only), pick(expected, only), dtype)
        if c.ok:
            return "native", "", c.max_error
        # a mismatch: is the op random? OpInfo seeds random ops itself (wrapper_set_seed), whose values then
        # depend on the dtype's RNG path; otherwise a second reference with another seed tells
        if seeds_itself(op):
            return "skipped", ("ran, but the output is random (OpInfo seeds it; the random stream differs by "
                               "dtype and device): comparison meaningless"), None
        again, _ = self.reference(op, ref, s, dtype, seed=1)
        if again is not None and not compare_outputs(again, expected, dtype).ok:
            return "skipped", ("ran, but the output is random (two CPU runs with different seeds differ): "
                               "comparison meaningless"), None
        return "wrong_result", f"vs {how}: {c.detail}", c.max_error

    def reference(self, op, ref, s, dtype, seed: int = 0):
        torch.manual_seed(seed)
        try:
            return call(op, ref), f"CPU {ref_name(ref, dtype)}"
        except Exception:
            pass
        if self.device.type != "cpu":
            torch.manual_seed(seed)
            try:
                return call(op, to_reference(s, dtype, dtype)), f"CPU {dtype}"
            except Exception:
                pass
        return None, ""

    def backward(self, op, dtype) -> dict:
        if not op.supports_autograd:
            return {"status": "skipped", "reason": "OpInfo: the op does not support autograd"}
        if not (dtype.is_floating_point or dtype.is_complex):
            return {"status": "skipped", "reason": f"no gradients for {dtype}"}
        why = opinfo_skip(op, self.device.type, dtype, TEST_NAMES_GRAD)
        if why:
            return {"status": "skipped", "reason": why}
        try:
            samples = self.samples(op, dtype, True)
        except Exception as e:
            status, reason = classify_exception(e)
            return {"status": status, "reason": f"making samples: {reason}"}
        results, max_err = [], None
        for s in samples:
            ref = to_reference(s, dtype, wide_dtype(dtype))
            torch.manual_seed(0)
            try:
                actual, fell = self.run_on_device(lambda s=s: grads_of(op, s))
            except Exception as e:
                results.append(classify_exception(e))
                continue
            if actual is None:
                results.append(("skipped", "no differentiable output"))
                continue
            if fell:
                results.append(("cpu_fallback", f"{self.device.type} ran {', '.join(fell)} on the CPU"))
                continue
            torch.manual_seed(0)
            try:
                expected = grads_of(op, ref)
            except Exception:
                results.append(("native", ""))
                continue
            if nonunique(op) is not None:
                results.append(("native", ""))  # gradients through non-unique outputs: not comparable
                continue
            c = compare_outputs(actual, expected, dtype, scale=gradient_scale())
            if c.max_error is not None:
                max_err = c.max_error if max_err is None else max(max_err, c.max_error)
            results.append(("native", "") if c.ok else ("wrong_result", f"gradient vs CPU float64: {c.detail}"))
        status, reason = aggregate(results)
        return {"status": status, "reason": reason, "max_error": max_err, "samples": len(samples)}


def _known_difference(result: dict, known: str) -> None:
    """A difference OpInfo knows about (random output, as_strided views of a storage the reference does not
    share, pivots) is not counted as wrong; OpInfo's reason and what was found are kept."""
    if not known:
        return
    if result.get("status") == "wrong_result":
        result["status"], result["reason"] = "skipped", f"{known}; it does differ here: {result['reason']}"
    elif result.get("status") == "skipped" and "random" in result.get("reason", ""):
        result["reason"] = f"{known}; {result['reason']}"


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


# ---- the index of ATen overloads each OpInfo entry reaches --------------------------------------------

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


# ---- main --------------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    global _OUT
    _OUT = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # an op that prints must not corrupt the protocol
    cfg = json.loads(Path(argv[0]).read_text())
    warnings.simplefilter("ignore")
    emit({"event": "hello", "torch": torch.__version__, "pid": os.getpid()})
    if cfg.get("threads"):
        torch.set_num_threads(int(cfg["threads"]))
    ops = select_ops(load_ops(cfg.get("extra_ops")), cfg.get("ops"))
    gc.collect()
    gc.freeze()  # the OpInfo database is millions of objects: keep them out of every later collection
    mode = cfg["mode"]
    if mode == "list":
        for o in ops:
            emit({"event": "op", "op": o.name, "variant": o.variant_test_name,
                  "family": family_of(o.name, type(o).__name__), "autograd": bool(o.supports_autograd)})
    elif mode == "index":
        for o in ops:
            emit({"event": "index", **index_entry(o)})
    elif mode == "audit":
        by_key = {(o.name, o.variant_test_name): o for o in ops}
        runner = Runner(cfg["device"], int(cfg.get("max_samples") or 0), float(cfg.get("time_target_s", 0.02)))
        for name, variant, dtype_name in cfg["units"]:
            key = unit_key(name, variant, dtype_name)
            emit({"event": "start", "unit": key})
            t0 = time.monotonic()
            op = by_key.get((name, variant))
            if op is None:
                row = {"op": name, "variant": variant, "dtype": dtype_name, "status": "error",
                       "reason": "no such OpInfo entry in this torch"}
            else:
                try:
                    row = runner.audit(op, getattr(torch, dtype_name), bool(cfg.get("grad")))
                except Exception as e:  # a bug of ours or a sample: record it, keep going
                    row = {"op": name, "variant": variant, "dtype": dtype_name, "status": "error",
                           "reason": one_line(f"audit failed: {e.__class__.__name__}: {e} "
                                              f"[{traceback.extract_tb(e.__traceback__)[-1].name}]")}
            row["wall_s"] = round(time.monotonic() - t0, 3)
            emit({"event": "row", "unit": key, "row": row})
            gc.collect()
    emit({"event": "end"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
