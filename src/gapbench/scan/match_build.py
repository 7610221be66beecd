"""CMake and Makefiles read by their structure: a light reader, not a build system.

CMake: the file as commands, `name(arguments)` with their arguments across lines (quoted and bracket arguments
and `#` comments read as CMake reads them). What that gives the line patterns:

- one finding per command: findings on later lines of a command spread over several move to its first flagged
  line (a `set_target_properties(... CUDA_SEPARABLE_COMPILATION ON)` is one edit);
- no findings in what only talks: `message(...)`, the doc string of `option()` and of `set(... CACHE TYPE "doc")`,
  anything outside every command (comments: after a command, `#[[...]]` blocks);
- no finding for a switch that is only tested (`if(BUILD_CUDA)`) or turned off (`set(USE_CUDA OFF)`): the port
  edits where the switch is turned on, and the code it guards;
- the `cmake-command` rules, tested on each command as `name arg arg ...` (quotes dropped, one space between):
  a CUDA architecture variable set or tested, the backend chosen by comparing with "cuda".

Makefiles: variable assignments (`NVCC ?= nvcc`, `GENCODE_FLAGS += ...`, with `export`/`override`) and their
continuation lines; the `make-variable` rules are tested on each assigned variable's name. Recipes are shell
lines, left to the line patterns.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from gapbench.scan.match_python import _line_starts, _position, _short
from gapbench.scan.match_text import TextMatch
from gapbench.scan.rules import Rule, RuleSet

_CMAKE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BRACKET_OPEN = re.compile(r"\[(=*)\[")
# A project switch: tested or turned off, it is no line a port edits.
_SWITCH = re.compile(r"^(?:USE|WITH|ENABLE|BUILD|HAVE)_\w+$")
_OFF_VALUES = frozenset({"OFF", "FALSE", "0", "NO", "N", "IGNORE"})
# Tests in an if(): a condition holding one of these is more than a switch's truth.
_CMAKE_TESTS = frozenset({"STREQUAL", "MATCHES", "EQUAL", "LESS", "GREATER", "LESS_EQUAL", "GREATER_EQUAL",
                          "STRLESS", "STRGREATER", "VERSION_LESS", "VERSION_GREATER", "VERSION_EQUAL",
                          "VERSION_LESS_EQUAL", "VERSION_GREATER_EQUAL", "IN_LIST", "DEFINED", "EXISTS"})
_MAKE_ASSIGN = re.compile(r"^(?:(?:export|override)[ \t]+)*([A-Za-z_][A-Za-z0-9_.-]*)[ \t]*(?::{1,3}=|\?=|\+=|!=|=)",
                          re.MULTILINE)
MAX_COMMANDS = 100_000


@dataclass
class Command:
    name: str           # lower case
    start: int          # offset of the name
    end: int            # offset after the closing parenthesis
    args: list[tuple[str, int, int, bool]]     # (text, start, end, quoted)

    def text(self) -> str:
        return " ".join([self.name, *(a[0] for a in self.args)])


def cmake_commands(text: str) -> list[Command]:
    """The commands of a CMake file in order. Linear: each character is looked at once."""
    out: list[Command] = []
    i, n = 0, len(text)
    while i < n and len(out) < MAX_COMMANDS:
        c = text[i]
        if c == "#":
            i = _skip_comment(text, i)
            continue
        if c.isalpha() or c == "_":
            m = _CMAKE_NAME.match(text, i)
            j = m.end()
            while j < n and text[j] in " \t":
                j += 1
            if j < n and text[j] == "(":
                cmd, i = _arguments(text, m.group(0).lower(), i, j + 1)
                out.append(cmd)
                continue
            i = m.end()
            continue
        i += 1
    return out


def _skip_comment(text: str, i: int) -> int:
    b = _BRACKET_OPEN.match(text, i + 1)
    if b:
        close = text.find("]" + b.group(1) + "]", b.end())
        return len(text) if close < 0 else close + len(b.group(1)) + 2
    nl = text.find("\n", i)
    return len(text) if nl < 0 else nl


def _arguments(text: str, name: str, start: int, i: int) -> tuple[Command, int]:
    """A command's arguments from just after its `(` to the matching `)` (or the end of the file)."""
    args: list[tuple[str, int, int, bool]] = []
    depth, n = 1, len(text)
    while i < n:
        c = text[i]
        if c in " \t\r\n":
            i += 1
        elif c == "#":
            i = _skip_comment(text, i)
        elif c == "(":
            depth += 1
            i += 1
        elif c == ")":
            depth -= 1
            i += 1
            if depth == 0:
                return Command(name, start, i, args), i
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            args.append((text[i + 1:min(j, n)], i, min(j + 1, n), True))
            i = j + 1
        elif c == "[" and _BRACKET_OPEN.match(text, i):
            b = _BRACKET_OPEN.match(text, i)
            close = text.find("]" + b.group(1) + "]", b.end())
            j = n if close < 0 else close + len(b.group(1)) + 2
            args.append((text[b.end():close if close >= 0 else n], i, j, True))
            i = j
        else:
            j = i
            while j < n and text[j] not in ' \t\r\n()#"':
                j += 2 if text[j] == "\\" else 1
            args.append((text[i:j], i, j, False))
            i = j
    return Command(name, start, n, args), n


