"""A subset of .gitignore matching: globs, `!` negation, `dir/` patterns, anchored `/patterns`, `**`, nested files.

Not supported: core.excludesFile, .git/info/exclude, and re-including a file below an excluded directory
(git does not support that either).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern
    negate: bool
    dir_only: bool


def _glob_to_regex(glob: str) -> str:
    """Translate one gitignore glob (already stripped of `!`, leading and trailing `/`) to a regex body."""
    out, i, n = [], 0, len(glob)
    while i < n:
        c = glob[i]
        if glob.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif glob.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = glob.find("]", i + 2 if glob[i + 1:i + 2] in ("!", "]") else i + 1)
            if j < 0:
                out.append(re.escape(c))
                i += 1
            else:
                body = glob[i + 1:j]
                if body.startswith("!"):
                    body = "^" + body[1:]
                out.append("[" + body.replace("\\", "\\\\") + "]")
                i = j + 1
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def parse(text: str) -> list[_Pattern]:
    pats = []
    for raw in text.splitlines():
        line = raw.rstrip("\r")
        if not line.endswith("\\ "):
            line = line.rstrip(" ")
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        elif line.startswith("\\"):
            line = line[1:]
        dir_only = line.endswith("/")
        line = line.rstrip("/")
        if not line:
            continue
        # A slash at the start or in the middle anchors the pattern to the .gitignore's folder.
        anchored = "/" in line
        line = line.lstrip("/")
        body = _glob_to_regex(line)
        regex = re.compile(("^" if anchored else "^(?:.*/)?") + body + "$")
        pats.append(_Pattern(regex, negate, dir_only))
    return pats


class Ignorer:
    """The .gitignore files met on the way down, each with the folder (relative to the root) it lives in."""

    def __init__(self, layers: tuple[tuple[str, tuple[_Pattern, ...]], ...] = ()):
        self.layers = layers

    def with_file(self, rel_dir: str, text: str) -> Ignorer:
        pats = tuple(parse(text))
        return Ignorer(self.layers + ((rel_dir, pats),)) if pats else self

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        """rel_path is relative to the scan root, with '/' separators. Deeper files and later lines win."""
        verdict = False
        for base, pats in self.layers:
            if base:
                if not rel_path.startswith(base + "/"):
                    continue
                sub = rel_path[len(base) + 1:]
            else:
                sub = rel_path
            for p in pats:
                if p.dir_only and not is_dir:
                    continue
                if p.regex.match(sub):
                    verdict = not p.negate
        return verdict
