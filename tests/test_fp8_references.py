"""Published fp8 GEMM figures and the two measured accumulations: every figure names the accumulation its source
ran with (specs/references.toml), lines up with the measured row of that accumulation only, and a figure whose
source does not say stands beside both rows with a warning that says so."""

import pytest

from compare_fixtures import gemm, gpu_device, result_set
from gapbench import specs
from gapbench.compare import compare, reference_matches
from gapbench.results import Measurement

H100 = gpu_device("NVIDIA H100 80GB HBM3")
MI300X = gpu_device("AMD Instinct MI300X")


def sweep(value: float, accum: str | None) -> Measurement:
    variant = {"dtype": "fp8", "sweep": "max"} | ({"accum": accum} if accum else {})
    return Measurement(workload="gemm", variant=variant, unit="TFLOP/s", value=value, stats=gemm(value).stats)


def h100_run(fp32: float = 1300.0, fast: float = 1450.0):
    return result_set([sweep(fp32, "fp32"), sweep(fast, "fast")], device=H100, label="mine")


def by_accum(comp, ref: int = 1) -> dict:
    """{accum: the reference's cell} over the fp8 sweep rows."""
    return {r.variant.get("accum"): r.cells[ref] for r in comp.rows if r.variant.get("sweep") == "max"}


def test_every_fp8_gemm_figure_names_its_accumulation_as_its_source_ran():
    fp8 = [r for r in specs.load_references() if r.workload == "gemm"
           and specs.normalize_dtype(r.variant.get("dtype")) == "fp8"]
    assert fp8 and all(r.variant.get("accum") in ("fp32", "fast", "unknown") for r in fp8)
    accum = {(r.platform, r.collection): r.variant["accum"] for r in fp8}
    assert accum[("h100-sxm", "")] == accum[("h200", "")] == accum[("b200", "")] == "fp32"  # MAMF: the default flag
    assert accum[("h100-sxm", "azure-ai-benchmarking")] == accum[("h200", "azure-ai-benchmarking")] == "fast"
    assert {accum[(p, c)] for (p, c) in accum if p.startswith("mi3")} == {"fp32"}  # hipBLASLt has one
    assert accum[("h100-sxm", "mi300x-vs-h100")] == "unknown"  # the table does not say
    assert all(r.note.startswith(f"accum {r.variant['accum']}: ") for r in fp8)  # and why, first in its note


def test_a_figure_lines_up_with_the_row_of_its_own_accumulation_only():
    mamf = by_accum(compare([h100_run()], refs=["h100-sxm"], history=False))
    assert mamf["fp32"].value == pytest.approx(1402.6) and mamf["fast"].status == "missing"
    azure = by_accum(compare([h100_run()], refs=["h100-sxm@azure-ai-benchmarking"], history=False))
    assert azure["fast"].value == pytest.approx(1382.2) and azure["fp32"].status == "missing"


def test_a_rocm_run_has_no_row_for_a_fast_accumulation_figure():
    mine = result_set([sweep(1200.0, "fp32")], device=MI300X, label="mi300x")
    comp = compare([mine], refs=["h100-sxm@azure-ai-benchmarking"], history=False)
    cells = {r.variant.get("accum"): r.cells for r in comp.rows if r.variant.get("sweep") == "max"}
    assert cells["fp32"][0].value == 1200.0 and cells["fp32"][1].status == "missing"  # never set against fast
    assert cells["fast"][0].status == "missing" and cells["fast"][1].value == pytest.approx(1382.2)


def test_an_old_files_sweep_lines_up_with_the_fp32_figure():
    old = result_set([sweep(1300.0, None)], device=H100, label="old")  # written before gemm named its accumulation
    comp = compare([old], refs=["h100-sxm"], history=False)
    (row,) = [r for r in comp.rows if r.variant.get("sweep") == "max" and r.variant["dtype"] == "fp8"]
    assert row.variant["accum"] == "fp32" and row.cells[0].value == 1300.0
    assert row.cells[1].value == pytest.approx(1402.6)


def test_a_figure_of_unstated_accumulation_stands_beside_both_rows_and_says_so():
    comp = compare([h100_run()], refs=["h100-sxm@mi300x-vs-h100"], history=False)
    cells = by_accum(comp)
    assert cells["fp32"].value == cells["fast"].value == 1979.0
    (line,) = [w for w in comp.warnings if "does not say its accum" in w]
    assert "accum=fp32" in line and "accum=fast" in line and "h100-sxm@mi300x-vs-h100" in line
    assert not [w for w in compare([h100_run()], refs=["h100-sxm"], history=False).warnings if "accum" in w]
    old = result_set([sweep(1300.0, None)], device=H100, label="old")  # its sweep is the fp32 one
    (line,) = [w for w in compare([old], refs=["h100-sxm@mi300x-vs-h100"], history=False).warnings if "accum" in w]
    assert line.endswith("(accum=fp32)")


def test_the_datasheet_figure_lists_the_measured_ones_of_both_accumulations():
    comp = compare([h100_run()], refs=["h100-sxm@mi300x-vs-h100"], history=False)
    (flag,) = {d["value"]: d for d in comp.datasheet_figures if d["workload"] == "gemm"}.values()
    instead = {x["variant"]["accum"]: x["value"] for x in flag["measured_instead"]}
    assert instead == {"fp32": pytest.approx(1402.6), "fast": pytest.approx(1382.2)}


def test_the_matching_rule_for_an_unstated_key():
    assert reference_matches({"dtype": "fp8", "accum": "unknown"}, {"dtype": "fp8", "accum": "fast"})
    assert reference_matches({"dtype": "fp8", "accum": "unknown"}, {"dtype": "fp8"})
    assert not reference_matches({"dtype": "fp8", "accum": "fp32"}, {"dtype": "fp8", "accum": "fast"})
    assert not reference_matches({"dtype": "fp8", "accum": "fp32"}, {"dtype": "fp8"})  # compare fills it first
