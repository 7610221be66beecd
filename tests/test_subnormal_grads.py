"""A training step that runs on subnormal gradients times the processor's subnormal arithmetic, not the stack: the
training driver records the share (metrics.subnormal_grads) and compare gives such a row's gaps no verdict."""

from __future__ import annotations

import types
from pathlib import Path

import pytest
import torch

from gapbench import devices
from gapbench.compare import compare
from gapbench.results import load
from gapbench.results.records import SUBNORMAL_LIMIT, Measurement
from gapbench.workloads.models.precision import precision_of
from gapbench.workloads.models.train import TrainStep, subnormal_share

RESULTS = Path(__file__).resolve().parents[1] / "results"


class Tiny(torch.nn.Module):
    """y = w·x: its weight's gradient is the inputs times the loss's, so tiny inputs give subnormal gradients."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(64))

    def forward(self, x, y):
        return types.SimpleNamespace(loss=((self.w * x).sum(-1) - y).pow(2).mean())


def _step(scale: float) -> TrainStep:
    g = torch.Generator().manual_seed(0)
    batch = {"x": torch.randn(8, 64, generator=g) * scale, "y": torch.randn(8, generator=g)}
    return TrainStep(Tiny(), batch, devices.resolve("cpu"), precision_of("fp32"), lr=1e-3)


def test_the_share_is_measured_on_one_more_backward_pass_and_leaves_the_weights_as_they_were():
    normal, tiny = _step(1.0), _step(1e-39)  # 1e-39 · O(1) is below fp32's smallest normal (1.18e-38)
    for s in (normal, tiny):
        s()
    before = tiny.model.w.detach().clone()
    assert normal.subnormal_grads() == 0.0
    share = tiny.subnormal_grads()
    assert share > 0.5
    assert torch.equal(before, tiny.model.w.detach())  # no optimizer step
    assert all(p.grad is None for p in tiny.model.parameters())  # and no gradient left behind
    w = torch.nn.Parameter(torch.zeros(4))
    w.grad = torch.tensor([1e-40, 1.0, 0.0, 2.0])
    assert subnormal_share([w]) == pytest.approx(1 / 3)


def _row(share, status="ok") -> Measurement:
    return Measurement(workload="assess-model", variant={"model": "m", "dtype": "fp32"}, status=status,
                       value=1.0 if status == "ok" else None, unit="steps/s", reason="" if status == "ok" else "x",
                       metrics={"subnormal_grads": share})


def test_a_row_says_why_above_the_limit_only():
    assert _row(SUBNORMAL_LIMIT).subnormal == ""
    assert _row(0.0).subnormal == ""
    assert "1.6% of the step's gradients were subnormal" in _row(0.016).subnormal
    assert _row(0.5, status="wrong_result").subnormal == ""
    assert _row(True).subnormal == "" and _row("high").subnormal == ""


def test_compare_gives_no_verdict_on_a_step_that_ran_on_subnormal_gradients():
    # a real folder: efficientnet's fp32 step held 1.6% subnormal gradients at one thread and at two
    folder = RESULTS / "cpu-xeon-2core-assess-r7-held-aside"
    one, two = load(folder / "models-1t.json"), load(folder / "models-2t.json")
    comp = compare([one, two], labels=["1 thread", "2 threads"], history=False)
    eff = next(r for r in comp.rows if r.variant == {"model": "efficientnet", "dtype": "fp32"})
    gap = eff.gaps[1]
    assert gap.verdict == "no verdict" and gap.pct is not None
    assert "platform: 1.6% of the step's gradients were subnormal" in gap.why and "baseline: 1.6%" in gap.why
    others = [r for r in comp.rows if r.variant.get("model") in ("falcon", "funnel") and r.variant["dtype"] == "fp32"]
    assert len(others) == 2 and all(not r.gaps[1].subnormal and r.gaps[1].verdict != "no verdict" for r in others)
    doc = comp.to_dict()
    marked = [r["variant"]["model"] for r in doc["rows"] for g in r["gaps"].values() if g["subnormal"]]
    assert marked == ["efficientnet"]
    judged = compare([one, two], labels=["1 thread", "2 threads"], history=False, allow_flagged=True)
    eff2 = next(r for r in judged.rows if r.variant == eff.variant)
    assert eff2.gaps[1].verdict != "no verdict" and eff2.gaps[1].subnormal


def test_the_terminal_table_marks_it_and_says_why(tmp_path):
    import subprocess
    import sys

    folder = RESULTS / "cpu-xeon-2core-assess-r7-held-aside"
    p = subprocess.run([sys.executable, "-m", "gapbench", "compare", str(folder / "models-1t.json"),
                        str(folder / "models-2t.json"), "--no-history"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    assert "on subnormal gradients" in text and "1.6% of the step's gradients were subnormal floats" in text
