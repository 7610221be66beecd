"""The house as tests: layers and cycles (import-linter), vendor checks only in gapbench.devices, and
no function that carries too much."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gapbench"
# the scanner and the port verb read CUDA code: naming vendors is their subject
EXEMPT = ("devices/", "scan/", "cli/cmd_port.py", "cli/cmd_scan.py")

VENDOR_WORD = re.compile(r"^(cuda|rocm|hip|xpu|npu|mps|hpu|nccl|rccl|hccl|xccl|oneccl|nvml|amdsmi|nvidia|amd|intel|"
                         r"huawei|ascend|apple|metal|cann|sycl|oneapi|gfx\d+\w*|sm_\d+)(:\d+)?$", re.I)
VENDOR_ATTRS = {("torch", "cuda"), ("torch", "xpu"), ("torch", "npu"), ("torch", "mps"), ("version", "hip"),
                ("version", "cuda"), ("version", "xpu"), ("backends", "cuda"), ("backends", "mps"),
                ("backends", "cudnn")}
VENDOR_NAMES = {"is_rocm", "is_cuda", "is_xpu", "is_npu", "is_mps"}
VENDOR_MODULES = ("pynvml", "amdsmi", "torch_npu", "intel_extension_for_pytorch")


def _vendor_str(node) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and bool(VENDOR_WORD.match(node.value))


def _vendor_any(node) -> bool:
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_vendor_str(e) for e in node.elts)
    return _vendor_str(node)


def vendor_checks(tree: ast.AST) -> list[tuple[int, str]]:
    """Places where code tests a vendor: comparisons and lookups with a vendor's name, vendor attributes of
    torch, vendor libraries imported."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(_vendor_any(x) for x in [node.left, *node.comparators]):
            found.append((node.lineno, "compares with a vendor name"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith", "get", "pop", "setdefault") and \
                any(_vendor_any(a) for a in node.args[:1]):
            found.append((node.lineno, f"{node.func.attr}() with a vendor name"))
        elif isinstance(node, ast.Subscript) and _vendor_str(node.slice):
            found.append((node.lineno, "looks up a vendor name"))
        elif isinstance(node, ast.Dict) and any(k is not None and _vendor_str(k) for k in node.keys):
            found.append((node.lineno, "a table keyed by vendor names"))
        elif isinstance(node, ast.MatchValue) and _vendor_str(node.value):
            found.append((node.lineno, "matches a vendor name"))
        elif isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
            base = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
            if (base, node.attr) in VENDOR_ATTRS:
                found.append((node.lineno, f"uses {base}.{node.attr}"))
            elif node.attr in VENDOR_NAMES:
                found.append((node.lineno, f"uses .{node.attr}"))
        elif isinstance(node, ast.Name) and node.id in VENDOR_NAMES:
            found.append((node.lineno, f"uses {node.id}"))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(n.split(".")[0] in VENDOR_MODULES for n in names):
                found.append((node.lineno, f"imports {', '.join(names)}"))
    return found


def vendor_checks_in(root: Path, exempt=EXEMPT) -> dict[str, list[tuple[int, str]]]:
    out = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if rel.startswith(exempt) or rel in exempt:
            continue
        hits = vendor_checks(ast.parse(p.read_text(encoding="utf-8")))
        if hits:
            out[rel] = hits
    return out


def test_no_module_outside_devices_tests_a_vendor():
    found = vendor_checks_in(SRC)
    assert not found, "\n".join(f"{f}:{ln}: {why}" for f, hits in found.items() for ln, why in hits)


def test_the_vendor_check_finds_what_it_is_for():
    code = ('import torch\nimport pynvml\n'
            'if dev.type == "cuda" and torch.version.hip: pass\n'
            'x = {"npu": 1}[kind]\nok = arch.startswith("gfx942")\nuse = dev.is_rocm\n'
            'fine = device.type == "cpu"\n')
    lines = sorted({ln for ln, _ in vendor_checks(ast.parse(code))})
    assert lines == [2, 3, 4, 5, 6]


def test_every_backend_is_one_module_with_its_backend():
    from gapbench import devices

    names = {b.name for b in devices.backends()}
    assert {"cuda", "rocm", "xpu", "npu", "mps", "cpu", "test"} <= names
    for b in devices.backends():
        module = sys.modules[type(b).__module__]
        assert module.BACKEND is b and module.__name__.startswith("gapbench.devices.")


def test_layers_and_no_cycles():
    """import-linter's contracts in pyproject.toml: the layer order of docs/design.md, no cycle anywhere."""
    pytest.importorskip("importlinter")
    exe = Path(sys.executable).with_name("lint-imports")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "importlinter.cli"]
    p = subprocess.run(cmd + ["--no-cache"], capture_output=True, text=True, cwd=SRC.parents[1], timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    assert "0 broken" in p.stdout


def complex_functions(root: Path, limit: int) -> list[tuple[str, str, int]]:
    from radon.complexity import cc_visit

    out = []
    for p in sorted(root.rglob("*.py")):
        for block in cc_visit(p.read_text(encoding="utf-8")):
            for b in [block, *getattr(block, "methods", [])]:
                if b.complexity >= limit and type(b).__name__ == "Function":
                    out.append((p.relative_to(root).as_posix(), b.name, b.complexity))
    return sorted(set(out))


def test_no_function_carries_too_much():
    """Cyclomatic complexity (radon) below 25 for every function."""
    pytest.importorskip("radon")
    found = complex_functions(SRC, 25)
    assert not found, found
