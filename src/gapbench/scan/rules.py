"""The scan rules: loaded from rules.toml (package data) and optional user files, checked, compiled once."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from gapbench.errors import GapbenchError
from gapbench.scan.reading import Unreadable, read_regular

TARGETS = ("rocm", "npu", "xpu")
TARGET_NAMES = {"rocm": "AMD ROCm", "npu": "Huawei Ascend NPU", "xpu": "Intel XPU"}
# Ordered from harmless to worst; the index is the severity.
VERDICTS = ("works", "auto", "manual", "blocker")
VERDICT_HELP = {
    "works": "runs as is on the target",
    "auto": "a mechanical change (rename, different wheel, a tool such as hipify or transfer_to_npu)",
    "manual": "an equivalent exists but a person must port and check it",
    "blocker": "no equivalent on the target: rewrite, redesign or drop the feature",
}
PYTHON_KINDS = ("python-attr", "python-method", "python-string", "python-import")
TEXT_KINDS = ("deps", "cpp", "build")
KINDS = PYTHON_KINDS + TEXT_KINDS
# Structural readers of build files and what a rule's pattern is tested on there (docs/scan.md).
STRUCTURES = {
    "yaml-key": "a key of a CI workflow mapping whose value is set (matrix axes, inputs, with:, env:)",
    "yaml-value": "a one-line value set in a CI workflow (a with:, a matrix value, an input's default, each item of "
                  "a list such as runs-on); not a label's, an if:'s or a run: body",
    "yaml-if": "a name in a CI step's or job's `if:` condition that the condition requires",
    "yaml-arch-key": "a key of a CI mapping (a matrix row, a matrix) set to compute capabilities (`arch: 86`, "
                     "`sm: [80, 90]`, `8.6`, `sm_90`) beside a CUDA key of the same mapping",
    "cmake-command": "a CMake command's name and arguments, its continuation lines joined",
    "make-variable": "a Makefile variable's name, where it is assigned",
    "python-compare": "a Python value compared with a literal (or a version): its dotted name, or a variable bound "
                      "from an expression the pattern names",
    "python-call": "a Python call with literal arguments only, one of them a number: the called function's dotted "
                   "name",
    "python-arch-list": "a Python variable (its name) assigned a list of compute capabilities (`[\"7.0\", \"8.0\"]`) "
                        "or given one by append/extend",
    "python-name": "a Python variable (its name) assigned a list, as a build script holds compiler flags "
                   "(`nvcc_flags = [...]`), or run as a command's first word (`[nvcc_bin, '-V']`)",
    "python-extension": "a Python call building a CUDA extension (its dotted name): the extension's imports and "
                        "uses anywhere in the tree are findings",
    "python-decorator-keyword": "the keyword names of a call used as a decorator (`@RunIf(min_cuda_gpus=2)`)",
}
_STRUCTURE_KIND = {"python-compare": "python-string", "python-call": "python-string",
                   "python-extension": "python-string", "python-name": "python-string",
                   "python-arch-list": "python-string", "python-decorator-keyword": "python-string"}
DEFAULT_RULES = Path(__file__).with_name("rules.toml")
NO_HIP_SUFFIX = "-no-hip"
MAX_RULES_BYTES = 4 * 2**20    # the packaged rules are about 60 KiB


@dataclass(frozen=True)
class Rule:
    id: str
    kinds: tuple[str, ...]
    message: str
    fix: str
    reference: str
    verdicts: dict[str, str]
    match: tuple[str, ...] = ()          # dotted names (python-attr/-import) or attribute names (python-method)
    pattern: str = ""                    # regex (python-string and text kinds)
    keyword: str = ""                    # python-attr: only calls that pass this keyword (or one of a|b)
    sources: tuple[str, ...] = ()        # python-attr with keyword: or calls naming a file with one of these endings
    bare: bool = False                   # python-attr: only calls with no argument (the device left implicit)
    call: bool = True                    # python-method: only when called
    files: tuple[str, ...] = ()          # text kinds: only files whose name matches one of these globs
    hint: tuple[str, ...] = ()           # the rule is tried only where one of these substrings occurs
    group: str = ""                      # effort: blocker rules of one group count as one problem
    api: tuple[str, ...] = ()            # cpp: CUDA API libraries (cuda_api.toml) whose names this rule reports
    no_hip: str = ""                     # cpp: ROCm verdict for names of `api` that HIP has no equivalent of
    uses: bool = False                   # python-import: also every use of what the import binds
    each: bool = False                   # every match is its own finding, even several in one statement
    fallback: bool = False               # text kinds: reported only on lines no other rule reports
    package: bool = False                # its match names a package or repository: the project's own is none
    library: str = ""                    # cpp: the library the rule reports uses of (tiny_cuda_nn): nothing in that
                                         # library's own tree (its include/<name>/ or Python package at the root)
    compared: bool = True                # python-string: a string compared with a value is a finding too
    structure: str = ""                  # found by a structural reader (STRUCTURES), its pattern tested on what
                                         # that reader hands it (a YAML key, a CMake command), not on lines
    regex: re.Pattern | None = field(default=None, compare=False, repr=False)

    @property
    def keywords(self) -> tuple[str, ...]:
        """The keywords a python-attr rule watches (`keyword = "cuda_sources|with_cuda"`: either one)."""
        return tuple(self.keyword.split("|")) if self.keyword else ()

    def severity(self, target: str) -> int:
        return VERDICTS.index(self.verdicts[target])

    def worst(self, targets) -> str:
        return max((self.verdicts[t] for t in targets), key=VERDICTS.index)


@dataclass(frozen=True)
class RuleSet:
    rules: dict[str, Rule]
    source: str
    date: str
    effort: dict
    files: tuple[str, ...]

    def of_kind(self, kind: str) -> list[Rule]:
        return [r for r in self.rules.values() if kind in r.kinds]

    def structural(self, structure: str) -> list[Rule]:
        return [r for r in self.rules.values() if r.structure == structure]

    def api_rules(self) -> dict[str, tuple[Rule, Rule]]:
        """CUDA API library -> (its rule, the rule for its names that have no HIP equivalent)."""
        out = {}
        for r in self.rules.values():
            for lib in r.api:
                out[lib] = (r, self.rules.get(f"{r.id}{NO_HIP_SUFFIX}", r))
        return out


def _as_tuple(value, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise GapbenchError(f"{what}: expected a string or a list of strings")


def _rule_from_table(t: dict, where: str) -> Rule:
    rid = t.get("id")
    if not isinstance(rid, str) or not re.fullmatch(r"[a-z0-9][a-z0-9-]*", rid):
        raise GapbenchError(f"{where}: rule id must be lower-case letters, digits and dashes, got {rid!r}")
    where = f"{where}: rule {rid}"
    kinds = _as_tuple(t.get("kind"), f"{where}: kind")
    if not kinds or any(k not in KINDS for k in kinds):
        raise GapbenchError(f"{where}: kind must be one or more of {', '.join(KINDS)}, got {t.get('kind')!r}")
    for key in ("message", "fix", "reference"):
        if not isinstance(t.get(key), str) or not t[key].strip():
            raise GapbenchError(f"{where}: '{key}' is required")
    verdicts = t.get("verdict")
    if not isinstance(verdicts, dict) or set(verdicts) != set(TARGETS) or any(v not in VERDICTS
                                                                              for v in verdicts.values()):
        raise GapbenchError(f"{where}: verdict must give one of {'/'.join(VERDICTS)} for each of "
                            f"{', '.join(TARGETS)}")
    match = _as_tuple(t.get("match"), f"{where}: match")
    pattern = t.get("pattern", "")
    api = _as_tuple(t.get("api"), f"{where}: api")
    structure = t.get("structure", "")
    if structure and (structure not in STRUCTURES or kinds != (_STRUCTURE_KIND.get(structure, "build"),)
                      or not pattern):
        raise GapbenchError(f"{where}: structure must be one of {', '.join(STRUCTURES)}, on a rule of its kind "
                            f"(build; python-string for the python-* ones) with a pattern")
    _check_shape(where, kinds, match, pattern, api, t.get("no_hip", ""))
    regex = None
    if pattern:
        try:
            regex = re.compile(pattern, re.MULTILINE)
        except re.error as e:
            raise GapbenchError(f"{where}: bad pattern: {e}") from None
    return Rule(id=rid, kinds=kinds, message=t["message"].strip(), fix=t["fix"].strip(),
                reference=t["reference"].strip(), verdicts=dict(verdicts), match=match, pattern=pattern,
                keyword=t.get("keyword", ""), sources=_as_tuple(t.get("sources"), f"{where}: sources"),
                call=bool(t.get("call", True)), bare=bool(t.get("bare", False)),
                files=_as_tuple(t.get("files"), f"{where}: files"), hint=_as_tuple(t.get("hint"), f"{where}: hint"),
                group=str(t.get("group", "")), api=api, no_hip=t.get("no_hip", ""), uses=bool(t.get("uses", False)),
                each=bool(t.get("each", False)), fallback=bool(t.get("fallback", False)),
                package=bool(t.get("package", False)), compared=bool(t.get("compared", True)),
                library=str(t.get("library", "")).replace("-", "_").lower(),
                structure=structure, regex=regex)


def _check_shape(where: str, kinds: tuple[str, ...], match: tuple[str, ...], pattern: str, api: tuple[str, ...],
                 no_hip: str) -> None:
    """Each kind has what it needs: names for the python-attr/-method/-import kinds, a pattern (or, for cpp, API
    libraries) for the others."""
    needs_match = {"python-attr", "python-method", "python-import"} & set(kinds)
    if needs_match and not match:
        raise GapbenchError(f"{where}: kind {sorted(needs_match)[0]} needs 'match'")
    text_kinds = set(kinds) - {"python-attr", "python-method", "python-import"}
    if text_kinds and not pattern and not (text_kinds == {"cpp"} and api):
        raise GapbenchError(f"{where}: kind {'/'.join(kinds)} needs 'pattern'")
    if api and "cpp" not in kinds:
        raise GapbenchError(f"{where}: 'api' is for kind cpp")
    unknown = sorted(set(api) - known_libraries())
    if unknown:
        raise GapbenchError(f"{where}: unknown api library {unknown[0]!r} (known: {', '.join(sorted(known_libraries()))})")
    if no_hip and (no_hip not in VERDICTS or not api):
        raise GapbenchError(f"{where}: no_hip must be one of {'/'.join(VERDICTS)}, on a rule with 'api'")


def _no_hip_rule(r: Rule) -> Rule:
    """The rule for names of r's libraries that HIP has no equivalent of: r with its ROCm verdict replaced."""
    return Rule(id=f"{r.id}{NO_HIP_SUFFIX}", kinds=r.kinds, message=f"{r.message}; this name has no HIP equivalent",
                fix=r.fix, reference="https://github.com/ROCm/HIPIFY/tree/amd-staging/docs/tables",
                verdicts={**r.verdicts, "rocm": r.no_hip}, group=r.group)


