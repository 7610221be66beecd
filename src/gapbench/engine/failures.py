"""How a child ended, in words: a status of the results schema and a one-line reason that says what
actually happened (the limit applied, the signal, where a crash happened)."""

from __future__ import annotations

import os
import re
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>\S+)')


@dataclass(frozen=True)
class Failure:
    status: str  # timeout | oom | crashed | error
    reason: str


def signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def crash_location(log: str) -> str:
    """'file.py:12 in f' of the innermost frame faulthandler printed for the crashing thread, followed by the
    innermost frame of the user's own code when that is another one ('… (from my_bench.py:30 in run)'), or ''."""
    lines = log.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(("Current thread", "Thread 0x"))), None)
    if start is None:
        return ""
    frames = []
    for ln in lines[start + 1:]:
        m = _FRAME.match(ln)
        if not m:
            break
        frames.append((m.group("file"), f"{m.group('file').rsplit('/', 1)[-1]}:{m.group('line')} in {m.group('func')}"))
    if not frames:
        return ""
    own = next((text for path, text in frames if not _installed(path)), None)
    return frames[0][1] + (f" (from {own})" if own and own != frames[0][1] else "")


def _installed(path: str) -> bool:
    """Whether a frame's file is Python's, an installed package's or gapbench's own, not the user's code."""
    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, str(Path(__file__).resolve().parents[1])}
    return "site-packages" in path or "dist-packages" in path or any(path.startswith(r + os.sep) for r in roots)


def last_message(log: str) -> str:
    """The line of a child's log that says most: faulthandler's 'Fatal Python error', else the last line
    that is not part of a stack dump or the extension-module list."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    fatal = [ln for ln in lines if ln.startswith("Fatal Python error")]
    if fatal:
        return fatal[-1][:200]
    for ln in reversed(lines):
        if ln.startswith(("File \"", "Extension modules:", "Current thread", "Thread 0x", "<no Python frame>")):
            continue
        if ln.endswith("(total: ") or re.fullmatch(r"[\w.]+(, [\w.]+)*,?( \(total: \d+\))?", ln):
            continue  # faulthandler's list of extension modules
        return ln[:200]
    return ""


def exited(returncode: int | None, log: str, *, what: str = "worker", oom_killed: bool = False) -> Failure:
    """A child that exited (or was killed by a signal) without finishing its work."""
    if returncode is not None and returncode < 0:
        sig = -returncode
        name = signal_name(sig)
        if sig == signal.SIGKILL:
            if oom_killed:
                return Failure("oom", f"{what} killed by SIGKILL from the kernel's out-of-memory killer")
            return Failure("crashed", f"{what} killed by SIGKILL: the out-of-memory killer or an external kill")
        where = crash_location(log)
        reason = f"{what} killed by {name}" + (f" at {where}" if where else "")
        msg = last_message(log)
        if msg and not msg.startswith("Fatal Python error"):
            reason += f": {msg}"
        return Failure("crashed", reason)
    reason = f"{what} exited with code {returncode}"
    msg = last_message(log)
    return Failure("crashed", reason + (f": {msg}" if msg else ""))


def timed_out(limit_s: float, phase: str, *, what: str = "worker") -> Failure:
    return Failure("timeout", f"{phase} exceeded its time limit of {limit_s:.4g} s; the {what} was killed")


def malformed(event: dict, *, what: str = "worker") -> Failure:
    return Failure("error", f"{what} wrote a malformed event ({event.get('why', 'unreadable')}): "
                            f"{event.get('text', '')[:80]!r}")
