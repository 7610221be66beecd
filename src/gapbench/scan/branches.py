"""Branches that already are the port: the lines a migration keeps, so findings there are "already ported".

C/C++: the preprocessor's conditionals, read as the preprocessor reads them (directive lines, continuations
joined): `#ifdef USE_ROCM`, `#if defined(__HIP_PLATFORM_AMD__)`, the `#else` of `#ifndef USE_ROCM`.
Python: `if` statements whose test asks for another stack (`if torch.version.hip:`, `elif device == "xpu":`,
`if is_torch_npu_available():`), through the AST.
"""

from __future__ import annotations

import ast
import posixpath
import re
from dataclasses import dataclass

# A macro or name that says "another stack than CUDA". HIP on NVIDIA (__HIP_PLATFORM_NVIDIA__/_NVCC__) is CUDA.
# Gaudi (hpu, habana), Cambricon (mlu), Apple (mps), AWS Neuron, Google TPU (xla), Moore Threads (musa), Enflame
# (gcu), Graphcore (ipu), Hygon (dcu), Tecorigin (sdaa), MetaX (maca), Iluvatar (corex), Kunlunxin are stacks too.
_PORT_WORD = re.compile(r"(?i)(?:^|_)(?:hip|hipcc|rocm|amd|gfx\w*|xpu|sycl|npu|ascend|cann|musa|hpu|habana|gaudi|mlu"
                        r"|cambricon|mps|neuron|xla|tpu|gcu|ipu|dcu|sdaa|maca|metax|corex|iluvatar|kunlun\w*)(?:$|_)")
_CUDA_SIDE = re.compile(r"(?i)nvidia|nvcc|cuda")
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif|define|include)\b([^\n]*)", re.MULTILINE)
_TERM_SPLIT = re.compile(r"&&|\|\|")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_PORT_STRINGS = frozenset({"xpu", "npu", "hip", "rocm", "musa", "hpu", "mlu", "mps", "xla", "neuron", "gcu", "ipu",
                           "sdaa"})

POSITIVE, NEGATIVE, NEUTRAL = 1, -1, 0


def is_port_name(name: str) -> bool:
    """A macro or identifier naming another stack than CUDA (USE_ROCM, __HIP_PLATFORM_AMD__, is_hip, torch_npu)."""
    name = name.strip("_")
    return bool(_PORT_WORD.search(name)) and not _CUDA_SIDE.search(name)


def _term_polarity(term: str, macros: PortMacros | None = None) -> int:
    names = [n for n in _IDENT.findall(term) if n != "defined"]
    negated = "!" in term.replace("!=", "")
    port = [n for n in names if is_port_name(n)]
    if port:
        return NEGATIVE if negated else POSITIVE
    if macros:
        pols = {macros.polarity(n, bool(re.search(r"\bdefined\s*\(?\s*" + re.escape(n) + r"\b", term)))
                for n in names if n in macros.names}
        pols.discard(NEUTRAL)
        if len(pols) == 1:
            pol = pols.pop()
            return -pol if negated else pol
    return NEUTRAL


def condition_polarity(kind: str, cond: str, macros: PortMacros | None = None) -> int:
    """POSITIVE when the branch under this condition is another stack's, NEGATIVE when its #else is, else
    NEUTRAL (a condition that mixes CUDA and the port, or says nothing about either). `macros`: the project's
    own portability macros (port_macros), read like USE_ROCM where their definitions say so."""
    cond = cond.split("//")[0]
    if kind in ("ifdef", "ifndef"):
        name = cond.strip().split()[0] if cond.strip() else ""
        if is_port_name(name):
            pol = POSITIVE
        elif macros and name in macros.names:
            pol = macros.polarity(name, True)
        else:
            return NEUTRAL
        return pol if kind == "ifdef" else -pol
    terms = [_term_polarity(t, macros) for t in _TERM_SPLIT.split(cond)]
    ops = _TERM_SPLIT.findall(cond)
    if all(t == POSITIVE for t in terms):
        return POSITIVE
    if all(t == NEGATIVE for t in terms):
        return NEGATIVE
    if POSITIVE in terms and NEGATIVE not in terms and all(op == "&&" for op in ops):
        return POSITIVE
    return NEUTRAL


def cpp_port_lines(masked: str, macros: PortMacros | None = None) -> list[tuple[int, int]]:
    """(first, last) 1-based line ranges inside a port branch of the preprocessor; `masked` has its comments
    blanked. One pass over the directives: linear in the file. `macros`: the project's portability macros."""
    if "#" not in masked:
        return []
    out: list[tuple[int, int]] = []
    for kind, line, frame, _ in _walk_directives(masked, macros):
        if kind not in ("if", "ifdef", "ifndef", "define", "include") and frame[1]:
            out.append((frame[2], line))
    return _merged(out)


