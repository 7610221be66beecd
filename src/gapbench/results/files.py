"""Files users give and files gapbench writes: guarded reading (regular files only, a size cap, strict JSON),
the check every writing verb makes before any work, and atomic writes."""

from __future__ import annotations

import json
import os
import re
import stat
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gapbench.errors import GapbenchError, ResultFileError
from gapbench.record import json_safe
from gapbench.text import printable

MAX_FILE_BYTES = 64 * 2**20  # a results file larger than this is refused (a run writes well under 1 MiB)
MAX_NESTING = 200  # arrays and objects nested deeper than this are refused (the JSON reader's own limit)


def read_bytes(path: str | os.PathLike, limit: int = MAX_FILE_BYTES) -> bytes:
    """The content of a regular file of at most `limit` bytes, else ResultFileError. A FIFO, a device or a
    folder is refused without reading: opening never blocks and nothing endless is read."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise ResultFileError(p, "", "no such file") from None
    except (OSError, ValueError) as e:
        raise ResultFileError(p, "", f"cannot read ({_why(e)})") from None
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise ResultFileError(p, "", "is a folder, not a file")
        if not stat.S_ISREG(mode):
            raise ResultFileError(p, "", "not a regular file (a FIFO, device or socket is never read)")
        chunks, size = [], 0
        while size <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as e:
        raise ResultFileError(p, "", f"cannot read ({_why(e)})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise ResultFileError(p, "", f"larger than {_mib(limit)}, the most gapbench reads (a run writes well under "
                                     "1 MiB; split the file)")
    return b"".join(chunks)


_NON_JSON = re.compile(rb"-?(?:NaN|Infinity)")
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def parse_json(data: bytes, path: str) -> Any:
    """Strict JSON: no NaN or Infinity, UTF-8, no lone surrogates, nested at most MAX_NESTING deep."""
    from pydantic_core import from_json  # strict, fast, and bounded in depth (json.loads recurses in C)

    try:
        return from_json(data, allow_inf_nan=False)
    except ValueError as e:
        raise ResultFileError(path, "", f"not valid JSON ({_json_problem(str(e), data)})") from None


def _json_problem(msg: str, data: bytes) -> str:
    m = re.search(r"line (\d+) column (\d+)", msg)
    where = f"line {m.group(1)}, column {m.group(2)}" if m else ""
    if "recursion limit" in msg:
        return f"arrays or objects nested more than {MAX_NESTING} deep, at {where}"
    if not m:
        return msg[:200]
    lines = data.split(b"\n")
    row, col = int(m.group(1)) - 1, int(m.group(2))
    line = lines[row] if 0 <= row < len(lines) else b""
    if msg.startswith("expected value") and any(_NON_JSON.match(line, max(col - k, 0)) for k in (1, 2)):
        return f"NaN and Infinity are not JSON numbers, at {where}"
    if "surrogate" in msg or ("hex escape" in msg and _SURROGATE.search(line, max(col - 14, 0), col + 1)):
        return f"a lone surrogate (\\ud800 to \\udfff without its pair) is no text, at {where}"
    return msg[:200]


def _why(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or e.__class__.__name__


def _mib(n: int) -> str:
    return f"{n / 2**20:g} MiB"


def json_text(data: Any, indent: int | None = 1) -> str:
    """Strict JSON text: a non-finite number becomes null (JSON has none), a lone surrogate '?', anything
    else unknown a string. Linear and fast for large documents (pydantic_core's encoder; json.dumps with an
    indent runs in pure Python)."""
    from pydantic_core import PydanticSerializationError, to_json

    try:
        return to_json(data, indent=indent, inf_nan_mode="null", fallback=str).decode("utf-8")
    except (PydanticSerializationError, ValueError, RecursionError):  # a lone surrogate, a cycle, ...
        return json.dumps(json_safe(data), indent=indent, allow_nan=False)


class OutputError(GapbenchError, OSError):
    """A file gapbench writes could not be written (a full disk, a read-only folder): one line naming the file.
    An OSError too, so that callers which treat a failed write as optional still can."""

    def __init__(self, path: str | os.PathLike, e: OSError):
        self.message = f"cannot write {path}: {_why(e)}"
        OSError.__init__(self, self.message)
        self.errno, self.strerror, self.filename = e.errno, e.strerror, str(path)

    def __str__(self) -> str:
        return self.message


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    write_text_atomic(path, json_text(data) + "\n")


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8; a lone surrogate becomes '?') to a unique temporary file in the target's folder,
    fsync it, then rename it over the target: a reader sees the old file or the new one, never half of one.
    A write the system refuses (no space, no permission) is an OutputError and leaves no temporary file."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    except OSError as e:
        raise OutputError(p, e) from None
    umask = os.umask(0)
    os.umask(umask)
    try:
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; an output is as readable as any other file
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8", "replace"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError) and not isinstance(e, OutputError):
            raise OutputError(p, e) from None
        raise


SQLITE_HEADER = b"SQLite format 3\x00"
JOURNAL_SUFFIX = ".journal.jsonl"


def history_path() -> Path:
    """The history database a run records into: $GAPBENCH_DB, else the XDG data folder's (gapbench.history
    reads the same place; this layer sits below it, so the rule is stated here too)."""
    if os.environ.get("GAPBENCH_DB"):
        return Path(os.environ["GAPBENCH_DB"]).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "gapbench" / "history.sqlite"


def check_output(path: str | os.PathLike, *, inputs: Iterable[str | os.PathLike] = (), force: bool = False,
                 flag: str = "--output", resume_hint: bool = False) -> None:
    """Before any work: GapbenchError unless writing `path` is possible and destroys nothing. Refused always: a
    folder, something that is not a regular file, one of the verb's inputs (or a file inside an input folder),
    a SQLite database or the history database's path, a run or coverage journal. Refused unless `force`: a
    results file, or an output with an interrupted run's journal beside it. And a place where no file can be
    created."""
    p = Path(path)
    try:
        os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):  # a new path; a file in the way of a folder is said below
        pass
    except (OSError, ValueError) as e:  # a name too long, a NUL byte
        raise GapbenchError(f"{flag} {printable(str(p)[:200])}: cannot write there ({_why(e)})") from None
    if p.is_dir():
        raise GapbenchError(f"{flag} {p}: is a folder; name a file")
    if p.exists() and not p.is_file():
        raise GapbenchError(f"{flag} {p}: is not a regular file (use '-' for standard output where a verb takes it)")
    _check_not_an_input(p, inputs, flag)
    _check_not_kept_data(p, flag)
    hint = "; to complete an interrupted run use --resume" if resume_hint else ""
    if not force and p.is_file() and is_results_file(p):
        raise GapbenchError(f"{flag} {p}: already holds a gapbench results file; add --force to replace it{hint}")
    journal = Path(f"{p}{JOURNAL_SUFFIX}")
    if not force and journal.is_file():
        then = "continue that run with --resume, or " if resume_hint else "write elsewhere, or "
        raise GapbenchError(f"{flag} {p}: the journal of an interrupted run, {journal}, is beside it; {then}"
                            "add --force to start again")
    _check_writable_folder(p, flag)


def _check_not_an_input(p: Path, inputs: Iterable[str | os.PathLike], flag: str) -> None:
    real = os.path.realpath(p)
    for inp in inputs:
        if inp is None or str(inp) in ("", "-"):
            continue
        src = os.path.realpath(inp)
        same = real == src or (p.exists() and os.path.exists(inp) and os.path.samefile(p, inp))
        if same:
            raise GapbenchError(f"{flag} {p}: is also an input; writing it would destroy what is being read")
        if os.path.isdir(src) and real.startswith(src.rstrip(os.sep) + os.sep):
            raise GapbenchError(f"{flag} {p}: is inside {inp}, which is read; write elsewhere")


def _check_not_kept_data(p: Path, flag: str) -> None:
    """The history database and journals hold what was measured: no output ever replaces one, --force or not."""
    db = history_path()
    if os.path.realpath(p) == os.path.realpath(db) or (p.exists() and db.exists() and os.path.samefile(p, db)):
        raise GapbenchError(f"{flag} {p}: is the history database; write elsewhere")
    head = _head(p)
    if head.startswith(SQLITE_HEADER):
        raise GapbenchError(f"{flag} {p}: is a SQLite database (a history database?); write elsewhere")
    if p.name.endswith(JOURNAL_SUFFIX):
        raise GapbenchError(f"{flag} {p}: is the name of a journal (what an interrupted run finished); resume it "
                            f"with --resume {p.with_name(p.name[:-len(JOURNAL_SUFFIX)])}, or write elsewhere")
    if is_journal(head):
        raise GapbenchError(f"{flag} {p}: holds a journal (what an interrupted run finished); write elsewhere")


def _head(p: Path, n: int = 4096) -> bytes:
    try:
        with open(p, "rb") as f:
            return f.read(n)
    except OSError:
        return b""


def is_journal(head: bytes) -> bool:
    """Whether the first bytes of a file are a journal's header line (a run's, or a coverage audit's)."""
    first = head.split(b"\n", 1)[0].lstrip()
    return first.startswith(b"{") and (b'"event": "header"' in first or b'"journal": "coverage"' in first)


def _check_writable_folder(p: Path, flag: str) -> None:
    folder = p.absolute().parent
    while not folder.exists() and folder != folder.parent:  # the folders the write would create are not made here
        folder = folder.parent
    if not folder.is_dir():
        raise GapbenchError(f"{flag} {p}: cannot write there ({folder} is not a folder)")
    try:
        fd, probe = tempfile.mkstemp(prefix=".gapbench-", suffix=".probe", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except (OSError, ValueError) as e:
        raise GapbenchError(f"{flag} {p}: cannot write there ({_why(e)})") from None


def is_results_file(path: str | os.PathLike) -> bool:
    """Whether a regular file looks like a gapbench results file (its first 4 KiB name a schema_version)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"{") and b'"schema_version"' in head
