"""The CUDA API dictionary: which identifiers are CUDA API names, which library each belongs to, and whether
HIP has an equivalent. Sources and format: cuda_api.toml. Built once per process, on first use."""

from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = Path(__file__).parent
HAND_KEPT = HERE / "cuda_api.toml"
GENERATED = HERE / "cuda_api_names.txt"
# hipify's table keys are also header paths and PyTorch-internal names; only identifiers are API names.
_IDENTIFIER = re.compile(r"[A-Za-z_]\w*")
_HIP_UNSUPPORTED = 47   # torch.utils.hipify.constants.HIP_UNSUPPORTED, in the tuples of older torch tables


@dataclass(frozen=True)
class ApiName:
    library: str
    hip: bool       # HIP has an equivalent (hipify maps it, or HIPIFY lists one)


@dataclass
class CudaApi:
    names: dict[str, ApiName] = field(default_factory=dict)
    namespaces: dict[str, str] = field(default_factory=dict)          # C++ namespace -> library
    members: dict[str, frozenset[str]] = field(default_factory=dict)  # library -> member names
    bare: dict[str, re.Pattern] = field(default_factory=dict)   # library -> its names read after `using namespace`
    sources: list[str] = field(default_factory=list)
    _candidates: re.Pattern | None = None

    @property
    def libraries(self) -> set[str]:
        return {n.library for n in self.names.values()} | set(self.namespaces.values()) | set(self.members)

    def candidates(self) -> re.Pattern:
        """A regex for the identifiers worth a lookup: those starting like some known name (most do not)."""
        if self._candidates is None:
            heads = sorted({n[:2] for n in self.names}, key=lambda h: (-len(h), h))
            self._candidates = re.compile(r"\b(?:" + "|".join(map(re.escape, heads)) + r")\w*")
        return self._candidates

    def add(self, name: str, library: str, hip: bool) -> None:
        old = self.names.get(name)
        # A name hipify maps (or any source pairs with HIP) stays mapped; the first library filed wins.
        self.names[name] = ApiName(old.library if old else library, hip or (old.hip if old else False))


@functools.lru_cache(maxsize=1)
def dictionary() -> CudaApi:
    api = CudaApi()
    _add_generated(api, GENERATED.read_text(encoding="utf-8"))
    hand = tomllib.loads(HAND_KEPT.read_text(encoding="utf-8"))
    _add_hand_kept(api, hand)
    tables = hipify_tables()
    if tables is not None:
        _add_hipify(api, tables, hand.get("hipify_prefix", {}))
        api.sources.append("torch.utils.hipify cuda_to_hip_mappings")
    for name in hand.get("exclude", {}).get("names", []):
        api.names.pop(name, None)
    api.sources += [GENERATED.name, HAND_KEPT.name]
    return api


def _add_generated(api: CudaApi, text: str) -> None:
    library = ""
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            library = line.strip("[]")
            continue
        name, _, mark = line.partition(" ")
        api.add(name, library, mark != "-")


def _add_hand_kept(api: CudaApi, hand: dict) -> None:
    for library, spec in hand.get("library", {}).items():
        for name in spec.get("names", []):
            api.add(name, library, bool(spec.get("hip", False)))
        for name in spec.get("no_hip", []):
            api.add(name, library, False)
        for ns in spec.get("namespaces", []):
            api.namespaces[ns] = library
        if spec.get("members"):
            api.members[library] = frozenset(spec["members"])
        bare = _bare_pattern(spec.get("bare", []), spec.get("bare_pattern", ""))
        if bare is not None:
            api.bare[library] = bare


def _bare_pattern(names: list[str], pattern: str) -> re.Pattern | None:
    """One regex for a library's bare names (longest first) and its own pattern, or None without either."""
    parts = [r"\b(?:" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b"] if names else []
    parts += [pattern] if pattern else []
    return re.compile("|".join(parts)) if parts else None


def _add_hipify(api: CudaApi, tables: list[dict], prefixes: dict[str, str]) -> None:
    ordered = sorted(prefixes.items(), key=lambda kv: -len(kv[0]))
    for table in tables:
        for key, value in table.items():
            name = key.strip()
            if not _IDENTIFIER.fullmatch(name):
                continue
            mapped = not (isinstance(value, tuple) and _HIP_UNSUPPORTED in value[1:])
            if name in api.names:
                api.add(name, "", mapped)
                continue
            library = next((lib for prefix, lib in ordered if name.startswith(prefix)), None)
            if library:
                api.add(name, library, mapped)


def hipify_tables() -> list[dict] | None:
    """The CUDA->HIP name tables of the installed torch, or None without torch. The tables file is executed on
    its own (it imports nothing but the standard library), so that torch itself is not imported."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "utils" / "hipify" / "cuda_to_hip_mappings.py"
    try:
        loader_spec = importlib.util.spec_from_file_location("_gapbench_cuda_to_hip_mappings", path)
        module = importlib.util.module_from_spec(loader_spec)
        loader_spec.loader.exec_module(module)
    except Exception:   # an older torch whose tables import their package: import it the ordinary way
        try:
            from torch.utils.hipify import cuda_to_hip_mappings as module
        except Exception:
            return None
    names = ("CUDA_TYPE_NAME_MAP", "CUDA_IDENTIFIER_MAP", "CUDA_SPECIAL_MAP")
    return [getattr(module, n) for n in names if isinstance(getattr(module, n, None), dict)]
