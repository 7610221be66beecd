"""Operator coverage: audit a backend against PyTorch's OpInfo database, and trace the operators a model uses.

    audit(device="cuda", dtypes=["bfloat16"], ops="linalg.*") -> ResultSet with .coverage filled
    trace_ops(...)  (gapbench.coverage.trace)                   -> OpTrace

The OpInfo database is imported only inside child processes (gapbench.coverage.child): importing it
changes global torch flags.
"""

from gapbench.coverage.audit import audit, list_ops, read_journal
from gapbench.coverage.summary import headline, summarize

__all__ = ["audit", "list_ops", "read_journal", "headline", "summarize"]

