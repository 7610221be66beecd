"""benchmarks/assess_recheck.py: a finished accuracy run's rates with one workload's rows measured anew. The rows are
replaced for each thread count, the run's own model rows kept; a held-aside model is refused; a missing file is one
line and exit code 2. Real results files, no model traced."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import assess_models, assess_recheck, assess_unseen  # noqa: E402

from gapbench import results  # noqa: E402
from gapbench.results import ResultSet  # noqa: E402
from test_assess_speed import _m, rates_file  # noqa: E402


def _conv(groups: int, tflops: float):
    return _m("conv", {"dtype": "fp32", "batch": 2, "c_in": 96, "c_out": 96, "hw": 8, "kernel": 7, "groups": groups,
                       "pass": "forward"}, tflops, "TFLOP/s")


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    for t in assess_unseen.THREADS:
        rates_file(run / assess_unseen.rates_file(t), gemm_tflops=0.001 * t, per_op_us=10, extra=[_conv(1, 0.004)])
        model = _m(assess_unseen.WORKLOAD, {"model": "convnext", "dtype": "fp32"}, 2.0 * t, "steps/s",
                   metrics={"category": "model"})
        results.save(ResultSet(host={}, device={"type": "cpu"}, measurements=[model]),
                     run / assess_unseen.models_file(t))
    return run


def test_the_workloads_rows_are_replaced_and_the_model_rows_kept(tmp_path):
    run = _run(tmp_path)
    new = {}
    for t in assess_unseen.THREADS:
        new[t] = tmp_path / f"conv-{t}t.json"
        results.save(ResultSet(host={}, device={"type": "cpu"}, measurements=[_conv(96, 0.0005 * t)]), new[t])
    for t in assess_unseen.THREADS:
        own = assess_recheck.sides(run, t, "fp32", None, new)
        replaced = assess_recheck.sides(run, t, "fp32", "conv", new)
        assert [p.groups for p in own.conv[("fp32", "forward")]] == [0]           # the run's dense row
        assert [(p.groups, p.rate.value) for p in replaced.conv[("fp32", "forward")]] == [(96, 0.0005e12 * t)]
        assert [m.value for m in replaced.models] == [m.value for m in own.models] == [2.0 * t]
        assert replaced.gemm == own.gemm                                          # other workloads untouched
        added = assess_recheck.sides(run, t, "fp32", "conv", new, add=True)        # --add: both, side by side
        assert sorted(p.groups for p in added.conv[("fp32", "forward")]) == [0, 96]


def test_a_held_aside_model_is_refused_and_a_missing_file_is_exit_code_2(tmp_path, capsys):
    held = next(n for n, m in assess_models.models().items() if m["split"] == "held-aside")
    run = _run(tmp_path)
    with pytest.raises(assess_unseen.Refused, match="held aside"):
        assess_recheck.main([str(run), "--rows", f"conv={run}/rates-1t.json,{run}/rates-2t.json", "--models", held])
    assert assess_recheck.main([str(run), "--rows", f"conv={tmp_path}/no-1t.json,{tmp_path}/no-2t.json",
                                "--models", "convnext"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file or folder" in err[0] and "no-1t.json" in err[0]
