"""Grouped GEMMs (torch._grouped_mm, the experts of a mixture-of-experts layer): the workload measures and checks
them on the CPU, a trace counts their FLOPs per group and layout, and assess prices them at the grouped rate of
their layout — never at the dense GEMM's, and not at all (said so) where a results file has no grouped rows."""

from __future__ import annotations

import pytest
import torch
from tests.test_assess_speed import _m, rates_file

from gapbench import results
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import predict
from gapbench.assess.work import Work, WorkRecorder
from gapbench.devices import resolve
from gapbench.engine.variant import run_variant
from gapbench.workloads import get
from gapbench.workloads.base import Context

pytestmark = pytest.mark.skipif(not hasattr(torch, "_grouped_mm"), reason="this torch has no torch._grouped_mm")


def _ctx(preset="tiny"):
    return Context(device=resolve("cpu"), preset=preset, budget_s=5, min_time_s=0.01, repeats=3, options={})


def test_tiny_grouped_gemm_runs_and_is_checked_on_the_cpu():
    w = get("grouped-gemm")
    ctx = _ctx()
    rows = [run_variant(w, v, ctx) for v in w.variants("tiny", ctx)]
    assert {r.variant["dtype"] for r in rows} == {"fp32", "bf16", "fp16"}
    fp32 = next(r for r in rows if r.variant["dtype"] == "fp32")
    assert fp32.ok and fp32.value > 0 and fp32.variant == {"dtype": "fp32", "groups": 2, "m": 32, "n": 32, "k": 32,
                                                           "layout": "rows"}


@pytest.mark.parametrize("layout", ["rows", "k"])
def test_the_check_finds_a_wrong_group(layout):
    from gapbench.workloads.base import Variant

    w = get("grouped-gemm")
    v = Variant({"dtype": "fp32", "groups": 3, "m": 16, "n": 8, "k": 12, "layout": layout})
    op = w.build(v, _ctx())
    assert op.check() == ""
    good = op.fn

    def last_group_off():
        out = good().clone()
        (out[-16:] if layout == "rows" else out[-1]).mul_(1.01)
        return out

    op.fn = last_group_off
    assert "group 2" in op.check()


def _moe_step(tokens=64, groups=4, k=32, n=48):
    """A mixture-of-experts layer's forward and backward through torch._grouped_mm."""
    return _routed_step((tokens // groups,) * groups, k, n)


def test_a_traced_grouped_matmul_is_a_gemm_per_group_with_its_layout():
    rec = WorkRecorder()
    step = _moe_step()
    with rec:
        step()
    work = rec.work("moe")
    grouped = [i for i in work.items if i.op == "aten._grouped_mm.default"]
    forward = next(i for i in grouped if i.phase == "forward")
    assert forward.cls == "gemm" and forward.groups == 4 and forward.layout == "rows"
    assert forward.shape == (16, 48, 32) and forward.flops == 2 * 64 * 32 * 48
    # the backward's weight gradient splits the shared (token) dimension: one (k, n) product per group
    assert {i.layout for i in grouped if i.phase == "backward"} == {"rows", "k"}
    assert all(i.flops == 2 * 64 * 32 * 48 for i in grouped)


def _grouped_rows(tflops: float) -> list:
    return [_m("grouped-gemm", {"dtype": "fp32", "groups": 4, "m": 16, "n": 48, "k": 32, "layout": layout},
               tflops, "TFLOP/s") for layout in ("rows", "k")]


def test_assess_prices_grouped_calls_at_the_grouped_rate_and_says_when_it_has_none(tmp_path):
    rec = WorkRecorder()
    with rec:
        _moe_step()()
    work = rec.work("moe")
    grouped = [i for i in work.items if i.groups]
    work = Work("moe", grouped, dtype="fp32")  # the grouped calls alone: their time is the prediction's work
    slow = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=1.0, per_op_us=1e-6,
                                                  extra=_grouped_rows(0.001))))
    fast = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=1.0, per_op_us=1e-6,
                                                  extra=_grouped_rows(0.004))))
    pred, missing = predict([(work, slow), (work, fast)])
    assert missing == []
    flops = sum(i.flops * i.count for i in grouped)
    gemm = next(c for c in pred.source.classes if c.cls == "gemm")
    assert gemm.seconds == pytest.approx(flops / 1e9)  # 0.001 TFLOP/s, not the dense 1 TFLOP/s
    assert pred.gap_pct == pytest.approx(300.0, rel=1e-3)
    none = platform_rates(results.load(rates_file(tmp_path / "c.json", gemm_tflops=1.0, per_op_us=1e-6)))
    pred, missing = predict([(work, slow), (work, none)])
    assert pred is None and any("no fp32 grouped GEMM rows (grouped-gemm)" in m for m in missing)


