"""Backends as one axis: one module per accelerator stack, each exposing a `BACKEND` (a `base.Backend`).

    dev = devices.resolve("cuda:1")      # or None / "auto" for the best device found
    dev.synchronize(); dev.new_timer(); dev.identity(); dev.dtype_unsupported("fp8")

Every difference between stacks lives in these modules; the rest of gapbench asks a `Device` and never
tests a vendor's name. A new stack is one new module here (found by its `BACKEND` attribute, or a
third-party package's entry point in the group `gapbench.backends`) plus its rows in
`specs/accelerators.toml`; see docs/design.md.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from functools import lru_cache
from importlib import metadata

from gapbench.devices.base import Backend, Device, EnergyCounter, Timer
from gapbench.devices.dtypes import DTYPE_NAMES, DTYPES, DType
from gapbench.devices.host import available_host_memory, host_identity, host_memory
from gapbench.errors import GapbenchError

__all__ = ["Backend", "Device", "EnergyCounter", "Timer", "DTYPE_NAMES", "DTYPES", "DType", "backends", "by_name", "resolve",
           "available_types", "kinds", "host_identity", "host_memory", "available_host_memory"]

ENTRY_POINT_GROUP = "gapbench.backends"
# `--device auto` takes the first available backend in this order; a backend not listed comes after these
PREFERENCE = ("cuda", "rocm", "xpu", "npu", "mps")


@lru_cache(maxsize=1)
def backends() -> tuple[Backend, ...]:
    """Every backend gapbench knows: the modules of this package, then entry points; best first."""
    found: dict[str, Backend] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in ("base", "host", "tools", "dtypes") or info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        b = getattr(mod, "BACKEND", None)
        if isinstance(b, Backend):
            found.setdefault(b.name, b)
    try:
        eps = list(metadata.entry_points(group=ENTRY_POINT_GROUP))
    except Exception:
        eps = []
    for ep in eps:
        try:
            b = ep.load()
        except Exception:  # a broken third-party backend must not break the others
            continue
        b = b() if isinstance(b, type) else b
        if isinstance(b, Backend):
            found.setdefault(b.name, b)

    def rank(b: Backend) -> tuple:
        pref = PREFERENCE.index(b.name) if b.name in PREFERENCE else len(PREFERENCE)
        return (not b.auto_select, not b.is_accelerator, pref, b.name)

    return tuple(sorted(found.values(), key=rank))


def by_name(name: str) -> Backend:
    for b in backends():
        if b.name == name:
            return b
    raise GapbenchError(f"unknown backend {name!r}; known: {', '.join(b.name for b in backends())}")


def kinds() -> list[str]:
    """What `--device` takes: every backend's device type and aliases, once each."""
    out: list[str] = []
    for b in backends():
        for k in (b.device_type, *b.aliases):
            if k not in out:
                out.append(k)
    return out


def available_backends() -> list[Backend]:
    """Backends usable in this process, best first (the test accelerator only when asked for by name)."""
    out = []
    for b in backends():
        try:
            ok = b.auto_select and b.available()
        except Exception:
            ok = False
        if ok:
            out.append(b)
    return out


def available_types() -> list[str]:
    """Device types usable in this process, best first."""
    return list(dict.fromkeys(b.device_type for b in available_backends()))


def resolve(spec: str | None) -> Device:
    """'cuda', 'cuda:1', 'rocm', 'cpu' or None / 'auto' (best found) -> Device; unknown or absent -> GapbenchError."""
    if spec is None or spec == "auto":
        return Device(available_backends()[0], 0)
    m = re.fullmatch(r"([a-z][a-z0-9_]*)(?::(\d+))?", str(spec).strip())
    known = kinds()
    if not m or m.group(1) not in known:
        raise GapbenchError(f"--device: unknown device {spec!r}; expected one of {', '.join(known)} (optionally :INDEX)")
    kind, index = m.group(1), int(m.group(2) or 0)
    candidates = [b for b in backends() if kind == b.device_type or kind in b.aliases]
    backend = None
    for b in candidates:
        try:
            if b.available():
                backend = b
                break
        except Exception:
            continue
    if backend is None:
        hint = "; ".join(dict.fromkeys(b.unavailable_hint for b in candidates))
        raise GapbenchError(f"device {spec!r} is not available: {hint}; found: {', '.join(available_types())}")
    if m.group(2) is not None and not backend.indexed:
        raise GapbenchError(f"--device {spec!r}: {kind} is one device; name it without an index")
    dev = Device(backend, index if backend.indexed else 0)
    if dev.index >= dev.count:
        raise GapbenchError(f"--device {spec!r}: only {dev.count} {kind} device(s) visible")
    return dev
