"""Shared terminal helpers for the verbs: the consoles they print to, and strict JSON output.

The consoles show every control character in what they print as an escape (gapbench.text.printable), whatever
the renderable: a label or a host name from a results file can clear the screen or retitle the window only if
its ESC reaches the terminal raw. rich's own styles and cursor moves are control segments of their own and pass.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.segment import Segment

from gapbench.results import json_text
from gapbench.text import has_controls, json_printable, printable

__all__ = ["out", "err", "print_json", "shown", "ShownConsole", "OUTPUT_WIDTH"]


class ShownConsole(Console):
    """A rich Console that writes the control characters of the text it prints as escapes, and reads no emoji
    codes (':name:') into a string."""

    def __init__(self, **kwargs):
        kwargs.setdefault("emoji", False)
        super().__init__(**kwargs)

    def render(self, renderable, options=None):
        for seg in super().render(renderable, options):
            if seg.control or not has_controls(seg.text, keep_newlines=True):
                yield seg
            else:
                yield Segment(printable(seg.text, keep_newlines=True), seg.style)


OUTPUT_WIDTH = 160  # files and pipes get full-width tables instead of rich's 80-column default: every verb alike

out = ShownConsole(highlight=False, soft_wrap=False)
if not out.is_terminal:
    out = ShownConsole(highlight=False, soft_wrap=False, width=OUTPUT_WIDTH)
err = ShownConsole(stderr=True, highlight=False)


def shown() -> ShownConsole:
    """The console every verb prints its tables to: the terminal's width, or OUTPUT_WIDTH piped."""
    return out


def print_json(data) -> None:
    """Strict JSON on standard output: a non-finite number is null, never NaN (which no JSON reader takes); no
    control character raw, not even those JSON lets through (DEL, C1)."""
    sys.stdout.write(json_printable(json_text(data)) + "\n")
