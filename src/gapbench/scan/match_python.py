"""Python rules by parsing with `ast` (the scanned code is never imported or run), and a text fallback."""

from __future__ import annotations

import ast
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass

from gapbench.scan.branches import (
    in_ranges,
    port_chosen_calls,
    port_chosen_names,
    port_import_aliases,
    python_port_lines,
    tests_port,
)
from gapbench.scan.rules import Rule, RuleSet
from gapbench.scan.statements import collapse, python_units, unit_of_lines

_KEY_PARTS = ("cuda", "cudnn", "nccl", "nvtx")
_STRING_LITERAL = re.compile(r"""(?P<q>'''|\"\"\"|'|")(?P<body>(?:\\.|(?!(?P=q)).)*?)(?P=q)""", re.DOTALL)


def _hint_for(name: str) -> str:
    """A substring that any file resolving to `name` must contain (every part of a dotted name appears in the
    file, in an import or an attribute); the CUDA-looking part is the rarest."""
    parts = name.split(".")
    for p in parts:
        if any(k in p.lower() for k in _KEY_PARTS):
            return p
    return parts[-1]


@dataclass
class PythonMatch:
    rule: Rule
    line: int
    col: int    # 0-based character column
    text: str
    ported: bool = False    # inside a branch that already is the port (if torch.version.hip: ...)
    last: int = 0           # the last line of the statement it stands for (0: its own line)


class PythonRules:
    """The python-* rules indexed for lookup, with the substrings that say whether parsing is worth it."""

    def __init__(self, ruleset: RuleSet):
        self.attr: dict[str, Rule] = {}
        self.imports: dict[str, Rule] = {}
        self.import_uses: dict[str, Rule] = {}     # python-import rules whose every use is a finding too
        self.methods: dict[str, Rule] = {}
        self.strings: list[Rule] = []
        self.structural: dict[str, list[Rule]] = {}     # python-compare / python-call rules
        self.attr_wild: dict[str, list[tuple[str, Rule]]] = {}  # parent name -> (prefix of the next part, rule)
        self.exempt = frozenset(r.id for r in ruleset.rules.values() if r.each)
        hints: set[str] = set()
        # (literal, confirming regex or None): a file is parsed only when some literal occurs (a fast `in`)
        # and its regex, if any, matches. An import rule needs its top module after `import` or `from`.
        gates: dict[str, re.Pattern | None] = {}
        self.always = False
        for r in ruleset.rules.values():
            self._index(r, hints, gates)
        self.hints = tuple(sorted(hints))
        # Plain literals first, the commonest ("cuda") at the head, so that `any` stops early.
        self.gates = sorted(gates.items(), key=lambda g: (g[1] is not None, g[0] != "cuda", g[0]))
        # Cheapest first test: lower-cased literals, none containing another (most files fail it). Each gate is
        # filed under the quick literals it contains: only the gates of the quick literals found are tried.
        self._quick = _minimal_literals(h.lower() for h in hints)
        self._gates_of = {q: [g for g in self.gates if q in g[0].lower()] for q in self._quick}
        # Lines worth walking: a hint, an import, or any string constant when a string rule has no hint.
        self._walk_literals = _minimal_literals([*self.hints, "import"])
        # The quick literal each walk literal contains ("import" has none): absent in a file, so is the walk literal.
        self._quick_of_walk = {w: next((q for q in self._quick if q in w.lower()), None) for w in self._walk_literals}
        # Each hint -> the walk literal it contains (itself when it is one): if that does not occur, neither does it.
        self._cover = {h: next((w for w in self._walk_literals if w in h), h) for h in self.hints}
        self._walk_rx = re.compile("['\"]") if self.always else None
        self._fallback = self._fallback_patterns()
        self._hidden: dict[tuple[str, str], bool] = {}
        self._hint_rx: re.Pattern | None = None

    def _index(self, r: Rule, hints: set[str], gates: dict[str, re.Pattern | None]) -> None:
        """File one rule under its kinds, and note the substrings that make a file worth parsing for it."""
        if "python-attr" in r.kinds:
            for m in r.match:
                if m.endswith("*"):     # `torch._C._cuda_*`: every name below torch._C starting so
                    parent, _, prefix = m[:-1].rpartition(".")
                    self.attr_wild.setdefault(parent, []).append((prefix, r))
                    hints.add(prefix)
                    gates[prefix] = None
                    continue
                self.attr[m] = r
                for h in r.hint or (r.keyword.split("_")[0] if r.keyword else _hint_for(m),):
                    hints.add(h)
                    gates[h] = None
        if "python-import" in r.kinds:
            for m in r.match:
                self.imports[m] = r
                if r.uses:
                    self.import_uses[m] = r
                head = m.split(".")[0]
                hints.add(head)
                if head not in gates:
                    gates[head] = re.compile(r"\b(?:from|import)\s+" + re.escape(head) + r"\b")
        if "python-method" in r.kinds:
            for m in r.match:
                self.methods[m] = r
                hints.add(m)
                gates[m] = None
        if r.structure:
            self.structural.setdefault(r.structure, []).append(r)
            if r.structure == "python-extension":   # a build script need not name CUDA: its hints open the file
                hints.update(r.hint)
                gates.update({h: None for h in r.hint})
            return      # gates are tried in files parsed for the other rules (their hints: file and line tests)
        if "python-string" in r.kinds:
            self.strings.append(r)
            if r.hint:
                hints.update(r.hint)
                gates.update({h: None for h in r.hint})
            else:
                self.always = True

    def hides_hint(self, alias: str, name: str) -> bool:
        """Whether `import name as alias` hides a hinted name: the name holds a hint, the alias none (cached: the
        same aliases recur file after file)."""
        key = (alias, name)
        got = self._hidden.get(key)
        if got is None:
            if self._hint_rx is None:
                self._hint_rx = re.compile("|".join(map(re.escape, sorted(self.hints, key=len, reverse=True))))
            got = self._hidden[key] = self._hint_rx.search(alias) is None and self._hint_rx.search(name) is not None
        return got

    def worth_parsing(self, text: str) -> bool:
        return self.gate(text) is not None

    def gate(self, text: str, present: frozenset[str] | None = None) -> frozenset[str] | None:
        """None when no rule can match in the text; else the quick literals it holds (they tell match() which
        walk literals to look for). `present`: those literals, when the caller has found them already."""
        if self.always:
            return frozenset(self._quick)
        if present is None:
            low = text.lower()
            present = frozenset(q for q in self._quick if q in low)
        tried: set[str] = set()
        for q in present:
            for lit, rx in self._gates_of[q]:
                if lit not in tried:
                    tried.add(lit)
                    if lit in text and (rx is None or rx.search(text)):
                        return present
        return None

    def attr_hit(self, dotted: str) -> tuple[str, Rule] | None:
        """The python-attr rule for a dotted name: the longest name matching, a `parent.prefix*` one included."""
        hit = self._longest(self.attr, dotted)
        if self.attr_wild:
            parts = dotted.split(".")
            for i in range(len(parts) - 1, 0, -1):
                parent = ".".join(parts[:i])
                for prefix, rule in self.attr_wild.get(parent, ()):
                    if parts[i].startswith(prefix):
                        name = f"{parent}.{parts[i]}"
                        if hit is None or len(name) > len(hit[0]):
                            return name, rule
                        return hit
        return hit

    @staticmethod
    def _longest(table: dict[str, Rule], dotted: str) -> tuple[str, Rule] | None:
        name = dotted
        while True:
            if name in table:
                return name, table[name]
            if "." not in name:
                return None
            name = name.rsplit(".", 1)[0]

    def strings_for(self, text: str, found: set[str] | None = None) -> list[Rule]:
        """The python-string rules worth trying on this file: those without hints, and those whose hint occurs.
        `found`: the walk literals known to occur; a hint is then searched for only when the walk literal it
        contains was found (each hint once, however many rules share it)."""
        present: dict[str, bool] = {}

        def occurs(h: str) -> bool:
            if h not in present:
                if found is None:
                    present[h] = h in text
                else:
                    cover = self._cover.get(h, h)
                    present[h] = cover in found and (cover == h or h in text)
            return present[h]

        return [r for r in self.strings if not r.hint or any(occurs(h) for h in r.hint)]

    # ---------------------------------------------------------------- the text fallback (syntax errors)

    def _fallback_patterns(self) -> list[tuple[Rule | None, re.Pattern]]:
        out = []
        names = sorted((n for n, r in self.attr.items() if not r.keyword and not r.bare), key=len, reverse=True)
        if names:   # one alternation, longest first, so the most specific name wins as in the AST matcher
            out.append((None, re.compile(r"(?<![\w.])(?:" + "|".join(map(re.escape, names)) + r")\b")))
        for mod, r in self.imports.items():
            head, _, last = mod.rpartition(".")
            alts = [r"^\s*import\s+" + re.escape(mod) + r"\b", r"^\s*from\s+" + re.escape(mod) + r"\b"]
            if head:
                alts.append(r"^\s*from\s+" + re.escape(head) + r"\s+import\s+[^#\n]*\b" + re.escape(last) + r"\b")
            out.append((r, re.compile("|".join(alts), re.MULTILINE)))
        for name, r in self.methods.items():
            out.append((r, re.compile(r"\." + re.escape(name) + (r"\s*\(" if r.call else r"\b"))))
        return out

    def fallback(self, text: str) -> list[PythonMatch]:
        """Regex approximations of the python rules, for a file that does not parse."""
        found: list[PythonMatch] = []
        starts = _line_starts(text)
        for r, rx in self._fallback:
            for m in rx.finditer(text):
                line, col = _position(starts, m.start())
                found.append(PythonMatch(r or self.attr[m.group(0)], line, col, m.group(0).strip()))
        strings = self.strings_for(text)
        if strings:
            for m in _STRING_LITERAL.finditer(text):
                body = m.group("body")
                if _is_prose(body):
                    continue
                for r in strings:
                    if r.regex.search(body):
                        line, col = _position(starts, m.start())
                        found.append(PythonMatch(r, line, col, _short(m.group(0))))
        return found

    # ---------------------------------------------------------------- the AST matcher

    def walk_literals(self, present: frozenset[str] | None) -> tuple[str, ...]:
        """The walk literals that can occur in a file holding the quick literals `present` (all when unknown)."""
        if present is None:
            return self._walk_literals
        return tuple(w for w in self._walk_literals if self._quick_of_walk[w] is None or self._quick_of_walk[w] in present)

    def match(self, tree: ast.AST, text: str, present: frozenset[str] | None = None,
              own: frozenset[str] = frozenset(), folder: tuple[str, ...] = (),
              extensions: frozenset[str] = frozenset(), facts: dict | None = None,
              packages: frozenset[str] = frozenset(), stem: str = "") -> list[PythonMatch]:
        """Findings in a parsed file. Only statements on lines that hold a hint or an import are walked:
        any name a rule can resolve has its CUDA-looking part on such a line, or behind an import alias
        (the lines using such an alias are walked in a second, equally pruned pass)."""
        fm = _FileMatch(self, tree, text)
        fm.own = own    # the folders the file sits in: a package importing itself is not a dependency
        fm.folder = folder
        fm.stem = stem      # the module's own name (backend for backend.py): `ext = load(...)` is backend.ext
        fm.packages = packages | frozenset(folder[:1])    # the project's top-level packages: its own names
        fm.extensions = set(extensions)
        found = fm.run(self.walk_literals(present))
        if facts is not None:
            libs = cuda_only_python_libraries(text, frozenset(fm.declared))
            facts["extensions"] = frozenset(fm.declared) | {TORCH_OPS + lib for lib in libs}
            facts["imports"] = frozenset(fm.imported)
        return found


