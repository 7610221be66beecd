"""CUDA C/C++: names looked up in the CUDA API dictionary (namespace aliases resolved), and the cpp rules'
patterns for what is not a name (headers, kernel launches, warp-size idioms, inline PTX)."""

from __future__ import annotations

import re

from gapbench.scan import cuda_api
from gapbench.scan.branches import (
    PortMacros,
    cpp_port_lines,
    header_facts,
    in_ranges,
    port_macros,
    tested_names,
    twins_pattern,
)
from gapbench.scan.match_python import _line_starts, _position, _short
from gapbench.scan.match_text import TextMatch, TextRules, mask_c_code, without_fallback_doubles
from gapbench.scan.rules import NO_HIP_SUFFIX, Rule, RuleSet
from gapbench.scan.statements import collapse, cpp_may_share, cpp_units

# `namespace fe = cudnn_frontend;`, `namespace cg = ::cooperative_groups::experimental;`
_NAMESPACE_ALIAS = re.compile(r"\bnamespace\s+(\w+)\s*=\s*(?:::\s*)?(\w+)[\w:\s]*;")
# `using namespace cute;`: the library's bare names (cuda_api.toml `bare`) are its names in this file
_USING_NAMESPACE = re.compile(r"\busing\s+namespace\s+(?:::\s*)?(\w+)\s*;")
# A variable declared right after an API type name: `cudaDeviceProp prop{};`, `const cudaLaunchConfig_t& cfg)`
_DECLARED = re.compile(r"\s*[&*]?\s*([A-Za-z_]\w*)\s*[;={\[,)]")
_NOT_VARIABLES = frozenset({"const", "volatile", "constexpr", "static", "return", "else"})
# Libraries whose structs are read field by field (`prop.multiProcessorCount`, `config.gridDim`): each read is a
# line to port. The fp16 vector types' `.x`/`.y` are left out: HIP's types have the same fields.
_STRUCT_LIBRARIES = frozenset({"cuda-runtime", "cuda-driver"})
# A struct that HIP keeps (cudaDeviceProp -> hipDeviceProp_t) keeps its fields' names: a read is ported with the
# declaration, except a compute-capability gate (`prop.major >= 9`), whose numbers mean another thing on AMD.
_CAPABILITY_GATE = re.compile(r"\s*(?:[<>]=?|[=!]=)\s*\d")
_CAPABILITY_FIELDS = frozenset({"major", "minor"})
# A field read for a message is no lock-in (log lines are not ported), nor the device's name, read for display and
# for spec tables (hardware facts).
_PRINTED = re.compile(r"\b\w*printf\w*\s*\(|<<")
_DISPLAY_FIELDS = frozenset({"name"})
# Handles and status codes are opaque (a pointer, an enum): a variable of such a type has no fields to read, so a
# later `e.max_rel` is another variable of the same name.
_OPAQUE_TYPE = re.compile(r"(?i)(?:error|result|status|stream|event|graph|graphexec|context|module|function|handle"
                          r"|kind|flags?)(?:_t)?$")


# A statement that is one edit however its lines run: inline assembly, an explicit template instantiation, a call
# whose arguments run on (`cublasHgemm(handle,` / `CUBLAS_OP_N, ...`, also inside a check macro `CHECK(cudaX(`).
# A declaration's parameters (a kernel's signature) stay each its own place to edit.
_WHOLE = re.compile(r"\s*(?:asm|__asm__|__asm)\b|\s*template\s+(?!<)|\s*using\s+\w+\s*=|\s*typedef\b|\s*(?:const\s+)?auto\s*[&*]?\s*\w+\s*=\s*[A-Za-z_][\w:]*\s*\((?![^;]*\)\s*;?\s*$)|\s*(?:[A-Za-z_][\w:]*\s*\(\s*)?[A-Za-z_][\w:]*\s*\((?![^;]*\)\s*[{;]?\s*$)")
_KERNEL_INSTANTIATION = re.compile(r"\btemplate\s+__global__\b")
_DEFINE_FUNCTION = re.compile(r"[ \t]*#[ \t]*define[ \t]+(\w+)\(")
# A mask variable or parameter set to all 32 lanes (`unsigned int mask = 0xffffffff`): a warp intrinsic given it
# assumes 32 lanes as much as one given the literal.
_FULL_MASK_NAME = re.compile(r"\b(\w*(?:mask|Mask|MASK)\w*)\s*=\s*0x[fF]{8}[uU]?[lL]{0,2}\b")
_MASK_RULE = "cpp-warp-full-mask"


