"""A child process dies with its parent: nothing gapbench starts outlives a `kill -9` of gapbench.

`tie_to_parent()` is called first thing in every child gapbench starts. On Linux the kernel sends the
child SIGKILL when its parent dies (PR_SET_PDEATHSIG); elsewhere a watchdog thread notices that the
parent changed. Run as a program (`python -m gapbench.engine.lifeline PARENT_PID -- CMD ...`) it ties
itself and then becomes CMD, for children that are not gapbench's own code (torch's elastic launcher);
the death signal survives the exec.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

PARENT_ENV = "GAPBENCH_PARENT_PID"
PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, arg: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def tie_to_parent(parent_pid: int | None = None) -> None:
    """Die when the parent dies. parent_pid: the pid expected (GAPBENCH_PARENT_PID by default)."""
    if parent_pid is None:
        try:
            parent_pid = int(os.environ.get(PARENT_ENV, "0")) or None
        except ValueError:
            parent_pid = None
    if _prctl(PR_SET_PDEATHSIG, signal.SIGKILL):
        if parent_pid is not None and os.getppid() != parent_pid:  # the parent died before the prctl
            os._exit(137)
        return
    start = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != start:
                os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="gapbench-lifeline", daemon=True).start()


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants (Linux): a daemonised grandchild of a
    worker is re-parented here, where the engine can still find and kill it."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m gapbench.engine.lifeline PARENT_PID -- CMD [ARG ...]", file=sys.stderr)
        return 2
    tie_to_parent(int(argv[0]))
    os.execvp(argv[2], argv[2:])
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
