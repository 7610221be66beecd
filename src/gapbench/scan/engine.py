"""Scan files: decide what each file is, read it safely, run the matching rules, apply suppressions.

Workers (a fork pool for big trees) each build the compiled rules once; a file is read, never imported.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import fnmatch
import gc
import multiprocessing
import os
import re
import warnings
from collections.abc import Iterable

from gapbench.scan import cuda_api, prefilter
from gapbench.scan.branches import (
    HeaderFacts,
    PortHeaders,
    header_facts,
    in_ranges,
    is_hip_native,
    is_port_path,
    twins_pattern,
)
from gapbench.scan.findings import FileResult, Finding, Note
from gapbench.scan.match_build import BuildRules, is_dockerfile
from gapbench.scan.match_cpp import CppRules
from gapbench.scan.match_notebook import scan_notebook
from gapbench.scan.match_python import TORCH_OPS, PythonRules, _short, names_extension, setup_names
from gapbench.scan.match_text import CPP_CUDA_HINT, TextRules, is_makefile, mask_hash_comments, mask_make_messages
from gapbench.scan.match_yaml import YamlRules
from gapbench.scan.reading import Unreadable, open_regular, read_fd
from gapbench.scan.rules import RuleSet, load_rules
from gapbench.scan.walker import Entry

PY_EXT = (".py", ".pyi", ".pyw")
CUDA_EXT = (".cu", ".cuh")
CPP_EXT = (".c", ".cc", ".cpp", ".cxx", ".c++", ".h", ".hh", ".hpp", ".hxx", ".inl", ".ipp", ".tpp")
DEPS_NAMES = ("requirements*.txt", "*-requirements*.txt", "*_requirements*.txt", "requirements*.in",
              "constraints*.txt", "pyproject.toml", "setup.py", "setup.cfg", "environment*.yml",
              "environment*.yaml", "conda*.yml", "conda*.yaml", "pipfile")
BUILD_NAMES = ("dockerfile*", "containerfile*", "*.dockerfile", "makefile", "gnumakefile", "*.mk", "*.make",
               "cmakelists.txt", "*.cmake", "jenkinsfile", "*.sh", "*.bash", "*.zsh", "*.ksh", "*.yml", "*.yaml",
               ".env", "*.env", ".envrc", "*.slurm", "*.sbatch", "*.pbs")
# Each list of names as one expression (the same test as fnmatch.fnmatchcase with each, once per file of a walk)
_DEPS_NAME = re.compile("|".join(fnmatch.translate(g) for g in DEPS_NAMES))
_BUILD_NAME = re.compile("|".join(fnmatch.translate(g) for g in BUILD_NAMES))
BINARY_SNIFF = 8192
SUPPRESS = re.compile(r"gapbench:\s*ignore(?:\[([^\]]*)\])?")


def kinds_of(rel: str) -> tuple[str, ...]:
    """Which matchers a file goes through, from its name alone ('cpp?' means: if it includes CUDA headers)."""
    name = rel.rsplit("/", 1)[-1].lower()
    kinds = []
    if name.endswith(PY_EXT):
        kinds.append("python")
    elif name.endswith(".ipynb"):
        kinds.append("notebook")
    if name.endswith(CUDA_EXT):
        kinds.append("cpp")
    elif name.endswith(CPP_EXT):
        kinds.append("cpp?")
    if _DEPS_NAME.match(name) or ("/requirements/" in f"/{rel.lower()}" and name.endswith((".txt", ".in"))):
        kinds.append("deps")
    if _BUILD_NAME.match(name):
        kinds.append("build")
    return tuple(kinds)


class Matcher:
    """Everything compiled that a worker needs."""

    def __init__(self, ruleset: RuleSet, max_bytes: int, macros=None, packages: frozenset[str] = frozenset(),
                 extensions: frozenset[str] = frozenset()):
        self.ruleset = ruleset
        self.extensions = extensions    # the tree's compiled CUDA extensions (a second pass gives them)
        self.macros = macros    # portability macros the tree's other files define (a second pass gives them)
        self.packages = packages    # folders of the tree holding Python: the project's own packages
        self.python = PythonRules(ruleset)
        self.text = TextRules(ruleset)
        self.cpp = CppRules(ruleset, self.text)
        self.yaml = YamlRules(ruleset)
        self.build = BuildRules(ruleset)
        self.max_bytes = max_bytes
        # which files can hold a finding, from their bytes (a second pass's extensions open every Python file)
        gate = None if self.python.always or extensions else frozenset(self.python._quick)
        self.prefilter = prefilter.Prefilter.for_rules(ruleset, gate, CPP_CUDA_HINT) if prefilter.enabled() else None
        self._cuda_hint = prefilter.superset_gate(CPP_CUDA_HINT.pattern) if self.prefilter is not None else None

    def scan_file(self, entry: Entry, kinds: tuple[str, ...]) -> FileResult:
        try:
            return self._scan_file(entry, kinds)
        except Exception as e:  # a bug or an odd file must not end a scan of 10,000 others
            return FileResult([], [], skipped=f"could not be scanned ({e.__class__.__name__}: {e})")

    def _scan_file(self, entry: Entry, kinds: tuple[str, ...]) -> FileResult:
        res = FileResult([], [])
        data = self._read(entry, res)
        if data is None:
            return res
        if self.prefilter is not None and not self.prefilter.may_match(data, kinds, entry.rel.rsplit("/", 1)[-1]):
            if not data.isascii():
                _decoded(entry.rel, data, res)     # only for the note a file that is not UTF-8 gets
            return res
        text = _decoded(entry.rel, data, res)
        quick = self.prefilter.quick_present(data) if self.prefilter is not None and "python" in kinds else None
        raw = self._matches(entry.rel, kinds, text, res, quick)
        if raw:
            res.findings, res.suppressed = _apply_suppressions(entry.rel, text, raw)
            if is_port_path(entry.rel) or is_hip_native(res.header):
                # another stack's own file (by its path, or a C/C++ source written for HIP): its code is the port
                res.findings = [dataclasses.replace(f, ported=True) for f in res.findings]
        return res

    def _read(self, entry: Entry, res: FileResult) -> bytes | None:
        """The file's bytes, or None with res.skipped saying why it is not scanned. Only a regular file is read
        (never through a symlink: the walk saw none there), its head first: a binary file is not read whole."""
        if entry.size > self.max_bytes:
            res.skipped = f"larger than the size limit ({entry.size:,} > {self.max_bytes:,} bytes)"
            return None
        try:
            fd, st = open_regular(entry.path, follow=False)
        except Unreadable as e:
            res.skipped = str(e)
            return None
        try:
            if st.st_size > self.max_bytes:
                res.skipped = f"larger than the size limit ({st.st_size:,} > {self.max_bytes:,} bytes)"
                return None
            sniff = min(BINARY_SNIFF, self.max_bytes)
            head = read_fd(fd, sniff - 1)      # at most `sniff` bytes
            if b"\x00" in head:
                res.skipped = "binary (contains NUL bytes)"
                return None
            data = head + read_fd(fd, self.max_bytes - len(head)) if len(head) == sniff else head
        except OSError as e:
            res.skipped = f"cannot read: {e.strerror}"
            return None
        finally:
            os.close(fd)
        if len(data) > self.max_bytes:
            res.skipped = f"larger than the size limit (> {self.max_bytes:,} bytes)"
            return None
        res.scanned, res.bytes = True, len(data)
        return data

    def _matches(self, rel: str, kinds: tuple[str, ...], text: str, res: FileResult,
                 quick: frozenset[str] | None = None) -> list[tuple[str, int, int, str, bool, int]]:
        """(rule id, line, 0-based column, text, ported, last line) from every matcher the file's kinds call for.
        `quick`: the Python gate's literals the file holds, when the prefilter found them."""
        raw: list[tuple[str, int, int, str, bool, int]] = []
        name = rel.rsplit("/", 1)[-1]
        if "python" in kinds:
            present = self._python_gate(text, quick)
            if present is not None:
                raw += self._python(rel, text, res, present)
        if "notebook" in kinds:
            raw += scan_notebook(rel, text, self.python, self.text, res.notes)
        if "cpp" in kinds or ("cpp?" in kinds and self._reads_as_cuda(text)):
            facts: dict = {}
            raw += [(m.rule.id, m.line, m.col, m.text, m.ported, m.last)
                    for m in self.cpp.match(name, text, self.macros, facts)
                    if not (m.rule.library and LIBRARY + m.rule.library in self.packages)]
            res.macros, res.tested = facts.get("macros"), facts.get("tested", frozenset())
            res.header = facts.get("header")
            if facts.get("torch_libraries"):    # `torch.ops.mylib.*` calls from Python run these CUDA kernels
                res.extensions = frozenset(TORCH_OPS + lib for lib in facts["torch_libraries"])
        for kind in ("deps", "build"):
            if kind in kinds:
                found = self._text_kind(kind, name, text)
                if kind == "build" and "deps" in kinds:     # environment.yml: a line its dependency rules report
                    taken = {r[1] for r in raw}
                    found = [m for m in found if m.line not in taken]
                raw += [(m.rule.id, m.line, m.col, m.text, m.ported, m.last) for m in found]
        return raw

    def _python_gate(self, text: str, quick: frozenset[str] | None) -> frozenset[str] | None:
        """The Python gate's literals the file holds, or None when no Python rule can find anything in it."""
        present = self.python.gate(text, quick)
        if present is None and self.extensions and _mentions(text, self.extensions):
            present = frozenset(self.python._quick)     # it imports one of the tree's CUDA extensions
        if present is None and names_extension(text):
            present = frozenset(self.python._quick)     # it imports an extension known by its name (awq_ext)
        return present

    def _text_kind(self, kind: str, name: str, text: str) -> list:
        """The dependency ("deps") or build ("build") rules' matches in a file, comments and messages masked: not
        the project's own name or packages; in build files the structured settings, one per continued command."""
        masked = mask_hash_comments(text)
        if kind == "build" and is_makefile(name):
            masked = mask_make_messages(masked)
        found = self.text.match(kind, name, masked)
        if kind == "deps" and found and name.lower() in ("pyproject.toml", "setup.cfg"):
            found = _without_own_name(masked, found)
        if found and self.packages:
            found = [m for m in found if not (m.rule.package and _names_own(m.text, self.packages))]
        if kind != "build":
            return found
        found = self._structure(name, text, masked, found)
        if found and self.packages:     # a structural reader's findings too (a CMake command naming the project)
            found = [m for m in found if not (m.rule.package and _names_own(m.text, self.packages))]
        if found:
            found = _without_messages(masked, found)
        if len(found) > 1 and not is_makefile(name) and not name.lower().endswith(_CMAKE_NAMES):
            found = _one_per_command(masked, found)
        return found

    def _reads_as_cuda(self, text: str) -> bool:
        """Whether a C/C++ header or source is GPU code (CPP_CUDA_HINT), searched by RE2 where it reads the text
        as Python's re does."""
        if self._cuda_hint is not None and prefilter.gate_safe(text):
            return self._cuda_hint.search(text) is not None
        return CPP_CUDA_HINT.search(text) is not None

    def _structure(self, name: str, text: str, masked: str, found: list) -> list:
        """A build file's line findings read through its structure, where it has a reader (CI YAML, CMake, make)."""
        low = name.lower()
        if low.endswith((".yml", ".yaml")):
            return self._workflow(text, found)
        if low == "cmakelists.txt" or low.endswith(".cmake"):
            return self.build.cmake_file(text, found)
        if is_makefile(name):
            return self.build.makefile(masked, found)
        if is_dockerfile(name):
            return self.build.dockerfile(masked, found, lambda line: self.text.match("build", name, line))
        return found

    def _workflow(self, text: str, found: list) -> list:
        """A CI workflow's line findings with what its structure adds: findings on label lines dropped, CUDA axes
        and CUDA-only conditions added, steps run only for another stack marked already ported."""
        facts = self.yaml.facts(text)
        if facts is None:
            return found
        read = {m.line for m in facts.found}     # a fallback rule's line the structure reads gets the structure's
        found = [m for m in found if m.line not in facts.quiet and not (m.rule.fallback and m.line in read)]
        lines = {m.line for m in found}
        found += [m for m in facts.found if m.line not in lines]
        if facts.ported:
            ranges = sorted(facts.ported)
            for m in found:
                m.ported = m.ported or in_ranges(ranges, m.line)
        return found

    def _python(self, rel: str, text: str, res: FileResult,
                present: frozenset[str] | None = None) -> list[tuple[str, int, int, str, bool, int]]:
        try:
            with warnings.catch_warnings(), _no_collection():
                warnings.simplefilter("ignore")     # invalid escape sequences etc. in the scanned code
                tree = ast.parse(text, filename=rel)
        except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
            where = f" at line {e.lineno}" if isinstance(e, SyntaxError) and e.lineno else ""
            res.notes.append(Note(rel, f"Python does not parse ({e.__class__.__name__}{where}): "
                                       "fell back to a text scan, findings are approximate"))
            matches = self.python.fallback(text)
        else:
            try:
                folder = tuple(rel.split("/")[:-1])
                facts: dict = {}
                packages = self.packages | setup_names(text) if rel.endswith("setup.py") else self.packages
                matches = self.python.match(tree, text, present, frozenset(folder) | self.packages, folder,
                                            self.extensions, facts, packages, rel.rsplit("/", 1)[-1].rsplit(".", 1)[0])
                res.extensions = facts.get("extensions", frozenset())
            except RecursionError:
                res.notes.append(Note(rel, "Python too deeply nested to walk: fell back to a text scan"))
                matches = self.python.fallback(text)
        return [(m.rule.id, m.line, m.col, m.text, m.ported, m.last) for m in matches]


