"""gapbench scan / port on inputs that used to break them: bad and hostile .gitignore patterns, file names that
are not UTF-8, an output that would overwrite an input, setuid bits and name collisions in port."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from gapbench.cli import main as cli
from gapbench.scan import scan
from gapbench.scan.port import port

SARIF_SCHEMA = Path(__file__).resolve().parents[2] / "shared/data/sarif-schema-2.1.0.json"
CUDA_PY = "import torch\ntorch.cuda.synchronize()\n"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("gapbench: error:"), err
    return err


# ---------------------------------------------------------------- .gitignore through pathspec

def test_a_bad_gitignore_pattern_is_skipped_with_a_note(tmp_path):
    src = tmp_path / "src"
    write(src / ".gitignore", "[z-a]\n*.gen.py\n")
    write(src / "kept.py", CUDA_PY)
    write(src / "x.gen.py", CUDA_PY)
    write(src / "k.cu", "#include <cuda_runtime.h>\nvoid f() { cudaDeviceSynchronize(); }\n")
    r = scan(src, jobs=1)
    assert {f.path for f in r.findings} == {"kept.py", "k.cu"}, "the good pattern after the bad one still applies"
    assert [(n.path, n.note.split(":")[0]) for n in r.notes] == [(".gitignore", "line 1")]
    assert "[z-a]" in r.notes[0].note
    ported = port(src, tmp_path / "hip", scan_output=False)
    assert {p.source for p in ported.translated} == {"k.cu"} and not (tmp_path / "hip" / "x.gen.py").exists()
    assert any(n.path == ".gitignore" for n in ported.notes)


def test_stacked_wildcards_match_in_linear_time(tmp_path):
    # A backtracking matcher takes seconds per path on this pattern (minutes with a few more `**a`).
    write(tmp_path / ".gitignore", "**a" * 16 + "\n")
    write(tmp_path / ("a" * 30 + "b.py"), CUDA_PY)
    write(tmp_path / ("a" * 20 + "d/" + "a" * 30 + "c.py"), CUDA_PY)
    t0 = time.perf_counter()
    r = scan(tmp_path, jobs=1)
    assert time.perf_counter() - t0 < 3
    assert len(r.findings) == 2, "neither name ends in 'a', so neither is ignored"
    write(tmp_path / ".gitignore", "**a" * 16 + "b.py\n")
    assert {f.path for f in scan(tmp_path, jobs=1).findings} == {"a" * 20 + "d/" + "a" * 30 + "c.py"}


# ---------------------------------------------------------------- file names that are not UTF-8

@pytest.fixture
def latin1_tree(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    name = os.fsdecode(b"caf\xe9.cu")       # a Latin-1 byte: not UTF-8
    try:
        (src / name).write_text("#include <cuda_runtime.h>\nvoid f() { cudaDeviceSynchronize(); }\n")
    except (OSError, UnicodeError):
        pytest.skip("this file system does not take file names that are not UTF-8")
    return src


@pytest.mark.parametrize("fmt", ["table", "json", "md", "html", "sarif"])
def test_every_format_shows_a_non_utf8_file_name(latin1_tree, tmp_path, fmt, capsys):
    out = tmp_path / f"report.{fmt}"
    out.write_text("an older report")
    assert cli(["scan", str(latin1_tree), "-f", fmt, "-o", str(out)]) == 0, capsys.readouterr().err
    text = out.read_bytes().decode("utf-8")      # valid UTF-8
    shown = "caf\\xe9.cu"                           # the byte 0xE9 written as an escape
    if fmt == "json":
        assert {f["path"] for f in json.loads(text)["findings"]} == {shown}
    elif fmt == "sarif":
        doc = json.loads(text)
        uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in doc["runs"][0]["results"]}
        assert uris == {"caf%5Cxe9.cu"}
        if SARIF_SCHEMA.exists():
            import jsonschema

            schema = json.loads(SARIF_SCHEMA.read_text())
            jsonschema.validators.validator_for(schema)(schema).validate(doc)
    elif fmt == "md":
        assert "caf\\\\xe9.cu" in text              # Markdown escapes the backslash
    else:
        assert shown in text


def test_stdout_and_port_show_a_non_utf8_file_name(latin1_tree, tmp_path, capsys):
    assert cli(["scan", str(latin1_tree), "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["findings"][0]["path"] == "caf\\xe9.cu"
    assert cli(["port", str(latin1_tree), "-o", str(tmp_path / "hip"), "-f", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [p["source"] for p in d["translated"]] == ["caf\\xe9.cu"]
    assert os.listdir(tmp_path / "hip") == [os.fsdecode(b"caf\xe9.cu")], "the output keeps the real name"


# ---------------------------------------------------------------- the report never lands on what is read

def test_an_output_that_is_an_input_is_refused_before_any_work(tmp_path, capsys):
    cu = write(tmp_path / "f.cu", "__global__ void k() {}\n")
    rules = write(tmp_path / "mine.toml", "")
    tree = tmp_path / "tree"
    write(tree / "a.py", CUDA_PY)
    cases = [(["scan", str(cu), "-o", str(cu)], "is also an input"),
             (["scan", str(tree), "-f", "json", "-o", str(tree / "report.json")], "is inside"),
             (["scan", str(tree), "-o", str(tmp_path)], "is a folder"),
             (["scan", str(tree), "--rules", str(rules), "-o", str(rules)], "is also an input")]
    for args, why in cases:
        assert cli(args) == 2, args
        assert why in one_error_line(capsys)
    link = tmp_path / "link.md"
    link.symlink_to(cu)
    assert cli(["scan", str(cu), "-f", "md", "-o", str(link)]) == 2
    assert "is also an input" in one_error_line(capsys)
    assert cu.read_text() == "__global__ void k() {}\n" and rules.read_text() == ""
    assert sorted(p.name for p in tree.iterdir()) == ["a.py"]


def test_reports_are_written_through_a_temporary_file(tmp_path, capsys):
    write(tmp_path / "src" / "a.py", CUDA_PY)
    out = tmp_path / "out" / "r.json"
    out.parent.mkdir()
    mask = os.umask(0o022)
    try:
        assert cli(["scan", str(tmp_path / "src"), "-f", "json", "-o", str(out)]) == 0
    finally:
        os.umask(mask)
    assert json.loads(out.read_text())["stats"]["findings"] == 1
    assert os.listdir(out.parent) == ["r.json"], "no temporary file is left behind"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644, "permissions as a new file gets them"
    assert cli(["scan", str(tmp_path / "src"), "-f", "md", "-o", str(out)]) == 0
    assert out.read_text().startswith("# CUDA lock-in scan") and os.listdir(out.parent) == ["r.json"]


# ---------------------------------------------------------------- port: no setuid bits, no collisions

def test_port_never_sets_setuid_setgid_or_sticky_bits(tmp_path):
    src = tmp_path / "src"
    tool = write(src / "tool.sh", "#!/bin/sh\nnvidia-smi\n")
    kernel = write(src / "k.cu", "#include <cuda_runtime.h>\n__global__ void k() {}\n")
    tool.chmod(0o6755)
    kernel.chmod(0o4644)
    if not stat.S_IMODE(tool.stat().st_mode) & stat.S_ISUID:
        pytest.skip("this file system does not keep setuid bits")
    port(src, tmp_path / "hip", scan_output=False)
    assert stat.S_IMODE((tmp_path / "hip" / "tool.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "hip" / "k.cu").stat().st_mode) == 0o644


def test_port_refuses_a_name_collision_before_writing(tmp_path, capsys):
    src = tmp_path / "src"
    write(src / "a.cu", "#include <cuda_runtime.h>\n__global__ void k() {}\n")
    write(src / "a.hip", "// hand-written HIP twin\n")
    write(src / "b.cu", "#include <cuda_runtime.h>\n__global__ void b() {}\n")
    out = tmp_path / "hip"
    assert cli(["port", str(src), "-o", str(out), "--rename"]) == 2
    err = one_error_line(capsys)
    assert "a.cu and a.hip" in err and "a.hip" in err
    assert not out.exists() or not os.listdir(out), "nothing written"
    assert cli(["port", str(src), "-o", str(out)]) == 0, "without --rename the names do not collide"
    assert (out / "a.hip").read_text() == "// hand-written HIP twin\n"


def test_port_output_inside_the_source_through_a_link_is_refused(tmp_path, capsys):
    src = tmp_path / "src"
    write(src / "a.cu", "__global__ void k() {}\n")
    (src / "empty").mkdir()
    (tmp_path / "out").symlink_to(src / "empty")
    assert cli(["port", str(src), "-o", str(tmp_path / "out")]) == 2
    assert "inside" in one_error_line(capsys)
    assert not os.listdir(src / "empty")