def _mark_ported(found: list[TextMatch], masked: str, macros: PortMacros | None, header) -> None:
    """Marks the findings inside the file's port branches, and uses of the names those branches alias to their
    HIP twins (the alias ports a later use too)."""
    ported = cpp_port_lines(masked, macros)
    if ported:
        twins = twins_pattern(n for n, side in header.aliases if side == "port")
        for m in found:
            m.ported = in_ranges(ported, m.line) or (twins is not None and bool(twins.match(m.text)))


class CppRules:
    """The cpp rules, compiled: the dictionary part is built on first use (it reads torch's hipify tables)."""

    def __init__(self, ruleset: RuleSet, text: TextRules):
        self.text = text
        self.by_library = ruleset.api_rules()
        self._api: cuda_api.CudaApi | None = None
        self._namespaces: re.Pattern | None = None
        self._members: dict[str, re.Pattern] = {}
        self.exempt = frozenset(r.id for r in ruleset.rules.values() if r.each)
        self.mask_rule = ruleset.rules.get(_MASK_RULE)

    def match(self, name: str, text: str, macros: PortMacros | None = None, facts: dict | None = None
              ) -> list[TextMatch]:
        """The file's findings. `macros`: portability macros other files of the tree define; `facts`, when given,
        receives the file's own ("macros"), the names its conditions test ("tested") and what a file including it
        or included by it learns ("header": its includes, the CUDA names it aliases to HIP twins, its port guards;
        branches.header_facts)."""
        masked, code = mask_c_code(text)
        own = port_macros(masked, macros) if "#" in masked else PortMacros()
        macros = macros.merged(own) if macros else own
        header = header_facts(masked, code, macros or None)
        if facts is not None:
            facts["macros"] = own if own.sides else None
            facts["tested"] = tested_names(masked) if "#" in masked else frozenset()
            facts["header"] = header if header.includes or header.aliases else None
            if "TORCH_LIBRARY" in code:
                facts["torch_libraries"] = cuda_only_torch_libraries(code)
        starts = _line_starts(masked)
        found = self.text.match("cpp", name, masked, starts)
        if self.mask_rule is not None and "_sync" in code:
            found += _full_mask_uses(code, starts, self.mask_rule)
        if self.by_library:
            found += _ApiMatch(self, code, starts).run()
        if not found:
            return found
        found = without_fallback_doubles(found)    # a fallback rule only where no rule of a known name is
        if "__global__" in code and "template" in code:
            skip = _instantiations(code, starts)
            if skip:
                found = [m for m in found if not in_ranges(skip, m.line)]
        found = _one_per_statement(found, text, code, starts, self.exempt)
        _mark_ported(found, masked, macros or None, header)
        return found

    @property
    def api(self) -> cuda_api.CudaApi:
        if self._api is None:
            self._api = cuda_api.dictionary()
            spaces = sorted(ns for ns, lib in self._api.namespaces.items() if lib in self.by_library)
            if spaces:
                self._namespaces = re.compile(r"\b(" + "|".join(map(re.escape, spaces)) + r")\s*::")
        return self._api

    def rule_for(self, library: str, hip: bool) -> Rule | None:
        pair = self.by_library.get(library)
        if pair is None:
            return None
        return pair[0] if hip else pair[1]

    def members(self, library: str) -> re.Pattern:
        rx = self._members.get(library)
        if rx is None:
            names = sorted(self.api.members[library], key=len, reverse=True)
            rx = re.compile(r"(?:\.|->)\s*(" + "|".join(map(re.escape, names)) + r")\b")
            self._members[library] = rx
        return rx


