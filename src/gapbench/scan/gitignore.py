""".gitignore matching with pathspec (git's wildmatch rules), over the nested .gitignore files of a tree.

pathspec compiles each pattern to a regular expression; with google-re2 installed (the `re2` extra this
package depends on) matching runs in linear time, so stacked wildcards (`**a**a**a…`) cannot backtrack for
minutes. A pattern that does not compile (`[z-a]`) is skipped and reported, never fatal.

Not read: core.excludesFile and .git/info/exclude. As in git, a file below an excluded folder cannot be
re-included (the folder is never entered).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pathspec import GitIgnoreSpec
from pathspec.patterns.gitignore import GitIgnorePatternError
from pathspec.patterns.gitignore.spec import GitIgnoreSpecPattern


@dataclass(frozen=True)
class BadPattern:
    line: int       # 1-based line in the .gitignore file
    pattern: str
    why: str


def load(text: str) -> tuple[GitIgnoreSpec | None, list[BadPattern]]:
    """The compiled patterns of one .gitignore file (None when it has none) and the lines that were skipped."""
    patterns: list[GitIgnoreSpecPattern] = []
    bad: list[BadPattern] = []
    for number, line in enumerate(text.splitlines(), 1):
        try:
            pattern = GitIgnoreSpecPattern(line)
        except (re.error, GitIgnorePatternError, ValueError) as e:
            bad.append(BadPattern(number, line, str(e)))
            continue
        if pattern.include is not None:     # blank lines and comments compile to nothing
            patterns.append(pattern)
    return (GitIgnoreSpec(patterns) if patterns else None), bad


class Ignorer:
    """The .gitignore files met on the way down, each with the folder (relative to the root) it lives in."""

    def __init__(self, layers: tuple[tuple[str, GitIgnoreSpec], ...] = ()):
        self.layers = layers

    def with_spec(self, rel_dir: str, spec: GitIgnoreSpec | None) -> Ignorer:
        return Ignorer(self.layers + ((rel_dir, spec),)) if spec is not None else self

    def with_file(self, rel_dir: str, text: str) -> Ignorer:
        """A new Ignorer that also applies `text` (a .gitignore in rel_dir); bad lines are left out."""
        return self.with_spec(rel_dir, load(text)[0])

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        """rel_path is relative to the scan root, with '/' separators. Deeper files and later lines win."""
        verdict = False
        for base, spec in self.layers:
            if base:
                if not rel_path.startswith(base + "/"):
                    continue
                sub = rel_path[len(base) + 1:]
            else:
                sub = rel_path
            result = spec.check_file(sub + "/" if is_dir else sub)
            if result.include is not None:
                verdict = result.include
        return verdict