def _walk_directives(masked: str, macros: PortMacros | None):
    """(kind, line, frame, match) for each directive, in order; a frame is [polarity of its first condition, is
    the current branch a port branch, start line, is the current branch the CUDA side]. For `#if`-family
    directives the frame given is the new one; for the others it is the frame as it was before the directive
    (for #define and #include: the side of the innermost conditional about the port, see _side)."""
    stack: list[list] = []
    line, pos = 1, 0
    for m in _DIRECTIVE.finditer(masked):
        line += masked.count("\n", pos, m.start())
        pos = m.start()
        kind = m.group(1)
        if kind in ("if", "ifdef", "ifndef"):
            pol = condition_polarity(kind, _joined(masked, m), macros)
            stack.append([pol, pol == POSITIVE, line, pol == NEGATIVE])
            yield kind, line, stack[-1], m
            continue
        if kind in ("define", "include"):
            yield kind, line, _side(stack), m
            continue
        if not stack:
            continue
        frame = stack[-1]
        yield kind, line, list(frame), m
        if kind == "endif":
            stack.pop()
        elif kind == "elif":
            pol = condition_polarity("if", _joined(masked, m), macros)
            cuda_side = pol != POSITIVE and (frame[0] == POSITIVE or pol == NEGATIVE)
            frame[1], frame[2], frame[3] = pol == POSITIVE, line, cuda_side
            if pol == NEGATIVE:
                frame[0] = NEGATIVE
        else:   # else
            frame[1], frame[2], frame[3] = frame[0] == NEGATIVE, line, frame[0] == POSITIVE


def _side(stack: list[list]) -> str:
    """Which side of the innermost conditional about the port a line is on: "port", "cuda", or "" (none)."""
    for frame in reversed(stack):
        if frame[1]:
            return "port"
        if frame[3]:
            return "cuda"
    return ""


# ---------------------------------------------------------------- a project's own portability macros

_DEFINE_VALUE = re.compile(r"[ \t]+([A-Za-z_]\w*)(?![\w(])[ \t]*([^\n]*)")
_TRUE_VALUES = frozenset({"1", "true", "(1)"})
_FALSE_VALUES = frozenset({"0", "false", "(0)"})


class PortMacros:
    """A project's own switches for the port, learnt from their definitions: a macro defined (or set to 1) only
    in a HIP/ROCm branch (`#if defined(__HIP_PLATFORM_AMD__)` / `#define MYLIB_HIP 1` / `#else` /
    `#define MYLIB_HIP 0`) is a port switch, `#if MYLIB_HIP` a port branch; one defined only on the CUDA side is
    its opposite."""

    def __init__(self, sides: dict[str, dict[str, str | None]] | None = None):
        self.sides: dict[str, dict[str, str | None]] = sides or {}     # name -> {"port"/"cuda"/"": value}
        self._pol: dict[tuple[str, bool], int] = {}
        self.names = frozenset(n for n in self.sides if self.polarity(n, True) or self.polarity(n, False))

    def polarity(self, name: str, defined: bool) -> int:
        """POSITIVE when `defined(name)` (defined=True) or `name` (its value) holds only on the port's side."""
        key = (name, defined)
        if key not in self._pol:
            self._pol[key] = self._compute(self.sides.get(name, {}), defined)
        return self._pol[key]

    @staticmethod
    def _compute(sides: dict[str, str | None], defined: bool) -> int:
        if not sides or "" in sides:
            return NEUTRAL      # also defined outside any port conditional: not a switch of the port
        if any(_truth(v) is None for v in sides.values()):
            return NEUTRAL      # a value that is no switch (64 against 32, a HIP name a CUDA name is renamed to)
        port, cuda = "port" in sides, "cuda" in sides
        if defined:
            return POSITIVE if port and not cuda else NEGATIVE if cuda and not port else NEUTRAL
        truth = {side: _truth(v) for side, v in sides.items()}
        p, c = truth.get("port", False), truth.get("cuda", False)
        return POSITIVE if p and not c else NEGATIVE if c and not p else NEUTRAL

    def merged(self, other: PortMacros) -> PortMacros:
        """Both files' definitions; a macro that two files define differently keeps every side seen."""
        sides = {n: dict(v) for n, v in self.sides.items()}
        for n, v in other.sides.items():
            mine = sides.setdefault(n, {})
            for side, value in v.items():
                if side in mine and mine[side] != value:
                    mine[""] = None     # two values on one side: not a switch
                mine.setdefault(side, value)
        return PortMacros(sides)

    def __bool__(self) -> bool:
        return bool(self.names)


