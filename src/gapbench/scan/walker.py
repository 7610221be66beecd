"""Find the files under a root: honours .gitignore, skips .git, never follows a symlink (it reports it)."""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from gapbench.errors import GapbenchError
from gapbench.scan import gitignore
from gapbench.scan.findings import Note
from gapbench.scan.gitignore import Ignorer
from gapbench.scan.reading import Unreadable, read_regular

VCS_DIRS = frozenset({".git", ".hg", ".svn"})
# Third-party code a repository carries but does not own: skipped (and listed) unless it is the root itself.
VENDORED_DIRS = {"node_modules": "node_modules (third-party JavaScript)",
                 "site-packages": "site-packages (installed third-party packages)"}
MAX_GITIGNORE_BYTES = 2**20     # a larger .gitignore is not used (and noted)


@dataclass(frozen=True)
class Entry:
    rel: str      # relative to the root, '/' separators
    path: str     # absolute path
    size: int


@dataclass(frozen=True)
class Skipped:
    path: str     # relative to the root
    reason: str


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _symlink_reason(path: str, root: str) -> str:
    try:
        st = os.stat(path)  # follows the link
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "symlink loop"
        return "broken symlink"
    target = os.path.realpath(path)
    if not _inside(target, root):
        return "symlink points outside the scanned root (not followed)"
    what = "folder" if os.path.isdir(target) and not os.path.isfile(target) else "file"
    del st
    return f"symlink to a {what} inside the root (not followed; its real path is scanned)"


def root_status(path: str) -> os.stat_result:
    """The status of what a scan is given (a symlink followed), else GapbenchError: it must be a folder or a
    regular file (a FIFO would block, a device never ends)."""
    try:
        st = os.stat(path)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise GapbenchError(f"{path}: a symlink loop") from None
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            raise GapbenchError(f"{path}: no such file or folder") from None
        raise GapbenchError(f"{path}: cannot read: {e.strerror}") from None
    if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
        raise GapbenchError(f"{path}: not a folder or a regular file (a FIFO, device or socket is not scanned)")
    return st


def walk(root: str, respect_gitignore: bool = True) -> tuple[list[Entry], list[Skipped], list[Note]]:
    """All regular files under root (sorted), what was skipped on the way with the reason, and notes (.gitignore
    lines that could not be used)."""
    root = os.path.realpath(root)
    entries: list[Entry] = []
    skipped: list[Skipped] = []
    notes: list[Note] = []
    st = root_status(root)
    if stat.S_ISREG(st.st_mode):
        return [Entry(os.path.basename(root), root, st.st_size)], [], []
    stack: list[tuple[str, str, Ignorer]] = [(root, "", Ignorer())]
    while stack:
        folder, rel_folder, ignorer = stack.pop()
        try:
            with os.scandir(folder) as it:
                items = sorted(it, key=lambda e: e.name)
        except OSError as e:
            skipped.append(Skipped(rel_folder or ".", f"cannot read folder: {e.strerror}"))
            continue
        if respect_gitignore and any(e.name == ".gitignore" and e.is_file(follow_symlinks=False) for e in items):
            ignorer = _with_gitignore(ignorer, folder, rel_folder, notes)
        subdirs = []
        for e in items:
            if e.name in VCS_DIRS:
                continue
            rel = f"{rel_folder}/{e.name}" if rel_folder else e.name
            sub = _visit(e, rel, root, ignorer if respect_gitignore else None, entries, skipped)
            if sub:
                subdirs.append((e.path, rel, ignorer))
        stack.extend(reversed(subdirs))
    return entries, skipped, notes


def _with_gitignore(ignorer: Ignorer, folder: str, rel_folder: str, notes: list[Note]) -> Ignorer:
    rel = f"{rel_folder}/.gitignore" if rel_folder else ".gitignore"
    try:    # a regular file (not a symlink, FIFO or device planted under that name), of a bounded size
        data = read_regular(os.path.join(folder, ".gitignore"), MAX_GITIGNORE_BYTES, follow=False)
    except Unreadable as e:
        notes.append(Note(rel, f"not used: {e}"))
        return ignorer
    spec, bad = gitignore.load(data.decode("utf-8", errors="replace"))
    for b in bad:
        notes.append(Note(rel, f"line {b.line}: pattern {b.pattern!r} skipped ({b.why})"))
    return ignorer.with_spec(rel_folder, spec)


def _visit(e: os.DirEntry, rel: str, root: str, ignorer: Ignorer | None, entries: list[Entry],
           skipped: list[Skipped]) -> bool:
    """File one directory entry as an entry or a skip; True when it is a folder to descend into."""
    try:
        is_link = e.is_symlink()
        is_dir = e.is_dir(follow_symlinks=False)
    except OSError as err:
        skipped.append(Skipped(rel, f"cannot stat: {err.strerror}"))
        return False
    if ignorer is not None and ignorer.ignored(rel, is_dir):
        return False
    if is_link:
        skipped.append(Skipped(rel, _symlink_reason(e.path, root)))
    elif is_dir:
        reason = _skipped_folder(e)
        if not reason:
            return True
        skipped.append(Skipped(rel, reason))
    elif e.is_file(follow_symlinks=False):
        try:
            entries.append(Entry(rel, e.path, e.stat(follow_symlinks=False).st_size))
        except OSError as err:
            skipped.append(Skipped(rel, f"cannot stat: {err.strerror}"))
    else:
        skipped.append(Skipped(rel, "not a regular file"))
    return False


def _skipped_folder(e: os.DirEntry) -> str:
    """Why a folder below the root is not descended into, or '' when it is."""
    if e.name in VENDORED_DIRS:
        return f"folder skipped: {VENDORED_DIRS[e.name]}"
    if os.path.isfile(os.path.join(e.path, "pyvenv.cfg")):
        return "folder skipped: a Python virtual environment (pyvenv.cfg)"
    return ""
