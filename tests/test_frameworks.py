"""The framework support matrix: real probes in real subprocesses, and the check on their results."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from gapbench import frameworks as fw
from gapbench import results


def test_check_accepts_the_exact_product_and_rejects_perturbed_ones():
    a, b = fw.probe_inputs()
    exact = (torch.tensor(a, dtype=torch.float64) @ torch.tensor(b, dtype=torch.float64)).tolist()
    assert fw.check_matmul(exact, a, b) is None
    off = [row[:] for row in exact]
    off[10][20] += 1.0
    assert fw.check_matmul(off, a, b) == f"wrong result: element (10,20) is {off[10][20]:g}, expected {exact[10][20]:g}"
    nan = [row[:] for row in exact]
    nan[0][0] = float("nan")
    assert "element (0,0)" in fw.check_matmul(nan, a, b)
    assert "shape" in fw.check_matmul(exact[:-1], a, b)
    assert fw.check_matmul("garbage", a, b) is not None
    transposed = (torch.tensor(b).t() @ torch.tensor(a).t()).tolist()  # a classic layout bug
    assert fw.check_matmul(transposed, a, b) is not None


def test_absent_module_is_not_installed_without_starting_anything():
    row = fw.probe(fw.Framework("Nothing", "gapbench_no_such_framework_xyz", "raise SystemExit(9)"), "cpu")
    assert row == {"framework": "Nothing", "version": None, "status": "not_installed", "device": None,
                   "reason": "python module 'gapbench_no_such_framework_xyz' not found"}


def test_pytorch_works_on_cpu_through_a_real_subprocess():
    row = fw.probe(fw.FRAMEWORKS[0], "cpu")
    assert row["status"] == "works", row
    assert row["version"] == torch.__version__ and row["device"] == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_pytorch_without_the_accelerator_is_cpu_only():
    row = fw.probe(fw.FRAMEWORKS[0], "cuda")
    assert row["status"] == "cpu_only" and "no cuda device" in row["reason"]


def _body(code: str) -> str:
    return "def matmul(a, b, device_type):\n" + textwrap.indent(textwrap.dedent(code).strip(), "    ") + "\n"


def test_a_framework_returning_a_wrong_result_is_an_error():
    body = _body("""
        c = [[sum(x * y for x, y in zip(r, col)) for col in zip(*b)] for r in a]
        c[1][2] += 3
        return {"version": "1.0", "device": "fake:0", "on_device": True, "result": c}
    """)
    row = fw.probe(fw.Framework("Fake", "json", body), "cpu")
    assert row["status"] == "error" and "element (1,2)" in row["reason"] and row["device"] == "fake:0"


def test_a_correct_framework_that_falls_back_to_cpu_is_cpu_only():
    body = _body("""
        c = [[sum(x * y for x, y in zip(r, col)) for col in zip(*b)] for r in a]
        return {"version": "1.0", "device": "cpu", "on_device": False, "result": c, "note": "no GPU here"}
    """)
    assert fw.probe(fw.Framework("Fake", "json", body), "cuda")["status"] == "cpu_only"
    assert fw.probe(fw.Framework("Fake", "json", body), "cpu")["status"] == "works"


def test_crashing_raising_and_hanging_frameworks_are_errors_with_reasons():
    crash = fw.probe(fw.Framework("Crash", "json", _body("import os\nos._exit(3)")), "cpu")
    assert crash["status"] == "error" and "exit code 3" in crash["reason"]
    broken = fw.probe(fw.Framework("Broken", "json", _body("import gapbench_missing_backend_lib")), "cpu")
    assert broken["status"] == "error" and "ModuleNotFoundError" in broken["reason"]
    hang = fw.probe(fw.Framework("Hang", "json", _body("import time\ntime.sleep(60)")), "cpu", timeout_s=2)
    assert hang["status"] == "error" and hang["reason"] == "probe timed out after 2 s"


def test_probe_all_has_one_row_per_framework_with_the_agreed_keys():
    rows = fw.probe_all("cpu:0")
    assert [r["framework"] for r in rows] == [f.name for f in fw.FRAMEWORKS]
    for r in rows:
        assert {"framework", "version", "status", "device", "reason"} <= r.keys()
        assert r["status"] in fw.STATUSES
        assert r["status"] == "works" or r["reason"]


@pytest.mark.slow
def test_cli_json_and_results_file(tmp_path):
    out = tmp_path / "fw.json"
    proc = subprocess.run([sys.executable, "-m", "gapbench", "frameworks", "--device", "cpu", "--json", "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert rows[0]["framework"] == "PyTorch" and rows[0]["status"] == "works"
    rs = results.load(out)
    assert rs.measurements == [] and rs.frameworks == rows and rs.device["type"] == "cpu"
    bad = subprocess.run([sys.executable, "-m", "gapbench", "frameworks", "--device", "tpu"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