# A shell line that only prints: echo/printf/Write-Host, or `python -c "... print(...)"`, sending nothing to a file,
# a pipe or a command substitution. A message is no lock-in ("CUDA: 12.1"), a print of CUDA_HOME neither.
_MESSAGE_LINE = re.compile(r"""^[ \t]*(?:-[ \t]+|run:[ \t]+)?(?:(?:echo|printf|Write-Host|Write-Output)\b"""
                           r"""|python3?[ \t]+-c[ \t]+["'][^"'\n]*\bprint[ \t]*\()[^\n]*$""")
_NOT_ONLY_PRINTING = re.compile(r">|\||\$\(|`|&&|;[ \t]*\S")


def _without_messages(masked: str, found: list) -> list:
    """Build-file findings without those on lines that only print a message."""
    lines = masked.split("\n")
    out = []
    for m in found:
        src = lines[m.line - 1] if 0 < m.line <= len(lines) else ""
        if _MESSAGE_LINE.match(src) and not _NOT_ONLY_PRINTING.search(_strip_python_print(src)):
            continue
        out.append(m)
    return out


_OWN_NAME_LINE = re.compile(r"^[ \t]*name[ \t]*[=:]")
_NAME_TOKEN = re.compile(r"[A-Za-z0-9][\w.-]*")


