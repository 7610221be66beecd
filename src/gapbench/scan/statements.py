"""Statements: the unit a person edits. Findings on several lines of one statement (a builder chain, a call whose
arguments run on, a continued condition) are one finding per rule, at the statement's first flagged line.

C/C++/CUDA through tree-sitter's C++ grammar, parsed only when two flagged lines could share a statement;
Python through its AST (already parsed for the rules).
"""

from __future__ import annotations

import ast
import functools
from bisect import bisect_left

# tree-sitter node types that are one statement a person edits (the innermost one holding a finding wins).
_CPP_STATEMENTS = frozenset({
    "expression_statement", "declaration", "field_declaration", "return_statement", "init_declarator",
    "preproc_def", "preproc_function_def", "preproc_call", "preproc_include", "alias_declaration",
    "type_definition", "using_declaration", "throw_statement", "static_assert_declaration", "template_instantiation",
})
# Statements whose head (up to the body) is one unit: `for (...)`, `if (...)`, a function's signature.
_CPP_HEADED = {"for_statement": "body", "for_range_loop": "body", "while_statement": "body",
               "if_statement": "consequence", "switch_statement": "body"}


@functools.lru_cache(maxsize=1)
def _cpp_parser():
    try:
        import tree_sitter
        import tree_sitter_cpp
    except ImportError:     # the grammar is a dependency; without it every line is its own statement
        return None
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_cpp.language()))


def cpp_may_share(code: str, starts: list[int], lines: list[int]) -> bool:
    """Whether two of these flagged lines (sorted) could be one statement: no `;`, `{` or `}` between them in the
    code (comments and strings blanked). Cheap: decides whether the file is parsed at all."""
    for a, b in zip(lines, lines[1:], strict=False):
        if a == b:
            continue
        seg = code[starts[a - 1]:starts[b - 1]]
        if ";" not in seg and "{" not in seg and "}" not in seg:
            return True
    return False


def cpp_units(text: str, positions: list[tuple[int, int]]) -> dict[tuple[int, int], tuple[int, int]]:
    """(line, 0-based column) -> (first, last) line of the statement holding it, for the positions given.
    Positions outside any statement, or in a part the grammar could not read, are left out."""
    parser = _cpp_parser()
    if parser is None or not positions:
        return {}
    data = text.encode("utf-8", "surrogatepass")
    tree = parser.parse(data)
    lines = text.split("\n")
    out = {}
    for line, col in positions:
        src = lines[line - 1] if 0 < line <= len(lines) else ""
        bcol = len(src[:col].encode("utf-8", "surrogatepass"))
        node = tree.root_node.descendant_for_point_range((line - 1, bcol), (line - 1, bcol))
        span = _cpp_span(node, line)
        if span:
            out[(line, col)] = span
    return out


def _cpp_span(node, line: int) -> tuple[int, int] | None:
    while node is not None:
        if node.type == "ERROR":
            return None
        if node.type in _CPP_STATEMENTS:
            end = node.end_point[0] + (1 if node.end_point[1] else 0)   # a directive ends at the next line's start
            return node.start_point[0] + 1, max(end, node.start_point[0] + 1)
        if node.type in _CPP_HEADED:
            body = node.child_by_field_name(_CPP_HEADED[node.type]) if _CPP_HEADED[node.type] else None
            end = body.start_point[0] + 1 if body is not None else node.start_point[0] + 1
            if line <= end:
                return node.start_point[0] + 1, end
            return None
        if node.type == "parameter_list" and node.parent is not None and node.parent.type == "function_declarator" \
                and node.parent.parent is not None and node.parent.parent.type == "template_instantiation":
            node = node.parent.parent      # an explicit instantiation's parameters are the instantiation
            continue
        if node.type in ("compound_statement", "translation_unit", "field_declaration_list", "parameter_list"):
            return None
        node = node.parent
    return None


# ---------------------------------------------------------------- Python

def python_units(nodes) -> list[tuple[int, int]]:
    """(first, last) line ranges of the innermost simple statements, compound statements' heads and decorators
    among `nodes` (a walk in pre-order), the ones a finding's line falls in."""
    out: list[tuple[int, int]] = []
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out += [(d.lineno, d.end_lineno or d.lineno) for d in node.decorator_list]
            out.append((node.lineno, _head_end(node)))
        elif isinstance(node, ast.stmt):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                out.append((node.lineno, _head_end(node)))
            else:
                out.append((node.lineno, node.end_lineno or node.lineno))
    return out


def _head_end(node) -> int:
    body = node.body
    first = body[0].lineno if body else node.lineno
    return max(node.lineno, first - 1) if first > node.lineno else node.lineno


def unit_of_lines(units: list[tuple[int, int]], lines: list[int]) -> dict[int, tuple[int, int]]:
    """Each of the sorted `lines` -> the smallest unit holding it. Units are statements' own lines (heads, not
    bodies), so a line lies in few of them: linear in practice."""
    out: dict[int, tuple[int, int]] = {}
    for a, b in units:
        i = bisect_left(lines, a)
        while i < len(lines) and lines[i] <= b:
            best = out.get(lines[i])
            if best is None or b - a < best[1] - best[0]:
                out[lines[i]] = (a, b)
            i += 1
    return out


def is_link(line: str) -> bool:
    """A line that continues a chain: it starts with `.name` or `->name` (a builder's next call)."""
    s = line.lstrip()
    return s.startswith((".", "->")) and not s.startswith("...")


def collapse(items: list[tuple], span_of, exempt: frozenset[str] = frozenset(), lines: list[str] | None = None,
             whole=None) -> list[tuple]:
    """Findings (rule, line, col, text, ...) with those on later lines of one statement moved to its first flagged
    line, one per rule there, each with the statement's last line appended. With `lines` (the file's text), only
    the links of a chain (`.set_x(...)` lines) move: each line of an argument list stays a place to edit. `span_of(item)` gives the statement's (first, last) line or None; rules in `exempt`
    are each their own unit (a list of autotune configs is one statement of many findings). `whole(span)` True: that
    statement is one edit however its lines run (an inline-assembly block, an explicit instantiation)."""
    items = sorted(items, key=lambda it: (it[1], it[2]))
    anchor: dict[tuple[int, int], tuple[int, int]] = {}
    spans = []
    for it in items:
        span = None if it[0] in exempt else span_of(it)
        spans.append(span)
        if span is not None and span[0] != span[1] and span not in anchor:
            anchor[span] = (it[1], it[2])
    out, seen = [], set()
    for it, span in zip(items, spans, strict=True):
        line, col = anchor.get(span, (it[1], it[2])) if span is not None else (it[1], it[2])
        if lines is not None and line != it[1] and not (0 < it[1] <= len(lines) and is_link(lines[it[1] - 1])) \
                and not (whole is not None and whole(span)):
            line, col = it[1], it[2]    # its own line of an argument list or a signature: a person edits it there
        key = (line, it[0])
        if line != it[1]:
            if key in seen:
                continue
            it = (it[0], line, col, *it[3:])
        seen.add(key)
        out.append((*it, span[1] if span is not None and span in anchor else line))
    return out