def _truth(value: str | None) -> bool | None:
    v = (value or "").strip().lower()
    if v in _TRUE_VALUES or v == "":
        return True
    if v in _FALSE_VALUES:
        return False
    return None


def tested_names(masked: str) -> frozenset[str]:
    """The identifiers the file's #if/#ifdef/#elif conditions test."""
    out: set[str] = set()
    for m in _DIRECTIVE.finditer(masked):
        if m.group(1) in ("if", "ifdef", "ifndef", "elif"):
            out.update(n for n in _IDENT.findall(m.group(2)) if n != "defined")
    return frozenset(out)


def port_macros(masked: str, known: PortMacros | None = None) -> PortMacros:
    """The portability macros a file defines (comments blanked), reading its conditionals with the macros already
    `known` (those of other files). Object-like macros only; a function-like one is no switch."""
    if "define" not in masked:
        return PortMacros()
    sides: dict[str, dict[str, str | None]] = {}
    for kind, _line, side, m in _walk_directives(masked, known):
        if kind != "define":
            continue
        d = _DEFINE_VALUE.match(m.group(2))
        if d is None or is_port_name(d.group(1)) or _CUDA_SIDE.search(d.group(1)) and side != "cuda":
            continue
        mine = sides.setdefault(d.group(1), {})
        if side in mine and mine[side] != d.group(2).strip():
            mine[""] = None
        mine.setdefault(side, d.group(2).strip())
    return PortMacros(sides)


# ---------------------------------------------------------------- conditions and names the port already handles

# A HIP/ROCm platform macro or switch (`__HIP_PLATFORM_AMD__`, `USE_ROCM`, `MYLIB_USE_HIP`, `__gfx90a__`): a
# condition testing one is already port-aware. Other stacks' switches (MUSA, SYCL, XPU) give ROCm no path.
_HIP_WORD = re.compile(r"(?i)(?:^|_)(?:hip|hipcc|rocm|amd|gfx\w*)(?:$|_)")
_HIP_MENTION = re.compile(r"HIP|hip|ROCM|ROCm|rocm|AMD|amd|gfx")
# The HIP/ROCm twin a CUDA name is aliased to: hipStream_t, HIPBLAS_OP_N, hipcub, rocblas_status, rccl names.
_TWIN = r"(?:__)?(?:hip|HIP|roc[a-z]|ROC[A-Z]|rccl|RCCL|miopen|MIOPEN)\w*"
_HIP_TWIN = re.compile(_TWIN + r"\b")
_INCLUDE_TARGET = re.compile(r'[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)')
_HIP_INCLUDE = re.compile(r'[<"/](?:hip|hipblas\w*|hipcub|hiprand|hipfft|hipsparse|rocblas|rocprim|rccl|miopen)\b')
_FUNCTION_DEFINE = re.compile(r"[ \t]+([A-Za-z_]\w*)\([^)\n]*\)[ \t]*(\S[^\n]*)")
# `typedef hip_bfloat16 nv_bfloat16;`, `using cudaStream_t = hipStream_t;`, `namespace cub = hipcub;` (a literal
# first, no \b: the regex engine then skips to each occurrence; the word's start is checked after)
_TYPE_ALIASES = (
    re.compile(r"typedef\s+(?:(?:struct|enum|union)\s+)?(?:::\s*)?" + _TWIN + r"\s*\*?\s*(\w+)\s*;"),
    re.compile(r"using\s+(\w+)\s*=\s*(?:typename\s+)?(?:::\s*)?" + _TWIN + r"[\w:]*\s*;"),
    re.compile(r"namespace\s+(\w+)\s*=\s*(?:::\s*)?hip\w*\s*;"),
    # `namespace cuda { namespace std = ::std; }`: libcu++'s cuda::std mapped to the standard library
    re.compile(r"namespace\s+(\w+)\s*\{\s*namespace\s+(\w+)\s*=\s*(?:::\s*)?(?:std|hip\w*)\s*;"),
)


def is_hip_name(name: str) -> bool:
    """A macro or identifier naming HIP/ROCm (not HIP's CUDA platform, __HIP_PLATFORM_NVIDIA__)."""
    name = name.strip("_")
    return bool(_HIP_WORD.search(name)) and not _CUDA_SIDE.search(name)


