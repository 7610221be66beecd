"""The worker event protocol seen from the parent: JSON lines cut from a byte stream, and a log's tail.

Workers (gapbench.worker, gapbench.dist.rank_worker) write one JSON object per line; the runner reads
them from a pipe and the distributed launcher from a file. Both cut lines the same way here.
"""

from __future__ import annotations

import json
import os
from typing import IO


def split_events(buf: bytes) -> tuple[list[dict], bytes]:
    """The complete event lines in buf, and the unfinished rest (a line torn by a kill is skipped)."""
    events = []
    while b"\n" in buf:
        line, buf = buf.split(b"\n", 1)
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events, buf


def log_tail(log: IO[bytes], limit: int) -> str:
    """The last `limit` bytes a worker wrote to its log, as text; closes the log."""
    log.seek(0, os.SEEK_END)
    log.seek(max(0, log.tell() - limit))
    tail = log.read().decode("utf-8", "replace")
    log.close()
    return tail
