"""gapbench claims --results on real results files: three real `gapbench run` processes on the CPU (gemm and
membw at their tiny presets, labelled as two table columns), then real `python -m gapbench claims` processes.
The user's measurements and the measured gap with its interval appear in every format; a file or a column
without a match is said, never guessed; the files of one label are one platform's runs."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gapbench.compare.gaps import gap_pct
from gapbench.report.kit import fmt_pct

pytestmark = pytest.mark.slow

RUN = ["--device", "cpu", "-w", "gemm:tiny", "-w", "membw:tiny", "--dtype", "fp32", "--variant-budget", "1",
       "--min-time", "0.02", "--repeats", "3", "--no-history", "--quiet"]


def gapbench(*args, timeout=180):
    return subprocess.run([sys.executable, "-m", "gapbench", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: path}: 'a1' and 'a2' labelled 'Box A' (one thread), 'b' labelled 'Box B' (two threads)."""
    d = tmp_path_factory.mktemp("claims-results")
    plan = {"a1": ("Box A", 1), "a2": ("Box A", 1), "b": ("Box B", 2)}
    procs = {k: subprocess.Popen([sys.executable, "-m", "gapbench", "run", *RUN, "--label", label,
                                  "--threads", str(threads), "-o", str(d / f"{k}.json")],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for k, (label, threads) in plan.items()}
    for k, p in procs.items():
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, (k, err[-2000:])
    return {k: d / f"{k}.json" for k in plan}


def table(tmp_path, headers=("Workload", "Box A", "Box B", "Gap")):
    rows = [["FP32 GEMM", "0.1 TFLOPS", "0.05 TFLOPS", "+100%"],
            ["Memory bandwidth triad", "14 GB/s", "10 GB/s", "+40%"],
            ["FP8 GEMM", "0.2 TFLOPS", "0.1 TFLOPS", "+100%"]]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    f = tmp_path / "boxes.md"
    f.write_text("# Two boxes\n\n" + "\n".join(lines) + "\n")
    return f


def claims(*args):
    p = gapbench("claims", *args)
    assert p.returncode == 0, p.stderr
    return p.stdout


def value(path, workload, **variant):
    doc = json.loads(Path(path).read_text())
    return next(m["value"] for m in doc["measurements"] if m["workload"] == workload
                and all(m["variant"].get(k) == v for k, v in variant.items()))


def test_measurements_and_measured_gap_in_every_format(runs, tmp_path):
    t = table(tmp_path)
    doc = json.loads(claims(t, "--results", runs["a1"], "--results", runs["b"], "--json"))
    plats = {p["header"]: p for p in doc["platforms"]}
    assert plats["Box A"]["results"] == [str(runs["a1"])] and plats["Box A"]["results_by"] == ["label"]
    assert plats["Box B"]["results"] == [str(runs["b"])]
    gemm = doc["rows"][0]["measured"]
    assert len(gemm) == 1 and gemm[0]["variant"]["dtype"] == "fp32" and gemm[0]["unit"] == "TFLOP/s"
    a, b = value(runs["a1"], "gemm", dtype="fp32"), value(runs["b"], "gemm", dtype="fp32")
    assert gemm[0]["values"] == [a, b] and gemm[0]["runs"] == [1, 1]
    assert gemm[0]["pct"] == pytest.approx(gap_pct(a, b), rel=1e-6)
    assert gemm[0]["lo"] < gemm[0]["pct"] < gemm[0]["hi"] and gemm[0]["basis"] == "single run"
    assert gemm[0]["share_of_claim"][0] == pytest.approx(a * 1e12 / 0.1e12)
    assert gemm[0]["stated_within"] is (gemm[0]["lo"] <= 100 <= gemm[0]["hi"])
    triad = doc["rows"][1]["measured"]
    assert [m["variant"]["kernel"] for m in triad] == ["triad"]  # the row's kernel, not every STREAM kernel
    assert triad[0]["values"] == [value(runs["a1"], "membw", kernel="triad"), value(runs["b"], "membw", kernel="triad")]
    assert doc["rows"][2]["measured"] == []  # fp8 was not measured: said, not filled in from fp32
    assert any("no gemm dtype=fp8 measurement" in n for n in doc["rows"][2]["notes"])
    gap = fmt_pct(gemm[0]["pct"])
    interval = f"[{fmt_pct(gemm[0]['lo'])}, {fmt_pct(gemm[0]['hi'])}]"
    md = claims(t, "--results", runs["a1"], "--results", runs["b"], "--format", "md")
    assert "your measured gap" in md and f"{gap} {interval}" in md and "Box A (yours)" in md
    term = claims(t, "--results", runs["a1"], "--results", runs["b"])
    assert "your measured gap" in term and gap in term and "Your results" in term


def test_a_file_or_a_column_without_a_match_is_said(runs, tmp_path):
    t = table(tmp_path, headers=("Workload", "Box A", "Box Z", "Gap"))
    doc = json.loads(claims(t, "--results", runs["a1"], "--results", runs["b"], "--json"))
    assert any(u.startswith(f"results file {str(runs['b'])!r} (label 'Box B'") and "matches no platform" in u
               for u in doc["unmatched"]), doc["unmatched"]
    assert "platform 'Box Z': no results file given matches it (by label or spec row)" in doc["unmatched"]
    assert all(r["measured"] == [] for r in doc["rows"])
    assert any("no file for 'Box Z'" in n for n in doc["rows"][0]["notes"])
    assert "Box Z" in claims(t, "--results", runs["a1"], "--results", runs["b"], "--format", "md")


def test_the_files_of_one_label_are_one_platform(runs, tmp_path):
    doc = json.loads(claims(table(tmp_path), "--results", runs["a1"], "--results", runs["a2"],
                            "--results", runs["b"], "--json"))
    assert doc["platforms"][0]["results"] == [str(runs["a1"]), str(runs["a2"])]
    gemm = doc["rows"][0]["measured"][0]
    assert gemm["runs"] == [2, 1] and gemm["lo"] < gemm["pct"] < gemm["hi"]


def test_a_results_file_that_is_not_one_is_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    p = gapbench("claims", table(tmp_path), "--results", bad)
    assert p.returncode == 2 and "bad.json" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