def port_guard_lines(masked: str, macros: PortMacros | None = None) -> list[tuple[int, int]]:
    """(first, last) line ranges of the #if/#elif conditions that test a HIP/ROCm macro or a learnt port switch
    (`#if defined(__HIP_PLATFORM_AMD__) || __CUDA_ARCH__ >= 800`): such a condition already tells the port's
    side from CUDA's, so the CUDA macros it also reads are kept by the port, not edited."""
    if "#" not in masked or (not (macros and macros.names) and not _HIP_MENTION.search(masked)):
        return []
    out: list[tuple[int, int]] = []
    line, pos = 1, 0
    for m in _DIRECTIVE.finditer(masked):
        line += masked.count("\n", pos, m.start())
        pos = m.start()
        if m.group(1) not in ("if", "elif", "ifdef", "ifndef"):
            continue
        cond = _joined(masked, m).split("//")[0]
        names = [n for n in _IDENT.findall(cond) if n != "defined"]
        if any(is_hip_name(n) or (macros is not None and n in macros.names) for n in names):
            out.append((line, line + _continued(masked, m)))
    return _merged(out)


def _continued(masked: str, m: re.Match) -> int:
    """How many lines a directive's condition runs on past its first (backslash continuations)."""
    n, start, end = 0, m.start(), m.end()
    while masked[start:end].rstrip(" \t\r").endswith("\\") and end < len(masked):
        start = end + 1
        nxt = masked.find("\n", start)
        end = len(masked) if nxt < 0 else nxt
        n += 1
    return n


@dataclass(frozen=True)
class HeaderFacts:
    """What other files of the tree learn from a C/C++ file (header_facts), and what it learns from them."""
    includes: tuple[tuple[str, str], ...] = ()     # `#include` targets ("<x" for <x>), each with its side
    aliases: tuple[tuple[str, str], ...] = ()      # CUDA names it aliases to HIP twins, each with its side
    guards: tuple[tuple[int, int], ...] = ()       # the lines of its conditions that test the port
    hip: bool = False       # it names HIP/ROCm (a HIP header, a name aliased to a HIP twin): a HIP port, not MUSA's


def header_facts(masked: str, code: str, macros: PortMacros | None = None, directives_only: bool = False
                 ) -> HeaderFacts:
    """What other files learn from this one: its `#include "..."` targets, and the CUDA names it aliases to their
    HIP twins (`#define cudaStream_t hipStream_t`, a shim `#define __shfl_sync(m, v, l, w) __shfl(v, l, w)`,
    `typedef hip_bfloat16 nv_bfloat16;`, `using ... = hip...;`, `namespace cub = hipcub;`), each with the side of
    the port's conditionals it stands on: "port", "cuda" or "" (outside any); and its port guards
    (port_guard_lines). A define to a number (`#define __CUDA_ARCH__ 1300`) is a stand-in value, no twin: the
    code it gates is still CUDA's. `masked`: comments blanked; `code`: strings blanked too. `directives_only`:
    the includes and #define aliases alone (a file read only to link others: no type aliases, no guards)."""
    words = [] if directives_only else [w for w in ("typedef", "using", "namespace") if w in code]
    if "#" not in masked and not words:
        return HeaderFacts()
    includes: list[tuple[str, str]] = []
    aliases: list[tuple[str, str]] = []
    hip = False
    for kind, _line, side, m in _walk_directives(masked, macros) if "#" in masked else ():
        if kind == "include":
            t = _INCLUDE_TARGET.match(m.group(2))
            if t:       # `<...>` kept with its bracket: found only through the include folders
                includes.append((t.group(1) if t.group(1) is not None else "<" + t.group(2), side))
            hip = hip or bool(_HIP_INCLUDE.search(m.group(2)))
        elif kind == "define" and side != "cuda":
            name, twin = _aliased_by_define(m.group(2))
            if name:
                aliases.append((name, side))
                hip = hip or twin
    if words:
        typed = _type_aliases(masked, code, macros)
        aliases += typed
        hip = hip or bool(typed)
    guards = () if directives_only else tuple(port_guard_lines(masked, macros))
    return HeaderFacts(tuple(includes), tuple(aliases), guards, hip)


def _aliased_by_define(rest: str) -> tuple[str | None, bool]:
    """The CUDA name a #define aliases (a shim macro, or a name defined to a HIP twin), and whether its value is
    a HIP twin."""
    f = _FUNCTION_DEFINE.match(rest)
    if f:
        name, twin = f.group(1), bool(_HIP_TWIN.match(f.group(2)))
    else:
        d = _DEFINE_VALUE.match(rest)
        if d is None or not _HIP_TWIN.match(d.group(2).strip()):
            return None, False
        name, twin = d.group(1), True
    return (None, False) if is_port_name(name) or _HIP_TWIN.match(name) else (name, twin)


