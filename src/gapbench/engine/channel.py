"""The event stream between a child and its parent: one JSON object per line.

The parent makes a FIFO and passes its path in GAPBENCH_EVENTS; the child (or, under a launcher, its
ranks) opens it and writes. Each line is written with one system call, so lines of different writers do
not interleave below PIPE_BUF. A line that is not a JSON object is delivered as a `malformed` event: a
misbehaving child is a failure of that child, never of the parent.
"""

from __future__ import annotations

import json
import os

EVENTS_ENV = "GAPBENCH_EVENTS"
MAX_LINE = 64 * 2**20  # a line longer than this is cut off and reported malformed


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
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        if line.strip():
            events.append(parse_line(line))
    if len(buf) > MAX_LINE:
        events.append({"event": "malformed", "text": buf[:200].decode("utf-8", "replace"),
                       "why": f"an event line longer than {MAX_LINE} bytes"})
        buf = b""
    return events, buf


def parse_line(line: bytes) -> dict:
    try:
        obj = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        return {"event": "malformed", "text": line[:200].decode("utf-8", "replace"), "why": str(e)[:120]}
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        return {"event": "malformed", "text": line[:200].decode("utf-8", "replace"),
                "why": "not an object with an 'event' name"}
    return obj
