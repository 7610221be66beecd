"""Numerics parity: a fault planted in one operator of the test accelerator is the layer compare names first; a
clean run on it is the same as the CPU within fp32 rounding; every format shows the comparison."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gapbench.compare import compare
from gapbench.compare.numerics import bound
from gapbench.report import render

ROOT = Path(__file__).resolve().parents[1]

MODEL = '''
import torch


def build():
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.SiLU(), torch.nn.Linear(32, 32), torch.nn.GELU(),
                                torch.nn.Linear(32, 4))
    return model, (torch.zeros(8, 16),)
'''


def _run(folder: Path, out: str, *args: str, env: dict | None = None) -> Path:
    e = {k: v for k, v in os.environ.items() if k != "GAPBENCH_TEST_ACCELERATOR_PERTURB"}
    e |= {"GAPBENCH_DB": str(folder / "history.sqlite"), **(env or {})}
    cmd = [sys.executable, "-m", "gapbench", "run", "-w", "numerics", "--entry", "mymodel:build", "--threads", "1",
           "--train-steps", "3", "--no-history", "-q", "-o", out, *args]
    p = subprocess.run(cmd, cwd=folder, env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    return folder / out


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("numerics")
    (folder / "mymodel.py").write_text(MODEL)
    cpu = _run(folder, "cpu.json", "--device", "cpu")
    clean = _run(folder, "test.json", "--device", "test")
    planted = _run(folder, "planted.json", "--device", "test", env={"GAPBENCH_TEST_ACCELERATOR_PERTURB": "silu:1e-3"})
    return cpu, clean, planted


@pytest.mark.slow
def test_a_fault_planted_in_one_operator_is_the_layer_compare_names_first(runs):
    cpu, _, planted = runs
    comp = compare([cpu, planted], labels=["cpu", "planted"], history=False)
    (entry,) = comp.numerics
    assert entry.first is not None and entry.first.name == "model.1"  # the SiLU: the Linear before it is clean
    assert comp.platforms[entry.sides[entry.first.side].platform].name == "planted"
    assert entry.first.err > entry.first.bound
    assert not entry.outputs[0].over(1)  # model.0, computed before the fault, is within fp32 rounding
    md = render(None, format="md", comparison=comp)
    assert "planted (fp32) diverges first at model.1" in md


@pytest.mark.slow
def test_the_clean_test_accelerator_is_the_cpu_within_fp32_rounding(runs):
    cpu, clean, _ = runs
    comp = compare([cpu, clean], labels=["cpu", "test"], history=False)
    (entry,) = comp.numerics
    assert entry.first is None and entry.first_grad is None and entry.same_start
    assert entry.loss_diff is not None and entry.loss_diff < 1e-5
    for le in entry.outputs:
        assert le.err[0] is not None and le.err[0] <= le.bounds[0]
    doc = json.loads(cpu.read_text())["measurements"][0]
    assert doc["variant"]["model"] == "entry:mymodel:build" and len(doc["metrics"]["numerics"]["losses"]) == 4
    assert not comp.rows  # numerics rows are compared layer by layer, not as a speed


@pytest.mark.slow
def test_every_format_shows_the_numerics(runs):
    cpu, _, planted = runs
    comp = compare([cpu, planted], labels=["cpu", "planted"], history=False)
    html = render(None, format="html", comparison=comp)
    assert "<h2>Numerics parity</h2>" in html and "error by layer" in html and "<polyline" in html
    data = json.loads(render(None, format="json", comparison=comp))
    assert data["numerics"][0]["first_divergence"]["name"] == "model.1"
    assert "diverges first at model.1" in data["numerics"][0]["verdict"]
    csv_text = render(None, format="csv", comparison=comp)
    header = csv_text.splitlines()[0].split(",")
    assert header[-6:] == ["layer", "layer_kind", "rel_error", "bound", "cross_error", "cross_bound"]
    assert any(",model.1,output," in line for line in csv_text.splitlines())
    term = render(None, format="terminal", comparison=comp)
    assert "diverges first at model.1" in " ".join(term.split())


def test_the_bound_grows_with_the_reduction_length_and_the_unit_roundoff():
    u32, ubf = 2.0**-24, 2.0**-8
    assert bound(u32, u32, 0, 0) == pytest.approx(10 * u32)
    assert bound(u32, u32, 1024, 8) == pytest.approx(10 * u32 * math.sqrt(8 + 1024))
    assert bound(ubf, u32, 1024, 8) > 1000 * bound(u32, u32, 1024, 8)


def test_a_bad_entry_is_one_line_and_exit_2(tmp_path):
    p = subprocess.run([sys.executable, "-m", "gapbench", "run", "-w", "numerics", "--entry", "no-colon",
                        "--no-history", "-q"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "GAPBENCH_DB": str(tmp_path / "h.sqlite")})
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "--entry" in p.stderr, p.stderr


def test_the_committed_cpu_results_are_within_rounding_and_bf16_errs_more_than_fp32():
    r = ROOT / "results"
    comp = compare([r / "cpu-xeon-2core-numerics-fp32-2threads.json", r / "cpu-xeon-2core-numerics-bf16-2threads.json"],
                   history=False)
    assert [e.model for e in comp.numerics] == ["llm-tiny", "bert-tiny", "unet-tiny"]
    for e in comp.numerics:
        assert e.first is None and e.first_grad is None and e.same_start and e.knobs_differ == ["dtype"]
        worst = [max(le.err[i] for le in e.outputs if le.err[i] is not None) for i in (0, 1)]
        assert 1e-8 < worst[0] < 1e-5 < 1e-3 < worst[1] < 0.1, worst
        assert 0 < e.loss_diff < 0.02
