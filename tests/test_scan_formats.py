"""gapbench scan output formats: JSON (documented shape), Markdown, escaped HTML, SARIF 2.1.0 against the schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gapbench.report.scan import render_html, render_json, render_markdown, render_sarif, terminal
from gapbench.scan import scan

FIX = Path(__file__).resolve().parent / "fixtures" / "scan"
SARIF_SCHEMA = Path(__file__).resolve().parent / "data" / "sarif-schema-2.1.0.json"


@pytest.fixture(scope="module")
def report():
    return scan(FIX, jobs=1)


def test_json_shape(report):
    d = json.loads(render_json(report))
    assert d["schema"] == "gapbench.scan/1" and d["targets"] == ["rocm", "npu", "xpu"]
    assert set(d["stats"]) >= {"files_scanned", "files_skipped", "findings", "suppressed", "elapsed_s", "files_per_s"}
    assert d["stats"]["findings"] == len(d["findings"]) == len(report.findings)
    assert sum(r["findings"] for r in d["rules_fired"].values()) == len(d["findings"])   # how often each rule fired
    f = d["findings"][0]
    assert set(f) == {"path", "line", "column", "rule", "already_ported", "kind", "text", "message", "verdicts", "fix",
                      "reference"}
    assert "blocker" in f["verdicts"].values(), "blockers come first"
    for t in ("rocm", "npu", "xpu"):
        s = d["summary"][t]
        assert sum(s["counts"].values()) == len(d["findings"]) - d["stats"]["already_ported"]
        assert 0 < s["effort_person_days"]["low"] <= s["effort_person_days"]["high"]
        assert {b["rule"] for b in s["blockers"]} == {r["rule"] for r in s["rules"] if r["verdict"] == "blocker"}


def test_markdown(report):
    md = render_markdown(report)
    assert "| target | works | auto | manual | blocker | effort (range) |" in md
    assert "## Blockers (no equivalent on the target)" in md and "Huawei Ascend NPU (npu)" in md
    assert "| cpp-inline-ptx |" in md and "person-days" in md


def test_html_is_self_contained_and_escaped(tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM nvidia/cuda:<script>alert(1)</script>\n")
    (tmp_path / "a&b.py").write_text("import torch\nx = '<b>'\ntorch.cuda.synchronize()\n")
    r = scan(tmp_path, jobs=1)
    page = render_html(r)
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "a&amp;b.py" in page
    assert "<link" not in page and "src=" not in page, "no external resources"


def test_sarif_validates_against_the_official_schema(report):
    import jsonschema

    schema = json.loads(SARIF_SCHEMA.read_text())
    doc = json.loads(render_sarif(report))
    jsonschema.validators.validator_for(schema)(schema).validate(doc)
    run = doc["runs"][0]
    assert doc["version"] == "2.1.0"
    assert len(run["results"]) == len(report.findings)
    ids = [r["id"] for r in run["tool"]["driver"]["rules"]]
    for res in run["results"]:
        assert ids[res["ruleIndex"]] == res["ruleId"]
        loc = res["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uriBaseId"] == "SRCROOT" and loc["region"]["startLine"] >= 1
    levels = {res["ruleId"]: res["level"] for res in run["results"]}
    assert levels["cpp-inline-ptx"] == "error" and levels["py-import-flash-attn"] == "warning"


def test_sarif_with_skips_and_notes_validates(tmp_path):
    import jsonschema

    (tmp_path / "b.py").write_bytes(b"\x00\x01")
    (tmp_path / "c d.py").write_text("def (:\ntorch.cuda.synchronize()\n")
    r = scan(tmp_path, targets=["rocm"], jobs=1)
    doc = json.loads(render_sarif(r))
    schema = json.loads(SARIF_SCHEMA.read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(doc)
    assert doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "c%20d.py"
    assert len(doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]) == 2


def test_terminal_renderables(report):
    from rich.console import Console

    console = Console(record=True, width=200)
    for item in terminal(report, limit=5):
        console.print(item)
    text = console.export_text()
    assert "CUDA lock-in per target" in text and "Blockers" in text and "5 of" in text
