"""The stacks a codebase can be moved to, by name: the scanner's own targets, and the stacks whose verdicts
another target's stand in for (stacks.toml, data), with the reason."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from gapbench.errors import GapbenchError
from gapbench.scan.rules import TARGET_NAMES, TARGETS

STACKS_FILE = Path(__file__).with_name("stacks.toml")


@dataclass(frozen=True)
class Stack:
    key: str  # what --target takes
    name: str  # how the stack is named in words
    scan_target: str  # the scanner target whose verdicts judge the code
    basis: str = ""  # why another target's verdicts stand in ("" when the stack has its own)

    @property
    def proxied(self) -> bool:
        return self.scan_target != self.key


@lru_cache(maxsize=1)
def stacks() -> dict[str, Stack]:
    """Every stack by key: the scanner's targets first, then those of stacks.toml."""
    out = {t: Stack(t, TARGET_NAMES.get(t, t), t) for t in TARGETS}
    data = tomllib.loads(STACKS_FILE.read_text(encoding="utf-8"))
    for key, d in (data.get("stack") or {}).items():
        if d.get("verdicts_of") not in TARGETS:
            raise GapbenchError(f"{STACKS_FILE}: stack {key!r} takes the verdicts of {d.get('verdicts_of')!r}, "
                                f"not a scan target ({', '.join(TARGETS)})")
        out.setdefault(key, Stack(key, str(d.get("name") or key), d["verdicts_of"], " ".join(str(d["basis"]).split())))
    return out


def stack(key: str) -> Stack:
    """The stack called `key`; GapbenchError naming the known ones otherwise."""
    known = stacks()
    k = str(key).strip().lower()
    if k not in known:
        raise GapbenchError(f"unknown target {key!r} (choose from {', '.join(known)})")
    return known[k]