def _quiet_spans(cmd: Command) -> list[tuple[int, int]]:
    """Offsets of a command that only talk: all of message(), the doc string of option() and set(... CACHE)."""
    if cmd.name == "message":
        return [(cmd.start, cmd.end)]
    words = [a[0] for a in cmd.args]
    if cmd.name == "option" and len(cmd.args) >= 2:
        return [cmd.args[1][1:3]]
    if cmd.name == "set" and "CACHE" in words:
        k = words.index("CACHE")
        if k + 2 < len(cmd.args):
            return [cmd.args[k + 2][1:3]]
    return []


def _switch_only(cmd: Command) -> bool:
    """A switch tested for its truth alone (`if(BUILD_CUDA)`, `elseif(NOT USE_CUDA)`) or a setting tested for
    being set (`if(NOT X STREQUAL "")`), or turned off (`set(BUILD_CUDA OFF)`, `option(USE_CUDA "..." OFF)`)."""
    words = [a[0] for a in cmd.args]
    if cmd.name in ("if", "elseif", "while") and len(cmd.args) >= 3 and words[-2] == "STREQUAL" \
            and cmd.args[-1][3] and not words[-1] and words[:-3] in ([], ["NOT"]):
        return True     # `if(NOT CMAKE_CUDA_HOST_COMPILER STREQUAL "")`: is it set; the line using it is the edit
    if cmd.name in ("if", "elseif", "while"):
        names = [w for w in words if w not in ("NOT", "AND", "OR")]
        return bool(names) and not any(w in _CMAKE_TESTS for w in words) and all(
            _SWITCH.match(w.strip("${}")) or not re.search(r"(?i)cuda|nv", w) for w in names)
    if cmd.name == "set" and len(words) >= 2 and _SWITCH.match(words[0]):
        return words[1].upper() in _OFF_VALUES
    if cmd.name == "option" and len(words) >= 3 and _SWITCH.match(words[0]):
        return words[2].upper() in _OFF_VALUES
    return False


# Commands that assign the variables they name (`set(CUDA_CCID "GNU")`, `list(JOIN CUDA_FLAGS " " CUDA_JOINED)`,
# `execute_process(... OUTPUT_VARIABLE CUDA_VER)`): a CUDA-named variable the file assigns is the project's name.
_ASSIGNING = frozenset({"set", "option", "list", "string", "math", "foreach", "get_filename_component",
                        "separate_arguments", "cmake_parse_arguments"})
_OUTPUT_KEYWORDS = frozenset({"OUTPUT_VARIABLE", "ERROR_VARIABLE", "RESULT_VARIABLE", "RESULTS_VARIABLE"})
_DEFINITIONS = frozenset({"add_compile_definitions", "target_compile_definitions", "add_definitions"})
_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
# What CMake's CUDA support reads, and architecture lists: a project assigning one still sets CUDA's setting.
_CUDA_SETTING = re.compile(r"ARCH|^CUDA_(?:NVCC_FLAGS|HOST_COMPILER|PROPAGATE_HOST_FLAGS|TOOLKIT_ROOT_DIR|HOME$|PATH$"
                           r"|BIN_PATH|VISIBLE_DEVICES|SEPARABLE|RESOLVE|STANDARD|RUNTIME|LIBRARIES|VERSION)")


def assigned_names(cmds: list[Command]) -> frozenset[str]:
    """The variables a CMake file assigns itself."""
    out: set[str] = set()
    for cmd in cmds:
        if cmd.name in _ASSIGNING:
            out.update(a[0] for a in cmd.args if not a[3] and _PLAIN_NAME.match(a[0]))
        elif cmd.name == "execute_process":
            words = [a[0] for a in cmd.args]
            out.update(words[i + 1] for i, w in enumerate(words[:-1]) if w in _OUTPUT_KEYWORDS)
    return frozenset(out)


def _projects_own(name: str, cmd: Command, assigned: frozenset[str]) -> bool:
    """A CUDA-named variable that is the project's own: assigned by the file, a compile definition it makes
    (`add_compile_definitions(MYLIB_CUDA_GRAPHS)`), or a switch tested for its truth (`if(MYLIB_CUDA_F16)`);
    not one CMake's CUDA support reads, nor an architecture list."""
    if _CUDA_SETTING.search(name):
        return False
    if name in assigned or cmd.name in _DEFINITIONS:
        return True
    words = [a[0] for a in cmd.args]
    return cmd.name in ("if", "elseif", "while") and not any(w in _CMAKE_TESTS for w in words)


