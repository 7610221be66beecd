"""Starting coverage child processes (gapbench.coverage.child) under the engine's supervisor."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator

from gapbench.engine import failures
from gapbench.engine.supervise import Child, DeadlinePassed


class ChildFailed(Exception):
    """A coverage child ended without finishing: `how` is 'timeout' or 'crashed', `detail` says more."""

    def __init__(self, how: str, detail: str = ""):
        self.how, self.detail = how, detail
        super().__init__(f"{how}{': ' + detail if detail else ''}")


def start(config: dict, backend=None) -> Child:
    """A coverage child with `config` on its stdin; the backend's fallback switches set unless the user set them."""
    env = dict(os.environ)
    for k, v in (getattr(backend, "fallback_env", None) or {}).items():
        env.setdefault(k, v)
    return Child([sys.executable, "-m", "gapbench.coverage.child"], payload=json.dumps(config), env=env,
                 what="coverage worker")


def next_event(child: Child, deadline: float) -> dict | None:
    """The child's next event; None at its clean end; ChildFailed on a crash or past the deadline."""
    try:
        ev = child.next_event(deadline)
    except DeadlinePassed:
        child.kill()
        raise ChildFailed("timeout") from None
    if ev is None:
        rc = child.wait()
        if rc == 0:
            return None
        raise ChildFailed("crashed", failures.exited(rc, child.log_tail(), what="worker").reason)
    if ev.get("event") == "malformed":
        child.kill()
        raise ChildFailed("crashed", failures.malformed(ev).reason)
    return ev


def run_simple(config: dict, timeout_s: float) -> Iterator[dict]:
    """Run a child that needs no per-op watching (list, index modes); yield its events."""
    child = start(config)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            ev = next_event(child, deadline)
            if ev is None:
                return
            yield ev
    finally:
        child.close()
