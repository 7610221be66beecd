"""How one operator run is judged: exception -> status, device output vs reference, samples -> one status.

Pure functions over torch objects and text; nothing here imports the OpInfo database.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

STATUSES = ("native", "cpu_fallback", "unsupported", "wrong_result", "error", "skipped")
# worst first: an (op, dtype) takes the worst status of its samples, an op the worst of its dtypes
SEVERITY = ("wrong_result", "error", "cpu_fallback", "unsupported", "native", "skipped")


@lru_cache(maxsize=1)
def rules() -> dict:
    return tomllib.loads(resources.files("gapbench.coverage").joinpath("rules.toml").read_text(encoding="utf-8"))


def family_of(name: str, opinfo_class: str = "") -> str:
    """Family of an OpInfo entry: the longest matching name prefix, else its OpInfo class, else 'other'."""
    fam = rules()["families"]
    best = ""
    for prefix in fam["prefixes"]:
        if name.startswith(prefix) and len(prefix) > len(best):
            best = prefix
    if best:
        return fam["prefixes"][best]
    return fam["classes"].get(opinfo_class, fam["other"])


def one_line(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def classify_exception(exc: BaseException) -> tuple[str, str]:
    """(status, reason) for an exception raised by an operator: unsupported when it says 'not implemented'."""
    msg = f"{exc.__class__.__name__}: {exc}"
    if isinstance(exc, NotImplementedError):
        return "unsupported", one_line(msg)
    for pat in rules()["unsupported"]["patterns"]:
        if re.search(pat, str(exc)):
            return "unsupported", one_line(msg)
    return "error", one_line(msg)


def fallback_ops(warning_texts: list[str], patterns: tuple[str, ...] | list[str]) -> list[str]:
    """The operators a backend said it ran on the CPU (or '<unnamed>' when the warning names none), by the
    backend's own warning patterns (gapbench.devices: Backend.fallback_patterns)."""
    found: list[str] = []
    for text in warning_texts:
        for pat in patterns:
            m = re.search(pat, text)
            if m:
                found.append(m.group(1) if m.groups() else "<unnamed>")
                break
    return found


def gradient_scale() -> float:
    return float(rules()["tolerance"].get("gradient_scale", 1.0))


def tolerance(dtype) -> tuple[float, float]:
    """(atol, rtol) for results computed in `dtype`, compared with a float64 reference."""
    tol = rules()["tolerance"]
    name = str(dtype).replace("torch.", "")
    t = tol.get(name, tol["default"])
    return float(t["atol"]), float(t["rtol"])


@dataclass(frozen=True)
class Comparison:
    ok: bool
    max_error: float | None  # largest |actual - expected| over the compared floating values (None: none compared)
    detail: str = ""  # where and how it differs, when not ok


def _leaves(x) -> list:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(x)[0]


def compare_outputs(actual, expected, dtype, scale: float = 1.0) -> Comparison:
    """Compare a device result with its reference, leaf by leaf; floating values within tolerance(dtype),
    times `scale` (gradients get rules.toml's gradient_scale: backward compounds forward's rounding)."""
    import torch

    a_leaves, e_leaves = _leaves(actual), _leaves(expected)
    if len(a_leaves) != len(e_leaves):
        return Comparison(False, None, f"output structure differs: {len(a_leaves)} vs {len(e_leaves)} values")
    atol, rtol = tolerance(dtype)
    atol, rtol = atol * scale, rtol * scale
    worst: float | None = None
    for i, (a, e) in enumerate(zip(a_leaves, e_leaves, strict=True)):
        where = f"output {i}" if len(a_leaves) > 1 else "output"
        if isinstance(a, torch.Tensor) != isinstance(e, torch.Tensor):
            return Comparison(False, worst, f"{where}: tensor vs {type(e).__name__}")
        if isinstance(a, torch.Tensor):
            c = _compare_tensors(a, e, atol, rtol, where)
        elif isinstance(a, (int, float, complex)) and not isinstance(a, bool) and isinstance(e, (int, float, complex)):
            c = _compare_tensors(torch.tensor(a), torch.tensor(e), atol, rtol, where)
        else:
            c = Comparison(a == e, None, "" if a == e else f"{where}: {a!r} vs {e!r}")
        if c.max_error is not None:
            worst = c.max_error if worst is None else max(worst, c.max_error)
        if not c.ok:
            return Comparison(False, worst, c.detail)
    return Comparison(True, worst)


