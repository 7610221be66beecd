"""Gap attribution: a model row's measured gap split into the work classes of its traced iteration, from the
assess-suite rates of the real results files in results/, and the residual the step model leaves."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gapbench import results
from gapbench.compare import compare, merge_result_sets
from gapbench.report import render
from gapbench.report.attribution import of, waterfall

D = Path(__file__).resolve().parents[1] / "results" / "cpu-epyc-2core-assess-accuracy"


def _side(threads: int, with_rates: bool = True, label: str = ""):
    """One platform: a thread count's rates and its llm-train row (fp32), as the files hold them."""
    files = [results.load(D / f"models-{threads}t-fp32.json")]
    if with_rates:
        files.insert(0, results.load(D / f"rates-{threads}t.json"))
    rs = merge_result_sets(files)
    rs.measurements = [m for m in rs.measurements if m.workload not in ("bert-finetune", "diffusion-infer")]
    rs.label = label or f"{threads}t"
    return rs


@pytest.fixture(scope="module")
def both():
    comp = compare([_side(1), _side(2)])
    return comp, of(comp)


def test_the_parts_and_the_residual_add_up_to_the_measured_gap(both):
    comp, (atts, notes) = both
    assert notes == []
    (a,) = atts
    assert a.workload == "llm-train:tiny" and a.names == ("1t", "2t")
    row = next(r for r in comp.rows if r.workload == "llm-train")
    assert a.measured_pct == pytest.approx(row.gaps[1].pct)
    assert sum(p.pp for p in a.parts) + a.residual == pytest.approx(a.measured_pct)
    names = [p.name for p in a.parts]
    assert names[0] == "gemm fp32" and "memory-bound" in names and names[-1] == "overhead"
    gemm = a.parts[0]
    # two threads run the GEMMs faster: a positive part, inside its own interval
    assert gemm.pp > 5 and gemm.lo < gemm.pp < gemm.hi and gemm.seconds[0] > gemm.seconds[1]
    assert all(p.missing == () for p in a.parts) and a.unexplained == ()
    # the modelled step is the prediction's (assess.speed): the classes add up to it on a CPU
    assert a.modelled_s[0] == pytest.approx(sum(p.seconds[0] for p in a.parts))


def test_a_side_without_rates_leaves_every_part_unexplained_and_names_what_it_lacks():
    comp = compare([_side(1), _side(2, with_rates=False, label="bare")])
    (a,), _ = of(comp)
    assert a.unexplained and all(p.pp is None for p in a.parts)
    gemm = next(p for p in a.parts if p.name == "gemm fp32")
    assert "bare: no fp32 GEMM rows (gemm)" in gemm.missing
    over = next(p for p in a.parts if p.name == "overhead")
    assert any("no per-operator time (launch, kind=train)" in m for m in over.missing)
    assert a.residual == pytest.approx(a.measured_pct)  # nothing explained: it is all residual, and says so
    md = render(None, "md", comparison=comp)
    assert "unexplained" in md and "holds the unexplained: gemm fp32" in md


def test_every_format_carries_it(both):
    comp, (atts, _) = both
    md = render(None, "md", comparison=comp)
    assert "#### Gap attribution" in md and "| gemm fp32 |" in md and "residual (measured − modelled)" in md
    term = render(None, "terminal", comparison=comp)
    assert "gap attribution" in term and "gemm fp32" in term
    doc = json.loads(render(None, "json", comparison=comp))
    (entry,) = doc["attribution"]
    assert entry["parts"][0]["class"] == "gemm fp32" and entry["residual_pp"] == pytest.approx(atts[0].residual)
    assert entry["parts"][0]["interval_pp"][0] < entry["parts"][0]["pp"] < entry["parts"][0]["interval_pp"][1]
    page = render(None, "html", comparison=comp)
    assert "<h2>Gap attribution</h2>" in page
    svg = ET.fromstring(waterfall(atts[0]))
    labels = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}text")]
    assert "residual" in labels and "measured gap" in labels
    assert len(list(svg.iter("{http://www.w3.org/2000/svg}rect"))) == len(atts[0].parts) + 2