class _FileMatch:
    """One parsed file going through the python rules: aliases from its imports, then every walked node."""

    def __init__(self, rules: PythonRules, tree: ast.AST, text: str):
        self.rules = rules
        self.tree = tree
        self.text = text
        self.lines = text.split("\n")
        self.starts = _line_starts(text)
        self.aliases: dict[str, str] = {}
        self.found: list[PythonMatch] = []
        self.handled: set[int] = set()      # ids of nodes already reported (inner parts of a dotted chain)
        self.docstrings: set[int] = set()
        self.strings: list[Rule] = []
        self.parents: dict[int, ast.AST] = {}
        self.own: frozenset[str] = frozenset()
        self.via_module: set[str] = set()   # names imported from a CUDA module: the import is their finding
        self.folder: tuple[str, ...] = ()   # the file's folders, for its relative imports
        self.packages: frozenset[str] = frozenset()
        self.extensions: set[str] = set()   # the project's compiled CUDA extensions (module names)
        self.declared: set[str] = set()     # extensions this file builds (CUDAExtension(name=...), load(...))
        self.imported: set[str] = set()     # every module this file imports (full names)
        self.ext_aliases: dict[str, str] = {}   # names bound to an extension module -> its name
        self.stem = ""
        self.torch_ops: frozenset[str] = frozenset()   # operator libraries registered for CUDA only (C++)
        self.ext_members: set[str] = set()      # names bound to a function of an extension (`from ext import f`)
        # functions returning a config whose watched keyword is their parameter: name -> (rule, parameter, position)
        self.factories: dict[str, tuple[Rule, str, int]] = {}

    def run(self, literals: tuple[str, ...]) -> list[PythonMatch]:
        found: set[str] = set()
        walk_lines = _lines_with(literals, self.text, self.starts, found)
        if self.rules._walk_rx is not None:
            walk_lines = sorted(set(walk_lines) | set(_lines_of(self.rules._walk_rx, self.text, self.starts)))
        nodes = _pruned_walk(self.tree, walk_lines, self.parents)
        self._imports(nodes)    # first: aliases are flow-insensitive, one anywhere in the file counts everywhere
        self._assigned_aliases(nodes)
        ext_rule = self.rules.structural.get("python-extension")
        if ext_rule:
            self._declared_extensions(ext_rule[0])
            nodes += self._extension_nodes(nodes, ext_rule[0])
        nodes += self._alias_nodes(nodes)
        self.strings = self.rules.strings_for(self.text, found)
        for node in nodes:
            self._visit(node)
        if self.factories:
            self._factory_calls()
        self._tuned_numbers()
        if self.rules.structural:
            self._gates()
            self._flag_variables()
        if any(m.rule.fallback for m in self.found):
            taken = {m.line for m in self.found if not m.rule.fallback}
            self.found = [m for m in self.found if not m.rule.fallback or m.line not in taken]
        return self._per_statement(nodes) if self.found else self.found

    def _tuned_numbers(self) -> None:
        """A keyword a rule watches in its calls (`num_warps` of `triton.Config`) set to a literal number
        elsewhere in a file importing the rule's module: `num_warps = 8`, `MyConfig(num_warps=8)`. The number is
        tuned for the vendor wherever it is written; one chosen by a condition (a port branch) is not a literal, and
        a kernel launch's (`kernel[grid](..., num_warps=8)`) stands with the kernel's own finding."""
        imported = {q.split(".")[0] for q in self.aliases.values()}
        watched = {r.keyword: r for m, r in self.rules.attr.items()
                   if len(r.keywords) == 1 and m.split(".")[0] in imported and r.keyword in self.text}
        if not watched:
            return
        words = "|".join(map(re.escape, sorted(watched)))
        rx = re.compile(r"\b(?:" + words + r")\s*(?::[^=\n]{0,80})?=(?!=)|[\"'](?:" + words + r")[\"']\s*:"
                        r"|\bdef\s+\w*(?:" + words + r")\w*\s*\(")
        reported = {(m.line, m.rule.id) for m in self.found}
        parents: dict[int, ast.AST] = {}
        for node in _pruned_walk(self.tree, _lines_of(rx, self.text, self.starts), parents):
            for rule, value in _tuned_entries(node, watched):
                if (value.lineno, rule.id) not in reported:
                    reported.add((value.lineno, rule.id))
                    self._add(rule, value.lineno, value.col_offset, ast.unparse(value))
            call = parents.get(id(node))
            if isinstance(node, ast.keyword) and isinstance(call, ast.Call) and isinstance(call.func, ast.Subscript):
                continue
            name, value = _bound_name(node)
            rule = watched.get(name) if name else None
            if rule is not None and isinstance(node, ast.keyword) and isinstance(call, ast.Call) \
                    and self._calls_rule(call, rule):
                continue    # `triton.Config(..., num_warps=8)` over lines: the Config call is the finding
            if rule is not None and _is_tuned(value) and (node.lineno, rule.id) not in reported:
                reported.add((node.lineno, rule.id))
                self._add(rule, node.lineno, node.col_offset, f"{name} = {ast.unparse(value)}")

    def _calls_rule(self, call: ast.Call, rule: Rule) -> bool:
        dotted = _dotted(call.func)
        q = _qualify(dotted, self.aliases) if dotted else None
        hit = self.rules.attr_hit(q) if q else None
        return hit is not None and hit[1] is rule

    def _gates(self) -> None:
        """Comparisons and calls that gate on a CUDA fact (the python-compare and python-call rules): a CUDA version
        (`bare_metal_version >= Version("11.8")` after `_, bare_metal_version = get_cuda_bare_metal_version(...)`),
        a compute capability (`major == 8 and minor == 7`, `has_cuda_capability(8, 9)`). A rule's hints are line
        tests: only lines holding one are walked, then the lines using a name bound on them."""
        compare = self.rules.structural.get("python-compare", ())
        call = self.rules.structural.get("python-call", ())
        hinted = tuple({h for r in (*compare, *call) for h in r.hint})
        lines = [ln for ln in _lines_with(hinted, self.text, self.starts) if _GATE_OR_BIND.search(self.lines[ln - 1])]
        if not lines:
            return
        nodes = _pruned_walk(self.tree, lines)
        bound = _bound_from(compare, nodes)     # variables bound from an expression a compare rule names
        if bound:
            rx = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(bound))) + r")\b")
            more = [ln for ln in _lines_of(rx, self.text, self.starts) if _GATE_LINE.search(self.lines[ln - 1])]
            seen = {id(n) for n in nodes}
            nodes += [n for n in _pruned_walk(self.tree, more) if id(n) not in seen]
        reported = {(m.line, m.rule.id) for m in self.found}
        for node in nodes:
            rule = _gate_rule(node, compare, call, bound)
            if rule is not None and (node.lineno, rule.id) not in reported:
                reported.add((node.lineno, rule.id))
                self._add(rule, node.lineno, node.col_offset, self._shown(node) or rule.id)

    def _flag_names(self, node: ast.AST, rules: tuple, arch: tuple) -> list[tuple[ast.Name, tuple]]:
        """(a name, the rules that may read it) where `node` fills a variable with flags or a capability list
        (`flags = [...]`, `archs.append("8.0")`) or runs the command a name holds (`[nvcc_bin, "-V"]`)."""
        if isinstance(node, ast.Assign) and _is_list_value(node.value):
            targets = [t for t in node.targets if isinstance(t, ast.Name)]
            names = [(t, rules) for t in targets] if self._holds_cuda_string(node.value) else []
            return names + ([(t, arch) for t in targets] if _capability_list(node.value) else [])
        if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Name) \
                and isinstance(node.elts[0].ctx, ast.Load):
            return [(node.elts[0], rules)]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("append", "extend", "insert") and isinstance(node.func.value, ast.Name) \
                and node.args and (_capability_list(node.args[-1]) or _is_capability(node.args[-1])):
            return [(node.func.value, arch)]
        return []

    def _flag_variables(self) -> None:
        """Variables a build script fills with a compiler's flags or runs as a command (the python-name rules):
        `nvcc_flags = ["--use_fast_math", ...]`, `subprocess.check_output([nvcc_bin, "-V"])`."""
        rules = self.rules.structural.get("python-name", ())
        arch = self.rules.structural.get("python-arch-list", ())
        hinted = tuple({h for r in rules for h in r.hint})
        lines = _lines_with(hinted, self.text, self.starts) if hinted else []
        arch_hints = tuple({h for r in arch for h in r.hint})
        if arch_hints and (_CAPABILITY_STRING.search(self.text) or _SM_LIST.search(self.text)):
            # a capability written as a string, or a list of SM numbers
            capable = set(_lines_of(_CAPABILITY_STRING, self.text, self.starts)) | set(
                _lines_of(_SM_LIST, self.text, self.starts))
            lines = sorted(set(lines) | capable.intersection(_lines_with(arch_hints, self.text, self.starts)))
        if not lines:
            return
        reported = {(m.line, m.rule.id) for m in self.found}
        for node in _pruned_walk(self.tree, lines):
            for n, candidates in self._flag_names(node, rules, arch):
                rule = next((r for r in candidates if r.regex.search(n.id)), None)
                if rule is not None and (n.lineno, rule.id) not in reported:
                    reported.add((n.lineno, rule.id))
                    self._add(rule, n.lineno, n.col_offset, n.id)

    def _holds_cuda_string(self, node: ast.AST) -> bool:
        """A value holding a string some python-string rule reports (an nvcc-only flag in a flag list)."""
        strings = self.rules.strings
        return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and any(r.regex.search(n.value)
                                                                                    for r in strings)
                   for n in ast.walk(node))

    def _shown(self, node: ast.AST) -> str:
        """The source of a node on its first line (to the line's end where it runs over lines)."""
        src = self.lines[node.lineno - 1] if 0 < node.lineno <= len(self.lines) else ""
        end = node.end_col_offset if node.end_lineno == node.lineno else len(src.encode("utf-8"))
        return src.encode("utf-8")[node.col_offset:end].decode("utf-8", errors="replace")

    def _per_statement(self, nodes: list[ast.AST]) -> list[PythonMatch]:
        """One finding per rule and statement, at its first flagged line; findings in a port branch marked."""
        lines = sorted({m.line for m in self.found})
        spans = unit_of_lines(python_units(nodes), lines)
        items = [(m.rule.id, m.line, m.col, m.text, m.rule) for m in self.found]
        merged = collapse(items, lambda it: spans.get(it[1]), self.rules.exempt, self.lines)
        around = _pruned_walk(self.tree, lines)     # every node around a finding
        ported = python_port_lines(around)
        keywords = frozenset(k for r in self.rules.attr.values() for k in r.keywords)
        chosen = port_chosen_names(getattr(self.tree, "body", [])) if keywords else frozenset()
        calls = port_chosen_calls(around, chosen, keywords) if chosen else []
        imports = [n for n in nodes if isinstance(n, (ast.Import, ast.ImportFrom))]
        aliased = port_import_aliases(imports, self.parents, len(self.lines)) if len(imports) > 1 else []
        return [PythonMatch(rule, line, col, shown, in_ranges(ported, line) or in_ranges(calls, line)
                            or _port_aliased(aliased, shown, line), last)
                for _, line, col, shown, rule, last in merged]

    def _col(self, lineno: int, byte_col: int) -> int:
        # ast columns count UTF-8 bytes; findings count characters.
        if 0 < lineno <= len(self.lines):
            s = self.lines[lineno - 1]
            if not s.isascii():
                return len(s.encode("utf-8")[:byte_col].decode("utf-8", errors="replace"))
        return byte_col

    def _add(self, rule: Rule, lineno: int, byte_col: int, shown: str) -> None:
        self.found.append(PythonMatch(rule, lineno, self._col(lineno, byte_col), _short(shown)))

    # ------------------------------------------------------------ imports and aliases

    def _assigned_aliases(self, nodes: list[ast.AST]) -> None:
        """A name bound to a function of a package whose every use is a finding (`attention =
        xformers.ops.fmha.memory_efficient_attention`): `attention(...)` calls the package, as if imported so."""
        for node in nodes:
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Attribute)):
                continue
            name = node.targets[0].id
            dotted = _dotted(node.value)
            q = _qualify(dotted, self.aliases) if dotted else None
            if q and name not in self.aliases and self.rules._longest(self.rules.import_uses, q) \
                    and q.split(".")[0] not in self.own:
                self.aliases[name] = q

    def _imports(self, nodes: list[ast.AST]) -> None:
        reported: set[tuple[int, str]] = set()    # one finding per line of an import and rule
        for node in nodes:
            if isinstance(node, ast.Import):
                for a in node.names:
                    self._alias_import(a)
                    self._report_import(node, a, a.name, f"import {a.name}", reported)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for a in node.names:
                    if a.name == "*":
                        continue
                    full = f"{node.module}.{a.name}"
                    self.aliases[a.asname or a.name] = full
                    self.imported.update((node.module, full))
                    self._report_import(node, a, full, f"from {node.module} import {a.name}", reported)


    def _relative_import(self, node: ast.ImportFrom, reported: set[tuple[int, str]]) -> None:
        """`from . import _C` in pkg/__init__.py: pkg._C; an extension's import is a finding, its uses too."""
        if node.level > len(self.folder) + 1:
            return
        base = list(self.folder[:len(self.folder) - node.level + 1])
        module = ".".join(base + ([node.module] if node.module else []))
        for a in node.names:
            full = f"{module}.{a.name}" if module else a.name
            for name in (full, module):
                # the file's folders may sit below the scanned root: a dotted extension name is matched at the end
                name = next((e for e in self.extensions if name == e or "." in e and name.endswith("." + e)), None)
                if name is not None:
                    bound = a.asname or a.name
                    self.aliases[bound] = full if name == full else f"{module}.{a.name}"
                    self.ext_aliases[bound] = name
                    if name != full and not full.endswith("." + name):
                        self.ext_members.add(bound)     # `from .ext import f`: f() calls the extension
                    self.imported.add(name)
                    self._report_extension(node.lineno, node.col_offset, f"from {'.' * node.level}"
                                           f"{node.module or ''} import {a.name}", reported)
                    break

    def _report_extension(self, line: int, col: int, shown: str, reported: set[tuple[int, str]]) -> None:
        rule = self.rules.structural["python-extension"][0]
        if (line, rule.id) not in reported:
            reported.add((line, rule.id))
            self._add(rule, line, col, shown)

    def _declared_extensions(self, rule: Rule) -> None:
        """The extensions this file builds for CUDA: CUDAExtension(name=...), cpp_extension.load(...) with CUDA
        flags or .cu sources; by their name (a string) and by the variable a load() is bound to."""
        # the builder's own names in this file (`load`, `CUDAExtension`), or a module path ending in one
        builders = sorted({k for k, q in self.aliases.items() if rule.regex.search(q)})
        if "sources" in self.text and (".cu'" in self.text or '.cu"' in self.text):
            self._own_builders(rule)
        if "cpp_extension" not in self.text and not builders:
            self.extensions |= self.declared
            return
        chosen = self._chosen_builders(rule) if "Extension" in self.text else {}
        rx = self._builder_calls(builders, chosen)
        wrapped: list[ast.Call] = []     # builder calls whose name is built from a function's parameters
        for node in _pruned_walk(self.tree, _lines_of(rx, self.text, self.starts)):
            value = node.value if isinstance(node, ast.Assign) else node
            if not isinstance(value, ast.Call):
                continue
            dotted = _dotted(value.func)
            q = chosen.get(dotted or "") or (_qualify(dotted, self.aliases) if dotted else None)
            if q and rule.regex.search(q) and _builds_cuda(q, value) and not self._declare(node, value):
                wrapped.append(value)
        if wrapped:
            self._wrapper_calls(wrapped)
        self.extensions |= self.declared

    def _builder_calls(self, builders: list[str], chosen: dict) -> re.Pattern:
        """The calls that may build an extension: the builders' own names, names chosen between them, the builder
        module under another name (`import torch.utils.cpp_extension as torch_cpp_ext`) and its dotted paths."""
        modules = sorted(k for k, q in self.aliases.items() if q == "torch.utils.cpp_extension")
        alts = ([re.escape(b) for b in builders] + [re.escape(v) for v in chosen]
                + [re.escape(m) + r"\.(?:load|CUDAExtension|CppExtension)" for m in modules]
                + [r"[\w.]*cpp_extension\.(?:load|CUDAExtension|CppExtension)"])
        return re.compile(r"(?<![\w.])(?:" + "|".join(alts) + r")[\s\\]*\(")

    def _declare(self, node: ast.AST, call: ast.Call) -> bool:
        """An extension built by this call: its name (a string), and the variable it is bound to. False when
        neither is known here (the name is computed, as in a helper that wraps the builder)."""
        name = _name_argument(call)
        known = isinstance(name, ast.Constant) and isinstance(name.value, str)
        if known:
            self.declared.add(name.value)
        return self._bind_extension(node) or known

    def _bind_extension(self, node: ast.AST) -> bool:
        """The names an assignment binds an extension build to (`ext = load(...)`, `softmax_cuda =
        _load_helper(...)`): each is an extension `ext.f()` calls, known to other modules by this module's name
        too (`from .backend import _backend`). False when the build is bound to no name."""
        names = [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else []
        for name in names:
            self.declared.add(name)
            if self.stem:
                self.declared.add(".".join((*self.folder, self.stem, name)))
            self.ext_aliases[name] = name
        return bool(names)

    def _wrapper_calls(self, calls: list[ast.Call]) -> None:
        """A helper that wraps the CUDA builder (`def make_cuda_ext(name, module, sources): ... return
        CUDAExtension(name=f"{module}.{name}", ...)`): each call of it builds an extension, named by its `name`
        and `module` arguments (`module.name`, the dotted path it is imported by)."""
        wrappers = {fd.name for fd in ast.walk(self.tree) if isinstance(fd, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and any(n is c for c in calls for n in ast.walk(fd))}
        for node in ast.walk(self.tree):
            call = node.value if isinstance(node, ast.Assign) else node
            if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in wrappers:
                self._wrapper_call(node, call)

    def _wrapper_call(self, node: ast.AST, call: ast.Call) -> None:
        """One call of a helper wrapping the builder: the extension it declares (`module.name`), and the name it is
        bound to when the call is assigned."""
        name = _name_argument(call)
        module = next((k.value for k in call.keywords if k.arg == "module"), call.args[1] if len(call.args) > 1 else None)
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return
        if isinstance(module, ast.Constant) and isinstance(module.value, str) and module.value:
            self.declared.add(f"{module.value}.{name.value}")
        else:
            self.declared.add(name.value)
        if self._bind_extension(node):     # a JIT build bound to a name, as a load() is: the line is a finding
            self._report_extension(node.lineno, node.col_offset, f"{call.func.id}({name.value!r})",
                                   {(m.line, m.rule.id) for m in self.found})

    def _chosen_builders(self, rule: Rule) -> dict[str, str]:
        """Variables the CUDA builder is assigned to (`extension = CUDAExtension` where CUDA is found, then
        `extension("pkg._C", ...)`): name -> the builder's qualified name."""
        out = {}
        for node in ast.walk(self.tree):
            if not isinstance(node, ast.Assign):
                continue
            # `extension = CUDAExtension`, or `CUDAExtension if device == "cuda" else CppExtension`
            values = [node.value.body, node.value.orelse] if isinstance(node.value, ast.IfExp) else [node.value]
            for value in values:
                dotted = _dotted(value) if isinstance(value, (ast.Name, ast.Attribute)) else None
                q = _qualify(dotted, self.aliases) if dotted else None
                if q and rule.regex.search(q) and q.endswith("CUDAExtension"):
                    out.update({t.id: q for t in node.targets if isinstance(t, ast.Name)})
        return out

    def _own_builders(self, rule: Rule) -> None:
        """A project's own JIT builder given CUDA sources and bound to a name (`_plugin = custom_ops.get_plugin(
        module_name=..., sources=["bias_act.cpp", "bias_act.cu"])`): the call builds a CUDA extension, and
        `_plugin.f()` calls it, as with cpp_extension.load."""
        for node in ast.walk(self.tree):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            sources = next((k.value for k in node.value.keywords if k.arg == "sources"), None)
            if sources is None or not _names_source(sources, (".cu", ".cuh")):
                continue
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if not names:
                continue
            for name in names:
                self.declared.add(name)
                self.ext_aliases[name] = name
            self._add(rule, node.lineno, node.col_offset, _dotted(node.value.func) or names[0])

    def _extension_nodes(self, nodes: list[ast.AST], rule: Rule) -> list[ast.AST]:
        """Imports of the project's CUDA extensions (absolute ones), names bound to them (`ext_c = ext`), and the
        nodes on the lines that use those names (walked again: such a line need not name CUDA)."""
        loaded = self._named_extensions(nodes)
        if not self.extensions:
            return []
        reported = {(m.line, m.rule.id) for m in self.found}
        for node in nodes + loaded:
            self._extension_import(node, reported)
        for node in ast.walk(self.tree):    # `ext_c = exllamav2_ext`: another name for it
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                    and isinstance(node.value, ast.Name) and node.value.id in self.ext_aliases:
                self.ext_aliases.setdefault(node.targets[0].id, self.ext_aliases[node.value.id])
        self.torch_ops = frozenset(e[len(TORCH_OPS):] for e in self.extensions if e.startswith(TORCH_OPS))
        names = [re.escape(a) + r"\s*[.(]" for a in sorted(self.ext_aliases)]
        names += [r"torch\.ops\." + re.escape(lib) + r"\." for lib in sorted(self.torch_ops)]
        if not names:
            return []
        rx = re.compile(r"\b(?:" + "|".join(names) + r")")
        seen = {id(n) for n in nodes}
        return [n for n in _pruned_walk(self.tree, _lines_of(rx, self.text, self.starts), self.parents)
                if id(n) not in seen]

    def _named_extensions(self, nodes: list[ast.AST]) -> list[ast.AST]:
        """Compiled extensions known by their names alone (`import awq_ext`, `marlin_cuda = try_import("marlin_cuda")`,
        `importlib.import_module("exl_ext")`): a top-level module named `*_cuda` or `*_ext` that is not the project's
        own package nor a library a rule names. Returns the nodes of their imports not walked yet."""
        matches = named_extensions(self.text)
        if not matches:
            return []
        # an import statement of a module a rule names is that rule's finding; loaded by an import function, it is not
        found = {a for _, a, _ in matches if a and not self.rules._longest(self.rules.imports, a)}
        found |= {b for _, _, b in matches if b}
        found = {n for n in found if n.split(".")[0] not in self.own}
        if not found:
            return []
        self.extensions |= found
        lines = sorted({bisect_right(self.starts, at) for at, a, b in matches if (a or b) in found})
        seen = {id(n) for n in nodes}
        out = []
        for node in _pruned_walk(self.tree, lines, self.parents):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                if id(node) not in seen:
                    out.append(node)
            elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and node.value.args:
                self._loaded_extension(node, found)
        return out

    def _loaded_extension(self, node: ast.Assign, found: set[str]) -> None:
        """`awq_ext, msg = try_import("awq_ext")`: the first name bound is the extension, the line a finding."""
        call = node.value
        module = _module_argument(call.args[0])
        if module not in found or "import" not in (_dotted(call.func) or ""):
            return
        target = node.targets[0]
        if isinstance(target, ast.Tuple) and target.elts:
            target = target.elts[0]
        if isinstance(target, ast.Name):
            self.ext_aliases[target.id] = module
            self._report_extension(node.lineno, node.col_offset, f"{target.id} = {_dotted(call.func)}({module!r})",
                                   {(m.line, m.rule.id) for m in self.found})

    def _extension_import(self, node: ast.AST, reported: set[tuple[int, str]]) -> None:
        """An import of one of the project's CUDA extensions: a finding, and the name it binds remembered."""
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name in self.extensions:
                    self.ext_aliases[a.asname or a.name.split(".")[0]] = a.name
                    self._report_extension(a.lineno, a.col_offset, f"import {a.name}", reported)
        elif isinstance(node, ast.ImportFrom) and node.level:
            self._relative_import(node, reported)
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in self.extensions or node.module in self.extensions:
                    self.ext_aliases[a.asname or a.name] = full if full in self.extensions else node.module
                    if full not in self.extensions:
                        self.ext_members.add(a.asname or a.name)
                    self._report_extension(node.lineno, node.col_offset, f"from {node.module} import {a.name}",
                                           reported)

    def _alias_import(self, a: ast.alias) -> None:
        self.imported.add(a.name)
        if a.asname:
            self.aliases[a.asname] = a.name
        else:
            top = a.name.split(".")[0]
            self.aliases[top] = top

    def _report_import(self, node: ast.AST, a: ast.alias, full: str, shown: str,
                       reported: set[tuple[int, str]]) -> None:
        if full.split(".")[0] in self.own:
            return      # the project's own package (bitsandbytes/utils.py importing bitsandbytes)
        package = self.rules._longest(self.rules.imports, full)
        hit = package or self.rules.attr_hit(full)
        if not hit or hit[1].keyword:
            return
        if not package and isinstance(node, ast.ImportFrom) and full == hit[0] and a.name[:1].islower() \
                and f"{a.asname or a.name}(" in self.text:
            return      # a function imported by its name (is_torch_cuda_available): each call is the edit, not this
        module = getattr(node, "module", None)
        if not package and module and len(hit[0]) < len(module) and not isinstance(node, ast.Import):
            # a module below the rule's name ties it to CUDA (`from torch.cuda._graph_annotations import (a, b)`
            # under torch.cuda): one edit, at the module's line; the names it brings are used through it. A
            # package's calls, and the names of a module a rule names itself (torch.cuda.amp), stay findings.
            line, col = node.lineno, node.col_offset
            if not any(k in a.name.lower() for k in _KEY_PARTS):
                self.via_module.add(a.asname or a.name)
        elif package and isinstance(node, ast.ImportFrom):
            line, col = node.lineno, node.col_offset    # `from pynvml import (` over lines: one edit, at its head
        else:
            line, col = a.lineno, a.col_offset
            if isinstance(node, ast.ImportFrom) and a.name in _MARKING_DECORATORS:
                # `from torch.cuda.amp import custom_fwd`: the import is the edit (torch.amp's), not each `@custom_fwd`
                self.via_module.add(a.asname or a.name)
        if (line, hit[1].id) not in reported:
            reported.add((line, hit[1].id))
            self._add(hit[1], line, col, shown)

    def _alias_nodes(self, nodes: list[ast.AST]) -> list[ast.AST]:
        """Nodes on the lines that use an alias hiding a hinted name (`import torch.cuda as g`; `g.x()`)."""
        hidden = [k for k, q in self.aliases.items() if k != q and self.rules.hides_hint(k, q)]
        if not hidden:
            return []
        rx = re.compile(r"\b(?:" + "|".join(map(re.escape, hidden)) + r")\b")
        seen = {id(n) for n in nodes}
        return [n for n in _pruned_walk(self.tree, _lines_of(rx, self.text, self.starts), self.parents) if id(n) not in seen]

    # ------------------------------------------------------------ the nodes

    def _visit(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            self._note_docstring(node)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, (ast.Attribute, ast.Name)):
            if id(node) not in self.handled:
                self._name(node)
        elif self.strings and isinstance(node, ast.Constant) and isinstance(node.value, str):
            self._string(node)

    def _in_annotation(self, node: ast.AST) -> bool:
        """A node inside a type annotation (`-> Literal["cuda", "rocm"]`, `device: "cuda"`): a type, not a value."""
        child, parent = node, self.parents.get(id(node))
        for _ in range(32):
            if parent is None:
                return False
            if _annotation_of(parent, child):
                return True
            if isinstance(parent, ast.stmt):
                return False
            child, parent = parent, self.parents.get(id(parent))
        return False

    def _note_docstring(self, node) -> None:
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            self.docstrings.add(id(body[0].value))

    def _call(self, node: ast.Call) -> None:
        f = node.func
        if node.keywords and "python-decorator-keyword" in self.rules.structural:
            self._decorator_keywords(node)
        dotted = _dotted(f)
        q = _qualify(dotted, self.aliases) if dotted else None
        if q:
            hit = self.rules.attr_hit(q)
            if hit and (hit[1].keyword or hit[1].bare):
                self.handled.add(id(f))
                r = hit[1]
                if r.each and self._config_not_made_here(node, r):
                    return
                if (r.bare and not node.args and not node.keywords) or (r.keyword and (
                        any(k.arg in r.keywords for k in node.keywords) or _names_source(node, r.sources))):
                    self._add(r, f.lineno, f.col_offset, dotted)
        if isinstance(f, ast.Attribute) and f.attr in self.rules.methods and id(f) not in self.handled:
            r = self.rules.methods[f.attr]
            if r.call and not q:
                self.handled.add(id(f))
                self._add(r, f.end_lineno, f.end_col_offset - len(f.attr), f".{f.attr}()")

    def _config_not_made_here(self, node: ast.Call, rule: Rule) -> bool:
        """A config passed on by a pruner (`yield triton.Config(config, num_warps=w)`: made elsewhere), or returned by
        a factory whose callers pass its numbers (`def make_config(..., n_warps): return triton.Config(...,
        num_warps=n_warps)`)."""
        if isinstance(self.parents.get(id(node)), ast.Yield) and node.args \
                and isinstance(node.args[0], (ast.Name, ast.Attribute)):
            return True
        return self._config_factory(node, rule)

    def _config_factory(self, node: ast.Call, rule: Rule) -> bool:
        """A config returned by a function that takes its watched keyword as a parameter (`return
        triton.Config({...}, num_warps=n_warps)` in `def linear_config(..., n_warps=4)`): the numbers are tuned where
        the function is called with them, so the calls are the findings, not this line."""
        if not isinstance(self.parents.get(id(node)), ast.Return):
            return False
        value = next((k.value for k in node.keywords if k.arg in rule.keywords), None)
        func = self.parents.get(id(node))
        while func is not None and not isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            func = self.parents.get(id(func))
        if not isinstance(value, ast.Name) or func is None:
            return False
        params = [a.arg for a in (*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs)]
        if value.id not in params:
            return False
        self.factories[func.name] = (rule, value.id, params.index(value.id))
        return True

    def _factory_calls(self) -> None:
        """Calls of a config factory that pass its warp count as a number (`linear_config(64, 32, n_warps=4)`)."""
        rx = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(self.factories))) + r")\s*\(")
        reported = {(m.line, m.rule.id) for m in self.found}
        for node in _pruned_walk(self.tree, _lines_of(rx, self.text, self.starts)):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.factories):
                continue
            rule, param, pos = self.factories[node.func.id]
            value = next((k.value for k in node.keywords if k.arg == param), None)
            if value is None and pos < len(node.args):
                value = node.args[pos]
            if isinstance(value, ast.Constant) and isinstance(value.value, int) \
                    and (node.lineno, rule.id) not in reported:
                reported.add((node.lineno, rule.id))
                self._add(rule, node.lineno, node.col_offset, ast.unparse(node))

    def _decorator_keywords(self, node: ast.Call) -> None:
        """A decorator call whose keyword names CUDA (`@RunIf(min_cuda_gpus=2)`): a test kept to CUDA machines."""
        parent = self.parents.get(id(node))
        if not isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) \
                or not any(d is node for d in parent.decorator_list):
            return
        for rule in self.rules.structural["python-decorator-keyword"]:
            k = next((k for k in node.keywords if k.arg and rule.regex.search(k.arg)), None)
            if k is not None:
                self._add(rule, k.lineno, k.col_offset, f"{k.arg}=")    # the keyword's own line: the one to edit
                return

    def _name(self, node: ast.Attribute | ast.Name) -> None:
        dotted = _dotted(node)
        if dotted is None:
            return
        self._mark_inner(node)
        if isinstance(node, ast.Name) and (not isinstance(node.ctx, ast.Load) or not self._runs(node)
                                           or node.id in self.via_module):
            return      # a name bound again (`X = None` after a failed import) or passed along is not a use
        if self._calls_extension(node, dotted):
            rule = self.rules.structural["python-extension"][0]
            self._add(rule, node.lineno, node.col_offset, dotted)     # _C.rasterize_gaussians(...)
            return
        q = _qualify(dotted, self.aliases)
        if q:
            hit = self.rules.attr_hit(q)
            if hit and not hit[1].keyword and not hit[1].bare:
                self._add(hit[1], node.lineno, node.col_offset, dotted)
            elif not hit and (used := self.rules._longest(self.rules.import_uses, q)) and self._is_use(node) \
                    and q.split(".")[0] not in self.own:
                self._add(used[1], node.lineno, node.col_offset, dotted)   # e.g. rotary_emb.apply_rotary(...)
        elif isinstance(node, ast.Attribute) and node.attr in self.rules.methods:
            r = self.rules.methods[node.attr]
            if not r.call:
                self._add(r, node.end_lineno, node.end_col_offset - len(node.attr), f".{node.attr}")

    def _calls_extension(self, node: ast.AST, dotted: str) -> bool:
        """A use of one of the project's CUDA extensions: through a name bound to it (`_C.rasterize(...)`, a function
        imported from it), or a `torch.ops.mylib.op(...)` of an operator library registered for CUDA only."""
        if self.torch_ops and dotted.startswith(TORCH_OPS) and dotted.count(".") >= 3:
            return dotted.split(".")[2] in self.torch_ops and self._is_use(node)
        head = dotted.split(".")[0]
        return head in self.ext_aliases and ("." in dotted or head in self.ext_members) and self._is_use(node) \
            and self._in_extension(head, dotted) and self._extension_use(node, dotted)

    def _in_extension(self, head: str, dotted: str) -> bool:
        """`import pkg.backend` binds `pkg`: `pkg.backend.f()` calls the extension, `pkg.backends.flag` does not."""
        if dotted.endswith(("_cpu", ".cpu")):
            return False    # the extension's CPU entry point (`ext.conv_forward_cpu(...)`) runs anywhere
        ext = self.ext_aliases[head]
        if not ext.startswith(head + ".") or self.aliases.get(head) not in (None, head):
            return True     # bound to the extension itself (`from . import _C`)
        return dotted == ext or dotted.startswith(ext + ".")

    def _extension_use(self, node: ast.AST, dotted: str) -> bool:
        """A use of an extension that runs its code: not the read of one of its enum values (`_C.Precision.Fp16`,
        a type's member compared or stored), which names a constant the port keeps."""
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Call) and parent.func is node:
            return True
        return not any(p[:1].isupper() and not p.isupper() for p in dotted.split(".")[1:-1])

    def _runs(self, node: ast.Name) -> bool:
        """A bare name (bound by `from m import name`) is used where it runs: called, a decorator, a base class,
        a context manager; elsewhere (an argument, a fallback, a test) it is only mentioned."""
        if node.id not in self.aliases or self.aliases[node.id] == node.id:
            return True     # not a from-import: judged by the rules as before
        if _CONSTANT.fullmatch(node.id):
            return True     # a value (CUDA_HOME): reading it is using it, a test of it too
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Call):
            return parent.func is node
        if isinstance(parent, ast.Assign) and parent.value is node:
            return True     # `extension = CUDAExtension`: the builder chosen, called under the new name
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            return any(d is node for d in parent.decorator_list) or any(
                b is node for b in getattr(parent, "bases", ()))     # decorators and bases, not annotations
        return isinstance(parent, (ast.withitem, ast.Subscript, ast.Attribute))

    def _is_use(self, node: ast.AST) -> bool:
        """A mention that runs the imported code (a call, a value passed on), not one that only asks about it:
        `X is None`, `X is not None`, `X.__version__`, `hasattr(X, ...)`, `del X`, `isinstance(y, X)`, `except
        X.Error:`, nor one that binds the name anew (`X = None`)."""
        if isinstance(node, ast.Attribute) and node.attr in _NOT_USES:
            return False
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            return False    # `X = None` in the except clause of its import: the name bound anew, nothing run
        parent = self.parents.get(id(node))
        if isinstance(parent, ast.Assign) and parent.value is node and isinstance(node, ast.Name) \
                and all(isinstance(t, ast.Name) for t in parent.targets):
            return False    # `ext_c = ext`: another name for it, used where that name is
        if isinstance(parent, ast.Compare):
            return not any(isinstance(c, ast.Constant) and c.value is None for c in (parent.left, *parent.comparators))
        if isinstance(parent, ast.Call) and node is not parent.func:
            return not _asks_about(parent)
        if isinstance(parent, ast.Attribute) and parent.attr in _NOT_USES:
            return False
        if isinstance(parent, ast.ExceptHandler) or (isinstance(parent, ast.Tuple)
                                                     and isinstance(self.parents.get(id(parent)), ast.ExceptHandler)):
            return False    # `except X.Error:` catches what a call of it raised; the call is the use
        return not isinstance(parent, (ast.If, ast.IfExp, ast.BoolOp, ast.UnaryOp, ast.Assert))

    def _mark_inner(self, node: ast.AST) -> None:
        """Only the outermost node of a dotted chain reports: mark the inner ones as handled."""
        inner = node.value if isinstance(node, ast.Attribute) else None
        while isinstance(inner, ast.Attribute):
            self.handled.add(id(inner))
            inner = inner.value
        if inner is not None:
            self.handled.add(id(inner))

    def _string(self, node: ast.Constant) -> None:
        if id(node) in self.docstrings or _is_prose(node.value):
            return
        if node.value.replace("-", "_") in self.packages or self._in_annotation(node):
            return      # the project's own name (PACKAGE_NAME = "mylib"), a type (Literal["cuda", "rocm"])
        parent = self.parents.get(id(node))
        if _is_assert_message(node, parent, self.parents):
            return      # `assert found, f"no libcudnn.so in {home}"`: the message of a check, not a value
        if self._names_an_implementation(node, parent):
            return      # `impl='cuda'`, `assert impl in ['ref', 'cuda']`: the project's own kernels chosen by name
        compared = isinstance(parent, ast.Compare)
        for r in self.strings:
            if r.regex.search(node.value) and (r.compared or not compared):
                self._add(r, node.lineno, node.col_offset, repr(node.value))

    def _names_an_implementation(self, node: ast.Constant, parent: ast.AST | None) -> bool:
        """A string that picks one of the project's implementations by name: the default of a parameter named
        `impl` (`def op(x, impl='cuda')`), or compared with a name `impl` (`impl == 'cuda'`, `impl in ['ref', 'cuda']`).
        The device the code runs on is tested elsewhere (`x.device.type == 'cuda'`), and that stays a finding."""
        if isinstance(parent, (ast.List, ast.Tuple, ast.Set)):
            parent = self.parents.get(id(parent))
        if isinstance(parent, ast.Compare):
            return any(isinstance(s, ast.Name) and s.id in _IMPL_NAMES for s in (parent.left, *parent.comparators))
        if isinstance(parent, ast.arguments):
            args = [*parent.posonlyargs, *parent.args]
            pairs = list(zip(args[len(args) - len(parent.defaults):], parent.defaults, strict=True))
            pairs += [(a, d) for a, d in zip(parent.kwonlyargs, parent.kw_defaults, strict=True) if d is not None]
            return any(d is node and a.arg in _IMPL_NAMES for a, d in pairs)
        return False


