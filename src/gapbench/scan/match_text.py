"""Regex rules over text files: dependency files, CUDA C/C++ and build/run files."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from gapbench.scan import prefilter
from gapbench.scan.match_python import _line_starts, _position, _short
from gapbench.scan.rules import Rule, RuleSet

# A C/C++ file counts as GPU code when it includes a CUDA- (or HIP-) stack header or holds device code.
CPP_CUDA_HINT = re.compile(
    r'#\s*include\s*[<"][^>"\n#]*(?:cuda|cublas|cudnn|cufft|cusparse|curand|nccl|cutlass|cute/|cub/|thrust/|nvrtc'
    r'|nvml|nvtx|mma\.h|cooperative_groups|hip/|hipblas|hipfft|hipsparse|hiprand|hipcub|rccl|miopen)[^>"\n#]*[>"]'
    r'|\b__global__\b|\b__device__\b|<<<'
    # or uses the stack through a header of its own project: a vendor namespace or macro, ATen's CUDA API, the
    # runtime's commonest names (a kernel header included by a .cu file, a host file calling cudaMalloc)
    r'|\b(?:cutlass|cute|cub|thrust|nvcuda)\s*::|\bCUTLASS_[A-Z]\w*|\b(?:at|c10)::cuda::'
    # a PyTorch extension's binding code that dispatches on CUDA (`x.is_cuda()`, kCUDA, the CUDA dispatch key)
    r'|\.\s*is_cuda\s*\(\s*\)|\bkCUDA\b|TORCH_LIBRARY_IMPL\s*\(\s*\w+\s*,\s*CUDA\b'
    r'|\bcuda(?:Stream_t|Error_t|Event_t|Malloc\w*|Memcpy\w*|Memset\w*|Free\w*|GetLastError|DeviceSynchronize'
    r'|StreamSynchronize|LaunchKernel\w*|SetDevice|GetDevice\w*)\b'
    # or inline PTX in a device header of its own macros (`asm volatile("st.volatile.global.v4.u32 ...")`)
    r'|\basm\s+(?:volatile\s*)?\(\s*"\s*(?:ld|st|mov|cvt|mma|ldmatrix|stmatrix|cp|red|atom|fence|membar|bar'
    r'|shfl|prmt|multimem|tcgen05|wgmma|griddepcontrol)\.[a-z]')
# Comments in C/C++ (string literals are matched so that a "//" inside one is left alone; PTX lives there).
# Linear on any input: an unclosed comment runs to the end of the file and an unclosed string to the end of its
# line (as the compiler reads them), and a character literal is short, so no match is tried again and again.
_C_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"?|\'(?:\\.|[^\'\\\n]){0,16}\'',
                                  re.DOTALL)
_HASH_COMMENT_LINE = re.compile(r"^[ \t]*#(?![ \t]*include)[^\n]*", re.MULTILINE)
# Messages make prints ($(info ...), $(warning ...), $(error ...)) name tools without using them.
_MAKE_MESSAGE = re.compile(r"\$\((?:info|warning|error)\s[^\n]*")


def _blank(m: re.Match) -> str:
    """Spaces for the match, its line breaks kept."""
    s = m.group(0)
    if "\n" not in s:
        return " " * len(s)
    return "\n".join(" " * len(part) for part in s.split("\n"))


def mask_c_comments(text: str) -> str:
    """The text with C/C++ comments replaced by spaces (same length, same line breaks)."""
    return _C_COMMENT_OR_STRING.sub(lambda m: m.group(0) if m.group(0)[0] in "\"'" else _blank(m), text)


def mask_c_code(text: str) -> tuple[str, str]:
    """(text with comments blanked, text with comments and string/char literals blanked), offsets kept."""
    masked: list[str] = []
    code: list[str] = []
    last = 0
    for m in _C_COMMENT_OR_STRING.finditer(text):
        before = text[last:m.start()]
        masked.append(before)
        code.append(before)
        s = m.group(0)
        blank = _blank(m)
        masked.append(s if s[0] in "\"'" else blank)
        code.append(blank)
        last = m.end()
    masked.append(text[last:])
    code.append(text[last:])
    return "".join(masked), "".join(code)


def mask_hash_comments(text: str) -> str:
    """The text with whole-line '#' comments blanked (shell, YAML, requirements, Dockerfile, CMake)."""
    if "#" not in text:
        return text
    return _HASH_COMMENT_LINE.sub(lambda m: m.group(0) if m.group(0).lstrip().startswith("#!") else _blank(m), text)


def is_makefile(name: str) -> bool:
    low = name.lower()
    return low in ("makefile", "gnumakefile") or low.endswith((".mk", ".make"))


def mask_make_messages(text: str) -> str:
    """The text with make's $(info/warning/error ...) messages blanked (same length, same line breaks)."""
    return _MAKE_MESSAGE.sub(_blank, text) if "$(" in text else text


@dataclass
class TextMatch:
    rule: Rule
    line: int
    col: int    # 0-based
    text: str
    ported: bool = False    # inside a branch that already is the port (#ifdef USE_ROCM, ...)
    last: int = 0           # the last line of the statement it stands for (0: its own line)


class TextRules:
    def __init__(self, ruleset: RuleSet):
        # structural rules are found by their readers (match_yaml, match_build), not as line patterns
        self.by_kind = {k: [r for r in ruleset.of_kind(k) if not r.structure] for k in ("deps", "cpp", "build")}
        # file globs matched without case: `cuda.Dockerfile` is a `*.dockerfile`, `Dockerfile.rocm` a `dockerfile*`
        self.globs = {r.id: tuple(g.lower() for g in r.files) for rules in self.by_kind.values() for r in rules}
        # per rule, RE2's search for a wider pattern (prefilter.superset_gate): no match of it in a file, none of the
        # rule's own pattern either, and Python's re is not run there (speed only: the same matches)
        self.gates = {r.id: prefilter.superset_gate(r.pattern) for rules in self.by_kind.values() for r in rules
                      if r.regex is not None} if prefilter.enabled() else {}

    def match(self, kind: str, name: str, masked: str, starts: list[int] | None = None) -> list[TextMatch]:
        found = []
        starts = starts or _line_starts(masked)
        low = name.lower()
        gated = bool(self.gates) and prefilter.gate_safe(masked)
        for r in self.by_kind[kind]:
            if r.regex is None:     # a cpp rule that only names API libraries (match_cpp)
                continue
            if r.files and not any(fnmatch.fnmatchcase(low, g) for g in self.globs[r.id]):
                continue
            if r.hint and not any(h in masked for h in r.hint):
                continue
            if gated and (gate := self.gates.get(r.id)) is not None and gate.search(masked) is None:
                continue
            last = 0
            for m in r.regex.finditer(masked):
                if not m.group(0).strip():
                    continue
                line, col = _position(starts, m.start())
                if line == last:
                    continue    # one finding of a rule per line: `cuda::atomic_ref<T, cuda::thread_scope>` is one edit
                last = line
                found.append(TextMatch(r, line, col, _short(m.group(0))))
        return without_fallback_doubles(found)


def without_fallback_doubles(found: list[TextMatch]) -> list[TextMatch]:
    """The matches less a fallback rule's on a line another rule reports (Rule.fallback)."""
    if not any(m.rule.fallback for m in found):
        return found
    taken = {m.line for m in found if not m.rule.fallback}
    return [m for m in found if not m.rule.fallback or m.line not in taken]
