"""One operator at one dtype on one device, audited: forward (and backward) on the device against a
CPU reference in a wider dtype, classified native / cpu_fallback / unsupported / wrong_result / error /
skipped, with the device and CPU times of its largest sample."""

from __future__ import annotations

import statistics
import time
import warnings

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
from gapbench.coverage.opinfo import (
    TEST_NAMES_COMPARE,
    TEST_NAMES_GRAD,
    _packet,
    call,
    declared_dtypes,
    grads_of,
    nonunique,
    opinfo_skip,
    pick,
    ref_name,
    sample_numel,
    seeds_itself,
    to_reference,
    wide_dtype,
)

__all__ = ["OpAuditor", "one_line"]


class OpAuditor:
    """Audits (op, dtype) units on one gapbench device; remembers what the backend said it ran on the CPU."""

    def __init__(self, device, max_samples: int, time_target_s: float):
        """device: a gapbench.devices.Device. max_samples 0: every sample OpInfo has."""
        self.dev = device
        self.device = device.torch_device
        self.max_samples = max_samples
        self.time_target_s = time_target_s
        self.has_fallback_rules = bool(self.dev.fallback_patterns)
        self.fell_back: set[str] = set()  # backends warn once per op; remember every op they named

    def sync(self, device=None):
        """Wait for the audited device (or, given torch.device('cpu'), nothing: the host is synchronous)."""
        if device is None or device == self.device:
            self.dev.synchronize()

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
        named = fallback_ops([str(w.message) for w in caught], self.dev.fallback_patterns)
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
        self.fell_back.update(n for n in fallback_ops([str(w.message) for w in caught], self.dev.fallback_patterns)
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
            return "cpu_fallback", f"{self.dev.kind} ran {', '.join(fell)} on the CPU", None
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
                results.append(("cpu_fallback", f"{self.dev.kind} ran {', '.join(fell)} on the CPU"))
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