def _names_own(text: str, packages: frozenset[str]) -> bool:
    """A package or repository match naming the project itself (`pip install flash-attn` in flash-attention's own
    Dockerfile, a clone of its own repository): the project building itself is no dependency."""
    for token in _NAME_TOKEN.findall(text):
        name = token.lower().removesuffix(".git").replace("-", "_")
        if name in packages or LIBRARY + name in packages:     # a package of the tree, or its C/C++ library
            return True
    return False


_CMAKE_NAMES = ("cmakelists.txt", ".cmake")


def _one_per_command(masked: str, found: list) -> list:
    """Build-file findings with one per rule and shell command where a command repeats itself over the lines a
    trailing backslash continues (`RUN NVSHMEM_A=0 \\` / `    NVSHMEM_B=1 \\`): one edit, at its first flagged line.
    Another setting of the same rule on a continued line (`-DCMAKE_CUDA_ARCHITECTURES=90`) stays its own."""
    lines = masked.split("\n")
    head: dict[int, int] = {}       # line -> the first line of the command it continues
    first = 1
    for i, src in enumerate(lines, 1):
        head[i] = first
        if not src.rstrip().endswith("\\"):
            first = i + 1
    out, seen = [], set()
    for m in sorted(found, key=lambda m: (m.line, m.col)):
        key = (head.get(m.line, m.line), m.rule.id, m.text.split("_", 1)[0])
        if key in seen and head.get(m.line, m.line) != m.line:
            continue
        seen.add(key)
        out.append(m)
    return out


