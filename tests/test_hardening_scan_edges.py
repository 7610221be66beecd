"""gapbench scan and port at their edges: outputs that are devices, FIFOs or links; rules, .gitignore files and
roots that are not regular files; huge files; inputs built to make a pattern backtrack; .gitignore files too big
for the matcher; file names that are not UTF-8; port's output folder changing under it; a full disk."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gapbench.cli import main as cli
from gapbench.errors import GapbenchError
from gapbench.scan import scan

CUDA_PY = "import torch\ntorch.cuda.synchronize()\n"
CUDA_CU = "#include <cuda_runtime.h>\n__global__ void k() {}\nvoid f() { cudaDeviceSynchronize(); }\n"


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("gapbench: error:"), err
    return err


def gapbench(*args: str, timeout: float = 30, preexec=None) -> subprocess.CompletedProcess:
    """gapbench in a child process: a call that would block forever fails the test instead of hanging it."""
    code = "import sys; from gapbench.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec)


def one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gapbench: error:"), proc.stderr
    return lines[0]


@pytest.fixture
def tree(tmp_path) -> Path:
    src = tmp_path / "tree"
    write(src / "a.py", CUDA_PY)
    return src


def make_device(path: Path) -> Path:
    """A character device node like /dev/full (1, 7), made in tmp_path; skips where that is not allowed."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (OSError, AttributeError) as e:
        pytest.skip(f"cannot make a device node here ({e})")
    return path


# ---------------------------------------------------------------- the report's output

def test_an_output_that_is_a_fifo_or_a_link_to_one_is_refused(tree, tmp_path, capsys):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "report.json"
    link.symlink_to(fifo)
    for out in (fifo, link):
        assert cli(["scan", str(tree), "-f", "json", "-o", str(out)]) == 2
        assert "not a regular file" in one_error_line(capsys)
    assert stat.S_ISFIFO(fifo.lstat().st_mode) and link.is_symlink(), "neither is replaced"


def test_an_output_that_is_a_device_is_refused(tree, tmp_path, capsys):
    dev = make_device(tmp_path / "full")
    assert cli(["scan", str(tree), "-o", str(dev)]) == 2
    assert "not a regular file" in one_error_line(capsys)
    assert stat.S_ISCHR(dev.lstat().st_mode), "the device node is still a device node"


def test_a_results_file_is_replaced_only_with_force(tree, tmp_path, capsys):
    results = write(tmp_path / "results.json", '{"schema_version": 1, "measurements": []}\n')
    assert cli(["scan", str(tree), "-f", "json", "-o", str(results)]) == 2
    assert "--force" in one_error_line(capsys)
    assert "schema_version" in results.read_text()
    assert cli(["scan", str(tree), "-f", "json", "-o", str(results), "--force"]) == 0
    assert json.loads(results.read_text())["stats"]["findings"] == 1


def test_a_link_to_a_regular_file_is_replaced_not_written_through(tree, tmp_path):
    target = write(tmp_path / "elsewhere.txt", "kept\n")
    link = tmp_path / "report.md"
    link.symlink_to(target)
    assert cli(["scan", str(tree), "-f", "md", "-o", str(link)]) == 0
    assert target.read_text() == "kept\n" and not link.is_symlink()
    assert link.read_text().startswith("# CUDA lock-in scan")


# ---------------------------------------------------------------- what is read: regular files only, bounded

def test_a_rules_file_that_is_a_fifo_is_refused_without_blocking(tree, tmp_path):
    fifo = tmp_path / "rules.toml"
    os.mkfifo(fifo)
    assert "not a regular file" in one_line(gapbench("scan", str(tree), "--rules", str(fifo), timeout=20))


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_AS, (4 * 2**30, 4 * 2**30))


def test_a_rules_file_that_is_a_device_or_too_large_is_refused(tree, tmp_path, capsys):
    dev = make_device(tmp_path / "zero")    # reads as endless zeros: in a child with a memory limit
    assert "not a regular file" in one_line(gapbench("scan", str(tree), "--rules", str(dev), preexec=_limit_memory))
    big = tmp_path / "big.toml"
    with open(big, "wb") as f:
        f.truncate(5 * 2**20)           # sparse: nothing is written
    assert cli(["scan", str(tree), "--rules", str(big)]) == 2
    assert "larger than 4 MiB" in one_error_line(capsys)


