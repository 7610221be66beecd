"""CUDA C++ -> HIP, file by file, with torch.utils.hipify's mappings; everything else is copied unchanged.

The output goes to a new folder (never over the input). What hipify left behind is reported: identifiers
that still look like CUDA (cuda*/cu*/CU*/nv*/...), CUDA headers still included, and the scanner's
manual/blocker findings for ROCm on the translated tree (warp size, inline PTX, tensor cores, ...).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
from collections import Counter
from dataclasses import dataclass, field

from gapbench.errors import GapbenchError
from gapbench.scan.cuda_api import dictionary
from gapbench.scan.engine import BINARY_SNIFF, kinds_of
from gapbench.scan.findings import Note, shown_path
from gapbench.scan.match_text import _C_COMMENT_OR_STRING, CPP_CUDA_HINT
from gapbench.scan.reading import Unreadable, open_regular, read_regular
from gapbench.scan.scanreport import ScanReport
from gapbench.scan.walker import Entry, Skipped, walk

PORT_TARGETS = ("rocm",)
# Identifiers that still name CUDA after translation (outside comments and string literals).
UNMAPPED = re.compile(r"\b(?:cuda[A-Za-z0-9_]*|CUDA[A-Za-z0-9_]*|cu[A-Z][A-Za-z0-9_]*|CU[A-Z][A-Za-z0-9_]*"
                      r"|nv[A-Z][A-Za-z0-9_]*|NV[A-Z][A-Za-z0-9_]*|__nv_\w+|__CUDA\w*|cublas\w*|cudnn\w*"
                      r"|cufft\w*|cusparse\w*|curand\w*|nvrtc\w*|nvtx\w*|nvcuda::\w+|nvml\w*)")
CUDA_INCLUDE = re.compile(r'#\s*include\s*[<"]([^>"\n#]*(?:cuda|cublas|cudnn|cufft|cusparse|curand|nvrtc|nvtx|nvml'
                          r'|cutlass|cute/|mma\.h)[^>"\n#]*)[>"]')
_INCLUDE_LINE = re.compile(r"^[ \t]*#[ \t]*include[^\n]*", re.MULTILINE)
_INCLUDE = re.compile(r'(#\s*include\s*[<"])([^>"\n#]+)([>"])')
_ATEN_CUDA_PREFIXES = ("ATen/cuda", "ATen/native/cuda", "ATen/native/nested/cuda", "ATen/native/quantized/cuda",
                       "ATen/native/sparse/cuda", "ATen/native/transformers/cuda")
# PyTorch's ROCm build keeps the at::cuda and c10::cuda namespaces (HIP "masquerading as CUDA").
_TORCH_CUDA_NAMESPACE = re.compile(r"(?:at|c10)::$")


@dataclass(frozen=True)
class PortedFile:
    source: str          # relative path in the input
    output: str          # relative path in the output
    changed: bool
    kernel_launches: int


@dataclass(frozen=True)
class Unmapped:
    identifier: str
    count: int
    first: str           # path:line of the first occurrence in the output


@dataclass
class PortReport:
    input: str
    output: str
    target: str
    translated: list[PortedFile] = field(default_factory=list)
    copied: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    unmapped: list[Unmapped] = field(default_factory=list)
    remaining: ScanReport | None = None     # the scan of the output, for the target

    def to_dict(self) -> dict:
        rem = self.remaining
        left = [f for f in rem.findings if rem.verdict(f, self.target) in ("manual", "blocker")] if rem else []
        shown = shown_path     # file names that are not UTF-8 are shown with \xNN escapes
        return {
            "schema": "gapbench.port/1", "input": shown(self.input), "output": shown(self.output),
            "target": self.target,
            "translated": [{"source": shown(p.source), "output": shown(p.output), "changed": p.changed,
                            "kernel_launches": p.kernel_launches} for p in self.translated],
            "copied": self.copied,
            "unmapped": [{"identifier": u.identifier, "count": u.count, "first": shown(u.first)}
                         for u in self.unmapped],
            "remaining_work": [{"path": f.path, "line": f.line, "column": f.column, "rule": f.rule, "text": f.text,
                                "verdict": rem.verdict(f, self.target), "fix": rem.ruleset.rules[f.rule].fix}
                               for f in left],
            "skipped": [{"path": shown(s.path), "reason": s.reason} for s in self.skipped],
            "notes": [{"path": shown(n.path), "note": n.note} for n in self.notes],
        }


def _hipify():
    try:
        from torch.utils.hipify import hipify_python
    except Exception as e:  # torch missing or broken
        raise GapbenchError(f"port needs torch.utils.hipify (ships with torch): {e}") from None
    return hipify_python


def hipify_source(text: str, *, cuda_file: bool, keep_launch_syntax: bool = False) -> tuple[str, int, str]:
    """One file's text through hipify's mappings: (new text, kernel launches rewritten, a note or '')."""
    hp = _hipify()
    out = hp.RE_PYTORCH_PREPROCESSOR.sub(lambda m: hp.PYTORCH_MAP[m.group(0)], text)
    note = ""
    launches = 0
    if not keep_launch_syntax and "<<<" in out:
        stats: dict[str, list] = {"kernel_launches": [], "unsupported_calls": []}
        try:
            out = hp.processKernelLaunches(out, stats)
            launches = len(stats["kernel_launches"])
        except Exception as e:  # hipify's launch parser is heuristic
            note = f"kernel launches left as <<<...>>> (hipify could not parse them: {e}); hip-clang accepts them"
    # As hipify does for PyTorch extensions: ATen's CUDA headers have hipified twins in the ROCm torch.
    def header(m: re.Match) -> str:
        path = m.group(2)
        if path.startswith(_ATEN_CUDA_PREFIXES):
            return f"{m.group(1)}{hp.get_hip_file_path(path, is_pytorch_extension=True)}{m.group(3)}"
        return m.group(0)
    out = _INCLUDE.sub(header, out)
    if cuda_file:
        # As hipify does for .cu/.cuh: std:: math calls in device code become the global versions.
        out = hp.replace_math_functions(out)
    out = hp.hip_header_magic(out)
    return out, launches, note


def _check_paths(src: str, dst: str) -> tuple[str, str]:
    if not os.path.exists(src):
        raise GapbenchError(f"{src}: no such folder")
    if not os.path.isdir(src):
        raise GapbenchError(f"{src}: port needs a folder")
    rsrc, rdst = os.path.realpath(src), os.path.realpath(dst)
    if rdst == rsrc or rdst.startswith(rsrc.rstrip(os.sep) + os.sep):
        raise GapbenchError(f"{dst}: the output folder must not be the input folder or inside it")
    if os.path.lexists(dst):
        if not os.path.isdir(dst):
            raise GapbenchError(f"{dst}: exists and is not a folder")
        if os.listdir(dst):
            raise GapbenchError(f"{dst}: output folder exists and is not empty (choose a new folder)")
    return rsrc, rdst


@dataclass
class _Planned:
    """One input file and what port will do with it."""
    entry: Entry
    out_rel: str
    text: str | None = None      # the source to translate; None: copy the file unchanged


def port(src: str | os.PathLike, dst: str | os.PathLike, target: str = "rocm", *, respect_gitignore: bool = True,
         rename: bool = False, keep_launch_syntax: bool = False, max_bytes: int = 2 * 1024 * 1024,
         scan_output: bool = True) -> PortReport:
    """Copy src to a new folder dst, translating CUDA C/C++ files to HIP. Never writes inside src, never
    overwrites a file, never sets setuid/setgid/sticky bits on what it writes.

    rename: .cu files become .hip (hipify's convention); by default names are kept (hipcc compiles .cu too).
    keep_launch_syntax: leave <<<...>>> launches (hip-clang accepts them) instead of hipLaunchKernelGGL.
    """
    if target not in PORT_TARGETS:
        raise GapbenchError(f"port supports --target rocm only (for xpu use SYCLomatic; Ascend needs Ascend C), "
                            f"got {target!r}")
    src, dst = os.fspath(src), os.fspath(dst)
    rsrc, rdst = _check_paths(src, dst)
    entries, skipped, notes = walk(rsrc, respect_gitignore=respect_gitignore)
    report = PortReport(input=rsrc, output=rdst, target=target, skipped=skipped, notes=notes)
    plan = [_plan(e, rename, max_bytes, report.notes) for e in entries]
    _check_collisions(plan)          # before anything is written
    counts: Counter[str] = Counter()
    first: dict[str, str] = {}
    own = _own_headers(plan)
    try:
        with OutputTree(rdst) as out:
            for item in plan:
                try:
                    if item.text is None:
                        out.copy(item.out_rel, item.entry.path)
                        report.copied += 1
                        continue
                    new = _translate(item, out, keep_launch_syntax, report)
                except Unreadable as e:     # the input changed since it was listed
                    report.skipped.append(Skipped(item.entry.rel, f"not copied: {e}"))
                    continue
                _collect_unmapped(item.out_rel, new, counts, first, own)
    except OSError as e:    # a full disk, a read-only or vanished folder, a file size limit
        raise GapbenchError(f"{dst}: cannot write the output: {_why(e)} (what was written so far is left there)") \
            from None
    report.unmapped = [Unmapped(k, n, first[k]) for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    if scan_output:
        from gapbench.scan import scan
        report.remaining = scan(rdst, targets=(target,), respect_gitignore=respect_gitignore, max_bytes=max_bytes)
    return report


def _plan(e: Entry, rename: bool, max_bytes: int, notes: list[Note]) -> _Planned:
    """Read a C/C++ file and keep its text when it is CUDA code to translate; everything else is copied."""
    kinds = kinds_of(e.rel)
    if not ("cpp" in kinds or "cpp?" in kinds) or e.size > max_bytes:
        return _Planned(e, e.rel)
    try:
        data = read_regular(e.path, max_bytes, follow=False)
    except Unreadable:
        return _Planned(e, e.rel)   # copied, which reads it again just as carefully (and says why not)
    if b"\x00" in data[:BINARY_SNIFF]:
        return _Planned(e, e.rel)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        notes.append(Note(e.rel, "not UTF-8: copied unchanged, not translated"))
        return _Planned(e, e.rel)
    if "cpp" not in kinds and not CPP_CUDA_HINT.search(text):
        return _Planned(e, e.rel)
    out_rel = e.rel[:-3] + ".hip" if rename and e.rel.endswith(".cu") else e.rel
    return _Planned(e, out_rel, text)


def _check_collisions(plan: list[_Planned]) -> None:
    """Two inputs must not land on one output name (`--rename` turns a.cu into a.hip next to a.hip), nor a file
    on the name of a folder another output needs (a.cu into a.hip beside a folder a.hip/)."""
    taken: dict[str, str] = {}
    for item in plan:
        other = taken.setdefault(item.out_rel, item.entry.rel)
        if other != item.entry.rel:
            raise GapbenchError(f"{other} and {item.entry.rel} would both be written to {item.out_rel}: "
                                "rename one of them (or drop --rename)")
    for item in plan:
        parts = item.out_rel.split("/")
        for i in range(1, len(parts)):
            folder = "/".join(parts[:i])
            if folder in taken:
                raise GapbenchError(f"{taken[folder]} would be written to {folder}, the name of the folder that "
                                    f"holds {item.entry.rel}: rename one of them (or drop --rename)")


def _translate(item: _Planned, out: OutputTree, keep_launch_syntax: bool, report: PortReport) -> str:
    e, text = item.entry, item.text
    new, launches, note = hipify_source(text, cuda_file=e.rel.endswith((".cu", ".cuh")),
                                        keep_launch_syntax=keep_launch_syntax)
    if note:
        report.notes.append(Note(e.rel, note))
    out.write(item.out_rel, new.encode("utf-8", "surrogateescape"), _permissions(e.path))
    report.translated.append(PortedFile(e.rel, item.out_rel, new != text, launches))
    if "miopen" in new and "cudnn" in text:
        report.notes.append(Note(item.out_rel, "cuDNN calls were renamed to MIOpen; the APIs differ (descriptors, "
                                               "algorithm search): review each call"))
    return new


def _permissions(source: str) -> int:
    """rwx bits only: a setuid/setgid/sticky bit on an input is never carried onto a file port writes (as root
    that would mint a setuid binary)."""
    try:
        return stat.S_IMODE(os.stat(source, follow_symlinks=False).st_mode) & 0o777
    except OSError:
        return 0o644


def _why(e: OSError) -> str:
    return e.strerror or str(e) or e.__class__.__name__


class OutputTree:
    """The output folder, held open: every folder and file below it is made relative to its descriptor and never
    through a symlink, so a link planted in it while port runs cannot send a write elsewhere. A file is written
    to a new temporary name (O_CREAT|O_EXCL|O_NOFOLLOW) and renamed to its own name, which must still be free."""

    _DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    _NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)

    def __init__(self, path: str):
        self.path = path
        self.root = -1
        self.chain: list[tuple[str, int]] = []     # the open folders of the last file written, from the root

    def __enter__(self) -> OutputTree:
        parent = os.path.dirname(self.path)
        os.makedirs(parent, exist_ok=True)
        try:
            os.mkdir(self.path)
        except FileExistsError:
            pass
        try:
            self.root = os.open(self.path, self._DIR)
        except OSError as e:
            raise GapbenchError(f"{self.path}: the output folder is not a folder any more ({_why(e)})") from None
        if os.listdir(self.root):
            raise GapbenchError(f"{self.path}: the output folder is not empty any more (something else writes there)")
        return self

    def __exit__(self, *exc) -> None:
        for _, fd in self.chain:
            os.close(fd)
        self.chain = []
        if self.root >= 0:
            os.close(self.root)

    def _folder(self, parts: list[str]) -> int:
        """A descriptor of the folder parts (relative to the root), made where missing, never through a link."""
        same = 0
        while same < min(len(parts), len(self.chain)) and self.chain[same][0] == parts[same]:
            same += 1
        for _, fd in self.chain[same:]:
            os.close(fd)
        del self.chain[same:]
        here = self.chain[-1][1] if self.chain else self.root
        for name in parts[same:]:
            try:
                os.mkdir(name, 0o777, dir_fd=here)
            except FileExistsError:
                pass
            try:
                here = os.open(name, self._DIR, dir_fd=here)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    where = "/".join([*[n for n, _ in self.chain], name])
                    raise GapbenchError(f"{self.path}: {where} is not the folder port made (a symlink or a file "
                                        "appeared there while port ran); nothing is written through it") from None
                raise
            self.chain.append((name, here))
        return here

    def _new(self, rel: str, mode: int, fill) -> None:
        *folders, name = rel.split("/")
        here = self._folder(folders)
        tmp = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, self._NEW, 0o600, dir_fd=here)
        try:
            fill(fd)
            os.fchmod(fd, mode)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=here)
            raise
        os.close(fd)
        try:
            os.stat(name, dir_fd=here, follow_symlinks=False)
        except FileNotFoundError:
            os.rename(tmp, name, src_dir_fd=here, dst_dir_fd=here)
            return
        os.unlink(tmp, dir_fd=here)
        raise GapbenchError(f"{self.path}: {rel} appeared while port ran (something else writes to the output folder)")

    def write(self, rel: str, data: bytes, mode: int) -> None:
        """A new file rel (relative to the root, '/' separators) holding data, with permission bits mode."""
        def fill(fd: int) -> None:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        self._new(rel, mode, fill)

    def copy(self, rel: str, source: str) -> None:
        """A new file rel with the bytes of the regular file source (never read through a symlink)."""
        src, st = open_regular(source, follow=False)
        try:
            def fill(fd: int) -> None:
                while chunk := os.read(src, 1 << 20):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view):]
            self._new(rel, stat.S_IMODE(st.st_mode) & 0o777, fill)
        finally:
            os.close(src)


# what hipify writes in place of a CUDA header: HIP's and ROCm libraries' own headers, never CUDA ones
_HIP_HEADER = re.compile(r"(?:^|/)(?:hip|roc|miopen|rccl|amd_)", re.IGNORECASE)


def _own_headers(plan) -> frozenset[str]:
    """The paths (and the tails of the paths) of the project's own files, as written and as read: an include of
    one of them is the project's header, not CUDA's, whatever its name says."""
    names: set[str] = set()
    for item in plan:
        for rel in {item.out_rel, item.entry.rel}:
            parts = rel.replace(os.sep, "/").split("/")
            names.update("/".join(parts[i:]) for i in range(len(parts)))
    return frozenset(names)


def _is_cuda_header(path: str, own: frozenset[str]) -> bool:
    """Whether an include left in the output is a real CUDA header: not the project's own file, and not a header
    hipify itself wrote in place of one (hip/hip_runtime.h, hipblas/hipblas.h, …)."""
    p = path.strip().lstrip("./")
    return p not in own and not _HIP_HEADER.search(p)


def _collect_unmapped(rel: str, text: str, counts: Counter, first: dict[str, str],
                      own: frozenset[str] = frozenset()) -> None:
    for m in CUDA_INCLUDE.finditer(text):
        if not _is_cuda_header(m.group(1), own):
            continue
        key = f"#include {m.group(1)}"
        counts[key] += 1
        first.setdefault(key, f"{rel}:{text.count(chr(10), 0, m.start()) + 1}")
    # Comments, string literals and #include lines blanked, offsets kept.
    code = _C_COMMENT_OR_STRING.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)
    code = _INCLUDE_LINE.sub(lambda m: " " * len(m.group(0)), code)
    known = dictionary().names
    for m in UNMAPPED.finditer(code):
        key = m.group(0)
        if key not in known and not key.startswith(("__CUDA", "__nv_", "nvcuda::")):
            continue  # a name that only looks like CUDA (cudaCheck, a project's own helper) is not left unmapped
        before = code[max(0, m.start() - 12):m.start()]
        if (key == "cuda" and _TORCH_CUDA_NAMESPACE.search(before)) or re.search(r"(?:at|c10)::cuda::$", before):
            continue
        counts[key] += 1
        first.setdefault(key, f"{rel}:{code.count(chr(10), 0, m.start()) + 1}")
