"""The event stream between a child and its parent: one JSON object per line.

The parent makes a FIFO and passes its path in GAPBENCH_EVENTS; the child (or, under a launcher, its
ranks) opens it and writes. Each line is written with one system call, so lines of different writers do
not interleave below PIPE_BUF. A line that is not a JSON object is delivered as a `malformed` event: a
misbehaving child is a failure of that child, never of the parent. What an object says is checked by its reader
(the worker's events: engine.events).
"""

from __future__ import annotations

import json
import os

from pydantic_core import from_json

EVENTS_ENV = "GAPBENCH_EVENTS"
MAX_LINE = 16 * 2**20  # a line longer than this is cut off and reported malformed (a real one is kilobytes)


class EventWriter:
    """The child's end: send(kind, **data) writes {"event": kind, ...} as one line."""

    def __init__(self, path: str | None = None):
        path = path if path is not None else os.environ.get(EVENTS_ENV)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)) if path else None

    def send(self, kind: str, **data) -> None:
        if self.fd is None:
            return
        line = (json.dumps({"event": kind, **data}, allow_nan=False, default=str) + "\n").encode()
        view = memoryview(line)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def split_events(buf: bytes) -> tuple[list[dict], bytes]:
    """The complete lines in buf as events, and the unfinished rest."""
    events = []
    start = 0
    while (end := buf.find(b"\n", start)) >= 0:
        line, start = buf[start:end], end + 1
        if len(line) > MAX_LINE:
            events.append(_too_long(line))
        elif line.strip():
            events.append(parse_line(line))
    rest = buf[start:]
    if len(rest) > MAX_LINE:
        events.append(_too_long(rest))
        rest = b""
    return events, rest


def _too_long(line: bytes) -> dict:
    return {"event": "malformed", "text": line[:200].decode("utf-8", "replace"),
            "why": f"an event line longer than {MAX_LINE} bytes"}


def parse_line(line: bytes) -> dict:
    """One line as an event: strict JSON (no NaN or Infinity, no lone surrogates, nested at most 200 deep, the
    same reader as a results file's) holding an object with an 'event' name; else a `malformed` event."""
    try:
        obj = from_json(line, allow_inf_nan=False)
    except ValueError as e:
        return {"event": "malformed", "text": line[:200].decode("utf-8", "replace"), "why": str(e)[:120]}
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        return {"event": "malformed", "text": line[:200].decode("utf-8", "replace"),
                "why": "not an object with an 'event' name"}
    return obj
