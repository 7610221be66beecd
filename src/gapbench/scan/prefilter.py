"""Which files can hold a finding, told from their bytes before they are decoded or parsed.

Each matcher a file goes through (by its kinds, engine.kinds_of) has trigger words: literals one of which every
file it can report anything in contains. A file holding none of its kinds' trigger words is counted as scanned
and goes no further: it is not decoded (an ASCII file; any other is checked for UTF-8, for the same note) and not
parsed. A file holding one goes through the matchers exactly as before, their own gates included, so the
prefilter only ever skips work whose answer is known: no finding and no note.

The trigger words are derived when the rules load, never listed by hand:

- Python (`python`): the Python reader's own gate literals (PythonRules: the hints of every python-* rule, lower
  case, none containing another); a file none of them occurs in is not parsed by it either. When a string rule
  has no hint the reader parses every file, and so nothing is skipped.
- C/C++ headers and sources (`cpp?`): the literals the header test (match_text.CPP_CUDA_HINT) needs, read off
  its pattern; only a file passing that test is read as GPU code.
- Dependency and build files (`deps`, `build`): the literals each rule of the kind needs, read off its pattern
  (rules found by the YAML, CMake and Makefile readers included: those test a key, a command or a variable name
  that is the file's own text). A rule whose pattern gives none makes every file of its kind pass.
- Notebooks and CUDA sources (`notebook`, `cpp`): always read.

A pattern's literals (`literals_of`): runs of characters that every match contains, parsed from the pattern as
Python's re module parses it. Compared without case (rules may ignore it, CMake lower-cases command names), cut
at whitespace, quotes and backslashes (a line joined from several, a YAML scalar folded or unquoted, a blanked
comment), and a non-ASCII character is never part of one. The search is one case-insensitive pass of RE2 (google-
re2, which pathspec already brings) over the raw bytes per group of literals; without RE2, Python's re.
"""

from __future__ import annotations

import os
import re

try:
    from re import _parser as _sre
except ImportError:  # Python 3.10
    import sre_parse as _sre  # type: ignore[no-redef]

try:
    import re2
except ImportError:  # optional: pathspec's re2 extra brings it
    re2 = None

# Characters outside ASCII that Python's case-insensitive matching (and str.lower) takes for ASCII letters:
# İ and ı for i, ſ for s, the Kelvin sign for k (test_scan_prefilter checks every code point). A file holding one
# is never skipped.
ASCII_LOOKALIKES = ("\u0130", "\u0131", "\u017f", "\u212a")
_LOOKALIKE_BYTES = tuple(c.encode("utf-8") for c in ASCII_LOOKALIKES)
# What a literal is cut at: a match found in a joined, folded, unquoted or blanked text may have other bytes there.
_CUT = frozenset(" \t\n\r\f\v'\"\\")
_EXACT_MOST = 64        # the most strings a pattern piece is followed as exactly
_ALTERNATIVES_MOST = 32  # the most alternatives a pattern's literals are kept as
_ZERO_WIDTH = ("AT", "ASSERT", "ASSERT_NOT")
_REPEATS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")
OFF_ENV = "GAPBENCH_SCAN_PREFILTER"     # "0": no prefilter (every file decoded and matched, for comparisons)


def enabled() -> bool:
    """Whether scans prefilter (the one place the switch is read)."""
    return os.environ.get(OFF_ENV, "1") != "0"


# ---------------------------------------------------------------- a rule's pattern widened for RE2

# Lookarounds (RE2 has none): dropped, the pattern only widens. A backreference: any word.
_LOOKAROUND = re.compile(r"\(\?<?[!=](?:[^()\\]|\\.|\((?:[^()\\]|\\.)*\))*\)")
_BACKREF = re.compile(r"\\[1-9]")
# What RE2 and Python's re read alike only in ASCII text with none of the separators Python's \s also takes.
_NOT_GATE_SAFE = re.compile(r"[^\x00-\x0a\x0c-\x1b\x20-\x7f]")


def superset_gate(pattern: str):
    """An RE2 search matching wherever the pattern matches (and more): its lookarounds dropped, a backreference
    read as a word; None without RE2 or when RE2 cannot read the result. Used only where gate_safe(text)."""
    if re2 is None:
        return None
    wide = _BACKREF.sub(r"\\w+", _LOOKAROUND.sub("", pattern))
    try:        # a construct RE2 lacks (an atomic group, a possessive repeat, \Z) fails here: no gate
        opts = re2.Options()
        opts.log_errors = False
        return re2.compile("(?m)" + wide, opts)
    except Exception:
        return None


def gate_safe(text: str) -> bool:
    """Whether RE2's reading of \\b, \\w and \\s agrees with Python's on this text: ASCII without a vertical tab or
    the file, group, record and unit separators."""
    return text.isascii() and _NOT_GATE_SAFE.search(text) is None


# ---------------------------------------------------------------- literals from a pattern

