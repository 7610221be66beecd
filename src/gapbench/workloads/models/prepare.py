"""What a model workload checks before it builds anything: that its libraries import."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from gapbench.workloads.models.precision import Precision

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