def _type_aliases(masked: str, code: str, macros: PortMacros | None) -> list[tuple[str, str]]:
    found = [(m.start(), "::".join(m.groups())) for rx in _TYPE_ALIASES for m in rx.finditer(code)
             if not (m.start() and (code[m.start() - 1].isalnum() or code[m.start() - 1] == "_"))]
    if not found:
        return []
    port, cuda = cpp_port_lines(masked, macros), _cuda_side_lines(masked, macros)
    out = []
    for start, name in found:
        line = code.count("\n", 0, start) + 1
        side = "port" if in_ranges(port, line) else "cuda" if in_ranges(cuda, line) else ""
        if side != "cuda" and not is_port_name(name):
            out.append((name, side))
            if "::" in name:
                out.append(("::" + name, side))    # `::cuda::std::forward`, as libcu++ code spells it
    return out


def _cuda_side_lines(masked: str, macros: PortMacros | None) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for kind, line, frame, _ in _walk_directives(masked, macros):
        if kind not in ("if", "ifdef", "ifndef", "define", "include") and frame[3]:
            out.append((frame[2], line))
    return _merged(out)


def twins_pattern(names) -> re.Pattern | None:
    """A finding's text that is one of these aliased names: the name alone (`cudaStream_t`), a name in its
    namespace (`cub::BlockLoad`), or a call's name with its first argument (`__shfl_sync(0xffffffff`, the mask
    a HIP shim drops); not a call with a literal the alias passes on (`__shfl_sync(m, v, l, 32)`: the width)."""
    names = sorted(set(names), key=len, reverse=True)
    if not names:
        return None
    return re.compile(r"(?:" + "|".join(map(re.escape, names)) + r")(?!\w)(?:\s*::.*|\s*\(\s*[^,()]*)?\Z")


class PortHeaders:
    """Headers that are the port, and what including one brings. A header the tree includes only from port
    branches (`#if defined(MYLIB_USE_HIP)` / `#include "vendors/hip.h"`), or only from other such headers, is the
    port's own file: its lines are kept by a migration. The CUDA names it aliases to their HIP twins are ported in
    every file that includes it, directly or through other headers (the alias does the port there), and so are
    the conditions there that test the port: such a file is compiled for both, through the header."""

    def __init__(self, facts: dict[str, HeaderFacts], paths: frozenset[str] | set[str]):
        self.facts = dict(facts)
        self.paths = paths
        self._by_name: dict[str, list[str]] | None = None
        self.port: set[str] = set()
        self._reach: dict[str, frozenset[str] | None] = {}
        self._targets: set[str] | None = None

    def resolve(self, includer: str, target: str) -> str | None:
        """The tree's file an `#include "target"` of `includer` names: beside the includer, else the one file of
        the tree whose path ends with it (an include folder given to the compiler); an `#include <target>`
        (given here as "<target") only the latter."""
        angle = target.startswith("<")
        target = target[1:] if angle else target
        if target.startswith("/"):
            return None
        near = posixpath.normpath(posixpath.join(posixpath.dirname(includer), target))
        if not angle and near in self.paths:
            return near
        if self._by_name is None:
            self._by_name = {}
            for p in self.paths:
                self._by_name.setdefault(p.rsplit("/", 1)[-1], []).append(p)
        tail = posixpath.normpath(target).lstrip("./")
        hits = [p for p in self._by_name.get(tail.rsplit("/", 1)[-1], ()) if p == tail or p.endswith("/" + tail)]
        return hits[0] if len(hits) == 1 else None

    def candidates(self) -> bool:
        """Whether some file includes a file of the tree from a port branch (else there is no port header)."""
        return any(side == "port" and self.resolve(rel, target)
                   for rel, f in self.facts.items() for target, side in f.includes)

    def targets(self) -> set[str]:
        """The tree's files that the files known so far include."""
        if self._targets is None:
            self._targets = {t for rel, f in self.facts.items() for x, _ in f.includes
                             if (t := self.resolve(rel, x)) is not None}
        return self._targets

    def port_side_names(self) -> set[str]:
        """The file names of the tree's files included from a port branch."""
        return {t.rsplit("/", 1)[-1] for rel, f in self.facts.items() for x, side in f.includes
                if side == "port" and (t := self.resolve(rel, x)) is not None}

    def settle(self, more: dict[str, HeaderFacts] | None = None) -> None:
        """The port headers, given every C/C++ file's facts (`more`: those of the files not scanned as CUDA)."""
        self.facts.update(more or {})
        includers: dict[str, list[tuple[str, str]]] = {}
        self._children: dict[str, list[str]] = {}
        for rel, f in self.facts.items():
            for target, side in f.includes:
                t = self.resolve(rel, target)
                if t is not None and t != rel:
                    includers.setdefault(t, []).append((rel, side))
                    self._children.setdefault(rel, []).append(t)
        changed = True
        while changed:
            changed = False
            for h, incs in includers.items():
                if h not in self.port and all(side == "port" or (side == "" and g in self.port) for g, side in incs):
                    self.port.add(h)
                    changed = True

    def imported(self, rel: str) -> frozenset[str] | None:
        """The names aliased to HIP twins by the HIP port headers `rel` includes (directly or not; a header of
        another stack's port, MUSA's, aliases to no HIP twin); None when it includes none."""
        if rel in self._reach:
            return self._reach[rel]
        self._reach[rel] = None        # a cycle of includes adds nothing
        out: set[str] | None = None
        for child in self._children.get(rel, ()):
            facts = self.facts.get(child, HeaderFacts())
            if child in self.port and facts.hip:
                out = out or set()
                out.update(n for n, side in facts.aliases if side != "cuda")
            got = self.imported(child)
            if got is not None:
                out = (out or set()) | got
        self._reach[rel] = frozenset(out) if out is not None else None
        return self._reach[rel]


