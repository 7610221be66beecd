"""gemm's fp8 rows by accumulation across results files: a row of a file written before gemm named its accumulation
(no `accum`: it ran with use_fast_accum=False) is the new files' `accum: "fp32"` row — in compare's row keys, the
runs of one platform merged from several files, the history's run-to-run spread and the history table."""

import pytest

from compare_fixtures import gemm, gpu_device, result_set
from gapbench import history
from gapbench.compare import compare
from gapbench.compare.keys import row_variant, spellings
from gapbench.report.runs import history_table

H100 = gpu_device("NVIDIA H100 80GB HBM3")


def fp8(value: float, accum: str | None = None, **kw):
    m = gemm(value, dtype="fp8", **kw)
    return m if accum is None else m.replace(variant={**m.variant, "accum": accum})


def old_run(value: float, run_id: str = "old", day: int = 1):
    return result_set([fp8(value)], device=H100, label=run_id, run_id=run_id,
                      started_at=f"2026-01-0{day}T00:00:00+00:00")


def new_run(fp32: float, fast: float, run_id: str = "new", day: int = 5):
    return result_set([fp8(fp32, "fp32"), fp8(fast, "fast")], device=H100, label=run_id, run_id=run_id,
                      started_at=f"2026-01-0{day}T00:00:00+00:00")


def test_the_rule_and_its_spellings():
    old = {"dtype": "fp8", "m": 8, "n": 8, "k": 8}
    assert row_variant("gemm", old) == {**old, "accum": "fp32"}
    assert row_variant("gemm", {**old, "accum": "fast"})["accum"] == "fast"
    assert row_variant("gemm", {**old, "dtype": "bf16"}) == {**old, "dtype": "bf16"}  # only fp8 rows name one
    assert row_variant("gemm-libs", old) == old  # only gemm's
    assert spellings("gemm", {**old, "accum": "fp32"}) == [{**old, "accum": "fp32"}, old]
    assert spellings("gemm", old) == [old, {**old, "accum": "fp32"}]
    assert spellings("gemm", {**old, "accum": "fast"}) == [{**old, "accum": "fast"}]  # fast rows are new only


def test_an_old_fp8_row_lines_up_with_the_new_fp32_row_not_as_a_row_of_its_own():
    comp = compare([old_run(600.0), new_run(660.0, 900.0)], history=False)
    rows = {r.variant.get("accum"): r for r in comp.rows}
    assert len(comp.rows) == 2 and set(rows) == {"fp32", "fast"}
    assert rows["fp32"].gaps[1].pct == pytest.approx(10.0)  # 660 against the old file's 600
    assert rows["fast"].cells[0].status == "missing"  # the old file measured no fast accumulation


def test_old_and_new_files_of_one_platform_merge_their_fp8_runs():
    other = result_set([fp8(700.0, "fp32")], device=gpu_device("NVIDIA H200"), label="h200", run_id="h200")
    comp = compare([[old_run(600.0), new_run(660.0, 900.0)], other], history=False)
    fp32 = next(r for r in comp.rows if r.variant.get("accum") == "fp32")
    assert sorted(fp32.cells[0].measurement.run_values) == [600.0, 660.0]  # two runs of one row, merged
    assert fp32.cells[0].value == pytest.approx(630.0)
    assert fp32.gaps[1].runs == (1, 2)


def test_the_history_spread_and_table_count_old_runs_as_the_fp32_row(tmp_path):
    db = tmp_path / "h.sqlite"
    for i, v in enumerate((600.0, 610.0, 590.0)):
        history.record(old_run(v, run_id=f"old{i}", day=i + 1), db)
    new = new_run(630.0, 900.0)
    other = result_set([fp8(700.0, "fp32"), fp8(950.0, "fast")], device=gpu_device("NVIDIA H200"), label="h200",
                       run_id="h200")
    comp = compare([new, other], history=db)
    fp32 = next(r for r in comp.rows if r.variant.get("accum") == "fp32")
    assert fp32.gaps[1].spreads[1].label == "history n=3"  # the new file's fp32 row, judged by the old runs
    fast = next(r for r in comp.rows if r.variant.get("accum") == "fast")
    assert fast.gaps[1].spreads[1].label == "accelerator default"

    history.record(new, db)
    table = history_table("gemm", history.rows("gemm", db_path=db))
    change = {(r[3], r[4]): r[7] for r in table.rows}
    new_fp32 = next(c for (label, v), c in change.items() if label == "new" and "fp32" in v)
    assert "+6.8%" in new_fp32  # against the old file's last run, 590
    assert next(c for (label, v), c in change.items() if label == "new" and "fast" in v) == "—"


def sweep_row(accum: str | None, tflops: float):
    """An fp8 sweep row whose probe found `tflops` at 4096³."""
    m = fp8(tflops, accum)
    variant = {"dtype": "fp8", "sweep": "max"} | ({"accum": accum} if accum else {})
    return m.replace(variant=variant, metrics={**m.metrics, "sweep": [{"m": 4096, "n": 4096, "k": 4096,
                                                                       "tflops": tflops}]})


def test_assess_prices_fp8_by_the_fp32_rows_and_keeps_the_fast_ones_beside():
    from gapbench.assess.rates import platform_rates

    rs = result_set([fp8(600.0, "fp32"), fp8(900.0, "fast"), fp8(650.0, size=2048),  # the last: an old file's
                     sweep_row("fp32", 700.0), sweep_row("fast", 1000.0)], device=H100, label="h100")
    pr = platform_rates(rs)
    assert sorted(p.rate.value / 1e12 for p in pr.gemm["fp8"]) == [600.0, 650.0, 700.0]
    assert sorted(p.rate.value / 1e12 for p in pr.gemm_fast_accum["fp8"]) == [900.0, 1000.0]
    at = pr.gemm_rate("fp8", (1024, 1024, 1024))
    assert at.rate.value == pytest.approx(600e12)  # the fp32 row, not the faster fast one of the same shape
    assert at.rate.source == "gemm fp8 accum fp32 1024x1024x1024"
    assert pr.gemm_rate("fp8", (2048, 2048, 2048)).rate.source == "gemm fp8 accum fp32 2048x2048x2048"


def test_the_takeaway_counts_each_fp8_shape_once():
    a = result_set([fp8(600.0, "fp32"), fp8(900.0, "fast"), fp8(1200.0, "fp32", size=2048),
                    fp8(1800.0, "fast", size=2048)], device=H100, label="a", run_id="a")
    b = result_set([fp8(660.0, "fp32"), fp8(990.0, "fast"), fp8(1320.0, "fp32", size=2048),
                    fp8(1980.0, "fast", size=2048)], device=gpu_device("NVIDIA H200"), label="b", run_id="b")
    comp = compare([a, b], history=False)
    assert len(comp.rows) == 4  # every row is in the table, the fast ones beside the fp32 ones
    (side,) = comp.takeaway.platforms
    assert sum(c.rows for c in side.classes) == 2 and side.not_comparable == 0
