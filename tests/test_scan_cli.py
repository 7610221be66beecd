"""gapbench scan / port through the real CLI (`python -m gapbench`): output formats and exit codes 0/1/2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

FIX = Path(__file__).resolve().parent / "fixtures" / "scan"


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gapbench", *map(str, args)], capture_output=True, text=True,
                          timeout=120, cwd=cwd, env={**os.environ, "COLUMNS": "200"})


def test_scan_table_and_json():
    p = run("scan", FIX / "build")
    assert p.returncode == 0, p.stderr
    assert "CUDA lock-in per target" in p.stdout and "build-docker-nvidia-base" in p.stdout
    p = run("scan", FIX / "build", "--target", "rocm", "--format", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["targets"] == ["rocm"] and d["stats"]["findings"] == len(d["findings"]) > 0


def test_fail_on_exit_codes(tmp_path):
    # fixtures/scan/python holds blockers for every target (tensorrt, gds)
    assert run("scan", FIX / "python", "--fail-on", "blocker", "-f", "json").returncode == 1
    # the build fixtures have no manual or blocker finding for ROCm ...
    p = run("scan", FIX / "build", "--fail-on", "manual", "--target", "rocm", "-f", "json")
    assert p.returncode == 0, p.stderr
    # ... but nvcc is a blocker for Ascend
    p = run("scan", FIX / "build", "--fail-on", "blocker", "--target", "npu", "-f", "sarif")
    assert p.returncode == 1 and "--fail-on" in p.stderr
    assert json.loads(p.stdout)["version"] == "2.1.0"


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    for args in (["scan", tmp_path / "missing"], ["scan", FIX, "--target", "cuda"], ["scan", FIX, "-f", "xml"],
                 ["scan", FIX, "--max-size", "lots"], ["port", FIX / "port" / "src", "-o", FIX / "port"],
                 ["port", FIX / "port" / "src", "-o", FIX / "port" / "src" / "out"]):
        p = run(*args)
        assert p.returncode == 2, (args, p.stdout, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
    assert not (FIX / "port" / "src" / "out").exists()


def test_output_files_md_html(tmp_path):
    for fmt in ("md", "html"):
        out = tmp_path / f"r.{fmt}"
        p = run("scan", FIX / "cpp", "--format", fmt, "--output", out)
        assert p.returncode == 0, p.stderr
        text = out.read_text()
        assert "cpp-inline-ptx" in text
    assert run("scan", FIX / "cpp", "-f", "md", "-o", tmp_path / "nodir" / "x.md").returncode == 2


def test_port_cli(tmp_path):
    p = run("port", FIX / "port" / "src", "--target", "rocm", "--output", tmp_path / "hip", "--format", "json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert {u["identifier"] for u in d["unmapped"]} == {"__CUDA_ARCH__", "cudaAccessPolicyWindow"}
    assert "hipMalloc" in (tmp_path / "hip" / "vadd.cu").read_text()
    p = run("port", FIX / "port" / "src", "-o", tmp_path / "hip2", "--fail-on-unmapped")
    assert p.returncode == 1