def _joined(text: str, m: re.Match) -> str:
    """A directive's condition with its backslash-continued lines joined."""
    cond = m.group(2)
    end = m.end()
    while cond.rstrip().endswith("\\") and end < len(text):
        nxt = text.find("\n", end + 1)
        nxt = len(text) if nxt < 0 else nxt
        cond = cond.rstrip()[:-1] + " " + text[end + 1:nxt]
        end = nxt
    return cond


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


# ---------------------------------------------------------------- Python

def _expr_polarity(node: ast.AST) -> int:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return -_expr_polarity(node.operand)
    if isinstance(node, ast.BoolOp):
        pols = [_expr_polarity(v) for v in node.values]
        if all(p == POSITIVE for p in pols):
            return POSITIVE
        if isinstance(node.op, ast.And) and POSITIVE in pols and NEGATIVE not in pols:
            return POSITIVE
        if all(p == NEGATIVE for p in pols):
            return NEGATIVE
        return NEUTRAL
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        return _compare_polarity(node)
    return POSITIVE if _names_port(node) else NEUTRAL


def tests_port(node: ast.AST) -> bool:
    """Whether a Python condition asks for another stack, or for its absence (`is_hip()`, `not IS_AMD`)."""
    return _expr_polarity(node) != NEUTRAL


def _compare_polarity(node: ast.Compare) -> int:
    op, left, right = node.ops[0], node.left, node.comparators[0]
    sides = (left, right)
    if any(isinstance(s, ast.Constant) and s.value is None for s in sides):
        other = right if isinstance(left, ast.Constant) else left
        if not _names_port(other):
            return NEUTRAL
        return POSITIVE if isinstance(op, ast.IsNot) else NEGATIVE
    port = any(_port_string(s) for s in sides) or any(_names_port(s) for s in sides if not isinstance(s, ast.Constant))
    if not port or any(_cuda_string(s) for s in sides):
        return NEUTRAL
    if isinstance(op, (ast.Eq, ast.Is, ast.In)):
        return POSITIVE
    if isinstance(op, (ast.NotEq, ast.IsNot, ast.NotIn)):
        return NEGATIVE
    return NEUTRAL


def _port_string(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(":")[0].lower() in _PORT_STRINGS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_port_string(e) for e in node.elts)
    return False


def _cuda_string(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value.split(":")[0].lower() == "cuda"
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_cuda_string(e) for e in node.elts)
    return False


