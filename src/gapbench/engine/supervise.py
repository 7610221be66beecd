"""The parent's side of a child process: start it in its own process group, follow its events under a
deadline, and leave nothing of it behind.

    child = Child([sys.executable, "-m", "gapbench.engine.worker"], payload=job_json, what="worker")
    outcome = child.follow(timeout_s=300, on_event=handle)   # handle(ev) may return a new timeout
    child.close()

Events come over a FIFO (see channel), so a child's own children and launchers' ranks can write them
too; the end of a child is its exit, never the end of a stream (a grandchild that keeps the stream open
cannot stall the parent). Every child carries a token in its environment: when a child is closed, its
process group is killed after a short grace, and so is every process still carrying its token, even one
that left the group (setsid) or was re-parented.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from gapbench.engine.channel import EVENTS_ENV, MAX_LINE, split_events
from gapbench.engine.lifeline import PARENT_ENV, become_subreaper

TOKEN_ENV = "GAPBENCH_CHILD_TOKEN"
GRACE_S = 1.0  # after a child ends, how long what it started may take to end by itself
LOG_TAIL = 20000
MAX_KEPT_EVENTS = 100_000  # events kept for the Outcome; a child that floods the channel cannot fill memory
KILL_ROUNDS = 20  # a process that forks while it is being killed is looked for again, this many times


class DeadlinePassed(Exception):
    pass


@dataclass
class Outcome:
    """How a child ended: its events, its exit code, whether the deadline killed it, its log's tail."""

    events: list[dict] = field(default_factory=list)
    returncode: int | None = None
    timed_out: bool = False
    limit_s: float | None = None  # the time limit that applied when the deadline passed
    log: str = ""
    oom_killed: bool = False  # the kernel's OOM killer fired in this cgroup while the child ran
    hint: str = ""  # what on_deadline found out before the kill


def cgroup_oom_kills() -> int | None:
    """The OOM-kill count of this process's memory cgroup (v2 memory.events or v1 memory.oom_control)."""
    # read by hand: psutil knows nothing of cgroups
    paths: list[str] = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrl, path = line.rstrip("\n").split(":", 2)
                if ctrl == "":
                    paths += [f"/sys/fs/cgroup{path.rstrip('/')}/memory.events"]
                elif "memory" in ctrl.split(","):
                    paths += [f"/sys/fs/cgroup/memory{path.rstrip('/')}/memory.oom_control"]
    except (OSError, ValueError):
        pass
    paths += ["/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"]
    for p in paths:
        try:
            with open(p) as f:
                for line in f:
                    k, _, v = line.partition(" ")
                    if k == "oom_kill":
                        return int(v)
        except (OSError, ValueError):
            continue
    return None


def processes_with_token(token: str) -> list[int]:
    """Pids of processes (other than this one) whose environment carries TOKEN_ENV=token."""
    me = os.getpid()
    try:
        # the environment a process started with; None where it cannot be read (another user's process, a zombie)
        return [p.info["pid"] for p in psutil.process_iter(["pid", "environ"])
                if p.info["pid"] != me and (p.info["environ"] or {}).get(TOKEN_ENV) == token]
    except OSError:  # no process table to read (/proc not mounted)
        return []


def _parent_of(pid: int) -> int | None:
    try:
        return psutil.Process(pid).ppid()
    except psutil.Error:
        return None


_live: dict[int, Child] = {}  # pid -> the children of this process not yet closed
_adopting = False


def adopt_orphans() -> bool:
    """Make this process the reaper of its orphaned descendants, once (see lifeline.become_subreaper), and end
    what is left of them when it exits. False where the system has no subreapers."""
    global _adopting
    if not _adopting:
        _adopting = become_subreaper()
        if _adopting:
            atexit.register(end_adopted)
    return _adopting


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below pid, its children's children included."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def adopted(since: float | None = None) -> list[psutil.Process]:
    """The orphans this subreaper took in (created at or after `since`, a psutil create time) and what is below
    them: its children in another session than its own that are not a child it started and has not closed.
    A child this process starts is its own session's leader and listed in `_live`; a process can leave a session
    only for a new one, so nothing below a child is ever in this process's session."""
    mine = os.getsid(0)
    out: list[psutil.Process] = []
    try:
        children = psutil.Process().children()
    except psutil.Error:
        return out
    for p in children:
        if p.pid in _live:
            continue
        try:
            if os.getsid(p.pid) == mine or (since is not None and p.create_time() < since):
                continue
        except (OSError, psutil.Error):
            continue
        out += [p, *descendants(p.pid)]
    return out


