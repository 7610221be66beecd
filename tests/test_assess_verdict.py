"""gapbench.assess as an API: the code part from a fixture repository with a known blocker, stacks the scanner has
no verdicts for, the operators of a model against a real coverage file with one operator marked unsupported, the
verdict line and every format."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

import gapbench
from gapbench.errors import GapbenchError
from gapbench.report.assess import render, verdict_line

TESTS = Path(__file__).resolve().parent
REPO = TESTS / "fixtures" / "assess" / "repo"
COVERAGE = TESTS.parent / "results" / "cpu-epyc-coverage-float32.json"  # a real audit of a CPU, float32
AUDITED = r"addmm|mm|t|nn\.functional\.relu|sum|view|expand|ones_like"


@pytest.fixture()
def repo(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))
    monkeypatch.chdir(REPO)
    yield REPO
    sys.modules.pop("model", None)


def test_code_part_finds_the_blocker_and_sizes_the_effort():
    a = gapbench.assess(REPO, target="rocm")
    c = a.code
    assert c.counts == {"works": 3, "auto": 0, "manual": 0, "blocker": 1}
    assert c.effort_days == (3.0, 10.0)            # one blocker problem in one file: 1 unit × 3–10 days
    assert c.blockers == [{"rule": "py-import-tensorrt", "findings": 1, "files": 1}]
    worst = c.findings[0]
    assert (worst.path, worst.line, worst.rule, worst.verdict) == ("train.py", 3, "py-import-tensorrt", "blocker")
    assert worst.fix
    assert a.fails("blocker") and a.fails("manual")
    assert a.operators is None and a.speed is None
    line = verdict_line(a)
    assert line.startswith(f"moving {REPO} to AMD ROCm: 1 blocker, 0 manual and 0 automatic changes, "
                           "3–10 person-days; operators not assessed")
    assert "speed not predicted" in line


def test_stacks_without_verdicts_of_their_own_say_whose_stand_in():
    for key, name in (("mps", "Apple MPS"), ("cpu", "CPU")):
        a = gapbench.assess(REPO, target=key)
        assert a.stack.name == name and a.stack.proxied and a.code.scan_target == "xpu"
        assert a.code.counts == {"works": 0, "auto": 3, "manual": 0, "blocker": 1}   # the XPU verdicts
        text = render(a, "md")
        assert "the Intel XPU verdicts stand in" in text and "no CUDA compatibility layer" in text
        assert f"The scanner has no {name} verdicts: the Intel XPU verdicts stand in" in text
    assert not gapbench.assess(REPO, target="npu").stack.proxied
    with pytest.raises(GapbenchError, match="unknown target 'cuda'"):
        gapbench.assess(REPO, target="cuda")


def test_bad_input_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(GapbenchError, match="no such file"):
        gapbench.assess(tmp_path / "missing", target="rocm")
    with pytest.raises(GapbenchError, match="two files"):
        gapbench.assess(REPO, target="rocm", results=[COVERAGE])
    with pytest.raises(GapbenchError, match="not both"):
        gapbench.assess(REPO, target="rocm", entry="model:build", like="llm-train:tiny")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GapbenchError, match="not valid JSON"):
        gapbench.assess(REPO, target="rocm", results=[bad, bad])
    with pytest.raises(GapbenchError, match="needs a step"):
        gapbench.assess(REPO, target="rocm", coverage=str(COVERAGE))


@pytest.fixture(scope="module")
def index():
    from gapbench.coverage.index import build_index

    return build_index(ops=AUDITED)  # the real index, of the entries this model's operators map to


@pytest.fixture()
def addmm_unsupported(tmp_path):
    data = json.loads(COVERAGE.read_text())
    for r in data["coverage"]["ops"]:
        if r["op"] == "addmm":
            r["status"], r["reason"] = "unsupported", "addmm: not implemented for 'Float' on this device"
    path = tmp_path / "target-coverage.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.slow
def test_operators_against_a_coverage_file_with_one_unsupported(repo, index, addmm_unsupported):
    a = gapbench.assess(repo, target="rocm", entry="model:build", coverage=str(addmm_unsupported), index=index)
    o = a.operators
    assert o.how == "entry" and o.traced == "model:build" and o.fake
    assert o.not_native == ["aten.addmm.default"]
    assert o.statuses["aten.addmm.default"]["status"] == "unsupported"
    assert o.statuses["aten.relu.default"]["status"] == "native"
    # the audit ran without --grad: backward-only kernels are not audited, and said so
    assert "aten.threshold_backward.default" in o.not_audited
    n = len(o.ops)
    line = verdict_line(a)
    assert f"; 1 of {n} operators not native (aten.addmm.default unsupported), {len(o.not_audited)} not audited;" \
        in line
    d = json.loads(render(a, "json"))
    assert d["verdict"] == line and d["operators"]["not_native"] == ["aten.addmm.default"]
    row = next(r for r in d["operators"]["ops"] if r["op"] == "aten.addmm.default")
    assert row["status"] == "unsupported" and row["entry"] == "addmm"
    # the same audit untouched: nothing is not native
    clean = gapbench.assess(repo, target="rocm", entry="model:build", coverage=str(COVERAGE), index=index)
    assert clean.operators.not_native == [] and f"0 of {n} operators not native" in verdict_line(clean)


def test_without_a_coverage_file_operators_are_not_audited(repo):
    a = gapbench.assess(repo, target="xpu", entry="model:step")
    assert a.operators.coverage is None and a.operators.not_audited == a.operators.ops
    assert f"{len(a.operators.ops)} operators, not audited on the target (no --coverage)" in verdict_line(a)
    assert "speed not predicted (no rates: give --results" in verdict_line(a)
    md = render(a, "md")
    assert "model:step was imported and run to trace it" in md


def test_formats_escape_what_comes_from_the_code(tmp_path):
    shutil.copytree(REPO, tmp_path / "repo")
    (tmp_path / "repo" / "<i>evil&.py").write_text("import pycuda  # <script>alert(1)</script>\n")
    a = gapbench.assess(tmp_path / "repo", target="npu")
    html = render(a, "html")
    assert "<i>evil" not in html and "&lt;i&gt;evil&amp;.py" in html and "<script>" not in html
    assert html.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in html
    md = render(a, "md")
    assert md.startswith("**moving ") and "&lt;i&gt;evil&.py" in md
    d = json.loads(render(a, "json"))
    assert d["schema"] == "gapbench.assess/1" and d["target"]["key"] == "npu"
    assert any(f["path"] == "<i>evil&.py" and f["verdict"] == "blocker" for f in d["code"]["findings"])