def _without_own_name(masked: str, found: list) -> list:
    """Dependency-file findings without those on the line giving the project's own name (`name = "xformers"`)."""
    lines = masked.split("\n")
    return [m for m in found if not (0 < m.line <= len(lines) and _OWN_NAME_LINE.match(lines[m.line - 1]))]


def _strip_python_print(src: str) -> str:
    """A `python -c "...; print(...)"` line without its code (its `;` and parentheses are Python's)."""
    m = re.search(r"""-c[ \t]+(["'])(.*)\1""", src)
    return src[:m.start()] + src[m.end():] if m else src


def _apply_suppressions(rel: str, text: str, raw) -> tuple[list[Finding], int]:
    lines = None
    marks: dict[int, re.Match | None] = {}     # a line's suppression comment, searched once however many findings
    out, suppressed, seen = [], 0, set()
    marked = "gapbench:" in text       # once: searching the text for each finding would be quadratic
    for rule, line, col, shown, ported, last in raw:
        key = (line, col, rule)
        if key in seen:
            continue
        seen.add(key)
        if marked:
            if lines is None:
                lines = text.split("\n")   # the same line breaks as the positions
            if line not in marks:
                marks[line] = SUPPRESS.search(lines[line - 1]) if 0 < line <= len(lines) else None
            m = marks[line]
            if m and (m.group(1) is None or any(fnmatch.fnmatchcase(rule, g.strip())
                                                for g in m.group(1).split(",") if g.strip())):
                suppressed += 1
                continue
        out.append(Finding(rel, line, col + 1, rule, _short(shown), ported, last if last > line else 0))
    return out, suppressed