def test_a_gitignore_that_is_too_large_is_not_used_and_noted(tmp_path):
    write(tmp_path / "a.py", CUDA_PY)
    with open(tmp_path / ".gitignore", "wb") as f:
        f.write(b"a.py\n")
        f.truncate(2 * 2**20)
    r = scan(tmp_path, jobs=1)
    assert {f.path for f in r.findings} == {"a.py"}
    assert [n.note for n in r.notes if n.path == ".gitignore"] == ["not used: larger than 1 MiB, the most read"]


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_root_that_is_not_a_folder_or_a_regular_file_is_exit_2(tmp_path, kind, capsys):
    root = tmp_path / "odd"
    if kind == "fifo":
        os.mkfifo(root)
    else:
        make_device(root)
    assert cli(["scan", str(root)]) == 2
    assert "not a folder or a regular file" in one_error_line(capsys)


def test_a_root_that_is_a_symlink_loop_is_exit_2(tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    assert cli(["scan", str(tmp_path / "a")]) == 2
    assert "symlink loop" in one_error_line(capsys)


def test_a_huge_binary_file_is_recognised_from_its_head(tmp_path):
    big = tmp_path / "tree" / "weights.py"
    big.parent.mkdir()
    with open(big, "wb") as f:
        f.truncate(768 * 2**20)         # sparse zeros: binary from its first byte
    # the peak from /proc (VmHWM, this process image's own): getrusage's ru_maxrss survives execve on Linux and
    # would report the forking test worker's size
    code = ("import sys; from gapbench.scan import scan; r = scan(sys.argv[1], max_bytes=2**31, jobs=1); "
            "print(r.skipped[0].reason); "
            "print(next(ln.split()[1] for ln in open('/proc/self/status') if ln.startswith('VmHWM:')))")
    proc = subprocess.run([sys.executable, "-c", code, str(big.parent)], capture_output=True, text=True, timeout=60)
    reason, maxrss_kib = proc.stdout.strip().splitlines()
    assert reason.startswith("binary")
    assert int(maxrss_kib) < 400 * 1024, "the file was read whole before its first bytes were looked at"


# ---------------------------------------------------------------- patterns are linear in the input

# Inputs that made one of the patterns try a match from each of n places, each scanning to the end: seconds to
# minutes at these sizes before, well under a second now.
PATHOLOGICAL = [     # (file name, the unit repeated 40,000 times, seconds allowed)
    ("k.cu", "<<<", 3),                          # kernel launch
    ("k.cu", "__shfl(", 3),                      # warp size 32 in a shuffle
    ("k.cu", "lane=", 3),                        # lane id modulo 32
    ("k.cu", "/* ", 3),                          # a comment that never closes
    ("k.cu", '"\\', 3),                          # a string that never closes
    ("CMakeLists.txt", "target_link_libraries(", 3),
    ("CMakeLists.txt", "LANGUAGES ", 3),
    # 40,000 findings each (about a second of records on an idle machine); the text was searched once per
    # finding for a suppression comment (over 10 s)
    ("Makefile", "--gpus ", 6),
    ("x.py", "x.cuda(", 6),
]


@pytest.mark.parametrize(("name", "unit", "allowed"), PATHOLOGICAL, ids=[f"{n}:{u}" for n, u, _ in PATHOLOGICAL])
def test_pathological_input_scans_in_linear_time(tmp_path, name, unit, allowed):
    path = write(tmp_path / name, unit * 40000)
    t0 = time.perf_counter()
    scan(tmp_path, jobs=1)
    took = time.perf_counter() - t0
    assert took < allowed, f"{took:.1f} s for {path.stat().st_size:,} bytes"


def test_doubling_a_run_of_launch_brackets_about_doubles_the_time(tmp_path):
    def timed(n: int) -> float:
        write(tmp_path / "k.cu", "<<<" * n)
        t0 = time.perf_counter()
        scan(tmp_path, jobs=1)
        return time.perf_counter() - t0
    timed(1000)     # the CUDA API dictionary is built once, outside the timing
    small, large = timed(40000), timed(80000)
    assert large < 3 * small + 0.2, f"{small:.2f} s, then {large:.2f} s at twice the size"


# ---------------------------------------------------------------- .gitignore files too big for the matcher

def test_a_gitignore_line_longer_than_the_limit_is_skipped_and_the_rest_honoured(tmp_path):
    write(tmp_path / ".gitignore", "a" * 60000 + "\n*.gen.py\n")
    write(tmp_path / "kept.py", CUDA_PY)
    write(tmp_path / "x.gen.py", CUDA_PY)
    r = scan(tmp_path, jobs=1)
    assert {f.path for f in r.findings} == {"kept.py"}
    [note] = [n.note for n in r.notes if n.path == ".gitignore"]
    assert note.startswith("line 1:") and "longer than 4096 characters" in note and len(note) < 200


def test_thousands_of_gitignore_patterns_are_compiled_in_chunks(tmp_path):
    write(tmp_path / ".gitignore", "".join(f"d{i}/**/*.o{i}\n" for i in range(3000)) + "*.gen.py\n!keep.gen.py\n")
    write(tmp_path / "kept.py", CUDA_PY)
    write(tmp_path / "x.gen.py", CUDA_PY)
    write(tmp_path / "keep.gen.py", CUDA_PY)
    write(tmp_path / "d2999" / "deep" / "m.o2999", "nvcc -o m\n")
    write(tmp_path / "d2999" / "deep" / "build.sh", "nvcc -o m\n")
    t0 = time.perf_counter()
    r = scan(tmp_path, jobs=1)
    assert time.perf_counter() - t0 < 10
    assert {f.path for f in r.findings} == {"kept.py", "keep.gen.py", "d2999/deep/build.sh"}
    assert not [n for n in r.notes if n.path == ".gitignore"]
    assert r.files_seen == 4, "x.gen.py and the .o2999 file are ignored"


# ---------------------------------------------------------------- file names that are not UTF-8

@pytest.fixture
def bad_names(tmp_path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    try:
        write(Path(os.fsdecode(os.fsencode(src) + b"/bad\xff.py")), CUDA_PY)
        write(Path(os.fsdecode(os.fsencode(src) + b"/gen\xfe.py")), CUDA_PY)
        write(Path(os.fsdecode(os.fsencode(src) + b"/k\xff.cu")), CUDA_CU)
    except (OSError, UnicodeError):
        pytest.skip("this file system does not take file names that are not UTF-8")
    write(src / ".gitignore", "gen?.py\n*.o\n")
    return src


def test_non_utf8_names_are_matched_against_gitignore_and_shown_escaped(bad_names, tmp_path, capsys):
    assert cli(["scan", str(bad_names), "-f", "json"]) == 0, capsys.readouterr().err
    paths = {f["path"] for f in json.loads(capsys.readouterr().out)["findings"]}
    assert paths == {"bad\\xff.py", "k\\xff.cu"}, "gen\\xfe.py is ignored by gen?.py"
    assert cli(["port", str(bad_names), "-o", str(tmp_path / "hip"), "-f", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [p["source"] for p in d["translated"]] == ["k\\xff.cu"]
    assert sorted(os.listdir(os.fsencode(tmp_path / "hip"))) == [b".gitignore", b"bad\xff.py", b"k\xff.cu"]


# ---------------------------------------------------------------- port's output folder

def test_port_refuses_a_file_that_would_land_on_a_folder_before_writing(tmp_path, capsys):
    src = tmp_path / "src"
    write(src / "a.cu", CUDA_CU)
    write(src / "a.hip" / "b.cu", CUDA_CU)
    write(src / "z.cu", CUDA_CU)
    out = tmp_path / "hip"
    assert cli(["port", str(src), "-o", str(out), "--rename"]) == 2
    assert "a.hip" in one_error_line(capsys)
    assert not out.exists() or not os.listdir(out), "nothing written"


def test_port_never_writes_through_a_link_planted_in_its_output(tmp_path):
    from gapbench.scan.port import OutputTree

    outside = tmp_path / "outside"
    outside.mkdir()
    out = tmp_path / "out"
    with OutputTree(str(out)) as tree:
        tree.write("a/one.txt", b"1\n", 0o644)
        (out / "b").symlink_to(outside)                 # planted while port runs
        with pytest.raises(GapbenchError, match="symlink"):
            tree.write("b/two.txt", b"2\n", 0o644)
        (out / "a" / "three.txt").symlink_to(outside / "three.txt")
        with pytest.raises(GapbenchError, match="appeared while port ran"):
            tree.write("a/three.txt", b"3\n", 0o644)
    assert os.listdir(outside) == []
    assert (out / "a" / "one.txt").read_text() == "1\n"
    assert sorted(os.listdir(out / "a")) == ["one.txt", "three.txt"], "no temporary file is left behind"


def _limit_file_size():
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))


def test_port_past_a_file_size_limit_is_one_line(tmp_path):
    src = tmp_path / "src"
    write(src / "data.txt", "x" * 200_000)     # copied as it is (no translation, so no torch to import)
    proc = gapbench("port", str(src), "-o", str(tmp_path / "hip"), preexec=_limit_file_size)
    assert "cannot write the output" in one_line(proc) and "File too large" in proc.stderr


def test_port_onto_a_full_disk_is_one_line(tmp_path):
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        src = tmp_path / "src"
        write(src / "data.txt", "x" * 200_000)
        proc = gapbench("port", str(src), "-o", str(disk / "hip"))
        assert "cannot write the output" in one_line(proc) and "No space left" in proc.stderr
    finally:
        subprocess.run(["umount", str(disk)], capture_output=True)