def _names_port(node: ast.AST) -> bool:
    """The expression names another stack: torch.version.hip, is_hip(), torch.xpu.is_available(), torch_npu."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and is_port_name(n.id):
            return True
        if isinstance(n, ast.Attribute) and is_port_name(n.attr):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "hasattr" and len(n.args) == 2 \
                and _port_string(n.args[1]):
            return True
    return False


def _span(stmts: list[ast.stmt]) -> tuple[int, int] | None:
    if not stmts:
        return None
    return stmts[0].lineno, max(s.end_lineno or s.lineno for s in stmts)


def is_port_function(name: str) -> bool:
    """A function named for another stack (`_infer_amd_arch`, `has_rocm_capability`, `test_impl_on_rocm`): the
    last stack its name names is not CUDA."""
    words = [w for w in re.split(r"_+|(?<=[a-z0-9])(?=[A-Z])", name) if w]
    for w in reversed(words):
        if _CUDA_SIDE.fullmatch(w.lower()) or w.lower() in ("nv", "cu"):
            return False
        if is_port_name(w):
            return True
    return False


def is_port_path(rel: str) -> bool:
    """A file that is another stack's code by where it lives or what it is called: a folder or a file named for
    that stack (`backends/rocm/`, `csrc/musa/`, `ops/npu_ops.py`, `flash_attn_triton_amd.py`). The stack named
    nearest the file decides: `rocm/cuda_graphs.py` names CUDA last and is CUDA's."""
    parts = rel.split("/")
    parts[-1] = parts[-1].split(".", 1)[0]
    for part in reversed(parts):
        words = [w for w in re.split(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])", part) if w]
        for w in reversed(words):
            if _CUDA_SIDE.fullmatch(w.lower()) or w.lower() in ("nv", "cu", "nvidia"):
                return False
            if is_port_name(w):
                return True
    return False


def python_port_lines(nodes) -> list[tuple[int, int]]:
    """(first, last) line ranges of the bodies of `if` statements among `nodes` whose test asks for another
    stack (their `else` when the test asks for the opposite), of the port side of such a conditional expression
    (`"rocm" if is_hip else "cuda"`: the lines it shares with its test), of tables keyed by stack, and of
    functions named for another stack (with their decorators)."""
    out = []
    for node in nodes:
        out += _port_spans(node)
    return _merged(out)


def _boolop_port_spans(node: ast.BoolOp) -> list[tuple[int, int]]:
    """`torch.version.hip or capability >= (7, 5)`: the lines of an operand that tests for the port (not for its
    absence: `not is_rocm() and torch.cuda.is_available()` is CUDA's side), not a per-vendor call beside a CUDA
    one (`has_cuda_capability(8, 9) or has_rocm_capability(9, 4)`)."""
    pols = [_expr_polarity(v) for v in node.values]
    if isinstance(node.op, ast.And) and POSITIVE in pols and NEGATIVE not in pols:
        # `torch.version.hip and torch.cuda.is_available()`: every operand is evaluated on the port only
        return [(v.lineno, v.end_lineno or v.lineno) for v in node.values]
    return [(v.lineno, v.end_lineno or v.lineno) for v, p in zip(node.values, pols, strict=True) if p == POSITIVE
            and not isinstance(v, ast.BoolOp) and not (isinstance(v, ast.Call) and v.args)]


def _port_spans(node: ast.AST) -> list[tuple[int, int]]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_port_function(node.name):
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        return [(first, node.end_lineno or node.lineno)]
    if isinstance(node, ast.Dict) and any(k is not None and _port_string(k) for k in node.keys):
        # a table keyed by stack (`{'cuda': 'cuda', 'hip': 'cuda', 'xpu': 'xpu'}`): it already holds the port
        return [(node.lineno, node.end_lineno or node.lineno)]
    if isinstance(node, ast.IfExp):
        span = _ifexp_port_span(node)
        return [span] if span else []
    if isinstance(node, ast.BoolOp):
        return _boolop_port_spans(node)
    if not isinstance(node, ast.If):
        return []
    pol = _expr_polarity(node.test)
    body = node.body if pol == POSITIVE else node.orelse if pol == NEGATIVE else None
    span = _span(body) if body else None
    return [span] if span else []


def port_import_aliases(imports, parents: dict[int, ast.AST], lines: int) -> list[tuple[str, int, int]]:
    """(name, first, last line) of each name that both sides of one port conditional import (`if
    is_hpu_available(): import intel_transformer_engine as te / else: import transformer_engine.pytorch as te`):
    after the conditional, to the end of its function, the name is whichever package the branch bound, so its
    uses there are already ported."""
    sides: dict[int, tuple[ast.If, set[str], set[str]]] = {}
    for node in imports:
        child, parent = node, parents.get(id(node))
        while parent is not None and not isinstance(parent, (ast.If, ast.FunctionDef, ast.AsyncFunctionDef,
                                                             ast.Module)):
            child, parent = parent, parents.get(id(parent))
        if not isinstance(parent, ast.If):
            continue
        pol = _expr_polarity(parent.test)
        if pol == NEUTRAL:
            continue
        in_body = any(child is s for s in parent.body)
        port = in_body if pol == POSITIVE else not in_body
        entry = sides.setdefault(id(parent), (parent, set(), set()))
        entry[1 if port else 2].update((a.asname or a.name).split(".")[0] for a in node.names)
    out = []
    for cond, port, other in sides.values():
        scope = parents.get(id(cond))
        while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
            scope = parents.get(id(scope))
        end = getattr(scope, "end_lineno", None) or lines
        out += [(name, (cond.end_lineno or cond.lineno) + 1, end) for name in sorted(port & other)]
    return out