def literals_of(pattern: str, flags: int = 0) -> list[list[frozenset[str]]] | None:
    """Literals (lower case) every match of the pattern contains, as alternatives: a match contains, for some
    alternative, a literal of each of its sets. None when no such literals are known (the pattern can match
    without one)."""
    try:
        parsed = _sre.parse(pattern, flags)
    except (re.error, RecursionError, OverflowError):
        return None
    dnf = _Piece.of_seq(list(parsed)).dnf()
    if any(not conj for conj in dnf):
        return None
    return [list(conj) for conj in dnf]


def _telling(s: frozenset[str]) -> tuple[int, int]:
    """Longer literals first, then fewer of them."""
    return min(len(x) for x in s), -len(s)


def _name(op) -> str:
    return getattr(op, "name", str(op))


_ANYTHING: list[tuple[frozenset[str], ...]] = [()]     # one alternative needing nothing


def _both(a: list[tuple], b: list[tuple]) -> list[tuple]:
    """Two requirements together (alternatives of sets, each set needed): their product while it stays small,
    else each alternative's most telling set in one."""
    out = [x + y for x in a for y in b]
    if len(out) <= _ALTERNATIVES_MOST:
        return out
    return _one(a) if len(a) >= len(b) else _one(b)


def _one(dnf: list[tuple]) -> list[tuple]:
    """One set a match needs a literal of, from alternatives: the most telling set of each, together."""
    if any(not conj for conj in dnf):
        return _ANYTHING
    return [(frozenset().union(*(max(conj, key=_telling) for conj in dnf)),)]


class _Piece:
    """What a part of a pattern says: `exact`, every string it can match (when few and short), and `alts`,
    alternatives of sets of literals: a match of the part holds, for one alternative, a literal of each set."""

    def __init__(self, exact: frozenset[str] | None = None, alts: list[tuple] | None = None):
        self.exact = exact
        self.alts = _ANYTHING if alts is None else alts

    def dnf(self) -> list[tuple]:
        if self.exact and "" not in self.exact:
            return _both(self.alts, [(self.exact,)])
        return self.alts

    @classmethod
    def of_seq(cls, items: list) -> _Piece:
        """A concatenation: exact strings joined while they stay few, each run closed needed on its own."""
        cur: frozenset[str] | None = frozenset({""})
        need = _ANYTHING
        whole = True    # every item so far joined into `cur`: the sequence matches exactly those strings
        for op, av in items:
            p = cls.of_item(_name(op), av)
            need = _both(need, p.alts)
            if cur is not None and p.exact is not None and len(cur) * len(p.exact) <= _EXACT_MOST:
                cur = frozenset(a + b for a in cur for b in p.exact)
                continue
            whole = False
            if cur and "" not in cur:
                need = _both(need, [(cur,)])
            cur = p.exact
        if whole:
            return cls(cur)
        if cur and "" not in cur:
            need = _both(need, [(cur,)])
        return cls(None, need)

    @classmethod
    def of_item(cls, op: str, av) -> _Piece:
        if op == "LITERAL":
            c = chr(av)
            return cls(frozenset({c.lower()})) if c.isascii() and c not in _CUT else cls()
        if op == "IN":
            return cls(_class_chars(av))
        if op in _ZERO_WIDTH:
            return cls(frozenset({""}))
        if op == "SUBPATTERN":
            return cls.of_seq(list(av[-1]))
        if op == "ATOMIC_GROUP":
            return cls.of_seq(list(av))
        if op == "BRANCH":
            return cls._branch([cls.of_seq(list(a)) for a in av[1]])
        if op in _REPEATS:
            return cls._repeat(av)
        return cls()    # any character, a class, a back reference: nothing known

    @classmethod
    def _branch(cls, alts: list[_Piece]) -> _Piece:
        if all(a.exact is not None for a in alts):
            union = frozenset().union(*(a.exact for a in alts))
            if len(union) <= _EXACT_MOST:
                return cls(union)
        dnf = [conj for a in alts for conj in a.dnf()]
        if any(not conj for conj in dnf):
            return cls()
        return cls(None, dnf if len(dnf) <= _ALTERNATIVES_MOST else _one(dnf))

    @classmethod
    def _repeat(cls, av) -> _Piece:
        lo, hi, body = av[0], av[1], cls.of_seq(list(av[2]))
        if lo == 0:
            return cls(frozenset({""}) | body.exact) if hi == 1 and body.exact is not None else cls()
        if lo == hi == 1:
            return body
        return cls(None, body.dnf())


def _class_chars(items) -> frozenset[str] | None:
    """The characters of a class such as [Cc] or [<"], lower case, when it is a short list of plain ones."""
    chars = set()
    for op, av in items:
        if _name(op) != "LITERAL":
            return None
        c = chr(av)
        if not c.isascii() or c in _CUT:
            return None
        chars.add(c.lower())
    return frozenset(chars) if 0 < len(chars) <= 8 else None


# ---------------------------------------------------------------- the search