_IMPL_NAMES = frozenset({"impl", "implementation"})

# an operator registered from Python: torch.library.impl("mylib::op", "cuda"[, EXT.op]), register_kernel(...), or
# custom_op("mylib::op", ..., device_types="cuda") (no device_types: every device)
_REGISTERS = ("impl(", "register_kernel(", "custom_op(")
_PY_OP_REGISTRATION = re.compile(
    r"\b(?:impl|register_kernel)\(\s*[\"'](\w+)::\w+[\"']\s*,\s*[\"'](\w+)[\"'](?:\s*,\s*(\w+)\.\w+\s*\))?"
    r"|\bcustom_op\(\s*[\"'](\w+)::\w+[\"'](?:[^)]*?\bdevice_types\s*=\s*[\"'](\w+)[\"'])?")


def cuda_only_python_libraries(text: str, extensions: frozenset[str] = frozenset()) -> frozenset[str]:
    """Operator libraries registered from Python for the CUDA dispatch key only (`@torch.library.impl("mylib::op",
    "cuda")` beside an abstract or fake kernel, `custom_op("mylib::op", ..., device_types="cuda")`), or whose
    kernels are functions of a CUDA extension this file builds (`torch.library.impl("mylib::op", "default",
    EXT.op)` after `EXT = load(..., sources=[... .cu])`: CUDA whatever the key): every `torch.ops.mylib.*` call runs
    a CUDA kernel. A library with any other device's kernel in the file is left out."""
    if "::" not in text or not any(r in text for r in _REGISTERS):
        return frozenset()
    lines = text.splitlines()     # only the lines that register an operator, with the two after them
    text = "\n".join("\n".join(lines[i:i + 3]) for i, ln in enumerate(lines) if any(r in ln for r in _REGISTERS))
    keys: dict[str, set[str]] = {}
    for m in _PY_OP_REGISTRATION.finditer(text):
        if m.group(1):
            lib, key = m.group(1), "cuda" if m.group(3) in extensions else m.group(2).lower()
        else:
            lib, key = m.group(4), (m.group(5) or "any").lower()
        keys.setdefault(lib, set()).add(key)
    return frozenset(lib for lib, ks in keys.items() if ks == {"cuda"})