def port_chosen_names(body: list[ast.stmt]) -> frozenset[str]:
    """Names these statements bind to a value chosen by the port: `WARPS = [1, 2, 4, 8] if IS_AMD else [4, 8, 32]`."""
    out: set[str] = set()
    for st in body:
        if isinstance(st, ast.Assign) and isinstance(st.value, ast.IfExp) and _expr_polarity(st.value.test) != NEUTRAL:
            out.update(t.id for t in st.targets if isinstance(t, ast.Name))
    return frozenset(out)


def port_chosen_calls(nodes, names: frozenset[str], keywords: frozenset[str]) -> list[tuple[int, int]]:
    """Line ranges of calls whose keyword (`num_warps`) takes a value chosen by the port: a name of `names`, or
    the variable of a comprehension or loop over one (`[triton.Config({}, num_warps=w) for w in WARPS]`). The
    value already holds each stack's numbers: the call is kept by a migration."""
    if not names or not keywords:
        return []
    out = []
    for node in nodes:
        scopes: list[tuple[set[str], ast.AST]] = []
        if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            over = {g.target.id for g in node.generators if isinstance(g.target, ast.Name)
                    and isinstance(g.iter, ast.Name) and g.iter.id in names}
            if over:
                scopes.append((over, node))
        elif isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Name) \
                and node.iter.id in names:
            scopes.append(({node.target.id}, node))
        elif isinstance(node, ast.Call):
            scopes.append((set(names), node))
        for chosen, where in scopes:
            out += [(c.lineno, c.end_lineno or c.lineno) for c in ast.walk(where) if isinstance(c, ast.Call)
                    and any(k.arg in keywords and isinstance(k.value, ast.Name) and k.value.id in chosen
                            for k in c.keywords)]
    return _merged(out)


def _ifexp_port_span(node: ast.IfExp) -> tuple[int, int] | None:
    """The lines of `a if <port test> else b` that hold the port's side and the test; the other side's own lines
    (a value spread over lines after the test) stay CUDA's."""
    pol = _expr_polarity(node.test)
    if pol == NEUTRAL:
        return None
    port, other = (node.body, node.orelse) if pol == POSITIVE else (node.orelse, node.body)
    lines = [port.lineno, port.end_lineno or port.lineno, node.test.lineno, node.test.end_lineno or node.test.lineno]
    first, last = min(lines), max(lines)
    if other.lineno <= last and (other.end_lineno or other.lineno) > last:
        return first, last if other.lineno > last else other.lineno
    return first, last


def in_ranges(ranges: list[tuple[int, int]], line: int) -> bool:
    from bisect import bisect_right

    i = bisect_right(ranges, (line, float("inf"))) - 1
    return i >= 0 and ranges[i][0] <= line <= ranges[i][1]


_HIP_HEADER = re.compile(r"^(?:hip/|hipcub/|hipblas|hipblaslt/|hiprand/|hipfft/|hipsparse/|rocprim/|rocblas/|rccl/|"
                         r"miopen/|hip_runtime|hip_fp16|hip_bf16|amd_detail/)")
_CUDA_HEADER = re.compile(r"(?:^|/)(?:cuda\w*\.h|cuda/|cub/|cutlass/|cute/|thrust/|cooperative_groups|mma\.h|nvml\.h|"
                          r"nccl\.h|cublas\w*\.h|cudnn\w*\.h|curand\w*\.h|cusparse\w*\.h|nvrtc\.h|nvtx\w*|ATen/cuda/|"
                          r"c10/cuda/)")


def is_hip_native(header: HeaderFacts | None) -> bool:
    """A C/C++ source written for HIP: among the includes header_facts read (`<` kept on a bracketed one) are HIP's
    headers (`<hip/hip_runtime.h>`, `<hip/hip_fp16.h>`, hipcub, rocPRIM) and none of CUDA's. Its kernels, launches,
    half types and shuffles are the port's own code."""
    if header is None or not header.includes:
        return False
    targets = [t.lstrip("<") for t, _ in header.includes]
    return any(_HIP_HEADER.match(t) for t in targets) and not any(_CUDA_HEADER.search(t) for t in targets)