def _compile(literals: frozenset[str]):
    alt = "|".join(re.escape(x) for x in sorted(literals, key=lambda x: (-len(x), x))).encode("ascii")
    if re2 is not None:
        opts = re2.Options()
        opts.case_sensitive = False
        opts.encoding = re2.Options.Encoding.LATIN1     # one byte, one character: ASCII case folding only
        opts.never_capture = True
        return re2.compile(alt, opts)
    return re.compile(alt, re.IGNORECASE)


def _compile_set(literals: frozenset[str]):
    """An RE2 set of the literals: which of them occur, overlapping ones included, in one pass."""
    opts = re2.Options()
    opts.case_sensitive = False
    opts.encoding = re2.Options.Encoding.LATIN1
    found = re2.Set.SearchSet(opts)
    for x in sorted(literals):
        if found.Add(re.escape(x).encode("ascii")) < 0:
            raise ValueError(f"literal {x!r} not compiled")
    found.Compile()
    return found


class Prefilter:
    """Trigger words per kind of file (None: every such file is read), and the search for them."""

    def __init__(self, kinds: dict[str, list[list[frozenset[str]]] | None]):
        self.kinds = kinds
        self._compiled: dict[frozenset[str], object] = {}
        self._by_kinds: dict[tuple[str, ...], list[tuple] | None] = {}
        self._quick: tuple | None = None

    @classmethod
    def for_rules(cls, ruleset, python_gate: frozenset[str] | None, cpp_hint: re.Pattern) -> Prefilter:
        """From the rules and the readers' own gates: `python_gate` the Python reader's literals (None when it
        reads every file), `cpp_hint` the pattern a C/C++ file must match to be read as GPU code."""
        kinds: dict[str, list[list[frozenset[str]]] | None] = {
            "python": [[frozenset(python_gate)]] if python_gate else None,
            "cpp?": literals_of(cpp_hint.pattern, cpp_hint.flags),
            "notebook": None, "cpp": None}
        for kind in ("deps", "build"):
            alts = [literals_of(r.pattern, r.regex.flags) if r.regex is not None else None
                    for r in ruleset.of_kind(kind)]
            kinds[kind] = None if any(a is None for a in alts) else [sets for a in alts for sets in a]
        return cls(kinds)

    def _alternatives(self, kinds: tuple[str, ...]) -> list[tuple] | None:
        """The searches for files of these kinds (a file can match when, for some tuple, each search finds a
        literal), or None: every such file is read. The alternatives of one literal set are one search, first."""
        if kinds not in self._by_kinds:
            alts: list[list[frozenset[str]]] = []
            for k in kinds:
                if self.kinds.get(k) is None:
                    self._by_kinds[kinds] = None
                    return None
                alts += self.kinds[k]
            singles = frozenset().union(*(sets[0] for sets in alts if len(sets) == 1))
            out = [(self._search(singles),)] if singles else []
            multi = [sets for sets in alts if len(sets) > 1]
            if multi:
                # one search first for any literal of the alternatives' first sets: most files hold none, and then
                # no alternative of several sets can hold in them either
                heads = frozenset().union(*(sets[0] for sets in multi))
                out.append((self._search(heads), [tuple(self._search(s) for s in sets[1:]) for sets in multi],
                            [self._search(sets[0]) for sets in multi]))
            self._by_kinds[kinds] = out
        return self._by_kinds[kinds]

    def _search(self, literals: frozenset[str]):
        if literals not in self._compiled:
            self._compiled[literals] = _compile(literals)
        return self._compiled[literals]

    def quick_present(self, data: bytes) -> frozenset[str] | None:
        """The Python reader's gate literals these bytes hold, as it finds them in the decoded text (lower-cased),
        in one pass; None when that cannot be told from the bytes (a look-alike character, no RE2)."""
        if self._quick is None:
            quick = self.kinds.get("python")
            self._quick = (sorted(quick[0][0]), _compile_set(quick[0][0])) if quick and re2 is not None else ()
        if not self._quick or (not data.isascii() and any(b in data for b in _LOOKALIKE_BYTES)):
            return None
        names, found = self._quick
        return frozenset(names[i] for i in found.Match(data) or ())

    def may_match(self, data: bytes, kinds: tuple[str, ...], name: str = "") -> bool:
        """False only when no matcher of these kinds can report anything in a file of these bytes."""
        alts = self._alternatives(kinds)
        if alts is None:
            return True
        if not data.isascii() and any(b in data for b in _LOOKALIKE_BYTES):
            return True
        if b"\\" in data and "build" in kinds and name.lower().endswith((".yml", ".yaml")):
            return True     # a double-quoted YAML scalar's escapes can spell a key its bytes do not hold
        for alt in alts:
            if len(alt) == 1:
                if alt[0].search(data):
                    return True
            elif alt[0].search(data):       # any first literal of the alternatives of several sets: try each
                if any(head.search(data) and all(rx.search(data) for rx in rest)
                       for head, rest in zip(alt[2], alt[1], strict=True)):
                    return True
        return False
