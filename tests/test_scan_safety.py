"""gapbench scan on hostile trees: binary, huge, non-UTF-8, syntax errors, symlink loops and escapes, .gitignore."""

from __future__ import annotations

import os
import time

import pytest

from gapbench.scan import scan
from gapbench.scan.gitignore import Ignorer


def write(path, text: str | bytes):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def rules_at(report, path):
    return {(f.line, f.rule) for f in report.findings if f.path == path}


def test_binary_and_huge_files_are_skipped_and_listed(tmp_path):
    write(tmp_path / "blob.py", b"x = 1\x00\x01\x02 torch.cuda.synchronize()\n")
    write(tmp_path / "big.cu", "cudaMalloc(0, 0);\n" * 200)
    write(tmp_path / "ok.py", "import torch\ntorch.cuda.synchronize()\n")
    r = scan(tmp_path, max_bytes=1000, jobs=1)
    reasons = {s.path: s.reason for s in r.skipped}
    assert reasons["blob.py"].startswith("binary")
    assert reasons["big.cu"].startswith("larger than the size limit")
    assert {f.path for f in r.findings} == {"ok.py"}
    assert r.files_scanned == 1


def test_non_utf8_is_decoded_with_replacement_and_noted(tmp_path):
    write(tmp_path / "latin.py", "# caf\xe9\nimport torch\nx = torch.zeros(1).cuda()\n".encode("latin-1"))
    r = scan(tmp_path, jobs=1)
    assert rules_at(r, "latin.py") == {(3, "py-dot-cuda")}
    assert any(n.path == "latin.py" and "not UTF-8" in n.note for n in r.notes)


def test_syntax_error_falls_back_to_text_scan(tmp_path):
    write(tmp_path / "broken.py", "import torch\ndef (:\ntorch.cuda.synchronize()\nimport apex\nx.cuda()\n"
                                  "d = 'cuda'\n")
    r = scan(tmp_path, jobs=1)
    assert rules_at(r, "broken.py") == {(3, "py-torch-cuda-portable"), (4, "py-import-apex"), (5, "py-dot-cuda"),
                                        (6, "py-cuda-device-string")}
    assert any("does not parse" in n.note and "line 2" in n.note for n in r.notes)


def test_code_is_never_executed(tmp_path):
    marker = tmp_path / "executed"
    write(tmp_path / "src" / "evil.py", f"open({str(marker)!r}, 'w').write('x')\nimport torch\ntorch.cuda.init()\n")
    write(tmp_path / "src" / "setup.py", f"open({str(marker)!r}, 'w').write('x')\n")
    r = scan(tmp_path / "src", jobs=1)
    assert rules_at(r, "evil.py") == {(3, "py-torch-cuda-portable")}
    assert not marker.exists()


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks on this platform")
def test_symlinks_loops_and_escapes(tmp_path):
    root = tmp_path / "root"
    outside = write(tmp_path / "outside" / "secret.py", "import torch\ntorch.cuda.synchronize()\n")
    write(root / "pkg" / "real.py", "import torch\ntorch.cuda.synchronize()\n")
    os.symlink(outside, root / "escape.py")                       # file out of the root
    os.symlink(outside.parent, root / "escape_dir")               # folder out of the root
    os.symlink(root / "pkg", root / "pkg" / "again")              # folder loop
    os.symlink(root / "loop_a", root / "loop_b")                  # link loop
    os.symlink(root / "loop_b", root / "loop_a")
    os.symlink(root / "missing", root / "dangling")
    t0 = time.perf_counter()
    r = scan(root, jobs=1)
    assert time.perf_counter() - t0 < 10
    assert {f.path for f in r.findings} == {"pkg/real.py"}
    reasons = {s.path: s.reason for s in r.skipped}
    assert "outside the scanned root" in reasons["escape.py"]
    assert "outside the scanned root" in reasons["escape_dir"]
    assert "inside the root" in reasons["pkg/again"]
    assert reasons["loop_a"] == "symlink loop" and reasons["loop_b"] == "symlink loop"
    assert reasons["dangling"] == "broken symlink"