def test_a_comparison_without_rates_has_no_attribution():
    comp = compare([_side(1, with_rates=False), _side(2, with_rates=False)])
    assert of(comp) == ([], [])
    assert "Gap attribution" not in render(None, "md", comparison=comp)


@pytest.mark.slow
def test_compare_verb_prints_the_attribution_of_every_model_row():
    p = subprocess.run([sys.executable, "-m", "gapbench", "compare", "--label", "1 thread", str(D / "rates-1t.json"),
                        str(D / "models-1t-fp32.json"), str(D / "infer-1t-fp32.json"), "--label", "2 threads",
                        str(D / "rates-2t.json"), str(D / "models-2t-fp32.json"), str(D / "infer-2t-fp32.json"),
                        "--format", "json"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    got = {e["workload"] for e in doc["attribution"]}
    assert got == {"llm-train:tiny", "bert-finetune:tiny", "diffusion-infer:tiny", "llm-infer:tiny"}
    diff = next(e for e in doc["attribution"] if e["workload"] == "diffusion-infer:tiny")
    assert any(part["class"] == "conv fp32" for part in diff["parts"])


def test_csv_carries_each_part_the_residual_and_the_measured_gap(both):
    import csv
    import io

    comp, (atts, _) = both
    lines = list(csv.DictReader(io.StringIO(render(None, "csv", comparison=comp))))
    mine = [r for r in lines if r["part"]]
    assert [r["part"] for r in mine] == [p.name for p in atts[0].parts] + ["residual", "measured gap"]
    assert all(r["workload"] == "llm-train:tiny" and r["unit"] == "pp" and r["platform"] == "2t" for r in mine)
    parts = sum(float(r["contribution_pp"]) for r in mine[:-2])
    residual, measured = float(mine[-2]["contribution_pp"]), float(mine[-1]["contribution_pp"])
    assert parts + residual == pytest.approx(measured)
    gemm = mine[0]
    assert float(gemm["contribution_low"]) < float(gemm["contribution_pp"]) < float(gemm["contribution_high"])
    assert "gemm fp32" in gemm["part_rates"] and float(gemm["part_s_baseline"]) > float(gemm["part_s_other"])
    assert all(r["part"] == "" for r in lines if r["workload"] == "llm-train")  # the model rows stay as they were


def _bf16_side(threads: int, drop_bf16_gemm: bool = False, label: str = ""):
    rs = merge_result_sets([results.load(D / f"rates-{threads}t.json"), results.load(D / f"models-{threads}t-bf16.json")])
    rs.measurements = [m for m in rs.measurements if m.workload == "llm-train" or m.workload not in (
        "bert-finetune", "diffusion-infer") and not (drop_bf16_gemm and m.workload == "gemm"
                                                     and m.variant.get("dtype") == "bf16")]
    rs.label = label or f"{threads}t"
    return rs


def test_one_missing_dtype_leaves_only_its_part_unexplained():
    comp = compare([_bf16_side(1), _bf16_side(2, drop_bf16_gemm=True, label="no bf16 gemm")])
    (a,), _ = of(comp)
    assert a.unexplained == ("gemm bf16",)
    gemm = next(p for p in a.parts if p.name == "gemm bf16")
    assert gemm.pp is None and gemm.missing == ("no bf16 gemm: no bf16 GEMM rows (gemm)",)
    assert all(p.pp is not None for p in a.parts if p.name != "gemm bf16")
    assert sum(p.pp for p in a.parts if p.pp is not None) + a.residual == pytest.approx(a.measured_pct)


def test_on_an_accelerator_only_the_larger_of_host_overhead_and_device_work_counts():
    accel = _side(2, label="accelerator")
    accel.device = dict(accel.device, type="test")  # the same rates, read as a device the host feeds
    (a,), _ = of(compare([_side(1), accel]))
    assert a.synchronous == (True, False)
    over = next(p for p in a.parts if p.name == "overhead")
    work = sum(p.seconds[1] for p in a.parts if p.name != "overhead")
    assert a.modelled_s[1] == pytest.approx(max(work, over.seconds[1]))
    assert a.modelled_s[0] == pytest.approx(sum(p.seconds[0] for p in a.parts))