def _decoded(rel: str, data: bytes, res: FileResult) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        res.notes.append(Note(rel, f"not UTF-8 (byte {e.start}): decoded with replacement characters"))
        return data.decode("utf-8", errors="replace")


# ---------------------------------------------------------------- running over many files

_WORKER: Matcher | None = None
_ITEMS: list[tuple[Entry, tuple[str, ...]]] = []
# A parsed file is a million objects: the cyclic collector, run every 700 allocations, spent more time walking
# them than ast.parse took to build them. Scans collect every 100,000 (what they free is mostly not cyclic).
_GC_THRESHOLDS = (100_000, 50, 100)
_SPANS_PER_JOB = 32
_MOST_PER_SPAN = 64     # files: a run of cheap-looking files that turn out to be parsed stays short


def _init_worker(rule_files: tuple[str, ...], max_bytes: int, packages: frozenset[str] = frozenset(),
                 items: list[tuple[Entry, tuple[str, ...]]] = ()):
    global _WORKER, _ITEMS
    _WORKER = Matcher(load_rules(rule_files[1:]), max_bytes, packages=packages)
    _ITEMS = items      # inherited through fork: a chunk is sent as its first and last index
    gc.freeze()         # the rules and the dictionary: never walked by the collector again
    gc.set_threshold(*_GC_THRESHOLDS)


def _scan_chunk(span: tuple[int, int]) -> tuple[int, list[FileResult]]:
    return span[0], [_WORKER.scan_file(e, k) for e, k in _ITEMS[span[0]:span[1]]]


@contextlib.contextmanager
def _fewer_collections():
    old = gc.get_threshold()
    gc.set_threshold(*_GC_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*old)


