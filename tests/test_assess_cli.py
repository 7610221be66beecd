"""gapbench assess through the real command line (subprocesses): the verdict first, --fail-on for CI gates,
--coverage with the cached operator index, --results, output files, and bad input as one line and exit 2."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

import gapbench as gapbench_pkg
from conftest import gapbench
from gapbench import results
from gapbench.results import Measurement, ResultSet
from gapbench.stats import Stats

TESTS = Path(__file__).resolve().parent
REPO = TESTS / "fixtures" / "assess" / "repo"
COVERAGE = TESTS.parent / "results" / "cpu-epyc-coverage-float32.json"


@pytest.mark.slow
def test_verdict_first_and_fail_on_blocker(tmp_path):
    p = gapbench("assess", REPO, "--target", "rocm", "--fail-on", "blocker", timeout=180)
    assert p.returncode == 1, p.stderr
    assert p.stdout.splitlines()[0].startswith(f"moving {REPO} to AMD ROCm: 1 blocker")
    assert "--fail-on" in p.stderr and "py-import-tensorrt" in p.stdout
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "train.py").write_text("import torch\nx = torch.ones(2).to('cuda')\n")   # works as is on ROCm
    p = gapbench("assess", clean, "--target", "rocm", "--fail-on", "manual", "-f", "json", timeout=180)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["verdict"].startswith(f"moving {clean} to AMD ROCm: 0 blockers, 0 manual and 0 automatic changes")
    assert d["code"]["counts"]["works"] == 1
    p = gapbench("assess", clean, "--target", "npu", "--fail-on", "manual", timeout=180)
    assert p.returncode == 0, p.stderr    # auto on Ascend (transfer_to_npu): below manual


@pytest.mark.parametrize("args, words", [
    (["assess", "/no/such/repo", "--target", "rocm"], "no such file or folder"),
    (["assess", str(REPO), "--target", "cuda"], "unknown target 'cuda'"),
    (["assess", str(REPO)], "needs --target"),
    (["assess", str(REPO), "--target", "rocm", "-f", "xml"], "unknown format"),
    (["assess", str(REPO), "--target", "rocm", "--results", str(COVERAGE)], "takes two files"),
    (["assess", str(REPO), "--target", "rocm", "--like", "no-such:tiny"], "unknown workload 'no-such'"),
    (["assess", str(REPO), "--target", "rocm", "--like", "llm-train:huge"], "no preset 'huge'"),
    (["assess", str(REPO), "--target", "rocm", "--coverage", str(COVERAGE)], "needs a step"),
    (["assess", str(REPO), "--target", "rocm", "--dtype", "bf16"], "--dtype is the precision a --like workload"),
    (["assess", str(REPO), "--target", "rocm", "--like", "llm-train:tiny", "--dtype", "fp8"], "dtype 'fp8'"),
    (["assess", str(REPO), "--target", "rocm", "--like", "llm-train:tiny", "--reference", "no-such:tiny"],
     "--reference 'no-such:tiny': unknown workload 'no-such'"),
    (["assess", str(REPO), "--target", "rocm", "--like", "llm-train:tiny", "--reference", "bert-finetune:huge"],
     "--reference 'bert-finetune:huge': workload bert-finetune has no preset 'huge'"),
    (["assess", str(REPO), "--target", "rocm", "--like", "llm-train:tiny", "--reference", "bert-finetune:tiny"],
     "--reference corrects a predicted speed: give the step"),
])
def test_bad_input_is_one_line_and_exit_2(args, words):
    p = gapbench(*args, timeout=180)
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and words in p.stderr, p.stderr


QUICK = TESTS.parent / "results" / "cpu-epyc-2core-quick-1thread.json"


@pytest.mark.parametrize("args, words", [
    ([str(QUICK), "-t", "dir", "--real", "--coverage", "out.json", "--like", "1,2"], "unknown target 'dir'"),
    ([str(REPO), "-t", "rocm", "--coverage", str(COVERAGE), "--like", "1,2"], "--like '1,2'"),
    ([str(REPO), "-t", "rocm", "--coverage", str(COVERAGE), "--like", "llm-train:tiny", "--dtype", "fp7"],
     "--dtype 'fp7'"),
    ([str(REPO), "-t", "rocm", "--coverage", "no-such.json", "--like", "llm-train:tiny"], "no-such.json"),
    ([str(REPO), "-t", "rocm", "--rules", "no-such.toml", "--coverage", str(COVERAGE), "--like", "llm-train:tiny"],
     "--rules no-such.toml"),
])
@pytest.mark.slow
def test_a_bad_command_line_is_refused_before_any_tracing(tmp_path, args, words):
    """With no cached operator index (a fresh cache folder) a good command would announce the minutes of tracing
    first; a bad one says its one line instead, and nothing is traced."""
    p = gapbench("assess", *args, timeout=120, cwd=tmp_path, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert p.returncode == 2, p.stdout + p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and words in p.stderr, p.stderr
    assert "tracing" not in p.stderr and not (tmp_path / "cache").exists()


def test_a_malformed_results_file_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1, "host": {}, "device": {}, "measurements": [{"workload": "gemm"}], '
                   '"run_id": "x"}')
    p = gapbench("assess", REPO, "--target", "rocm", "--results", bad, "--results", bad, timeout=180)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "bad.json: measurements[0].variant: missing" in p.stderr


def _rates(path: Path, gemm_tflops: float, per_op_us: float) -> Path:
    def m(workload, variant, value, unit, hib=True, **kw):
        return Measurement(workload=workload, variant=variant, value=value, unit=unit, higher_is_better=hib,
                           stats=Stats(median=value, iqr=0.0, min=value, max=value, n=7, ci95=(value, value), mean=value,
                                       stdev=0.0), **kw)

    rs = ResultSet(host={}, device={"type": "cpu", "product": f"CPU {per_op_us} us"}, measurements=[
        m("gemm", {"dtype": "fp32", "m": 256, "n": 256, "k": 256}, gemm_tflops, "TFLOP/s"),
        m("membw", {"kernel": "copy", "dtype": "fp32", "elements": 1 << 20}, 20.0, "GB/s", bytes=8.0 * 2**20),
        m("launch", {"kind": "train"}, per_op_us, "us", hib=False)])
    results.save(rs, path)
    return path


@pytest.mark.slow
def test_like_with_results_and_coverage_gives_the_whole_verdict(tmp_path):
    """The full verdict through the CLI: the operator index comes from the cache (here a small real index put
    where gapbench keeps it), the rates from two results files."""
    from gapbench.coverage.index import build_index, index_path
    from gapbench.results import write_json_atomic

    cache = tmp_path / "cache"
    small = build_index(ops=r"addmm|mm|t|nn\.functional\.relu|sum|view|expand|ones_like")
    write_json_atomic(cache / "gapbench" / index_path().name, small)   # where $XDG_CACHE_HOME/gapbench keeps it
    # run from the fixture repository (the entry is imported from the current folder), with this gapbench
    env = {"XDG_CACHE_HOME": str(cache), "PYTHONPATH": os.pathsep.join(
        [str(Path(gapbench_pkg.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])}
    src, tgt = _rates(tmp_path / "src.json", 0.1, 10.0), _rates(tmp_path / "tgt.json", 0.2, 5.0)
    out = tmp_path / "verdict.html"
    p = gapbench("assess", REPO, "--target", "cpu", "--entry", "model:build", "--coverage", COVERAGE,
                 "--results", src, "--results", tgt, "-f", "json", timeout=300, env=env, cwd=REPO)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["operators"]["coverage"] == str(COVERAGE) and d["operators"]["not_native"] == []
    assert d["speed"]["gap_pct"] > 0 and d["speed"]["lo"] < d["speed"]["gap_pct"] < d["speed"]["hi"]
    assert "expected speed +" in d["verdict"] and "against the source stack (predicted)" in d["verdict"]
    assert "the Intel XPU verdicts stand in" in d["target"]["basis"]
    p = gapbench("assess", REPO, "--target", "cpu", "--entry", "model:build", "--results", src, "--results", tgt,
                 "-f", "html", "-o", out, timeout=300, env=env, cwd=REPO)
    assert p.returncode == 0 and out.read_text().startswith("<!DOCTYPE html>")
    # what the traced code printed went to stderr, before the verdict line and the file written
    assert p.stderr.splitlines()[0] == "building the model" and p.stderr.splitlines()[1].startswith("moving ")
    assert f"wrote {out}" in p.stderr


@pytest.mark.slow
def test_a_reference_both_files_measured_corrects_the_speed_by_its_kinds_weight(tmp_path):
    """One thread against two on this project's EPYC (one session's folder, rates and model rows merged per side
    as the accuracy benchmark merges them): llm-train:tiny, measured on both sides, is the reference of
    bert-finetune:tiny's prediction."""
    import sys

    from gapbench.assess import calibration

    sys.path.insert(0, str(TESTS.parent))
    from benchmarks import assess_accuracy

    folder = TESTS.parent / "results" / "cpu-epyc-2core-assess-accuracy"
    files = []
    for t in (1, 2):
        rs = assess_accuracy.side(folder, t, "fp32")
        rs.path = None
        files.append(tmp_path / f"{t}t.json")
        results.save(rs, files[-1])
    args = ["assess", REPO, "--target", "cpu", "--like", "bert-finetune:tiny", "--results", files[0], "--results",
            files[1], "-f", "json"]
    plain = json.loads(gapbench(*args, timeout=300).stdout)["speed"]
    p = gapbench(*args, "--reference", "llm-train:tiny", timeout=300)
    assert p.returncode == 0, p.stderr
    speed = json.loads(p.stdout)["speed"]
    weight = calibration.default().weight_of(speed["kind"]).weight
    ref = speed["reference"]
    assert ref["name"] == "llm-train:tiny" and ref["error"] is not None and speed["reference_weight"] == weight > 0
    # in place of the kind's shift, where it has one
    assert speed["shift"] == 0.0 and 1 + speed["gap_pct"] / 100 == pytest.approx(
        (1 + plain["gap_pct"] / 100) * math.exp(plain["shift"] - weight * ref["error"]), rel=1e-6)