# ---- the groups' own sizes: a routed layer's uneven groups ------------------------------------------------------

def _listed_ctx(shapes: str):
    from gapbench.workloads.micro.options import GroupedShapeOptions

    return Context(device=resolve("cpu"), preset="listed", budget_s=5, min_time_s=0.01, repeats=3,
                   options=GroupedShapeOptions(grouped_shapes=shapes, dtype=["fp32"]).model_dump())


def test_listed_measures_a_routed_call_with_new_group_sizes_on_every_call_and_checks_each_split():
    w = get("grouped-gemm")
    ctx = _listed_ctx("5+0+19+8x24x16,12x24x5+0+19+8")
    variants = w.variants("listed", ctx)
    assert [(v.params["layout"], v.params["sizes"], v.params["m"], v.params["n"], v.params["k"]) for v in variants] \
        == [("rows", "5+0+19+8", 8, 24, 16), ("k", "5+0+19+8", 12, 24, 8)]
    # FLOPs of the groups as given: 2·Σrows·n·k and 2·m·n·Σk, not the mean group's times the groups
    assert [v.flops for v in variants] == [2.0 * 32 * 24 * 16, 2.0 * 12 * 24 * 32]
    rows = [run_variant(w, v, ctx) for v in variants]
    assert all(r.ok and r.value > 0 for r in rows), [r.error for r in rows]
    from gapbench.workloads.micro.grouped_gemm import ROUTED_DRAWS, redrawn

    splits = redrawn([100, 0, 380, 160], ROUTED_DRAWS, torch.Generator().manual_seed(0))
    assert all(sum(s) == 640 and s[1] == 0 for s in splits)  # as many tokens; an empty group stays empty
    assert len({tuple(s) for s in splits}) > ROUTED_DRAWS * 0.8  # the sizes change from call to call
    assert 80 < sum(s[0] for s in splits) / len(splits) < 120  # around the given shares
    for v in variants:
        op = w.build(v, ctx)
        assert all(op.check() == "" for _ in range(4))  # the given split, then new ones: each checked as run
        good = op.fn

        def off(good=good):
            return good().clone().mul_(1.01)

        op.fn = off
        assert "group" in op.check()


def test_listed_without_shapes_or_with_a_bad_one_is_one_line_and_exit_2(tmp_path):
    from tests.test_gemm_listed import _gapbench

    for extra, said in (((), "none were given"),
                        (("--grouped-shapes", "8+8x16x8+8"), "is not a grouped GEMM shape"),
                        (("--grouped-shapes", "0+0x16x16"), "not all 0")):
        out = tmp_path / "never.json"
        p = _gapbench("run", "--device", "cpu", "-w", "grouped-gemm:listed", *extra, "--no-history", "-o", str(out),
                      cwd=tmp_path)
        assert p.returncode == 2 and said in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and not out.exists()


def _routed_step(sizes=(5, 0, 19, 8), k=16, n=24):
    """A routed layer's forward and backward through torch._grouped_mm, its groups as a router left them."""
    x = torch.randn(sum(sizes), k, requires_grad=True)
    w = torch.randn(len(sizes), n, k).transpose(-2, -1).requires_grad_(True)
    offs = torch.tensor(sizes, dtype=torch.int32).cumsum(0, dtype=torch.int32)

    def step():
        out = torch._grouped_mm(x, w, offs=offs)
        out.backward(torch.ones(out.shape))

    return step


def test_a_trace_on_real_tensors_keeps_the_groups_sizes_and_names_them_as_listed_measures_them():
    from gapbench.assess.work import grouped_sizes

    rec = WorkRecorder()
    with rec:
        _routed_step()()
    grouped = [i for i in rec.work("moe").items if i.groups]
    assert {i.sizes for i in grouped} == {(5, 0, 19, 8)}
    assert {(i.phase, i.layout, i.grouped_spec) for i in grouped} == {
        ("forward", "rows", "5+0+19+8x24x16"), ("backward", "rows", "5+0+19+8x16x24"),
        ("backward", "k", "24x16x5+0+19+8")}   # the weight gradient as torch computes it: gradᵀ · x per group
    # on fake tensors the offsets have no values: the groups are taken as equal and no spec is named
    from torch._subclasses.fake_tensor import FakeTensorMode

    ends = torch.tensor([5, 5, 24, 32], dtype=torch.int32)
    with FakeTensorMode() as mode:
        offs = mode.from_tensor(ends)
        a, b = torch.empty(32, 16), torch.empty(4, 16, 24)
    assert grouped_sizes((a, b, offs)) == ()