def _dense_cpu(t):
    import torch

    if t.layout != torch.strided:
        t = t.to_dense()
    if t.is_conj():
        t = t.resolve_conj()
    if t.is_neg():
        t = t.resolve_neg()
    return t.detach().cpu()


def _compare_tensors(a, e, atol: float, rtol: float, where: str) -> Comparison:
    import torch

    a, e = _dense_cpu(a), _dense_cpu(e)
    if a.shape != e.shape:
        return Comparison(False, None, f"{where}: shape {tuple(a.shape)} vs {tuple(e.shape)}")
    if a.numel() == 0:
        return Comparison(True, None)
    if not (a.is_floating_point() or a.is_complex() or e.is_floating_point() or e.is_complex()):
        same = bool(torch.equal(a.to(e.dtype), e)) if a.dtype != e.dtype else bool(torch.equal(a, e))
        if same:
            return Comparison(True, 0.0)
        n = int((a.to(e.dtype) != e).sum())
        return Comparison(False, None, f"{where}: {n} of {e.numel()} exact values differ")
    wide = torch.complex128 if (a.is_complex() or e.is_complex()) else torch.float64
    if (a.is_floating_point() or a.is_complex()) and a.dtype != e.dtype and a.dtype.itemsize < e.dtype.itemsize \
            and (a.is_complex() or not e.is_complex()):
        e = e.to(a.dtype)  # the reference as the device's dtype can best hold it (overflow to inf included)
    a, e = a.to(wide), e.to(wide)
    nan_a, nan_e = torch.isnan(a), torch.isnan(e)
    if not torch.equal(nan_a, nan_e):
        n = int((nan_a != nan_e).sum())
        return Comparison(False, None, f"{where}: NaN in {n} places where the reference has none (or the reverse)")
    fin = torch.isfinite(e) & torch.isfinite(a)
    inf_mismatch = (~fin & ~nan_e) & (a != e)
    if bool(inf_mismatch.any()):
        return Comparison(False, None, f"{where}: {int(inf_mismatch.sum())} infinite values differ")
    if not bool(fin.any()):
        return Comparison(True, 0.0)
    diff = (a[fin] - e[fin]).abs()
    scale = max(1.0, float(e[fin].abs().mean()))
    allowed = atol * scale + rtol * e[fin].abs()
    max_err = float(diff.max())
    bad = diff > allowed
    if bool(bad.any()):
        n = int(bad.sum())
        excess = float((diff / allowed.clamp_min(1e-300)).max())
        return Comparison(False, max_err, f"{where}: {n} of {int(fin.sum())} values beyond tolerance "
                                          f"(atol {atol:g}×{scale:.3g}, rtol {rtol:g}; max error {max_err:.3g}, "
                                          f"{excess:.3g}x allowed)")
    return Comparison(True, max_err if math.isfinite(max_err) else None)


def worst(statuses) -> str:
    """The worst status of several (see SEVERITY); 'skipped' only when all are skipped."""
    statuses = list(statuses)
    for s in SEVERITY:
        if s in statuses:
            return s
    return "skipped"


def aggregate(samples: list[tuple[str, str]]) -> tuple[str, str]:
    """(status, reason) of several (status, reason) samples: the worst, with how many samples share it."""
    if not samples:
        return "skipped", "no samples"
    status = worst(s for s, _ in samples)
    same = [r for s, r in samples if s == status]
    counted = [s for s, _ in samples if s != "skipped"] if status != "skipped" else [s for s, _ in samples]
    if status == "native":
        return status, ""
    reason = same[0] if same else ""
    if len(counted) > 1:
        reason = f"{len(same)} of {len(counted)} samples: {reason}"
    return status, reason