class _ApiMatch:
    """One file's code (comments and strings blanked) against the dictionary."""

    def __init__(self, rules: CppRules, code: str, starts: list[int]):
        self.rules = rules
        self.api = rules.api
        self.code = code
        self.starts = starts
        self.found: list[TextMatch] = []
        self.seen: set[tuple[int, str]] = set()   # one finding per line and rule: the first name on the line
        self.used: set[str] = set()      # libraries this file uses
        self.variables: dict[str, Rule] = {}    # variables declared with an API struct type -> that type's rule

    def run(self) -> list[TextMatch]:
        self._names()
        self._fields()
        self._namespaces()
        for library in sorted(self.used & self.api.members.keys()):
            rule = self.rules.rule_for(library, True)
            for m in self.rules.members(library).finditer(self.code):
                self._add(rule, m.start(1), m.group(1))
        return self.found

    def _add(self, rule: Rule | None, offset: int, shown: str) -> None:
        if rule is not None:
            line, col = _position(self.starts, offset)
            if (line, rule.id) not in self.seen:
                self.seen.add((line, rule.id))
                self.found.append(TextMatch(rule, line, col, _short(shown)))

    def _names(self) -> None:
        names = self.api.names
        for m in self.api.candidates().finditer(self.code):
            info = names.get(m.group(0))
            if info is not None:
                rule = self.rules.rule_for(info.library, info.hip)
                if rule is not None:
                    self.used.add(info.library)
                    self._add(rule, m.start(), m.group(0))
                    if info.library in _STRUCT_LIBRARIES and not _OPAQUE_TYPE.search(m.group(0)):
                        self._note_variable(m.end(), rule)

    def _note_variable(self, end: int, rule: Rule) -> None:
        if self.code[end:end + 1] not in (" ", "\t", "&", "*"):
            return      # a call, a `::` or an argument: most names are not declarations (cheap test first)
        d = _DECLARED.match(self.code, end)
        if d is not None and d.group(1) not in _NOT_VARIABLES and d.group(1) not in self.api.names:
            self.variables.setdefault(d.group(1), rule)

    def _fields(self) -> None:
        """Reads of an API struct's fields through a variable declared with its type in this file."""
        if not self.variables:
            return
        rx = re.compile(r"(?<![\w.>])(" + "|".join(map(re.escape, sorted(self.variables, key=len, reverse=True)))
                        + r")\s*(?:\.|->)\s*([A-Za-z_]\w*)")
        for m in rx.finditer(self.code):
            head = self.code[self.starts[_position(self.starts, m.start())[0] - 1]:m.start()]
            rule = self.variables[m.group(1)]
            if rule.id.endswith(NO_HIP_SUFFIX) or (m.group(2) in _CAPABILITY_FIELDS
                                                    and _CAPABILITY_GATE.match(self.code, m.end())):
                if m.group(2) not in _DISPLAY_FIELDS and not _PRINTED.search(head):
                    self._add(rule, m.start(), m.group(0))

    def _namespaces(self) -> None:
        """Vendor namespaces used with `::`, directly or through an alias declared in the file."""
        spaces = self.api.namespaces
        aliases: dict[str, str] = {}
        if "namespace" in self.code:
            for m in _NAMESPACE_ALIAS.finditer(self.code):
                library = spaces.get(m.group(2))
                if library is not None and self.rules.rule_for(library, True) is not None:
                    aliases[m.group(1)] = library
                    self.used.add(library)
                    self._add(self.rules.rule_for(library, True), m.start(2), m.group(0))
        if "using" in self.code:
            self._using_namespaces(spaces, aliases)
        patterns = [self.rules._namespaces] if self.rules._namespaces is not None else []
        if aliases:
            patterns.append(re.compile(r"\b(" + "|".join(map(re.escape, aliases)) + r")\s*::"))
        for rx in patterns:
            for m in rx.finditer(self.code):
                library = spaces.get(m.group(1)) or aliases[m.group(1)]
                self.used.add(library)
                self._add(self.rules.rule_for(library, True), m.start(), m.group(0))


    def _using_namespaces(self, spaces: dict[str, str], aliases: dict[str, str]) -> None:
        """`using namespace cute;` is a line of the library, and its bare names are its uses from then on."""
        bare: set[str] = set()
        for m in _USING_NAMESPACE.finditer(self.code):
            library = spaces.get(m.group(1)) or aliases.get(m.group(1))
            rule = self.rules.rule_for(library, True) if library else None
            if rule is not None:
                self.used.add(library)
                self._add(rule, m.start(), m.group(0))
                if library in self.api.bare:
                    bare.add(library)
        for library in sorted(bare):
            rule = self.rules.rule_for(library, True)
            for m in self.api.bare[library].finditer(self.code):
                self._add(rule, m.start(), m.group(0))


def _full_mask_uses(code: str, starts: list[int], rule: Rule) -> list[TextMatch]:
    """Warp intrinsics given a mask variable that the file sets to all 32 lanes."""
    names = {m.group(1) for m in _FULL_MASK_NAME.finditer(code)}
    if not names:
        return []
    rx = re.compile(r"\b__(?:shfl(?:_up|_down|_xor)?|ballot|any|all|match_any|match_all|reduce_\w+)_sync\s*\(\s*(?:"
                    + "|".join(map(re.escape, sorted(names))) + r")\b")
    out = []
    for m in rx.finditer(code):
        line, col = _position(starts, m.start())
        out.append(TextMatch(rule, line, col, _short(m.group(0))))
    return out


