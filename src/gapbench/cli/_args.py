"""Argument types for the verbs' numbers and names: a value out of range is a usage error (one line, exit 2)
when the command line is read, never a failure after work has started."""

from __future__ import annotations

import argparse
import math

MAX_SECONDS = 1e9  # about 31 years: more is a typo, and beyond it deadlines lose their precision
MAX_GIB = 2.0**20  # a pebibyte
MAX_COUNT = 1_000_000
MAX_LABEL = 200  # what a results file holds (gapbench.record.MAX_NAME)


def _number(text: str, what: str, high: float) -> float:
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, not {text!r}") from None
    if not math.isfinite(x) or x <= 0 or x > high:
        raise argparse.ArgumentTypeError(f"expected {what} above 0 and at most {high:g}, not {text!r}")
    return x


def seconds(text: str) -> float:
    """A positive, finite number of seconds."""
    return _number(text, "a number of seconds", MAX_SECONDS)


def gib(text: str) -> float:
    """A positive, finite size in GiB."""
    return _number(text, "a size in GiB", MAX_GIB)


def count(text: str) -> int:
    """A whole number of at least 1."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, not {text!r}") from None
    if not 1 <= n <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to {MAX_COUNT}, not {text!r}")
    return n


def label(text: str) -> str:
    """A platform name short enough for a results file and a table column."""
    if not text.strip() or len(text) > MAX_LABEL:
        raise argparse.ArgumentTypeError(f"expected a name of 1 to {MAX_LABEL} characters")
    return text

# torch.distributed's backends (c10d): gloo on every device, each stack's own (nccl on CUDA and ROCm, xccl on XPU,
# hccl on Ascend), and the two a torch build may have been compiled with
DIST_BACKENDS = ("gloo", "nccl", "xccl", "hccl", "mpi", "ucc")