def _is_assert_message(node: ast.AST, parent: ast.AST | None, parents: dict[int, ast.AST]) -> bool:
    """A string (or a piece of an f-string) that is an assert statement's message."""
    if isinstance(parent, ast.JoinedStr):
        node, parent = parent, parents.get(id(parent))
    return isinstance(parent, ast.Assert) and parent.msg is node

TORCH_OPS = "torch.ops."     # an extension named `torch.ops.<lib>`: an operator library registered for CUDA only

# decorators imported from a CUDA module that only mark a function (autocast's custom_fwd/custom_bwd): one edit, at
# their import, not at each use
_MARKING_DECORATORS = frozenset({"custom_fwd", "custom_bwd"})

# a compiled extension known by its name: `import awq_ext`, `from marlin_cuda import mul`, `try_import("exl_ext")`
NAMED_EXTENSION = re.compile(r"^[ \t]*(?:import|from)[ \t]+([A-Za-z]\w*_(?:cuda|ext))\b(?![ \t]*\.)"
                             r"|import\w*\([ \t]*f?[\"']([A-Za-z][\w.{}]*_(?:cuda|ext|C))[\"'][ \t]*\)")
_NAMED_KEYS = ("_cuda", "_ext", "_C'", '_C"')
_NAMED_ARGUMENT = re.compile(r"[ \t]*f?[\"']([A-Za-z][\w.{}]*_(?:cuda|ext|C))[\"'][ \t]*,?[ \t]*\)?[ \t]*$")
_IMPORT_CALL_OPEN = re.compile(r"import\w*\([ \t]*$")


