"""Operator coverage: audit a backend against PyTorch's OpInfo database, and trace the operators a model uses.

    audit(device="cuda", dtypes=["bfloat16"], ops="linalg.*") -> ResultSet with .coverage filled
    trace_ops(...)  (gapbench.coverage.trace)                   -> OpTrace

The OpInfo database is imported only inside child processes (gapbench.coverage.child): importing it
changes global torch flags.
"""

from gapbench.coverage.audit import audit, list_ops, read_journal
from gapbench.coverage.summary import headline, summarize

__all__ = ["audit", "list_ops", "read_journal", "headline", "summarize"]


import sys as _sys  # noqa: E402
import types as _types  # noqa: E402


class _CallableModule(_types.ModuleType):
    """`gapbench.coverage(...)` is the API function and also this package's name: once the package is
    imported the attribute on `gapbench` is the module, so the module calls audit()."""

    def __call__(self, *args, **kwargs):
        return audit(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableModule
