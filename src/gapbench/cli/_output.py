"""Shared terminal helpers for the verbs: the consoles they print to, and strict JSON output."""

from __future__ import annotations

import sys

from rich.console import Console

from gapbench.results import json_text

__all__ = ["out", "err", "print_json"]

out = Console(highlight=False, soft_wrap=False)
if not out.is_terminal:  # files and pipes get full-width tables instead of rich's 80-column default
    out = Console(highlight=False, soft_wrap=False, width=160)
err = Console(stderr=True, highlight=False)


def print_json(data) -> None:
    """Strict JSON on standard output: a non-finite number is null, never NaN (which no JSON reader takes)."""
    sys.stdout.write(json_text(data) + "\n")
