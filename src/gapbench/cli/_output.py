"""Shared terminal helpers for the verbs: the consoles they print to."""

from __future__ import annotations

from rich.console import Console

__all__ = ["out", "err"]

out = Console(highlight=False, soft_wrap=False)
if not out.is_terminal:  # files and pipes get full-width tables instead of rich's 80-column default
    out = Console(highlight=False, soft_wrap=False, width=160)
err = Console(stderr=True, highlight=False)
