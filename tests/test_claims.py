"""gapbench claims on real tables, through real `python -m gapbench claims` processes: each verdict tripped by a
table written for it, bad input as one line and exit 2, every output format, and the example table's verdicts."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "docs" / "examples" / "mi300x-vs-h100-ainews.md"


def run(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "gapbench", "claims", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120)


def report(path):
    p = run(path, "--json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def table(tmp_path, rows, headers=("Workload", "AMD MI300X", "NVIDIA H100 SXM", "Gap"), name="t.md"):
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    f = tmp_path / name
    f.write_text("# My table\n\n" + "\n".join(lines) + "\n")
    return f


def numbers(doc, row=0):
    return [n["verdict"] for n in doc["rows"][row]["numbers"]]


def test_example_table_verdicts():
    doc = report(EXAMPLE)
    assert doc["verdict"] == "implausible" and doc["verdict_line"].startswith("Benchmark Comparison")
    rows = {r["label"]: r for r in doc["rows"]}
    fp8 = rows["FP8 Matrix Multiply (GEMM)"]
    assert [n["verdict"] for n in fp8["numbers"]] == ["within_measured", "datasheet"]
    assert fp8["numbers"][1]["peak_kind"] == "dense" and any("specification set against a measurement" in u
                                                             for u in fp8["unlike"])
    pairs = fp8["like_for_like"]
    assert pairs and all(g["variant"]["accum"] == "fp32" for g in pairs)  # the same accumulation on both sides
    # the Azure guide's own pair (1,222.9 against 1,382.2) is not like for like: its H100 figure ran cuBLASLt with
    # fast accumulation, which MI300X's hipBLASLt does not have
    assert not any(g["same_source"] for g in pairs)
    assert not any(g["baseline_value"] == pytest.approx(1382.2) for g in pairs)
    assert any(-10 < g["pct"] < -9 for g in pairs)  # AMD's 1,273 against the MAMF 1,402.6
    bw = rows["Memory Bandwidth"]
    assert [n["verdict"] for n in bw["numbers"]] == ["datasheet", "datasheet"]
    triad = [g for g in bw["like_for_like"] if g["variant"] == {"kernel": "triad"}][0]
    assert triad["pct"] == pytest.approx(4.10 / 2.97 * 100 - 100, abs=0.1)
    train = rows["LLM Training (Llama 2 70B)"]["numbers"][1]
    assert train["verdict"] == "above_peak" and train["peak_share"] > 5 and train["devices_needed"] >= 12
    sdxl = rows["Stable Diffusion XL Inference"]["numbers"][1]
    assert sdxl["verdict"] == "above_peak"
    assert any("ms per image" in e["text"] for e in sdxl["evidence"])
    assert any("published per-device figure" in e["text"] and e["run_by"] == "vendor" for e in sdxl["evidence"])
    assert all(r["gap"]["verdict"] == "agrees" for r in doc["rows"])
    assert "agree" in bw["gap"]["direction"]


def test_sparse_peak_quoted_as_dense_and_figure_above_peak(tmp_path):
    f = table(tmp_path, [["FP8 GEMM", "5,230 TFLOPS", "3,958 TFLOPS", "+32%"],
                         ["BF16 GEMM", "1,400 TFLOPS", "1,100 TFLOPS", "+27%"]])
    doc = report(f)
    sparse = doc["rows"][0]["numbers"]
    assert [n["verdict"] for n in sparse] == ["datasheet", "datasheet"]
    assert {n["peak_kind"] for n in sparse} == {"sparse"}
    assert numbers(doc, 1) == ["above_peak", "above_peak"]
    assert run(f, "--fail-on", "implausible").returncode == 1


def test_wrong_gap_sign_and_other_baseline(tmp_path):
    doc = report(table(tmp_path, [["FP8 GEMM", "1,280 TFLOPS", "1,380 TFLOPS", "+7%"],
                                  ["Memory bandwidth triad", "4.1 TB/s", "2.97 TB/s", "-28%"]]))
    assert doc["rows"][0]["gap"]["verdict"] == "sign_reversed"
    assert doc["rows"][1]["gap"]["verdict"] == "other_baseline"
    assert doc["rows"][0]["verdict"] == "implausible"


def test_unknown_platform_and_unit_typo(tmp_path):
    doc = report(table(tmp_path, [["FP8 GEMM", "1,280 TB/s", "1,380 TFLOPS", ""],
                                  ["Quantum annealing", "3 qubits/s", "4 qubits/s", ""]],
                       headers=("Workload", "AMD MI300X", "Acme Z9", "Gap")))
    assert numbers(doc, 0) == ["unit_mismatch", "no_platform"]
    assert "platform 'Acme Z9'" in doc["unmatched"] and "row 'Quantum annealing'" in doc["unmatched"]
    assert numbers(doc, 1) == ["no_row", "no_row"]


def test_bare_h100_ambiguity_is_said(tmp_path):
    doc = report(table(tmp_path, [["HBM bandwidth", "5.3 TB/s", "2.0 TB/s", ""]],
                       headers=("Workload", "MI300X", "H100", "Gap")))
    h100 = doc["rows"][0]["numbers"][1]
    assert h100["verdict"] == "datasheet" and h100["spec"] == "h100-pcie"
    assert any("read as NVIDIA H100 PCIe" in e["text"] for e in h100["evidence"])


def test_csv_and_own_toml(tmp_path):
    c = tmp_path / "t.csv"
    c.write_text("Workload,H200,MI325X,Gap\nBF16 GEMM,\"1,366 TFLOPS\",843 TFLOPS,\n")
    assert numbers(report(c)) == ["above_peak", "within_measured"]
    t = tmp_path / "t.toml"
    t.write_text('title = "mine"\nplatforms = ["MI300X", "H100 SXM"]\n[[row]]\nlabel = "Memory bandwidth"\n'
                 'values = ["4.1 TB/s", "2.9 TB/s"]\ngap = "+41%"\n')
    doc = report(t)
    assert numbers(doc) == ["within_measured", "within_measured"] and doc["rows"][0]["gap"]["verdict"] == "agrees"


@pytest.mark.parametrize("name,text,msg", [
    ("missing.md", None, "no such file"),
    ("t.xlsx", "x", "unknown table format"),
    ("t.md", "no table here\n", "no Markdown table"),
    ("t.md", "| a | b |\n|---|---|\n| x | y | z |\n", "line 3 has 3 cells"),
    ("t.toml", "platforms = 3\n", "'platforms' must be a list"),
    ("t.json", "{", "not valid JSON"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, name, text, msg):
    f = tmp_path / name
    if text is not None:
        f.write_text(text)
    p = run(f)
    assert p.returncode == 2 and msg in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_every_format_and_output_file(tmp_path):
    out = tmp_path / "r.html"
    p = run(EXAMPLE, "--format", "html", "-o", out)
    assert p.returncode == 0 and "wrote" in p.stderr
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "Content-Security-Policy" in page and "datasheet" in page
    md = run(EXAMPLE, "--format", "md").stdout
    assert md.startswith("**Benchmark Comparison") and "| row |" in md
    term = run(EXAMPLE).stdout
    assert term.splitlines()[0].startswith("Benchmark Comparison") and "IMPLAUSIBLE" in term.splitlines()[0]
    assert run(EXAMPLE, "-o", EXAMPLE).returncode == 2  # never over its own input


def test_control_characters_are_shown_escaped(tmp_path):
    f = table(tmp_path, [["FP8 GEMM \x1b[2J", "1,280 TFLOPS", "1,380 TFLOPS", ""]])
    for fmt in ("table", "md", "html", "json"):
        out = run(f, "--format", fmt).stdout
        assert "\x1b" not in out, fmt


def test_api_is_lazy_and_callable():
    import gapbench

    r = gapbench.claims(str(EXAMPLE))
    assert r.verdict == "implausible" and r.fails("implausible") and len(r.rows) == 5


def test_h100_nvl_is_its_own_spec_row(tmp_path):
    doc = report(table(tmp_path, [["FP8 GEMM", "3,341 TFLOPS", ""], ["BF16 GEMM", "900 TFLOPS", ""],
                                  ["HBM bandwidth", "3.9 TB/s", ""]], headers=("Workload", "NVIDIA H100 NVL", "Gap")))
    assert doc["platforms"][0]["spec"] == "h100-nvl" and doc["unmatched"] == []
    fp8, bf16, hbm = (r["numbers"][0] for r in doc["rows"])
    assert fp8["verdict"] == "datasheet" and fp8["peak_kind"] == "sparse"  # the datasheet's "with sparsity" figure
    assert bf16["verdict"] == "above_peak"  # above the dense 835.5 TFLOP/s
    assert hbm["verdict"] == "datasheet" and hbm["peak_kind"] == "bandwidth"


def test_h100_pcie_is_not_read_as_sxm(tmp_path):
    doc = report(table(tmp_path, [["FP16 GEMM", "756 TFLOPS", ""], ["BF16 GEMM", "800 TFLOPS", ""]],
                       headers=("Workload", "H100 PCIe", "Gap")))
    assert doc["platforms"][0]["spec"] == "h100-pcie" and not doc["platforms"][0]["also"]
    assert numbers(doc, 0) == ["datasheet"] and numbers(doc, 1) == ["above_peak"]  # the SXM's peak would allow 800


def test_bare_h100_says_when_the_nvl_reading_changes_the_verdict(tmp_path):
    doc = report(table(tmp_path, [["HBM bandwidth", "3.9 TB/s", ""], ["BF16 GEMM", "800 TFLOPS", ""]],
                       headers=("Workload", "H100", "Gap")))
    hbm, bf16 = doc["rows"][0]["numbers"][0], doc["rows"][1]["numbers"][0]
    assert hbm["verdict"] == "datasheet" and hbm["spec"] == "h100-nvl"  # above the SXM's 3.35 TB/s, the NVL's figure
    assert any("read as NVIDIA H100 NVL" in e["text"] for e in hbm["evidence"])
    assert bf16["spec"] == "h100-sxm"
    said = " ".join(e["text"] for e in bf16["evidence"])
    assert "as NVIDIA H100 PCIe 80GB it would be above peak" in said


def test_shipped_schema_is_the_generated_one():
    from gapbench.claims.schema import json_schema

    shipped = json.loads((ROOT / "src" / "gapbench" / "claims" / "claims.schema.json").read_text())
    assert shipped == json_schema()
