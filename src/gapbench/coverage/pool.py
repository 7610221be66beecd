"""Watching coverage worker processes: start one, read its JSON lines with a deadline, kill it when it hangs.

The worker is started in its own session so that killing it (and anything it started) touches nothing else.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from gapbench.coverage.classify import fallback_env


class WorkerDied(Exception):
    """The worker exited without finishing: `how` says crashed (signal/exit code) or timed out."""

    def __init__(self, how: str, detail: str = ""):
        self.how, self.detail = how, detail
        super().__init__(f"{how}{': ' + detail if detail else ''}")


class Worker:
    """One `python -m gapbench.coverage.worker` process; iterate events() to read its lines."""

    def __init__(self, config: dict, device_type: str = "cpu"):
        self._cfg = tempfile.NamedTemporaryFile("w", suffix=".json", prefix="gapbench-cov-", delete=False)
        json.dump(config, self._cfg)
        self._cfg.close()
        self._err = tempfile.NamedTemporaryFile("w+b", suffix=".log", prefix="gapbench-cov-", delete=False)
        env = dict(os.environ)
        for k, v in fallback_env(device_type).items():
            env.setdefault(k, v)  # the user's own setting wins
        env.setdefault("PYTHONFAULTHANDLER", "1")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gapbench.coverage.worker", self._cfg.name],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self._err, env=env, start_new_session=True,
        )
        self._buf = b""
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.proc.stdout, selectors.EVENT_READ)

    def next_event(self, deadline: float) -> dict | None:
        """The next JSON line, None at a clean end of output; WorkerDied on a crash or past the deadline."""
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerDied("timeout")
            if not self._sel.select(timeout=min(left, 1.0)):
                continue
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                rc = self.proc.wait()
                if self._buf.strip():
                    break
                if rc == 0:
                    return None
                raise WorkerDied("crashed", self.exit_detail(rc))
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            return {"event": "noise", "text": line.decode(errors="replace")[:200]}

    def exit_detail(self, rc: int) -> str:
        how = f"killed by {signal.Signals(-rc).name}" if rc < 0 and -rc in signal.valid_signals() else f"exit code {rc}"
        last = self.stderr_tail()
        return f"{how}{'; ' + last if last else ''}"

    def stderr_tail(self) -> str:
        try:
            lines = [x.strip() for x in Path(self._err.name).read_text(errors="replace").splitlines() if x.strip()]
        except OSError:
            return ""
        # faulthandler prints "Fatal Python error: Segmentation fault" then a stack; the first such line says most
        fatal = [x for x in lines if x.startswith("Fatal Python error")]
        return (fatal[0] if fatal else lines[-1] if lines else "")[:200]

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        self._sel.close()
        self.proc.stdout.close()
        self._err.close()
        for p in (self._cfg.name, self._err.name):
            try:
                os.unlink(p)
            except OSError:
                pass


def run_simple(config: dict, timeout_s: float, device_type: str = "cpu") -> Iterator[dict]:
    """Run a worker that needs no per-op watching (list, index modes); yield its events."""
    w = Worker(config, device_type)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            ev = w.next_event(deadline)
            if ev is None:
                return
            yield ev
    finally:
        w.close()