@contextlib.contextmanager
def _no_collection():
    """No garbage collection while ast.parse builds a tree: every node it makes is alive until the tree is walked,
    so a collection in the middle only walks them (the next one, after the file, frees what is cyclic)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _spans(items: list[tuple[Entry, tuple[str, ...]]], jobs: int) -> list[tuple[int, int]]:
    """Runs of consecutive items of about equal expected work (parsed files by their size, the others at a small
    fraction of it), the heaviest first: no worker is left with a long last chunk while the other waits."""
    cost = [e.size + 2000 if {"python", "cpp", "notebook"} & set(k) else 200 + e.size // 20 for e, k in items]
    target = sum(cost) / (jobs * _SPANS_PER_JOB)
    spans: list[tuple[int, int, int]] = []
    start = acc = 0
    for i, c in enumerate(cost):
        acc += c
        if acc >= target or i + 1 - start >= _MOST_PER_SPAN or i + 1 == len(items):
            spans.append((acc, start, i + 1))
            start, acc = i + 1, 0
    return [(a, b) for _, a, b in sorted(spans, reverse=True)]


_SOURCE_ROOTS = frozenset({"src", "python", "lib"})
LIBRARY = "library:"    # own_packages: a C/C++ library of the tree, not a Python package


def own_packages(items: list[tuple[Entry, tuple[str, ...]]]) -> frozenset[str]:
    """The project's own top-level packages: the tree's top folders holding Python files (and those under src/,
    python/, lib/). An import of one of them is the project's own code (its tests importing its package), not a
    dependency. And, marked LIBRARY + name, the C/C++ libraries whose public headers sit at its root
    (include/<name>/: `library:tiny_cuda_nn`), for the rules of one library (Rule.library); no module has that name."""
    out = set()
    for e, k in items:
        parts = e.rel.split("/")[:-1]
        if "python" in k and parts:
            out.add(parts[1] if parts[0] in _SOURCE_ROOTS and len(parts) > 1 else parts[0])
        elif len(parts) >= 2 and parts[0] == "include" and ("cpp" in k or "cpp?" in k):
            out.add(LIBRARY + parts[1].replace("-", "_").lower())
    return frozenset(out)


def scan_entries(items: list[tuple[Entry, tuple[str, ...]]], ruleset: RuleSet, max_bytes: int,
                 jobs: int, packages: frozenset[str] = frozenset()) -> Iterable[tuple[Entry, FileResult]]:
    """(entry, result) for every item, in order; a pool of `jobs` forked workers when jobs > 1."""
    if jobs <= 1 or "fork" not in multiprocessing.get_all_start_methods() or multiprocessing.current_process().daemon:
        with _fewer_collections():
            m = Matcher(ruleset, max_bytes, packages=packages)
            for e, k in items:
                yield e, m.scan_file(e, k)
        return
    if ruleset.api_rules() and any("cpp" in k or "cpp?" in k for _, k in items):
        cuda_api.dictionary()   # built once here, shared by the forked workers
    results: list[FileResult | None] = [None] * len(items)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(jobs, initializer=_init_worker, initargs=(ruleset.files, max_bytes, packages, items)) as pool:
        for start, part in pool.imap_unordered(_scan_chunk, _spans(items, jobs)):
            results[start:start + len(part)] = part
    yield from ((e, r) for (e, _), r in zip(items, results, strict=True))





def _mentions(text: str, extensions: frozenset[str]) -> bool:
    """Whether an import in the text could name one of these modules (a substring test first: cheap)."""
    lasts = {e.rsplit(".", 1)[-1] for e in extensions}
    return "import" in text and any(last in text for last in lasts)


def with_tree_facts(results: list[tuple[Entry, FileResult]], ruleset: RuleSet, max_bytes: int,
                    packages: frozenset[str] = frozenset()) -> list[tuple[Entry, FileResult]]:
    """The results with the files that need what another file of the tree says scanned again knowing it: C/C++
    files testing a portability macro defined elsewhere (`#if MYLIB_HIP` in a kernel file, `#define MYLIB_HIP 1`
    under `#ifdef USE_ROCM` in a header), Python files importing a CUDA extension the tree builds
    (`from . import _C` beside a setup.py with `CUDAExtension(name="pkg._C")`). Few files: the second pass runs
    here, in this process. Then the findings of C/C++ files that include a header which is the port
    (branches.PortHeaders: `#include "vendors/hip.h"` under `#if defined(MYLIB_USE_HIP)`, the header `#define`s
    CUDA names to their HIP twins) are marked already ported where the header does the port: no file is scanned
    again for that, the first pass kept each file's includes, aliases and port guards."""
    return _through_port_headers(_rescanned(results, ruleset, max_bytes, packages), max_bytes)


