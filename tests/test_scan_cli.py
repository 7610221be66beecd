"""gapbench scan / port through the CLI: a real `python -m gapbench` subprocess for the exit codes 0/1/2, and
the same entry point in-process (gapbench.cli.main) for the rest, to keep the suite fast."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gapbench.cli import main as cli

FIX = Path(__file__).resolve().parent / "fixtures" / "scan"


def run(*args):
    return subprocess.run([sys.executable, "-m", "gapbench", *map(str, args)], capture_output=True, text=True,
                          timeout=180, env={**os.environ, "COLUMNS": "200"})


def test_subprocess_exit_codes(tmp_path):
    p = run("scan", FIX / "buildrun", "--target", "rocm", "--format", "json", "--fail-on", "manual")
    assert p.returncode == 0, p.stderr          # build fixtures: nothing manual for ROCm
    d = json.loads(p.stdout)
    assert d["targets"] == ["rocm"] and d["stats"]["findings"] == len(d["findings"]) > 0
    p = run("scan", FIX / "python", "--fail-on", "blocker")
    assert p.returncode == 1 and "--fail-on" in p.stderr       # tensorrt and gds are blockers everywhere
    assert "CUDA lock-in per target" in p.stdout
    p = run("scan", tmp_path / "missing")
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "no such file" in p.stderr


def test_fail_on_with_target_selection(capsys):
    assert cli(["scan", str(FIX / "buildrun"), "--fail-on", "blocker", "--target", "rocm", "-f", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["targets"] == ["rocm"]
    assert cli(["scan", str(FIX / "buildrun"), "--fail-on", "blocker", "--target", "npu", "-f", "sarif"]) == 1
    out = capsys.readouterr()     # nvcc has no Ascend equivalent
    assert "--fail-on" in out.err and json.loads(out.out)["version"] == "2.1.0"


def test_bad_input_exit_2(tmp_path, capsys):
    for args in (["scan", str(FIX), "--target", "cuda"], ["scan", str(FIX), "-f", "xml"],
                 ["scan", str(FIX), "--max-size", "lots"], ["scan", str(FIX), "-f", "md", "-o",
                                                            str(tmp_path / "nodir" / "x.md")],
                 ["port", str(FIX / "port" / "src"), "-o", str(FIX / "port")],
                 ["port", str(FIX / "port" / "src"), "-o", str(FIX / "port" / "src" / "out")],
                 ["port", str(FIX / "port" / "src"), "-o", str(tmp_path / "x"), "--target", "npu"]):
        assert cli(args) == 2, args
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and err.startswith("gapbench: error:"), err
    assert not (FIX / "port" / "src" / "out").exists()


def test_output_files(tmp_path):
    for fmt in ("md", "html", "table"):
        out = tmp_path / f"r.{fmt}"
        assert cli(["scan", str(FIX / "cpp"), "--format", fmt, "--output", str(out)]) == 0
        assert "cpp-inline-ptx" in out.read_text()


def test_port_cli(tmp_path, capsys):
    assert cli(["port", str(FIX / "port" / "src"), "--target", "rocm", "--output", str(tmp_path / "hip"),
                "--format", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {u["identifier"] for u in d["unmapped"]} == {"__CUDA_ARCH__", "cudaAccessPolicyWindow"}
    assert "hipMalloc" in (tmp_path / "hip" / "vadd.cu").read_text()
    assert cli(["port", str(FIX / "port" / "src"), "-o", str(tmp_path / "hip2"), "--fail-on-unmapped"]) == 1


def test_list_rules(capsys):
    assert cli(["scan", "--list-rules", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    ids = {r["id"] for r in d["rules"]}
    assert {"py-dot-cuda", "cpp-inline-ptx", "deps-nvidia-wheel", "build-docker-nvidia-base"} <= ids
    assert cli(["scan"]) == 2
    assert "needs a PATH" in capsys.readouterr().err