def _instantiations(code: str, starts: list[int]) -> list[tuple[int, int]]:
    """Line ranges of explicit instantiations of kernels (`template __global__ void k<half, 128>(...);`), and of the
    uses of a macro of the file whose body is one (`MAKE_kernel(ADAM, half)`): they restate a definition that is
    reported itself, and hipify leaves them as they are."""
    out = []
    macros = []
    for m in _KERNEL_INSTANTIATION.finditer(code):
        first = _position(starts, m.start())[0]
        head = _define_head(code, starts, first)
        end = _instantiation_end(code, m.end(), head is not None)
        if end is None:
            continue
        if head is not None:
            macros.append(head)
        out.append((first, _position(starts, max(end - 1, m.start()))[0]))
    if macros:
        rx = re.compile(r"\b(" + "|".join(map(re.escape, sorted(set(macros)))) + r")\s*\(")
        for m in rx.finditer(code):
            line = _position(starts, m.start())[0]
            if in_ranges(sorted(out), line):
                continue
            end = _closing(code, m.end())
            out.append((line, _position(starts, max(end - 1, m.start()))[0]))
    return sorted(out)


def _instantiation_end(code: str, i: int, in_define: bool) -> int | None:
    """Where an instantiation starting before i ends: its `;`, or the end of the macro it is the body of; None
    when a brace comes first (no instantiation: a definition)."""
    n = min(len(code), i + 8192)
    while i < n:
        c = code[i]
        if c == ";":
            return i + 1
        if c in "{}":
            return None
        if c == "\n" and in_define and not code[:i].rstrip(" \t\r").endswith("\\"):
            return i
        i += 1
    return None


def _define_head(code: str, starts: list[int], line: int) -> str | None:
    """The name of the function-like macro whose definition holds this line (through its continuations), if any."""
    k = line
    while k >= 1:
        seg = code[starts[k - 1]:starts[k] if k < len(starts) else len(code)]
        d = _DEFINE_FUNCTION.match(seg)
        if d:
            return d.group(1)
        if k == 1 or not code[starts[k - 2]:starts[k - 1]].rstrip().endswith("\\"):
            return None
        k -= 1
    return None


def _closing(code: str, i: int) -> int:
    """The offset after the parenthesis closing the one opened just before i (or the end of the line)."""
    depth = 1
    nl = code.find("\n", i)
    limit = min(len(code), i + 4096)
    while i < limit:
        c = code[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";" and depth == 1:
            break
        i += 1
    return nl if nl >= 0 else len(code)


def _one_per_statement(found: list[TextMatch], text: str, code: str, starts: list[int],
                       exempt: frozenset[str]) -> list[TextMatch]:
    """Findings on later lines of one C/C++ statement moved to its first flagged line (one per rule there). The
    file is parsed only when two flagged lines could be one statement."""
    lines = sorted({m.line for m in found})
    if len(lines) < 2 or not cpp_may_share(code, starts, lines):
        return found
    units = cpp_units(text, [(m.line, m.col) for m in found])
    items = [(m.rule.id, m.line, m.col, m) for m in found]
    out = []
    src = text.split("\n")
    for _, line, col, m, last in collapse(items, lambda it: units.get((it[3].line, it[3].col)), exempt, src,
                                          lambda span: bool(_WHOLE.match(src[span[0] - 1]))):
        if line != m.line or last != line:
            m = TextMatch(m.rule, line, col, m.text, last=last)
        out.append(m)
    return out


_TORCH_LIBRARY = re.compile(r"\bTORCH_LIBRARY(?:_FRAGMENT)?\s*\(\s*(\w+)\s*,")
_TORCH_LIBRARY_IMPL = re.compile(r"\bTORCH_LIBRARY_IMPL\s*\(\s*(\w+)\s*,\s*(\w+)\s*,")
_CUDA_IMPL = re.compile(r"\b(?:torch|c10|at)::kCUDA\b|\bDispatchKey::CUDA\b")
_OTHER_IMPL = re.compile(r"\b(?:torch|c10|at)::k(?:CPU|HIP|XPU|PrivateUse1|Meta)\b|\bDispatchKey::(?:CPU|HIP|XPU)\b")


def cuda_only_torch_libraries(code: str) -> frozenset[str]:
    """Operator libraries a PyTorch extension registers for the CUDA dispatch key only (`TORCH_LIBRARY_IMPL(mylib,
    CUDA, m)`, or `TORCH_LIBRARY_FRAGMENT(mylib, m)` whose `m.impl(...)`s all name `torch::kCUDA`): every
    `torch.ops.mylib.*` call from Python runs a CUDA kernel. A library with a CPU, HIP or XPU implementation in the
    file is left out."""
    impls: dict[str, set[str]] = {}
    for m in _TORCH_LIBRARY_IMPL.finditer(code):
        impls.setdefault(m.group(1), set()).add(m.group(2))
    out = {lib for lib, keys in impls.items() if keys == {"CUDA"}}
    if _CUDA_IMPL.search(code) and not _OTHER_IMPL.search(code) and not any(k != "CUDA" for ks in impls.values() for k in ks):
        out |= {m.group(1) for m in _TORCH_LIBRARY.finditer(code)}
    return frozenset(out)