def _rescanned(results: list[tuple[Entry, FileResult]], ruleset: RuleSet, max_bytes: int,
               packages: frozenset[str]) -> list[tuple[Entry, FileResult]]:
    tree = None
    extensions: set[str] = set()
    for _, res in results:
        if res.macros is not None:
            tree = res.macros if tree is None else tree.merged(res.macros)
        extensions |= res.extensions
    if not tree and not extensions:
        return results
    exts = frozenset(extensions)
    matcher = None
    out = []
    for entry, res in results:
        own = res.macros.names if res.macros is not None else frozenset()
        again = bool(tree) and bool(res.tested) and bool((res.tested & tree.names) - own)
        if not again and exts - res.extensions and entry.rel.endswith(PY_EXT) and res.scanned:
            again = _imports_one(entry, exts - res.extensions, max_bytes)
        if again:
            matcher = matcher or Matcher(ruleset, max_bytes, tree, packages, exts)
            res = matcher.scan_file(entry, kinds_of(entry.rel))
        out.append((entry, res))
    return out


def _through_port_headers(results: list[tuple[Entry, FileResult]], max_bytes: int) -> list[tuple[Entry, FileResult]]:
    """The results with what port headers do marked: every finding of a port header is already ported, and in a
    file including one, the findings on names it aliases to their HIP twins and on conditions testing the port."""
    facts = {e.rel: r.header for e, r in results if r.header is not None}
    if not facts:
        return results
    graph = PortHeaders(facts, {e.rel for e, _ in results})
    if not graph.candidates():
        return results      # no file includes one of the tree's files from a port branch: the common case
    graph.settle(_linking_headers(results, graph, max_bytes))
    out = []
    for entry, res in results:
        if res.findings and res.header is not None:
            res = _ported_through(graph, entry.rel, res)
        out.append((entry, res))
    return out


def _ported_through(graph: PortHeaders, rel: str, res: FileResult) -> FileResult:
    if rel in graph.port:
        marks = [dataclasses.replace(f, ported=True) for f in res.findings]
    else:
        names = graph.imported(rel)
        if names is None:
            return res
        twins = twins_pattern(names)
        guards = list(res.header.guards)
        marks = [f if f.ported or not ((twins is not None and twins.match(f.text)) or in_ranges(guards, f.line))
                 else dataclasses.replace(f, ported=True) for f in res.findings]
    return dataclasses.replace(res, findings=marks)


_QUOTED_INCLUDE = re.compile(r'#[ \t]*include[ \t]*"')


def _is_c_source(rel: str) -> bool:
    return rel.lower().endswith(CUDA_EXT + CPP_EXT)


def _linking_headers(results: list[tuple[Entry, FileResult]], graph: PortHeaders,
                     max_bytes: int) -> dict[str, HeaderFacts]:
    """The includes of the C/C++ files the first pass did not read as CUDA code, where they can matter: a file
    another file includes (a link of a chain, followed on), or one naming a header that is included from a port
    branch somewhere (it may include it outside one). Read from their directive lines, comments left: a
    `// #include` is no directive."""
    texts = {}
    for e, r in results:
        if r.header is None and r.scanned and _is_c_source(e.rel):
            text = _text_of(e, max_bytes)
            if text and _QUOTED_INCLUDE.search(text):
                texts[e.rel] = text
    names = graph.port_side_names()
    todo = [rel for rel, text in texts.items() if rel in graph.targets() or any(n in text for n in names)]
    out: dict[str, HeaderFacts] = {}
    while todo:
        rel = todo.pop()
        if rel not in out:
            out[rel] = header_facts(texts[rel], texts[rel], directives_only=True)
            todo += [t for t in (graph.resolve(rel, x) for x, _ in out[rel].includes) if t in texts and t not in out]
    return out


def _text_of(entry: Entry, max_bytes: int) -> str | None:
    try:
        fd, _ = open_regular(entry.path, follow=False)
    except Unreadable:
        return None
    try:
        data = read_fd(fd, max_bytes)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace")


def _imports_one(entry: Entry, extensions: frozenset[str], max_bytes: int) -> bool:
    text = _text_of(entry, max_bytes)
    return text is not None and _mentions(text, extensions)
