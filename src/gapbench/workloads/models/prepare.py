"""The checks every model workload makes before it builds anything: its libraries import, the device computes
in its precision, the attention backend it asks for exists."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from gapbench.workloads.models.precision import Precision, attention_choice, precision_unsupported

INSTALL_HINT = "pip install 'gapbench[models]'"


def missing_dependency(*modules: str) -> str | None:
    """None when every module imports; otherwise the reason, with the install command."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as e:  # a broken install is as unusable as a missing one
            why = "is not installed" if isinstance(e, ImportError) else f"fails to import ({type(e).__name__}: {e})"
            return f"{name} {why}; install the model extras: {INSTALL_HINT}"
    return None


@dataclass(frozen=True)
class Prepared:
    precision: Precision
    attn_impl: str  # transformers attn_implementation
    sdpa_backends: list | None


def prepare(workload, variant, ctx, *modules: str):
    """Prepared, or the failed Measurement to return: a missing library or a precision the device lacks
    is `unsupported` with the reason. The precision is read back from the variant (its identity)."""
    missing = missing_dependency(*modules)
    if missing:
        return workload.failed(variant, ctx, "unsupported", missing)
    prm = variant.params
    precision = Precision(prm["dtype"], prm.get("weights", prm["dtype"]), "variant")
    why = precision_unsupported(ctx.device, precision)
    if why:
        return workload.failed(variant, ctx, "unsupported", why)
    attn_impl, backends = attention_choice({"attention": prm["attention"]})
    return Prepared(precision, attn_impl, backends)