_DOCKER_ARG = re.compile(r"^[ \t]*ARG[ \t]+([A-Za-z_]\w*)=[\"']?([^\s\"']+)", re.MULTILINE | re.IGNORECASE)
_DOCKER_FROM = re.compile(r"^[ \t]*FROM[ \t][^\n]*\$\{?[A-Za-z_][^\n]*", re.MULTILINE | re.IGNORECASE)
_DOCKER_REF = re.compile(r"\$\{?([A-Za-z_]\w*)\}?")


def is_dockerfile(name: str) -> bool:
    low = name.lower()
    return low.startswith(("dockerfile", "containerfile")) or low.endswith(".dockerfile")


class BuildRules:
    def __init__(self, ruleset: RuleSet):
        self.cmake = ruleset.structural("cmake-command")
        self.make = ruleset.structural("make-variable")

    def cmake_file(self, text: str, found: list[TextMatch]) -> list[TextMatch]:
        """A CMake file's line findings read through its commands, with the cmake-command rules' findings."""
        cmds = cmake_commands(text)
        if not cmds:
            return found
        starts = _line_starts(text)
        firsts = [c.start for c in cmds]
        assigned = assigned_names(cmds)
        kept: list[TextMatch] = []
        first_line: dict[int, int] = {}     # command index -> its first flagged line
        for m in sorted(found, key=lambda m: (m.line, m.col)):
            off = starts[m.line - 1] + m.col if m.line - 1 < len(starts) else len(text)
            k = bisect_right(firsts, off) - 1
            cmd = cmds[k] if k >= 0 and off < cmds[k].end else None
            if cmd is None:
                continue    # outside every command: a comment (after a command, or a #[[...]] block), no code
            if any(a <= off < b for a, b in _quiet_spans(cmd)) or _switch_only(cmd):
                continue
            if m.rule.fallback and _projects_own(m.text, cmd, assigned):
                continue
            line = first_line.setdefault(k, m.line)
            last = _position(starts, max(cmd.end - 1, cmd.start))[0]
            if line != m.line:
                continue        # a later line of a command already flagged: one edit
            if last > line:
                m.last = last
            kept.append(m)
        lines = {m.line for m in kept}
        for cmd in cmds:
            if cmd.name == "message":
                continue
            rule = next((r for r in self.cmake if r.regex.search(cmd.text())), None)
            if rule is not None:
                line, col = _position(starts, cmd.start)
                if line not in lines:
                    lines.add(line)
                    kept.append(TextMatch(rule, line, col, _short(cmd.text())))
        return kept

    def dockerfile(self, masked: str, found: list[TextMatch], lines_of) -> list[TextMatch]:
        """A Dockerfile's line findings with its `FROM ${BASE_IMAGE}` lines read with the ARG defaults put in
        (`ARG BASE_IMAGE=nvidia/cuda:12.4.0-devel-ubuntu22.04`): `lines_of(text)` gives a line's findings."""
        if "FROM" not in masked and "from" not in masked:
            return found
        args = {m.group(1): m.group(2) for m in _DOCKER_ARG.finditer(masked)}
        if not args:
            return found
        taken = {m.line for m in found}
        starts = None
        for m in _DOCKER_FROM.finditer(masked):
            line_text = m.group(0)
            put = _DOCKER_REF.sub(lambda v: args.get(v.group(1), v.group(0)), line_text)
            if put == line_text:
                continue
            starts = starts or _line_starts(masked)
            line = _position(starts, m.start())[0]
            got = [t for t in lines_of(put) if t.line == 1]
            if got and line not in taken:
                taken.add(line)
                found.append(TextMatch(got[0].rule, line, 0, _short(line_text)))
        return found

    def makefile(self, masked: str, found: list[TextMatch]) -> list[TextMatch]:
        """A Makefile's line findings with the make-variable rules' findings at each assignment they name."""
        if not self.make:
            return found
        starts = None
        lines = {m.line for m in found}
        for m in _MAKE_ASSIGN.finditer(masked):
            rule: Rule | None = next((r for r in self.make if r.regex.search(m.group(1))), None)
            if rule is None:
                continue
            end = masked.find("\n", m.end())
            if not masked[m.end():end if end >= 0 else None].strip():
                continue        # `NVCC_LDLIBS =`: set to nothing, nothing to port
            starts = starts or _line_starts(masked)
            line, col = _position(starts, m.start(1))
            if line not in lines:
                lines.add(line)
                end = masked.find("\n", m.end())
                found.append(TextMatch(rule, line, col, _short(masked[m.start(1):end if end >= 0 else None])))
        return found
