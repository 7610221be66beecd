""".gitignore matching with pathspec (git's wildmatch rules), over the nested .gitignore files of a tree.

pathspec compiles each pattern to a regular expression; with google-re2 installed (the `re2` extra this
package depends on) matching runs in linear time, so stacked wildcards (`**a**a**a…`) cannot backtrack for
minutes. A pattern that does not compile (`[z-a]`), a line longer than MAX_PATTERN_CHARS and one that re2 refuses
for its size are skipped and reported, never fatal; the patterns are compiled in chunks, so that thousands of
them stay within re2's memory budget.

Not read: core.excludesFile and .git/info/exclude. As in git, a file below an excluded folder cannot be
re-included (the folder is never entered).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pathspec import GitIgnoreSpec
from pathspec.patterns.gitignore import GitIgnorePatternError
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern

try:
    from re2 import error as _CompileError  # what re2 raises for a set too large for its memory budget
except ImportError:     # pathspec's own backend: no such limit
    _CompileError = re.error

MAX_PATTERN_CHARS = 4096    # git's longest path; a longer line is skipped (and re2 would refuse or log it)
CHUNK = 256                 # patterns compiled together; re2 refuses a set beyond its memory budget
SHOWN = 80                  # characters of a skipped pattern that its note shows


@dataclass(frozen=True)
class BadPattern:
    line: int       # 1-based line in the .gitignore file
    pattern: str    # as shown: a long one is cut
    why: str


class Patterns:
    """One .gitignore file's patterns, compiled in chunks in file order (later lines win, across chunks too)."""

    def __init__(self, specs: list[GitIgnoreSpec]):
        self.specs = specs

    def include(self, path: str) -> bool | None:
        """True: ignored; False: re-included by a `!` pattern; None: no pattern matches."""
        verdict = None
        for spec in self.specs:
            result = spec.check_file(path).include
            if result is not None:
                verdict = result
        return verdict


def _shown(line: str) -> str:
    return line if len(line) <= SHOWN else f"{line[:SHOWN]}... ({len(line):,} characters)"


def load(text: str) -> tuple[Patterns | None, list[BadPattern]]:
    """The compiled patterns of one .gitignore file (None when it has none) and the lines that were skipped."""
    patterns: list[tuple[int, str, GitIgnoreSpecPattern]] = []
    bad: list[BadPattern] = []
    for number, line in enumerate(text.splitlines(), 1):
        if len(line) > MAX_PATTERN_CHARS:
            bad.append(BadPattern(number, _shown(line), f"longer than {MAX_PATTERN_CHARS} characters"))
            continue
        try:
            pattern = GitIgnoreSpecPattern(line)
        except (re.error, GitIgnorePatternError, ValueError) as e:
            bad.append(BadPattern(number, _shown(line), str(e)))
            continue
        if pattern.include is not None:     # blank lines and comments compile to nothing
            patterns.append((number, line, pattern))
    specs: list[GitIgnoreSpec] = []
    for i in range(0, len(patterns), CHUNK):
        specs += _compiled(patterns[i:i + CHUNK], bad)
    bad.sort(key=lambda b: b.line)
    return (Patterns(specs) if specs else None), bad


def _compiled(patterns: list[tuple[int, str, GitIgnoreSpecPattern]], bad: list[BadPattern]) -> list[GitIgnoreSpec]:
    """The patterns as one spec, or as several when re2 refuses them together; one it refuses alone is skipped."""
    if not patterns:
        return []
    try:
        return [GitIgnoreSpec([p for _, _, p in patterns])]
    except _CompileError:
        if len(patterns) == 1:
            number, line, _ = patterns[0]
            bad.append(BadPattern(number, _shown(line), "too large to compile for linear-time matching"))
            return []
    half = len(patterns) // 2
    return _compiled(patterns[:half], bad) + _compiled(patterns[half:], bad)


def matchable(path: str) -> str:
    """A path the matcher can take: a file name that is not UTF-8 (lone surrogates from os.fsdecode) has each
    such byte as U+FFFD, which `*` and `?` match as git's byte-wise matching would."""
    if path.isascii():
        return path
    return path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


class Ignorer:
    """The .gitignore files met on the way down, each with the folder (relative to the root) it lives in."""

    def __init__(self, layers: tuple[tuple[str, Patterns], ...] = ()):
        self.layers = layers

    def with_spec(self, rel_dir: str, spec: Patterns | None) -> Ignorer:
        return Ignorer(self.layers + ((rel_dir, spec),)) if spec is not None else self

    def with_file(self, rel_dir: str, text: str) -> Ignorer:
        """A new Ignorer that also applies `text` (a .gitignore in rel_dir); bad lines are left out."""
        return self.with_spec(rel_dir, load(text)[0])

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        """rel_path is relative to the scan root, with '/' separators. Deeper files and later lines win."""
        verdict = False
        rel_path = matchable(rel_path)
        for base, spec in self.layers:
            if base:
                base = matchable(base)
                if not rel_path.startswith(base + "/"):
                    continue
                sub = rel_path[len(base) + 1:]
            else:
                sub = rel_path
            result = spec.include(sub + "/" if is_dir else sub)
            if result is not None:
                verdict = result
        return verdict
