"""Text from users and files made safe to show: a control character is shown, never obeyed.

A label, a host name or a reason read from a results file (or a path in a scanned tree) may hold terminal
escapes (ESC [2J clears the screen; an OSC sets the window title or a hyperlink), C1 controls (0x9b is a CSI
on its own), carriage returns and backspaces that overwrite what was printed before, or the Unicode marks that
reorder a line. Every renderer passes such strings through `printable`, which writes each of them as an escape
(ESC as \\x1b, CR as \\r, U+202E as \\u202e) and leaves every other character, all of ordinary Unicode, as it
is; `json_printable` does the same inside JSON text, where the escape keeps the string's value.
"""

from __future__ import annotations

import re

__all__ = ["printable", "json_printable", "has_controls"]

# beside the C0 controls: DEL, the C1 controls, and the marks that reorder or break a line without being visible
# (bidirectional embeddings, overrides and isolates, the line and paragraph separators)
_MARKS = "\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f{_MARKS}]")
_CONTROL_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{_MARKS}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
# what JSON text may still carry raw (a JSON encoder escapes C0 itself): DEL, C1 and the invisible marks
_JSON_RAW = re.compile(f"[{_MARKS}]")


def _escape(m: re.Match) -> str:
    c = m.group()
    if c in _NAMED:
        return _NAMED[c]
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}"


def has_controls(text: str, keep_newlines: bool = False) -> bool:
    """Whether `printable` would change the text."""
    return (_CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL).search(text) is not None


def printable(text: object, keep_newlines: bool = False) -> str:
    """The text with every control character written as an escape ('\\x1b[2J' for ESC [2J); newlines kept where
    the output lays out lines itself (a terminal cell), else shown as '\\n'."""
    s = text if isinstance(text, str) else str(text)
    pattern = _CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL
    return pattern.sub(_escape, s) if pattern.search(s) else s


def json_printable(json_text: str) -> str:
    """JSON text with DEL, C1 controls and the invisible marks inside its strings written as \\u escapes (a JSON
    encoder escapes the C0 controls itself): the same document, which no terminal obeys. They occur only inside
    strings, so the structure is untouched."""
    return _JSON_RAW.sub(lambda m: f"\\u{ord(m.group()):04x}", json_text)