def test_gitignore_is_honoured(tmp_path):
    cuda = "import torch\ntorch.cuda.synchronize()\n"
    write(tmp_path / ".gitignore", "# comment\n*.gen.py\nbuild/\n/top.py\n!keep.gen.py\n**/cache/*.py\n")
    for rel in ("a.py", "x.gen.py", "keep.gen.py", "build/b.py", "sub/build/c.py", "top.py", "sub/top.py",
                "deep/cache/d.py", "sub/local.py", "sub/other.py", ".git/hooks/e.py"):
        write(tmp_path / rel, cuda)
    write(tmp_path / "sub" / ".gitignore", "local.py\n")
    r = scan(tmp_path, jobs=1)
    assert {f.path for f in r.findings} == {"a.py", "keep.gen.py", "sub/top.py", "sub/other.py"}
    r2 = scan(tmp_path, respect_gitignore=False, jobs=1)
    assert {f.path for f in r2.findings} == {"a.py", "x.gen.py", "keep.gen.py", "build/b.py", "sub/build/c.py",
                                             "top.py", "sub/top.py", "deep/cache/d.py", "sub/local.py",
                                             "sub/other.py"}   # .git is skipped always


def test_virtualenvs_and_node_modules_are_skipped_and_listed(tmp_path):
    cuda = "import torch\ntorch.cuda.synchronize()\n"
    write(tmp_path / "app.py", cuda)
    write(tmp_path / "env" / "pyvenv.cfg", "home = /usr/bin\n")
    write(tmp_path / "env" / "lib" / "python3.11" / "site-packages" / "x.py", cuda)
    write(tmp_path / "web" / "node_modules" / "y.py", cuda)
    r = scan(tmp_path, jobs=1)
    assert {f.path for f in r.findings} == {"app.py"}
    reasons = {s.path: s.reason for s in r.skipped}
    assert "virtual environment" in reasons["env"] and "node_modules" in reasons["web/node_modules"]


def test_gitignore_matcher_details():
    ig = Ignorer().with_file("", "*.o\n/only_root\ndocs/*.md\nlogs/\n!important.o\n\\#hash\n")
    assert ig.ignored("a.o", False) and ig.ignored("x/y/a.o", False)
    assert not ig.ignored("x/important.o", False)
    assert ig.ignored("only_root", False) and not ig.ignored("x/only_root", False)
    assert ig.ignored("docs/a.md", False) and not ig.ignored("docs/sub/a.md", False)
    assert ig.ignored("logs", True) and not ig.ignored("logs", False)
    assert ig.ignored("#hash", False)
    nested = ig.with_file("pkg", "!keep.o\n/gen\n")
    assert not nested.ignored("pkg/keep.o", False) and nested.ignored("pkg/other.o", False)
    assert nested.ignored("pkg/gen", True) and not nested.ignored("gen", True)


@pytest.mark.slow
def test_parallel_scan_matches_serial_and_is_fast(tmp_path):
    for i in range(1500):
        d = tmp_path / f"pkg{i % 30}"
        if i % 3 == 0:
            write(d / f"m{i}.py", f"import torch\n\ndef f{i}(x):\n    return x.cuda() + {i}\n" + "y = 1\n" * 50)
        elif i % 3 == 1:
            write(d / f"k{i}.cu", "#include <cuda_runtime.h>\n__global__ void k(){}\n" + "int a;\n" * 50)
        else:
            write(d / f"h{i}.h", f"#pragma once\nint plain_header_{i};\n" + "// text\n" * 50)
    serial = scan(tmp_path, jobs=1)
    parallel = scan(tmp_path, jobs=2)
    assert serial.findings == parallel.findings and len(serial.findings) == 1500
    assert parallel.files_scanned == 1500
    assert parallel.elapsed_s < 20, f"{parallel.files_per_s:.0f} files/s"


def test_single_file_and_odd_line_breaks(tmp_path):
    # A form feed is a line break for str.splitlines() but not for Python: positions and suppressions agree.
    f = write(tmp_path / "ff.py", "import torch\n\x0c\nx.cuda()  # gapbench: ignore\ny.cuda()\r\n")
    r = scan(f, jobs=1)
    assert [(x.path, x.line, x.rule) for x in r.findings] == [("ff.py", 4, "py-dot-cuda")]
    assert r.suppressed == 1