def named_extensions(text: str) -> list[tuple[int, str | None, str | None]]:
    """(offset, module of an import statement, module given to an import function) of each extension known by its
    name. Only the lines holding one of the keys are matched: a substring search finds them (fast on files that
    hold none, which are most)."""
    lines: set[int] = set()
    for key in _NAMED_KEYS:
        i = text.find(key)
        while i >= 0:
            start = text.rfind("\n", 0, i) + 1
            lines.add(start)
            end = text.find("\n", i)
            i = text.find(key, end) if end >= 0 else -1
    out = []
    for start in sorted(lines):
        end = text.find("\n", start)
        line = text[start:end if end >= 0 else len(text)]
        found = [(start + m.start(), m.group(1), m.group(2)) for m in NAMED_EXTENSION.finditer(line)]
        if not found and start and (m := _NAMED_ARGUMENT.match(line)):
            # `importlib.import_module(` / `    "fused_layer_norm_cuda")`: the call opened on the line before
            before = text.rfind("\n", 0, start - 1) + 1
            if _IMPORT_CALL_OPEN.search(text, before, start - 1):
                found = [(before, None, m.group(1))]
        out += found
    return out


def names_extension(text: str) -> bool:
    """Whether the text may import a compiled extension known by its name."""
    return bool(named_extensions(text))


