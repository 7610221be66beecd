"""Reading what scan and port are given: regular files only (opening a FIFO never blocks, a device is never read
without end), optionally never through a symlink, and never more than a size limit."""

from __future__ import annotations

import errno
import os
import stat

_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
NOT_REGULAR = "not a regular file (a FIFO, device or socket is never read)"


class Unreadable(Exception):
    """Why a file was not read; str() is the reason, without the file's name."""


def size_text(n: int) -> str:
    """A byte count as people write limits: 1 MiB, 64 KiB, 500 bytes."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


def open_regular(path: str | os.PathLike, *, follow: bool = True) -> tuple[int, os.stat_result]:
    """A read-only descriptor of a regular file and its status, else Unreadable. With follow=False a symlink is
    refused (the name may have been swapped for one since the folder was listed)."""
    flags = _OPEN_FLAGS | (0 if follow else getattr(os, "O_NOFOLLOW", 0))
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise Unreadable("a symlink loop" if follow else "is a symlink (not followed)") from None
        raise Unreadable(f"cannot read: {e.strerror}") from None
    try:
        st = os.fstat(fd)
    except OSError as e:
        os.close(fd)
        raise Unreadable(f"cannot read: {e.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise Unreadable("is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Unreadable(NOT_REGULAR)
    return fd, st


def read_fd(fd: int, limit: int) -> bytes:
    """At most limit + 1 bytes from fd (one more than the limit says that the file is larger)."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = os.read(fd, min(1 << 20, limit + 1 - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def read_regular(path: str | os.PathLike, limit: int, *, follow: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, else Unreadable saying why (and the limit)."""
    fd, st = open_regular(path, follow=follow)
    try:
        if st.st_size > limit:
            raise Unreadable(f"larger than {size_text(limit)}, the most read")
        try:
            data = read_fd(fd, limit)
        except OSError as e:
            raise Unreadable(f"cannot read: {e.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > limit:      # it grew since fstat
        raise Unreadable(f"larger than {size_text(limit)}, the most read")
    return data
