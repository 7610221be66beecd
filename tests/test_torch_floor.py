"""Every torch API gapbench calls, classified against the oldest torch the package allows.

The inventory reads src/gapbench with `ast` only (torch is not imported): attribute chains rooted at a torch
import (`torch.cuda.tunable.enable`, `F.scaled_dot_product_attention`), `from torch.x import y`, names bound to
such chains (`t = torch.cuda.tunable; t.enable()`), `getattr`/`hasattr` with a constant or table-driven name, the
fields read off `get_device_properties(...)`, the keywords passed to the calls the table checks keywords of, and
the keys given to `torch._inductor.config.patch`. src/gapbench/devices/torch_apis.toml classifies what it finds:
a row per accelerator or version-sensitive API (since when, how gapbench handles an older torch, the source), and
a `core` list of plain tensor APIs present in every release from the floor on.

The tests fail when
- a torch API (or a keyword of a function whose keywords the table lists) is used that the table does not
  classify: a new use must be classified;
- a row whose API needs a newer torch than the floor (`torch>=` in pyproject.toml) is marked `floor`, or is marked
  neither `guarded` (naming its guard and what an older torch gets) nor `needs-guard` (naming the guard it needs
  and where);
- a `guarded` row's guard is gone from a file it names;
- the files using an API newer than the floor are not the files its row lists (a new use there must be looked at);
- a row names an API nothing uses any more.

`python tests/test_torch_floor.py` prints the inventory.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "gapbench"
TABLE = SRC / "devices" / "torch_apis.toml"

# calls whose result's fields are recorded: torch.cuda.get_device_properties(i).L2_cache_size
FIELD_CALLS = ("torch.cuda.get_device_properties", "torch.xpu.get_device_properties")
INDUCTOR_PATCH = "torch._inductor.config.patch"
# names that need a row of their own (never a place in `core`): accelerators, compilers, private APIs. One ending in
# "." is a namespace (itself and the names under it), the others name prefixes (torch._*, torch.float8_*)
ROW_PREFIXES = ("torch.cuda.", "torch.xpu.", "torch.mps.", "torch.npu.", "torch.accelerator.", "torch.backends.",
                "torch.distributed.", "torch.nn.attention.", "torch._", "torch.float8", "torch.compile",
                "torch.library.", "torch.ops.", "torch.amp.", "torch.autocast", "torch.utils.", "torch.version.",
                "torch.sparse.", "torch.get_device_module", "torch.OutOfMemoryError", "torch.testing.",
                "torch.multiprocessing.", "torch.overrides.")
HANDLINGS = ("floor", "guarded", "needs-guard")


# ---- the inventory -------------------------------------------------------------------------------------------

@dataclass
class Use:
    where: set[str] = field(default_factory=set)  # "path:line", path relative to src/gapbench
    probed: set[str] = field(default_factory=set)  # files that test for it first (hasattr, getattr(.., default), try)

    @property
    def files(self) -> set[str]:
        return {w.rsplit(":", 1)[0] for w in self.where}


@dataclass
class Scope:
    parent: Scope | None
    chains: dict[str, list[str]] = field(default_factory=dict)  # local name -> chain parts ("()" marks a call)
    dicts: dict[str, list[ast.expr]] = field(default_factory=dict)  # local name -> dict-valued expressions bound

    def chain(self, name: str) -> list[str] | None:
        s: Scope | None = self
        while s is not None:
            if name in s.chains:
                return s.chains[name]
            s = s.parent
        return None

    def dict_exprs(self, name: str) -> list[ast.expr]:
        s: Scope | None = self
        while s is not None:
            if name in s.dicts:
                return s.dicts[name]
            s = s.parent
        return []


def normalize(parts: list[str]) -> str:
    """The API a chain names: cut at its first call, except the one field read off a FIELD_CALLS result."""
    if "()" not in parts:
        return ".".join(parts)
    i = parts.index("()")
    head = ".".join(parts[:i])
    if head in FIELD_CALLS and i + 1 < len(parts) and parts[i + 1] != "()":
        return f"{head}().{parts[i + 1]}"
    return head


class Inventory(ast.NodeVisitor):
    """Torch APIs used by one module, added to `uses` (name -> Use) and `kwargs` ((name, keyword) -> Use)."""

    def __init__(self, rel: str, tree: ast.Module, uses: dict, kwargs: dict):
        self.rel, self.uses, self.kwargs = rel, uses, kwargs
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.module_scope = Scope(None)
        self.scope = self.module_scope
        self.tried: set[ast.AST] = set()  # import nodes inside a try that catches their failure
        for node in ast.walk(tree):
            if isinstance(node, ast.Try) and node.handlers:
                for stmt in node.body:
                    for sub in ast.walk(stmt):
                        if isinstance(sub, (ast.Import, ast.ImportFrom)):
                            self.tried.add(sub)
        self._bind(tree.body, self.module_scope)
        self.generic_visit(tree)

    # -- bindings ------------------------------------------------------------------------------------------
    def _scope_nodes(self, body: list[ast.stmt]):
        """The nodes of a scope's body, nested function and class bodies left out."""
        todo = list(body)
        while todo:
            node = todo.pop()
            yield node
            for child in ast.iter_child_nodes(node):
                if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    todo.append(child)

    def _bind(self, body: list[ast.stmt], scope: Scope) -> None:
        nodes = list(self._scope_nodes(body))
        for node in nodes:  # imports first: assignments below may use them
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name == "torch" or a.name.startswith("torch."):
                        if a.asname:
                            scope.chains[a.asname] = a.name.split(".")
                        else:
                            scope.chains["torch"] = ["torch"]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and (
                    node.module == "torch" or node.module.startswith("torch.")):
                for a in node.names:
                    scope.chains[a.asname or a.name] = [*node.module.split("."), a.name]
        for node in nodes:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
                if isinstance(value, (ast.Dict, ast.DictComp, ast.IfExp)):
                    scope.dicts.setdefault(name, []).append(value)
                parts = self._parts(value, scope)
                if parts is not None and name not in scope.chains:
                    scope.chains[name] = parts

    def _parts(self, node: ast.AST, scope: Scope | None = None) -> list[str] | None:
        scope = scope or self.scope
        tail: list[str] = []
        while True:
            if isinstance(node, ast.Attribute):
                tail.append(node.attr)
                node = node.value
            elif isinstance(node, ast.Call):
                tail.append("()")
                node = node.func
            elif isinstance(node, ast.Name):
                head = scope.chain(node.id)
                return None if head is None else head + tail[::-1]
            else:
                return None

    # -- recording -----------------------------------------------------------------------------------------
    def _add(self, name: str, node: ast.AST, probed: bool = False) -> None:
        use = self.uses.setdefault(name, Use())
        use.where.add(f"{self.rel}:{getattr(node, 'lineno', 0)}")
        if probed:
            use.probed.add(self.rel)

    def _inner(self, node: ast.AST) -> bool:
        """Whether `node` is part of a longer chain (recorded with that chain)."""
        parent = self.parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node:
            return True
        if isinstance(parent, ast.Call) and parent.func is node:
            grand = self.parents.get(parent)
            return isinstance(grand, ast.Attribute) and grand.value is parent
        return False

    def _strings(self, node: ast.AST) -> list[str] | None:
        """The names a getattr argument can be: a constant, or a value of a module-level dict indexed."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):
            out = []
            for d in self.module_scope.dict_exprs(node.value.id):
                if isinstance(d, ast.Dict):
                    out += [v.value for v in d.values if isinstance(v, ast.Constant) and isinstance(v.value, str)]
            return out or None
        return None

    def _keys(self, node: ast.AST | None, depth: int = 0) -> set[str]:
        """The constant keys a dict-valued expression can have (through names, `**` and module-level tables)."""
        if node is None or depth > 4:
            return set()
        if isinstance(node, ast.Dict):
            out: set[str] = set()
            for k, v in zip(node.keys, node.values, strict=True):
                if k is None:
                    out |= self._keys(v, depth + 1)
                elif isinstance(k, ast.Constant) and isinstance(k.value, str):
                    out.add(k.value)
            return out
        if isinstance(node, ast.IfExp):
            return self._keys(node.body, depth + 1) | self._keys(node.orelse, depth + 1)
        if isinstance(node, ast.DictComp):
            return self._keys(node.value, depth + 1)
        if isinstance(node, ast.Name):
            out = set()
            for d in self.scope.dict_exprs(node.id):
                out |= self._keys(d, depth + 1)
            return out
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name):  # TABLE[key]: any row's keys
            out = set()
            for d in self.module_scope.dict_exprs(node.value.id):
                for v in getattr(d, "values", []):
                    out |= self._keys(v, depth + 1)
                if isinstance(d, ast.DictComp):
                    out |= self._keys(d.value, depth + 1)
            return out
        return set()

    # -- visiting ------------------------------------------------------------------------------------------
    def _visit_scope(self, node) -> None:
        outer = self.scope
        self.scope = Scope(outer)
        self._bind(node.body if isinstance(node.body, list) else [node.body], self.scope)
        self.generic_visit(node)
        self.scope = outer

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = _visit_scope

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            if a.name.startswith("torch."):
                self._add(a.name, node, probed=node in self.tried)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module and (node.module == "torch" or node.module.startswith("torch.")):
            for a in node.names:
                self._add(f"{node.module}.{a.name}", node, probed=node in self.tried)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not self._inner(node):
            parts = self._parts(node)
            if parts is not None:
                self._add(normalize(parts), node)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if not self._inner(node) and isinstance(node.ctx, ast.Load):
            parts = self.scope.chain(node.id)
            if parts is not None and parts != ["torch"]:
                self._add(normalize(parts), node)

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        if isinstance(f, ast.Name) and f.id in ("getattr", "hasattr") and len(node.args) >= 2:
            base = self._parts(node.args[0])
            if base is not None:
                names = self._strings(node.args[1])
                probed = f.id == "hasattr" or len(node.args) == 3
                for n in names or ["<dynamic>"]:
                    self._add(normalize([*base, n]), node, probed=probed)
        parts = self._parts(f)
        if parts is not None:
            name = normalize(parts)
            for kw in node.keywords if "()" not in parts else ():  # not the keywords of what a call returned
                for k in [kw.arg] if kw.arg else sorted(self._keys(kw.value)):
                    self.kwargs.setdefault((name, k), Use()).where.add(f"{self.rel}:{node.lineno}")
            if name == INDUCTOR_PATCH and node.args:
                for k in sorted(self._keys(node.args[0])):
                    self._add(f"torch._inductor.config.{k}", node)
        self.generic_visit(node)


@functools.lru_cache(maxsize=4)
def inventory(root: Path = SRC) -> tuple[dict[str, Use], dict[tuple[str, str], Use]]:
    """(API name -> its uses, (function, keyword) -> its uses) over every module under `root`."""
    uses: dict[str, Use] = {}
    kwargs: dict[tuple[str, str], Use] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        Inventory(rel, ast.parse(path.read_text(encoding="utf-8"), str(path)), uses, kwargs)
    uses.pop("torch", None)
    return uses, kwargs


# ---- the table -----------------------------------------------------------------------------------------------

def version(v: str) -> tuple[int, ...]:
    """(2, 5) for "2.5"; "never" (in no torch release: another package's, or a name no release has) sorts last."""
    return (99,) if v == "never" else tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def floor() -> str:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    m = re.search(r'"torch>=([0-9.]+)', text)
    assert m, "pyproject.toml declares no torch>= floor"
    return m.group(1)


@functools.lru_cache(maxsize=4)
def _table(path: Path, mtime: float) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def table() -> dict:
    return _table(TABLE, TABLE.stat().st_mtime)


def rows() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for r in table()["api"]:
        assert r["name"] not in out, f"{r['name']}: two rows"
        out[r["name"]] = r
    return out


def needed(row: dict) -> str:
    """The first release in which gapbench's use works as written: `since`, or `changed` where the form
    gapbench relies on came later."""
    return row.get("changed") or row["since"]


def covering(name: str, table_rows: dict[str, dict]) -> str | None:
    """The row that classifies `name`: its own, or the row listing it among its `members` (the names under the
    row's, or the fields of the object its call returns)."""
    if name in table_rows:
        return name
    for n, r in table_rows.items():
        for m in r.get("members", ()):
            if name in (f"{n}.{m}", f"{n}().{m}"):
                return n
    return None


# ---- the tests -----------------------------------------------------------------------------------------------

def test_the_inventory_sees_what_gapbench_calls():
    uses, kwargs = inventory()
    for name in ("torch._scaled_mm", "torch._int_mm", "torch.cuda.tunable.set_filename", "torch.float8_e4m3fnuz",
                 "torch.nn.attention.flex_attention.flex_attention", "torch.cuda.get_device_properties().L2_cache_size",
                 "torch.nn.attention.SDPBackend.OVERRIDEABLE", "torch._inductor.config.max_autotune_gemm_backends",
                 "torch.distributed.all_gather_single", "torch.backends.cuda.preferred_blas_library"):
        assert name in uses, name
    assert ("torch.nn.functional.scaled_dot_product_attention", "enable_gqa") in kwargs
    assert ("torch._scaled_mm", "out_dtype") in kwargs
    assert "devices/rocm.py" in uses["torch.backends.cuda.preferred_rocm_fa_library"].probed


def test_every_torch_api_used_is_classified():
    uses, kwargs = inventory()
    t = table()
    named = rows()
    names = set(named)
    core = set(t["core"]["names"])
    missing = sorted(f"{n} ({sorted(u.where)[0]})" for n, u in uses.items() if n not in core
                     and covering(n, named) is None)
    assert not missing, ("torch APIs the table does not classify; give each a row (or, for a plain tensor API "
                         "present since the floor, a place in `core`) in src/gapbench/devices/torch_apis.toml:\n  "
                         + "\n  ".join(missing))
    checked = {n: r for n, r in rows().items() if "kwargs" in r}
    unclassified = sorted(f"{n}({k}=) ({sorted(u.where)[0]})" for (n, k), u in kwargs.items() if n in checked
                          and k not in checked[n]["kwargs"] and f"{n}({k}=)" not in names)
    assert not unclassified, "keywords the table does not classify:\n  " + "\n  ".join(unclassified)


def test_core_holds_no_accelerator_api():
    bad = [n for n in table()["core"]["names"] if any(n == p.rstrip(".") or n.startswith(p) for p in ROW_PREFIXES)]
    assert not bad, f"these need a row of their own, not a place in core: {bad}"


def test_rows_newer_than_the_floor_are_handled():
    low = version(floor())
    problems = []
    for name, r in rows().items():
        h = r.get("handling")
        if h not in HANDLINGS:
            problems.append(f"{name}: handling {h!r} is none of {HANDLINGS}")
            continue
        for key in ("since", "source"):
            if not r.get(key):
                problems.append(f"{name}: no {key}")
        if not r.get("since"):
            continue
        newer = version(needed(r)) > low
        if newer and h == "floor":
            problems.append(f"{name}: needs torch {needed(r)}, newer than the floor {floor()}, yet marked floor")
        if h == "guarded" and not (r.get("guard") and (r.get("marker") or r.get("probe"))):
            problems.append(f"{name}: guarded, but names no guard file and marker (or probe)")
        if h == "guarded" and newer and not r.get("reason"):
            problems.append(f"{name}: guarded, but says nothing of what an older torch gets (reason)")
        if h == "needs-guard" and not (r.get("needs") and r.get("where")):
            problems.append(f"{name}: needs-guard, but says neither which guard nor where")
    assert not problems, "\n".join(problems)


def test_guards_are_where_the_table_says():
    uses, kwargs = inventory()
    problems = []
    for name, r in rows().items():
        if r.get("handling") != "guarded":
            continue
        for g in r["guard"]:
            text = (SRC / g).read_text(encoding="utf-8")
            if r.get("marker") and r["marker"] not in text:
                problems.append(f"{name}: {g} no longer holds its guard ({r['marker']!r})")
            if r.get("probe") and g not in uses.get(name, Use()).probed:
                problems.append(f"{name}: {g} no longer tests for it (hasattr, getattr with a default, try/import)")
    assert not problems, "\n".join(problems)


def test_the_files_of_rows_newer_than_the_floor_are_the_files_using_them():
    """A new use of an API newer than the floor, in a file the row does not list, must be looked at."""
    uses, kwargs = inventory()
    low = version(floor())
    problems = []
    named = rows()
    for name, r in named.items():
        if version(needed(r)) <= low or r.get("detect") is False or "where" not in r:
            continue
        m = re.fullmatch(r"(.+)\((\w+)=\)", name)
        use = kwargs.get((m.group(1), m.group(2))) if m else None
        got = use.files if use else set()
        if m is None:  # the row's own name and its members
            for n, u in uses.items():
                if covering(n, named) == name:
                    got |= u.files
        if set(r["where"]) != got:
            problems.append(f"{name}: the table says {sorted(r['where'])}, the code uses it in {sorted(got)}")
    assert not problems, "\n".join(problems)


def test_every_row_is_used():
    uses, kwargs = inventory()
    named = rows()
    covered = {covering(n, named) for n in uses} | {f"{n}({k}=)" for n, k in kwargs}
    stale = [n for n, r in named.items() if r.get("detect") is not False and n not in covered]
    assert not stale, f"rows for APIs nothing uses any more (remove them): {stale}"

if __name__ == "__main__":
    found, keywords = inventory()
    classified = rows()
    for n in sorted(found):
        mark = "" if covering(n, classified) or n in table()["core"]["names"] else "  <- unclassified"
        print(f"{n}  {sorted(found[n].where)[0]}{' probed' if found[n].probed else ''}{mark}")
    if "-k" in sys.argv:
        grouped = defaultdict(list)
        for n, k in keywords:
            grouped[n].append(k)
        for n in sorted(grouped):
            print(f"{n}({', '.join(sorted(grouped[n]))})")
