"""Ratios between library paths on one platform: which paths each ratio takes, how the intervals combine,
failures that leave a ratio without a number, the per-dtype summaries, and every format's table and sentence."""

import json
import math

import pytest

from compare_fixtures import gpu_device, result_set, stats_around, write
from conftest import gapbench
from gapbench.compare import compare
from gapbench.compare.ratios import platform_ratios, ratio_ci
from gapbench.report import render
from gapbench.results import Measurement


def gl(path, value, dtype="bf16", size=4096, spread=None, status="ok", reason="", **metrics):
    ok = status == "ok"
    return Measurement(workload="gemm-libs", preset="standard",
                       variant={"dtype": dtype, "m": size, "n": size, "k": size, "path": path}, unit="TFLOP/s",
                       value=value if ok else None, status=status, reason=reason,
                       stats=stats_around(value, spread if spread is not None else value * 0.01) if ok else None,
                       flops=2.0 * size**3, metrics=metrics)


def att(path, value, mode="fwd", status="ok", reason=""):
    ok = status == "ok"
    return Measurement(workload="attention-libs", preset="standard",
                       variant={"dtype": "bf16", "batch": 4, "heads": 32, "kv_heads": 32, "seq": 4096,
                                "head_dim": 128, "mode": mode, "path": path}, unit="TFLOP/s",
                       value=value if ok else None, status=status, reason=reason,
                       stats=stats_around(value, value * 0.01) if ok else None)


def gpu_rows():
    """Two shapes of one GPU: the vendor library ahead of portable kernels, tuning a few percent up."""
    rows = []
    for size, base, lead, gain, tuning in ((4096, 700.0, 1.4, 1.08, 40.0), (8192, 750.0, 1.6, 1.04, 60.0)):
        rows += [gl("matmul", base, size=size), gl("linear", base * 0.98, size=size),
                 gl("tunableop", base * gain, size=size, tuning_s=tuning),
                 gl("triton", base / lead / 1.1, size=size, tuning_s=12.0),
                 gl("compile-triton", base / lead, size=size),
                 gl("compile-cpp", None, size=size, status="unsupported", reason="Inductor's CPP templates ..."),
                 gl("blas-cublaslt", base * 1.02, size=size), gl("numpy", None, size=size, status="unsupported",
                                                                 reason="no such library")]
    return rows


def test_the_interval_of_a_ratio_combines_both_intervals_in_log_space():
    x, y = gl("triton", 2.0), gl("matmul", 1.0)
    lo, hi = ratio_ci(x, y)
    (xl, xh), (yl, yh) = x.stats.ci95, y.stats.ci95
    assert lo == pytest.approx(2.0 * math.exp(-math.hypot(math.log(2.0 / xl), math.log(yh / 1.0))))
    assert hi == pytest.approx(2.0 * math.exp(math.hypot(math.log(xh / 2.0), math.log(1.0 / yl))))
    assert lo < 2.0 < hi and xl / yh < lo and hi < xh / yl  # narrower than the interval-arithmetic bound
    # lower-is-better values (latency) are inverted into speeds first
    fast = Measurement(workload="gemm-libs", variant={}, unit="ms", value=5.0, higher_is_better=False,
                       stats=stats_around(5.0, 0.05))
    slow = Measurement(workload="gemm-libs", variant={}, unit="ms", value=10.0, higher_is_better=False,
                       stats=stats_around(10.0, 0.1))
    lo, hi = ratio_ci(fast, slow)
    assert lo < 2.0 < hi
    single = Measurement(workload="gemm-libs", variant={}, unit="TFLOP/s", value=1.0, stats=None)
    assert ratio_ci(single, y) is None


def test_each_ratio_takes_its_paths_and_names_the_fastest():
    pr = platform_ratios(result_set(gpu_rows(), device=gpu_device("NVIDIA H100 80GB HBM3")), 0)
    by = {(r.kind, r.problem["m"]): r for r in pr.ratios}
    portable = by[("portable", 4096)]
    assert portable.numerator == "compile-triton" and portable.denominator == "matmul"  # the faster of two
    assert portable.value == pytest.approx(1 / 1.4) and portable.significant is True
    tuned = by[("tuned", 4096)]
    assert tuned.value == pytest.approx(1.08) and tuned.setup_s == 40.0
    assert by[("linear", 4096)].value == pytest.approx(0.98)
    assert by[("blas", 4096)].numerator == "blas-cublaslt"
    library = by[("library", 4096)]  # numpy failed everywhere: the ratio says why, without a number
    assert library.value is None and library.status == "unsupported" and library.reason == "no such library"
    best = by[("best", 8192)]
    assert best.numerator == "tunableop" and best.value == pytest.approx(1.04)

    s = {(x.kind, x.dtype): x for x in pr.summaries}
    portable_s = s[("portable", "bf16")]
    assert portable_s.n == 2 and portable_s.geomean == pytest.approx(1 / math.sqrt(1.4 * 1.6))
    assert (portable_s.lo, portable_s.hi) == (pytest.approx(1 / 1.6), pytest.approx(1 / 1.4))
    assert portable_s.below == 2 and portable_s.above == 0 and portable_s.paths == ("compile-triton",)
    assert s[("tuned", "bf16")].setup_s == 50.0  # the median of 40 and 60
    assert ("library", "bf16") not in s