def _module_argument(arg: ast.AST) -> str | None:
    """A module name given to an import function: a string, or an f-string read with `{...}` for its fields."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{" + (_dotted(v.value) or "") + "}"
                       for v in arg.values)
    return None


def _name_argument(call: ast.Call) -> ast.AST | None:
    """An extension builder's `name`: its keyword, else its first positional argument."""
    return next((k.value for k in call.keywords if k.arg == "name"), call.args[0] if call.args else None)


def _builds_cuda(q: str, call: ast.Call) -> bool:
    """A CUDAExtension, or a load() given CUDA flags or .cu sources."""
    if q.endswith("CUDAExtension"):
        return True
    if any(k.arg in ("extra_cuda_cflags", "cuda_sources", "with_cuda") for k in call.keywords):
        return True
    return any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.endswith((".cu", ".cuh"))
               for n in ast.walk(call))


_SETUP_CALL = re.compile(r"\bsetup\s*\(")
_NAME_KEYWORD = re.compile(r"""\bname\s*=\s*(["'])([A-Za-z0-9][\w.-]*)\1""")


def setup_names(text: str) -> frozenset[str]:
    """The distribution name a setup script gives setup(name=...): the project's own name, no dependency."""
    calls = list(_SETUP_CALL.finditer(text)) if "setup" in text else []
    if not calls:
        return frozenset()
    m = _NAME_KEYWORD.search(text, calls[-1].end())
    return frozenset({m.group(2).replace("-", "_")}) if m else frozenset()


