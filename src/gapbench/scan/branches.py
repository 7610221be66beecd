"""Branches that already are the port: the lines a migration keeps, so findings there are "already ported".

C/C++: the preprocessor's conditionals, read as the preprocessor reads them (directive lines, continuations
joined): `#ifdef USE_ROCM`, `#if defined(__HIP_PLATFORM_AMD__)`, the `#else` of `#ifndef USE_ROCM`.
Python: `if` statements whose test asks for another stack (`if torch.version.hip:`, `elif device == "xpu":`,
`if is_torch_npu_available():`), through the AST.
"""

from __future__ import annotations

import ast
import re

# A macro or name that says "another stack than CUDA". HIP on NVIDIA (__HIP_PLATFORM_NVIDIA__/_NVCC__) is CUDA.
_PORT_WORD = re.compile(r"(?i)(?:^|_)(?:hip|hipcc|rocm|amd|gfx\w*|xpu|sycl|npu|ascend|cann|musa)(?:$|_)")
_CUDA_SIDE = re.compile(r"(?i)nvidia|nvcc|cuda")
_DIRECTIVE = re.compile(r"^[ \t]*#[ \t]*(if|ifdef|ifndef|elif|else|endif|define)\b([^\n]*)", re.MULTILINE)
_TERM_SPLIT = re.compile(r"&&|\|\|")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_PORT_STRINGS = frozenset({"xpu", "npu", "hip", "rocm", "musa"})

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
        if kind not in ("if", "ifdef", "ifndef", "define") and frame[1]:
            out.append((frame[2], line))
    return _merged(out)


def _walk_directives(masked: str, macros: PortMacros | None):
    """(kind, line, frame, match) for each directive, in order; a frame is [polarity of its first condition, is
    the current branch a port branch, start line, is the current branch the CUDA side]. For `#if`-family
    directives the frame given is the new one; for the others it is the frame as it was before the directive
    (for #define: the innermost frame, or None outside any conditional)."""
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
        if kind == "define":
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


def python_port_lines(nodes) -> list[tuple[int, int]]:
    """(first, last) line ranges of the bodies of `if` statements among `nodes` whose test asks for another
    stack (their `else` when the test asks for the opposite), of the port side of such a conditional expression
    (`"rocm" if is_hip else "cuda"`: the lines it shares with its test), and of functions named for another
    stack (with their decorators)."""
    out = []
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and is_port_function(node.name):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            out.append((first, node.end_lineno or node.lineno))
            continue
        if isinstance(node, ast.IfExp):
            span = _ifexp_port_span(node)
            if span:
                out.append(span)
            continue
        if isinstance(node, ast.BoolOp):
            # `torch.version.hip or capability >= (7, 5)`: the lines of an operand that tests for the port
            # (not a per-vendor call beside a CUDA one: `has_cuda_capability(8, 9) or has_rocm_capability(9, 4)`)
            out += [(v.lineno, v.end_lineno or v.lineno) for v in node.values if _expr_polarity(v) != NEUTRAL
                    and not isinstance(v, ast.BoolOp) and not (isinstance(v, ast.Call) and v.args)]
            continue
        if not isinstance(node, ast.If):
            continue
        pol = _expr_polarity(node.test)
        body = node.body if pol == POSITIVE else node.orelse if pol == NEGATIVE else None
        span = _span(body) if body else None
        if span:
            out.append(span)
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