def _routed_work():
    """(the routed step's grouped calls, their Work, rows of equal groups of their mean for each call's shape)."""
    rec = WorkRecorder()
    with rec:
        _routed_step()()
    grouped = [i for i in rec.work("moe").items if i.groups]
    equal = [_m("grouped-gemm", {"dtype": "fp32", "groups": 4, "m": 8, "n": n, "k": k, "layout": lay}, 0.004,
                "TFLOP/s") for lay, n, k in (("rows", 24, 16), ("rows", 16, 24), ("k", 24, 8))]
    return grouped, Work("moe", grouped, dtype="fp32"), equal


def test_assess_prices_a_routed_call_at_its_own_sizes_and_names_the_calls_it_has_no_such_row_for(tmp_path):
    from gapbench.assess.speed import unmeasured_grouped
    from gapbench.report.assess import _grouped_line

    grouped, work, equal = _routed_work()
    own = [_m("grouped-gemm", {"dtype": "fp32", "groups": 4, "m": m, "n": n, "k": k, "layout": lay,
                               "sizes": "5+0+19+8"}, 0.001, "TFLOP/s")
           for lay, m, n, k in (("rows", 8, 24, 16), ("rows", 8, 16, 24), ("k", 24, 16, 8))]
    without = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=1.0, per_op_us=1e-6,
                                                     extra=equal)))
    with_own = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=1.0, per_op_us=1e-6,
                                                      extra=equal + own)))
    pred, missing = predict([(work, without), (work, with_own)])
    assert missing == []
    flops = sum(i.flops * i.count for i in grouped)
    source, target = (next(c for c in p.classes if c.cls == "gemm") for p in (pred.source, pred.target))
    assert target.seconds == pytest.approx(flops / 1e9)  # its own rows: 0.001 TFLOP/s
    assert source.seconds == pytest.approx(flops / 4e9)  # equal groups of the mean: 0.004 TFLOP/s
    specs, share = unmeasured_grouped(work, without)
    assert {s for _, s in specs} == {"5+0+19+8x24x16", "5+0+19+8x16x24", "24x16x5+0+19+8"} and share == 1.0
    assert unmeasured_grouped(work, with_own) == ((), 0.0)
    line = _grouped_line(pred.source)
    assert "grouped-gemm:listed --dtype fp32 --grouped-shapes" in line and "24x16x5+0+19+8" in line
    assert _grouped_line(pred.target) == ""


def test_a_routed_call_is_priced_at_a_row_of_another_split_of_its_tokens_not_at_one_of_other_tokens(tmp_path):
    from gapbench.assess.speed import unmeasured_grouped

    grouped, work, equal = _routed_work()

    def routed(sizes: str, tflops: float) -> list:
        return [_m("grouped-gemm", {"dtype": "fp32", "groups": 4, "m": m, "n": n, "k": k, "layout": lay,
                                    "sizes": sizes}, tflops, "TFLOP/s")
                for lay, m, n, k in (("rows", 8, 24, 16), ("rows", 8, 16, 24), ("k", 24, 16, 8))]

    # a trace elsewhere split the same 32 tokens 5+0+19+8; the rows were measured at 6+0+18+8 and 4+2+18+8, and at
    # twice the tokens
    rows = equal + routed("6+0+18+8", 0.001) + routed("4+2+18+8", 0.002) + routed("10+0+38+16", 0.0005)
    pr = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=1.0, per_op_us=1e-6, extra=rows)))
    for it in grouped:
        point = pr.grouped_rate(it.dtype, it.shape, it.groups, it.layout, it.sizes)
        assert point.sizes == (6, 0, 18, 8)  # the nearest split of as many tokens
    assert unmeasured_grouped(work, pr) == ((), 0.0)
    other = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=1.0, per_op_us=1e-6,
                                                   extra=equal + routed("10+0+38+16", 0.0005))))
    assert unmeasured_grouped(work, other)[1] == 1.0  # twice the tokens is another call