def end_processes(procs: list[psutil.Process]) -> list[int]:
    """SIGKILL the processes (psutil checks a pid was not reused) and reap those that are this process's
    children, zombies included. Returns the pids signalled."""
    me = os.getpid()
    killed = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE:
                p.kill()
                killed.append(p.pid)
    mine = []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.ppid() == me:
                mine.append(p)
    psutil.wait_procs(mine, timeout=5)  # waits on this process's children: reaps them
    return killed


def end_adopted() -> None:
    """Kill every child not closed and reap every orphan this process took in (at its exit: nothing gapbench
    started outlives it)."""
    for child in list(_live.values()):
        with contextlib.suppress(Exception):
            child.kill()
    for _ in range(KILL_ROUNDS):
        left = _to_end(adopted())
        if not left:
            return
        end_processes(left)


def _running(procs: list[psutil.Process]) -> bool:
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE:
                return True
    return False


def _to_end(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those still running, and the zombies this process must reap (another's zombie is its parent's to reap)."""
    me, out = os.getpid(), []
    for p in procs:
        with contextlib.suppress(psutil.Error):
            if p.status() != psutil.STATUS_ZOMBIE or p.ppid() == me:
                out.append(p)
    return out


DIR_PREFIX = "gapbench-child-"  # + the parent's pid: the event FIFO's folder, removed when the child is closed
_swept = False


def sweep_stale_dirs() -> list[str]:
    """Remove the folders children of a parent that was killed (kill -9 runs no clean-up) left behind: those
    whose parent pid is gone. Once per process; returns what was removed."""
    global _swept
    if _swept:
        return []
    _swept = True
    gone = []
    base = tempfile.gettempdir()
    try:
        names = os.listdir(base)
    except OSError:
        return gone
    for name in names:
        pid = name[len(DIR_PREFIX):].split("-", 1)[0] if name.startswith(DIR_PREFIX) else ""
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)
            gone.append(name)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


class Child:
    """One supervised child process (see the module docstring)."""

    def __init__(self, argv: list[str], *, payload: str | bytes | None = None, env: dict | None = None,
                 what: str = "worker", cwd: str | None = None):
        self.what = what
        self.token = uuid.uuid4().hex
        sweep_stale_dirs()
        adopt_orphans()
        self._dir = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-")
        self.events_path = os.path.join(self._dir, "events")
        os.mkfifo(self.events_path, 0o600)
        self._r = os.open(self.events_path, os.O_RDONLY | os.O_NONBLOCK)
        self._w = os.open(self.events_path, os.O_WRONLY | os.O_NONBLOCK)  # no end-of-stream between writers
        e = dict(os.environ if env is None else env)
        e.update({EVENTS_ENV: self.events_path, PARENT_ENV: str(os.getpid()), TOKEN_ENV: self.token})
        e.setdefault("PYTHONFAULTHANDLER", "1")
        self._log = tempfile.TemporaryFile(mode="w+b")
        self._oom0 = cgroup_oom_kills()
        self._parts: list[bytes] = []  # what was read of an unfinished line
        self._size = 0
        self._pending: deque[dict] = deque()
        self.events: list[dict] = []
        self.closed = False
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE if payload is not None else subprocess.DEVNULL,
                                     stdout=self._log, stderr=subprocess.STDOUT, env=e, cwd=cwd,
                                     start_new_session=True)
        _live[self.proc.pid] = self
        try:
            self._since = psutil.Process(self.proc.pid).create_time()  # what it starts is no older
        except psutil.Error:  # it is gone already: what it started is younger than this
            self._since = time.time() - 1.0
        if payload is not None:
            try:
                self.proc.stdin.write(payload.encode() if isinstance(payload, str) else payload)
                self.proc.stdin.close()
            except (BrokenPipeError, OSError):
                pass

    # ---- reading ---------------------------------------------------------------------------------
    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._r, 1 << 16)
            except BlockingIOError:
                return
            if not chunk:
                return
            self._parts.append(chunk)
            self._size += len(chunk)
            if b"\n" in chunk or self._size > MAX_LINE:  # a long line is joined once, not once per chunk
                events, rest = split_events(b"".join(self._parts))
                self._parts, self._size = ([rest] if rest else []), len(rest)
                self._pending.extend(events)

    def next_event(self, deadline: float) -> dict | None:
        """The next event; None once the child has exited and all it wrote was read; DeadlinePassed after
        `deadline` (time.monotonic())."""
        while not self._pending:
            if self.proc.poll() is not None:
                self._read()
                if self._pending:
                    break
                return None
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeadlinePassed
            ready, _, _ = select.select([self._r], [], [], min(left, 0.2))
            if ready:
                self._read()
        ev = self._pending.popleft()
        if len(self.events) < MAX_KEPT_EVENTS:
            self.events.append(ev)
        return ev

    def follow(self, timeout_s: float, on_event: Callable[[dict], float | None] | None = None,
               on_deadline: Callable[[], str] | None = None) -> Outcome:
        """Read events until the child exits or the deadline passes (then on_deadline() may explain, and the
        child is killed). on_event(ev) may return a new timeout, counted from now."""
        limit = timeout_s
        deadline = time.monotonic() + timeout_s
        timed_out, hint = False, ""
        try:
            while True:
                try:
                    ev = self.next_event(deadline)
                except DeadlinePassed:
                    if on_deadline is not None:
                        hint = on_deadline() or ""
                    self.kill()
                    timed_out = True
                    break
                if ev is None:
                    break
                new = on_event(ev) if on_event is not None else None
                if new is not None:
                    limit = new
                    deadline = time.monotonic() + new
        except BaseException:
            self.kill()
            raise
        return self.outcome(timed_out=timed_out, limit_s=limit if timed_out else None, hint=hint)

    def outcome(self, *, timed_out: bool = False, limit_s: float | None = None, hint: str = "") -> Outcome:
        rc = self.wait()
        oom1 = cgroup_oom_kills()
        return Outcome(list(self.events), rc, timed_out, limit_s, self.log_tail(),
                       oom_killed=self._oom0 is not None and oom1 is not None and oom1 > self._oom0, hint=hint)

    def wait(self, timeout_s: float = 30.0) -> int | None:
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.wait()

    def log_tail(self, limit: int = LOG_TAIL) -> str:
        try:
            self._log.flush()
            self._log.seek(0, os.SEEK_END)
            self._log.seek(max(0, self._log.tell() - limit))
            return self._log.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""

    # ---- ending ----------------------------------------------------------------------------------
    def signal_group(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """Kill the child, everything below it, its process group and every process carrying its token, now."""
        below = descendants(self.proc.pid) if self.proc.poll() is None else []
        self.signal_group(signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        end_processes(below)
        self.kill_strays(grace_s=0.0)

    def strays(self) -> list[psutil.Process]:
        """What the child started that is still there: below it, carrying its token, or taken in by this
        process since it started (it is not counted itself)."""
        found: dict[int, psutil.Process] = {}
        if self.proc.returncode is None:
            found.update((p.pid, p) for p in descendants(self.proc.pid))
        for pid in processes_with_token(self.token):
            with contextlib.suppress(psutil.Error):
                found.setdefault(pid, psutil.Process(pid))
        found.update((p.pid, p) for p in adopted(self._since))
        found.pop(self.proc.pid, None)
        return list(found.values())

    def kill_strays(self, grace_s: float = GRACE_S) -> list[int]:
        """After the child ended: give what it started `grace_s` to end, then SIGKILL its group and every stray
        (see strays), again while new ones appear; reap those that were re-parented here. Returns the pids
        killed."""
        end = time.monotonic() + grace_s
        left = self.strays()
        while _running(left) and time.monotonic() < end:
            time.sleep(0.05)
            left = self.strays()
        self.signal_group(signal.SIGKILL)
        killed: list[int] = []
        for _ in range(KILL_ROUNDS):
            left = _to_end(left)
            if not left:
                break
            killed += end_processes(left)
            left = self.strays()
        return killed

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.proc.poll() is None:
            self.kill()
        self.wait()
        _live.pop(self.proc.pid, None)
        self.kill_strays()
        for fd in (self._r, self._w):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError, ValueError):
            self._log.close()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> Child:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