def _port_aliased(aliased: list[tuple[str, int, int]], shown: str, line: int) -> bool:
    """A use, where it stands, of a name both sides of a port conditional import."""
    head = re.match(r"[A-Za-z_]\w*", shown)
    return head is not None and any(name == head.group(0) and a <= line <= b for name, a, b in aliased)


_CAPABILITY = re.compile(r"[1-9]\d?\.\d[af]?(?:\+PTX)?")
_CAPABILITY_STRING = re.compile(r"""["'][1-9]\d?\.\d[af]?(?:\+PTX)?["']""")


def _is_capability(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(_CAPABILITY.fullmatch(node.value))


# NVIDIA's compute capabilities written as SM numbers (`[70, 75, 80]`, `["80", "86", "120a"]`)
_SM_NUMBERS = frozenset({20, 21, 30, 32, 35, 37, 50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90, 100, 101, 103,
                         110, 120, 121})
_SM_LIST = re.compile(r"""[\[(]\s*(?:["']?\d{2,3}[af]?["']?\s*,\s*){2,}""")


def _is_sm(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value in _SM_NUMBERS
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        m = re.fullmatch(r"(\d{2,3})[af]?", node.value)
        return m is not None and int(m.group(1)) in _SM_NUMBERS
    return False


def _capability_list(node: ast.AST) -> bool:
    """A list of two or more compute capabilities (`["7.0", "7.5", "8.0"]`), or of three or more SM numbers
    (`[70, 75, 80]`), possibly joined with more."""
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        node = node.left
    if not isinstance(node, (ast.List, ast.Tuple)) or len(node.elts) < 2:
        return False
    return all(map(_is_capability, node.elts)) or (len(node.elts) >= 3 and all(map(_is_sm, node.elts)))


def _is_list_value(node: ast.AST) -> bool:
    """A list, or a list joined with more (`[...] + extra_flags(...)`)."""
    while isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        node = node.left
    return isinstance(node, (ast.List, ast.ListComp))


def _names_source(call: ast.AST, endings: tuple[str, ...]) -> bool:
    """A call (or one of its arguments) given a file whose name has one of these endings (`load(...,
    sources=["k.cpp", "k.cu"])`)."""
    return bool(endings) and any(isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.endswith(endings)
                                 for n in ast.walk(call))


def _hinted(rule: Rule, text: str) -> bool:
    return not rule.hint or any(h in text for h in rule.hint)


def _value_name(node: ast.AST) -> str | None:
    """The dotted name a compared value stands for: `x`, `a.b.major`, `parse(torch.version.cuda)` (a call of one
    argument stands for its argument), `get_version()` (a call of none for its function), `capability[0]` (an
    element taken by a literal index stands for the whole: `int(cc[0]) >= 8`)."""
    while isinstance(node, (ast.Call, ast.Subscript)):
        if isinstance(node, ast.Subscript):
            if not (isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, int)):
                return None
            node = node.value
        elif len(node.args) == 1 and not node.keywords:
            node = node.args[0]
        elif not node.args:
            node = node.func
        else:
            return None
    return _dotted(node)


def _names_rule(rules: list[Rule], node: ast.AST) -> Rule | None:
    """The first rule whose pattern names the value: itself, a call's function or one of its arguments, a
    tuple's element (`get_cuda_bare_metal_version(CUDA_HOME)`, `parse(torch.version.cuda)`)."""
    parts = list(node.elts) if isinstance(node, ast.Tuple) else [node]
    names = []
    for n in parts:
        if isinstance(n, ast.Call):
            names += [_dotted(n.func), *(_dotted(a) for a in n.args)]
            n = n.args[0] if len(n.args) == 1 and isinstance(n.args[0], ast.Call) else None
            if n is not None:
                names += [_dotted(n.func), *(_dotted(a) for a in n.args)]
        elif isinstance(n, (ast.Name, ast.Attribute)):
            names.append(_dotted(n))
    return next((r for r in rules for d in names if d and r.regex.search(d)), None)


_VERSION_STRING = re.compile(r"v?\d+(?:\.\d+)*[\w.+-]*")


def _is_literal(node: ast.AST) -> bool:
    """A number, a version string, a tuple of numbers, or Version("12.1") / parse("12.1")."""
    if isinstance(node, ast.Constant):   # a string only when it reads as a version ("12.1", "v8.9.2")
        return (isinstance(node.value, (int, float)) and not isinstance(node.value, bool)) or (
            isinstance(node.value, str) and bool(_VERSION_STRING.fullmatch(node.value)))
    if isinstance(node, ast.Tuple):
        return bool(node.elts) and all(_is_number(e) for e in node.elts)
    if isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
        name = _dotted(node.func) or ""
        return name.rsplit(".", 1)[-1] in _VERSION_CALLS and isinstance(node.args[0], ast.Constant) \
            and isinstance(node.args[0].value, str)
    return False


# A line that can hold a gate: a comparison, or a call given a number.
_GATE_LINE = re.compile(r"[<>]|[=!]=|[(,]\s*\d")
_GATE_OR_BIND = re.compile(r"[<>]|[=!]?=|[(,]\s*\d")    # a gate, or an assignment binding a name
_VERSION_CALLS = frozenset({"Version", "parse", "LooseVersion", "StrictVersion", "parse_version"})


def _compare_gate(rules: list[Rule], bound: dict[str, Rule], node: ast.Compare) -> Rule | None:
    """The rule of a comparison of a named value with a literal (`is`/`in` tests are no gates)."""
    if any(isinstance(op, (ast.Is, ast.IsNot, ast.In, ast.NotIn)) for op in node.ops):
        return None
    sides = [node.left, *node.comparators]
    if not any(_is_literal(s) for s in sides):
        # no literal: a gate only when every side is a value the rules name (two CUDA versions compared)
        names = [_value_name(s) for s in sides]
        if not all(names) or not all(any(r.regex.search(n) for r in rules) or n.split(".")[0] in bound
                                     for n in names):
            return None
    for side in sides:
        name = _value_name(side)
        if name is None:
            continue
        head = name.split(".")[0]
        rule = next((r for r in rules if r.regex.search(name)), None) or bound.get(head)
        if rule is not None:
            return rule
    return None


def _annotation_of(parent: ast.AST, node: ast.AST) -> bool:
    """Whether `node` is (the top of) an annotation of `parent`."""
    if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return parent.returns is node
    if isinstance(parent, (ast.arg, ast.AnnAssign)):
        return parent.annotation is node
    return False


def _asks_about(call: ast.Call) -> bool:
    """A call that only asks about its argument: `hasattr(X, ...)`, `isinstance(y, X)`, a signature probe
    (`inspect.getfullargspec(X.forward)`); any other call given X passes it on, a use."""
    if isinstance(call.func, ast.Name):
        return call.func.id in ("hasattr", "getattr", "isinstance", "issubclass", "id", "type", "bool")
    return (_dotted(call.func) or "").startswith("inspect.")


def _bound_name(node: ast.AST) -> tuple[str | None, ast.AST | None]:
    """(name, value) of `name = value`, `name: T = value` or a keyword argument `name=value`; else (None, None)."""
    if isinstance(node, ast.keyword):
        return node.arg, node.value
    if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id, node.value
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id, node.value
    return None, None


def _tuned_entries(node: ast.AST, watched: dict) -> list[tuple[Rule, ast.AST]]:
    """(rule, value) where a table or a heuristic sets a watched keyword to a tuned number: a dict entry
    (`"num_warps": 4`, `"num_warps": lambda args: 8`), each number a function named for it returns
    (`def softmax_heur_num_warps(args): ... return 8`)."""
    out = []
    if isinstance(node, ast.Dict):
        for k, v in zip(node.keys, node.values, strict=True):
            rule = watched.get(k.value) if isinstance(k, ast.Constant) and isinstance(k.value, str) else None
            v = v.body if isinstance(v, ast.Lambda) else v
            if rule is not None and _is_tuned(v):
                out.append((rule, v))
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        rule = next((r for w, r in watched.items() if w in node.name), None)
        if rule is not None:
            out += [(rule, n.value) for n in ast.walk(node) if isinstance(n, ast.Return) and _is_tuned(n.value)]
    return out


def _is_tuned(node: ast.AST | None) -> bool:
    """A literal number, a choice between literal numbers (`2 if block_n <= 64 else 4`), or a count derived from
    a 32-wide warp (`min(16, BLOCK_SIZE // 32)`)."""
    if isinstance(node, ast.IfExp):     # one chosen by a port test holds each stack's number: ported
        return _is_number(node.body) and _is_number(node.orelse) and not tests_port(node.test)
    if isinstance(node, (ast.Call, ast.BinOp)):
        return any(isinstance(n, ast.BinOp) and isinstance(n.op, (ast.FloorDiv, ast.Div)) and _is_number(n.right)
                   and n.right.value == 32 for n in ast.walk(node))
    return _is_number(node)


def _is_number(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is int


_CONSTANT = re.compile(r"[A-Z][A-Z0-9_]*")
_NOT_USES = frozenset({"__version__", "version", "__file__", "__name__", "__spec__", "__path__", "VERSION"})


def _minimal_literals(literals) -> tuple[str, ...]:
    """The literals, shortest first, without any that contains another (a text holding it holds the other)."""
    lits = sorted(set(literals), key=len)
    return tuple(h for i, h in enumerate(lits) if not any(o in h for o in lits[:i]))


def _lines_of(rx: re.Pattern, text: str, starts: list[int]) -> list[int]:
    """Sorted line numbers (1-based) holding a match of rx."""
    out: list[int] = []
    for m in rx.finditer(text):
        line = bisect_right(starts, m.start())
        if not out or out[-1] != line:
            out.append(line)
    return out


def _lines_with(literals: tuple[str, ...], text: str, starts: list[int],
                found: set[str] | None = None) -> list[int]:
    """Sorted line numbers (1-based) holding one of the literals (str.find is much faster than a regex
    alternation over a large file); the literals that occur are added to `found`."""
    lines: set[int] = set()
    for lit in literals:
        i = text.find(lit)
        if i >= 0 and found is not None:
            found.add(lit)
        while i >= 0:
            line = bisect_right(starts, i)
            lines.add(line)
            # jump to the next line: one hit per line is enough
            i = text.find(lit, starts[line] if line < len(starts) else len(text))
    return sorted(lines)


def _bound_from(compare: tuple, nodes: list[ast.AST]) -> dict[str, Rule]:
    """Variables bound from an expression a compare rule names (`_, v = get_cuda_bare_metal_version(...)`)."""
    bound: dict[str, Rule] = {}
    for node in nodes:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            rule = _names_rule(compare, node.value)
            if rule is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name) and n.id != "_":
                        bound.setdefault(n.id, rule)
    return bound


def _gate_rule(node: ast.AST, compare: tuple, call: tuple, bound: dict[str, Rule]) -> Rule | None:
    """The rule a comparison, or a call given literals only (a number among them), gates by, if any:
    `has_cuda_capability(9, 0)`, `check_cudnn_version_and_warn("--cudnn_gbn", 8500)`."""
    if isinstance(node, ast.Compare) and compare:
        return _compare_gate(compare, bound, node)
    if isinstance(node, ast.Call) and call and node.args and any(_is_number(a) for a in node.args) \
            and all(_is_number(a) or isinstance(a, ast.Constant) and isinstance(a.value, str) for a in node.args) \
            and not node.keywords:
        name = _dotted(node.func)
        return next((r for r in call if name and r.regex.search(name)), None)
    return None


# Fields that hold no node a rule reads: expression contexts (Load/Store) and operators (read off their parent).
_SKIPPED_FIELDS = frozenset({"ctx", "op", "ops"})
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {}
_DECORATED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _child_fields(cls: type) -> tuple[str, ...]:
    """A node class's fields that can hold child nodes, last first (they are pushed on a stack)."""
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        fields = _CHILD_FIELDS[cls] = tuple(reversed([f for f in cls._fields if f not in _SKIPPED_FIELDS]))
    return fields


def _pruned_walk(tree: ast.AST, lines: list[int], parents: dict[int, ast.AST] | None = None) -> list[ast.AST]:
    """Nodes in pre-order (a parent before its children), skipping every node whose line range holds none of
    `lines`. Nodes without a position (the module, keywords' holders) are always entered; expression contexts and
    operators are not walked. `parents`, when given, gets each node's parent (by id)."""
    out: list[ast.AST] = []
    if not lines:
        return out
    stack = [tree]
    last = len(lines)
    lo, hi = lines[0], lines[-1]
    AST = ast.AST
    while stack:
        node = stack.pop()
        out.append(node)
        for name in _child_fields(type(node)):
            v = getattr(node, name, None)
            if v is None:
                continue
            for c in (reversed(v) if isinstance(v, list) else (v,)):
                if not isinstance(c, AST):
                    continue
                ln = getattr(c, "lineno", None)
                if ln is not None:
                    if isinstance(c, _DECORATED) and c.decorator_list:
                        ln = min(ln, c.decorator_list[0].lineno)     # a definition starts at its first decorator
                    end = c.end_lineno or ln
                    if end < lo or ln > hi:
                        continue
                    i = bisect_left(lines, ln)
                    if i == last or lines[i] > end:
                        continue
                if parents is not None:
                    parents[id(c)] = node
                stack.append(c)
    return out


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _qualify(dotted: str, aliases: dict[str, str]) -> str | None:
    """The full module path of a dotted name whose first part was imported, else None (a local variable)."""
    head, _, rest = dotted.partition(".")
    base = aliases.get(head)
    if base is None:
        if head != "torch":     # `torch` used without an import we saw (star import, exec'd snippet): still torch
            return None
        base = "torch"
    return f"{base}.{rest}" if rest else base


_STOPWORDS = frozenset("a an the is are was were be not no but and or of to in on at for with by if it this that "
                       "set found none could cannot can will should please because when".split())


def _is_prose(s: str) -> bool:
    """A message or log text rather than a value: three or more words, one of them a common English word.
    'CUDA_HOME' and 'nvidia-smi --query-gpu=name' are values; 'Set CUDA_HOME to a toolkit' is prose."""
    words = s.lower().split()
    return len(words) >= 3 and any(w in _STOPWORDS for w in words)


def _short(s: str, limit: int = 120) -> str:
    s = " ".join(s.split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _line_starts(text: str) -> list[int]:
    starts = [0]
    i = text.find("\n")
    while i >= 0:
        starts.append(i + 1)
        i = text.find("\n", i + 1)
    return starts


def _position(starts: list[int], offset: int) -> tuple[int, int]:
    """1-based line and 0-based column of a character offset."""
    i = bisect_right(starts, offset) - 1
    return i + 1, offset - starts[i]