def test_a_failed_default_leaves_every_ratio_of_its_problem_without_a_number():
    rows = [gl("matmul", None, status="oom", reason="out of memory"), gl("triton", 300.0)]
    pr = platform_ratios(result_set(rows), 0)
    (r,) = [r for r in pr.ratios if r.kind == "portable"]
    assert r.value is None and r.status == "default oom"
    assert platform_ratios(result_set([gl("matmul", 1.0)]), 0).summaries[0].kind == "best"
    assert platform_ratios(result_set([]), 0) is None


def test_a_ratio_without_a_number_names_the_path_that_ran_and_failed():
    rows = [gl("matmul", 0.1), gl("triton", None, status="unsupported", reason="no Triton here"),
            gl("compile-cpp", None, status="too_slow", reason="one iteration takes 4.6 s")]
    (r,) = [r for r in platform_ratios(result_set(rows), 0).ratios if r.kind == "portable"]
    assert (r.numerator, r.status, r.value) == ("compile-cpp", "too_slow", None)


def test_the_default_as_best_is_exactly_one():
    pr = platform_ratios(result_set([gl("matmul", 700.0), gl("linear", 600.0)]), 0)
    best = next(r for r in pr.ratios if r.kind == "best")
    assert best.numerator == "matmul" and best.value == 1.0 and best.ci95 == (1.0, 1.0)


def test_attention_ratios_take_forced_kernels_and_flex():
    rows = [att("sdpa", 400.0), att("flash", 410.0), att("math", 80.0), att("flex", 300.0),
            att("cudnn", None, status="unsupported", reason="no cudnn SDPA kernel")]
    pr = platform_ratios(result_set(rows), 0)
    by = {r.kind: r for r in pr.ratios}
    assert set(by) == {"portable", "vendor", "fallback", "best"}
    assert by["portable"].numerator == "flex" and by["portable"].value == pytest.approx(0.75)
    assert by["vendor"].numerator == "flash" and by["fallback"].value == pytest.approx(0.2)


def test_every_format_shows_the_ratio_table_and_the_sentence(tmp_path):
    gpu = result_set(gpu_rows(), device=gpu_device("NVIDIA H100 80GB HBM3"), label="H100 <b>")
    cpu = result_set([gl("matmul", 0.2, dtype="fp32", size=1024), gl("numpy", 0.42, dtype="fp32", size=1024)])
    comp = compare([gpu, cpu])
    assert [pr.platform for pr in comp.library_ratios] == [0, 1]
    sentence = ("H100 <b>: on this stack the vendor library leads portable kernels (compile-triton) by 1.5× on bf16 "
                "GEMM (2 shapes, 1.4–1.6×); tuning (tunableop) gains 6.0% on bf16 GEMM (2 shapes, +4.0% to +8.0%; "
                "50 s of tuning per shape); no other library path here (numpy: unsupported: no such library); the "
                "best path (tunableop) runs at 1.06× the default on bf16 GEMM (2 shapes, 1.04–1.08×).")
    md = render([gpu, cpu], format="md")
    assert "#### Library paths" in md and sentence.replace("<", "&lt;").replace(">", "&gt;") in md
    assert "| bf16 4096x4096x4096 | 0.714× [" in md and "compile-triton |" in md
    assert "2.1× the default on fp32 GEMM" in md  # numpy ahead of torch on the CPU platform
    doc = json.loads(render([gpu, cpu], format="json"))
    ratios = doc["library_ratios"]["platforms"]["H100 <b>"]["ratios"]
    tuned = next(r for r in ratios if r["kind"] == "tuned" and r["problem"]["m"] == 4096)
    assert tuned["ratio"] == pytest.approx(1.08) and tuned["setup_s"] == 40.0 and tuned["text"].endswith("tunableop")
    assert doc["library_ratios"]["sentences"][0].startswith("H100 <b>: on this stack")
    html = render([gpu, cpu], format="html")
    assert "<h2>Library paths</h2>" in html and "H100 &lt;b&gt;" in html and "H100 <b>" not in html
    term = render([gpu, cpu], format="terminal")
    assert "portable ÷ vendor" in term and "tuned ÷ untuned" in term


def test_a_sentence_says_within_noise_when_no_interval_excludes_one():
    from gapbench.report.ratios import ratio_sentences

    rows = [gl("matmul", 100.0, spread=10.0), gl("triton", 97.0, spread=10.0), gl("linear", 80.0, spread=1.0)]
    comp = compare([result_set(rows, label="GPU")])
    (line,) = ratio_sentences(comp)
    assert "portable kernels (triton) and the vendor library are within noise of each other on bf16 GEMM" in line
    assert "the default path is the fastest on bf16 GEMM (1 shape)" in line
    table = render([result_set(rows, label="GPU")], format="md")
    assert "≈ 0.97× [" in table and "0.8× [" in table and "≈ 0.8×" not in table


def test_no_library_rows_no_section():
    from compare_fixtures import gemm

    rs = result_set([gemm(1.0)])
    assert compare([rs]).library_ratios == []
    assert "Library paths" not in render([rs], format="md")
    assert "library_ratios" in json.loads(render([rs], format="json"))


def test_compare_cli_prints_the_ratio_table(tmp_path):
    path = write(result_set(gpu_rows(), device=gpu_device("NVIDIA H100 80GB HBM3"), label="H100"),
                 tmp_path / "h100.json")
    p = gapbench("compare", path, "--format", "md")
    assert p.returncode == 0, p.stderr
    assert "gemm-libs on H100: speed ratios between paths" in p.stdout
    assert "the vendor library leads portable kernels (compile-triton) by 1.5×" in p.stdout