def _read(path: Path) -> dict:
    """A rules file: a regular file (a FIFO or a device is refused, never read) of at most MAX_RULES_BYTES."""
    try:
        data = read_regular(path, MAX_RULES_BYTES)
    except Unreadable as e:
        why = f"{e} for a rules file" if str(e).startswith("larger than") else str(e)
        raise GapbenchError(f"{path}: cannot read rules file: {why}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise GapbenchError(f"{path}: not valid TOML: not UTF-8 (byte {e.start})") from None
    except tomllib.TOMLDecodeError as e:
        raise GapbenchError(f"{path}: not valid TOML: {e}") from None
    except RecursionError:
        raise GapbenchError(f"{path}: not valid TOML: arrays or tables nested too deeply") from None


def load_rules(extra: list[str | Path] | tuple = ()) -> RuleSet:
    """The packaged rules, then each extra file in order (a rule with the same id replaces the earlier one)."""
    paths = [DEFAULT_RULES, *(Path(p) for p in extra)]
    rules: dict[str, Rule] = {}
    source = date = ""
    effort: dict = {}
    for path in paths:
        data = _read(path)
        if path == DEFAULT_RULES:
            source, date = str(data.get("source", "")), str(data.get("date", ""))
            effort = dict(data.get("effort", {}))
        else:
            effort.update(data.get("effort", {}))
        tables = data.get("rule", [])
        if not isinstance(tables, list):
            raise GapbenchError(f"{path}: [[rule]] tables expected")
        seen: set[str] = set()
        for t in tables:
            r = _rule_from_table(t, str(path))
            if r.id in seen:
                raise GapbenchError(f"{path}: rule id {r.id} appears twice")
            seen.add(r.id)
            rules[r.id] = r
    return RuleSet(rules=_with_derived(rules), source=source, date=date, effort=effort,
                   files=tuple(str(p) for p in paths))


def _with_derived(rules: dict[str, Rule]) -> dict[str, Rule]:
    """Add the no-HIP twin of every rule that has `no_hip`, and check that no API library has two rules."""
    out: dict[str, Rule] = {}
    owner: dict[str, str] = {}
    for r in rules.values():
        if r.id.endswith(NO_HIP_SUFFIX) and r.id[: -len(NO_HIP_SUFFIX)] in rules:
            continue    # derived again below, from the rule it belongs to
        out[r.id] = r
        for lib in r.api:
            if owner.setdefault(lib, r.id) != r.id:
                raise GapbenchError(f"api library {lib!r} is claimed by rules {owner[lib]} and {r.id}")
        if r.no_hip:
            out[f"{r.id}{NO_HIP_SUFFIX}"] = _no_hip_rule(r)
    return out


@functools.lru_cache(maxsize=1)
def known_libraries() -> frozenset[str]:
    """The library ids of the CUDA API dictionary (section names of its two data files), read without building it."""
    from gapbench.scan import cuda_api

    libs = set(re.findall(r"^\[([\w-]+)\]$", cuda_api.GENERATED.read_text(encoding="utf-8"), re.MULTILINE))
    with open(cuda_api.HAND_KEPT, "rb") as f:
        libs |= set(tomllib.load(f).get("library", {}))
    return frozenset(libs)
