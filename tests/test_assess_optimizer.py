"""A whole optimizer step as one measured rate: the optimizer workload (real steps, its check catches a wrong
one), the trace's record of each step (the optimizer, its parameters' sizes, the calls inside it), and the step
priced whole against its row, by hand."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from gapbench import results
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import predict
from gapbench.assess.work import Item, OptimizerStep, Work, WorkRecorder
from gapbench.devices import resolve
from gapbench.workloads import get
from gapbench.workloads.base import Context
from gapbench.workloads.micro import optimizer as om
from gapbench.workloads.micro.options import OptimizerOptions, param_set_spec
from test_assess_speed import _m, rates_file


def _opt_row(params: str, gelems: float, dtype: str = "fp32", name: str = "adamw"):
    sizes = [tuple(map(int, p.split("*"))) for p in params.split("+")]
    return _m("optimizer", {"optimizer": name, "dtype": dtype, "params": params,
                            "elements": sum(n * c for n, c in sizes), "tensors": sum(c for _, c in sizes)},
              gelems, "Gelem/s")


def _traced_step(dtype=torch.float32, name="adamw") -> Work:
    """A real two-layer model's forward, backward and optimizer step, recorded (the optimizer's state exists)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 16)).to(dtype)
    opt = om.make_optimizer(name, list(model.parameters()))
    x = torch.randn(8, 64, dtype=dtype)

    def step():
        opt.zero_grad()
        model(x).float().pow(2).mean().backward()
        opt.step()

    step()
    rec = WorkRecorder()
    with rec:
        step()
    return rec.work("two-layers", dtype="fp32")


def test_optimizer_tiny_runs_every_dtype_and_optimizer_ok():
    w, cpu = get("optimizer"), resolve("cpu")
    for name in ("adamw", "sgd"):
        ctx = Context(device=cpu, preset="tiny", budget_s=2, min_time_s=0.002, repeats=3,
                      options=OptimizerOptions(dtype=["fp32", "bf16"], optimizer=name))
        vs = w.variants("tiny", ctx)
        assert [v.params["dtype"] for v in vs] == ["fp32", "bf16"]
        assert vs[0].params == {"optimizer": name, "dtype": "fp32", "params": "4096*4+64*4", "elements": 16640,
                                "tensors": 8}
        res = [w.run(v, ctx) for v in vs]
        assert all(m.ok and m.value > 0 and m.unit == "Gelem/s" for m in res), [(m.status, m.reason) for m in res]


def test_the_check_catches_a_step_that_lands_elsewhere():
    cpu = torch.device("cpu")
    assert om.check_step("adamw", torch.float32, cpu, 1e-5) == ""
    # bf16's rounding is far above a tolerance meant for fp32: the same check fails, and says by how much
    err = om.check_step("adamw", torch.bfloat16, cpu, 1e-6)
    assert err.startswith("adamw step differs from float64 by") and "tolerance 1e-06" in err


def test_the_trace_keeps_each_optimizer_step_whole():
    work = _traced_step()
    (step,) = work.optimizers
    assert (step.name, step.dtype) == ("adamw", "fp32")
    # weights 128×64 and 16×128, biases 128 and 16
    assert step.sizes == ((8192, 1), (2048, 1), (128, 1), (16, 1)) and step.elements == 10384 and step.tensors == 4
    assert step.spec == "8192*1+2048*1+128*1+16*1"
    inside = [i for i in work.items if i.phase == "optimizer"]
    assert {"lerp_", "addcmul_", "addcdiv_"} <= {i.packet for i in inside}
    assert step.calls == work.optimizer_calls == sum(i.count for i in inside) > 0
    # the forward and backward are as before: the optimizer's calls are neither
    assert any(i.phase == "backward" for i in work.items) and any(i.phase == "forward" for i in work.items)
    assert work.to_dict()["optimizers"] == [step.to_dict()]


def test_a_step_without_an_optimizer_records_none():
    model = torch.nn.Linear(8, 8)
    rec = WorkRecorder()
    with rec:
        model(torch.randn(2, 8)).sum().backward()
    work = rec.work("no-optimizer")
    assert work.optimizers == [] and work.optimizer_calls == 0 and "optimizers" not in work.to_dict()


def test_a_whole_step_is_priced_at_its_own_row_and_its_calls_pay_no_per_operator_time(tmp_path):
    work = _traced_step()
    spec = work.optimizers[0].spec
    # the same set at 0.001 Gelem/s: 10,384 elements take 10.384 ms; a far set at 1 Gelem/s is not used
    rows = [_opt_row(spec, 0.001), _opt_row("1048576*24", 1.0)]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10, extra=rows)))
    p, missing = predict([(work, a), (work, a)])
    assert not missing
    classes = {c.cls: c for c in p.source.classes}
    assert classes["optimizer"].seconds == pytest.approx(10384 / 1e6)
    assert classes["optimizer"].calls == 1
    assert classes["optimizer"].rates == ("optimizer adamw fp32 0.0104 M elements in 4 tensors",)
    assert classes["overhead"].calls == work.calls - work.optimizer_calls
    assert p.source.unmeasured_optimizer == ()


def test_a_row_measured_cold_prices_the_step_before_a_hot_one_of_the_same_set(tmp_path):
    work = _traced_step()
    spec = work.optimizers[0].spec
    cold = _opt_row(spec, 0.001).model_copy(update={"metrics": {"cache_flush_bytes": 1 << 30,
                                                                 "cache_flush": "read-write"}})
    for rows in ([_opt_row(spec, 0.01), cold], [cold, _opt_row(spec, 0.01)]):
        a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10,
                                                   extra=rows)))
        p, _ = predict([(work, a), (work, a)])
        step = next(c for c in p.source.classes if c.cls == "optimizer")
        assert step.seconds == pytest.approx(10384 / 1e6)
        assert step.rates == ("optimizer adamw fp32 0.0104 M elements in 4 tensors (cold cache)",)


def test_optimizer_listed_with_flush_cache_reads_and_writes_the_cache_before_each_step(tmp_path):
    out = tmp_path / "cold.json"
    p = subprocess.run([sys.executable, "-m", "gapbench", "run", "--device", "cpu", "-w", "optimizer:listed",
                        "--param-sets", "256*2+16*2", "--dtype", "fp32", "--flush-cache", "--no-history",
                        "--variant-budget", "1", "--repeats", "3", "-o", str(out)], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    (row,) = results.load(str(out)).measurements
    assert row.ok and row.metrics["cache_flush_bytes"] >= 1 << 20 and row.metrics["cache_flush"] == "read-write"
    point = platform_rates(results.load(str(out))).optimizer_at("adamw", "fp32", "256*2+16*2", 544, 4)
    assert point.cold and point.rate.source.endswith("(cold cache)")


def test_without_its_own_set_the_nearest_one_and_the_command_that_measures_it(tmp_path):
    work = _traced_step()
    rows = [_opt_row("4096*2+64*2", 0.002), _opt_row("1048576*24+4096*48", 1.0)]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10, extra=rows)))
    p, _ = predict([(work, a), (work, a)])
    classes = {c.cls: c for c in p.source.classes}
    assert classes["optimizer"].seconds == pytest.approx(10384 / 2e6)  # 8,320 elements in 4 tensors is nearer
    assert p.source.unmeasured_optimizer == (("adamw", "fp32", work.optimizers[0].spec, "nearest"),)
    from gapbench.report.assess import _optimizer_line

    line = _optimizer_line(p.source)
    assert "priced at the nearest measured parameter set" in line
    assert f"`gapbench run -w optimizer:listed --dtype fp32 --param-sets {work.optimizers[0].spec} --flush-cache`" in line


def test_a_side_without_optimizer_rows_prices_both_sides_call_by_call(tmp_path):
    work = _traced_step()
    spec = work.optimizers[0].spec
    with_row = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10,
                                                      extra=[_opt_row(spec, 0.001)])))
    without = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=10)))
    p, missing = predict([(work, with_row), (work, without)])
    assert not missing
    for side in (p.source, p.target):
        assert "optimizer" not in {c.cls for c in side.classes}
        assert next(c for c in side.classes if c.cls == "overhead").calls == work.calls
    assert p.target.unmeasured_optimizer == (("adamw", "fp32", spec, "per-operator"),)


def test_an_optimizer_gapbench_does_not_build_gets_no_command():
    from gapbench.report.assess import _optimizer_line

    class Side:
        platform = "cpu"
        unmeasured_optimizer = (("lion", "bf16", "64*2", "per-operator"),)

    line = _optimizer_line(Side())
    assert "the lion step over 64*2 (bf16)" in line and "gapbench run" not in line


def test_the_optimizer_part_of_an_attribution(tmp_path):
    from gapbench.assess.attribution import attribute
    from gapbench.compare.gaps import Gap

    work = _traced_step()
    spec = work.optimizers[0].spec
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[_opt_row(spec, 0.001)])))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[_opt_row(spec, 0.002)])))
    rows = [_m("llm-train", {"model": "x"}, v, "s", hib=False, metrics={"time_per_iter_s": v}) for v in (0.1, 0.09)]
    att = attribute((work, work), (a, b), tuple(rows), Gap(11.1, False, lo=5.0, hi=17.0), 1, draws=200)
    part = next(p for p in att.parts if p.name == "optimizer fp32")
    # 10.384 ms against 5.192 ms, over the other side's measured 90 ms
    assert part.seconds == pytest.approx((10384 / 1e6, 10384 / 2e6))
    assert part.pp == pytest.approx((10384 / 1e6 - 10384 / 2e6) / 0.09 * 100)


def test_param_sets_are_read_and_merged():
    o = OptimizerOptions(param_sets="786432*8+1536*24,4096*4")
    assert o.param_sets == [[(786432, 8), (1536, 24)], [(4096, 4)]]
    assert param_set_spec([(64, 2), (4096, 1), (64, 3)]) == "4096*1+64*5"
    assert OptimizerStep("adamw", "bf16", ((4096, 1), (64, 5))).spec == "4096*1+64*5"


@pytest.mark.parametrize("args, says", [
    (["-w", "optimizer:listed"], "the listed preset measures the parameter sets of --param-sets"),
    (["-w", "optimizer:listed", "--param-sets", "12*x"], "'12*x' is not a parameter set NUMEL*COUNT"),
    (["-w", "optimizer:listed", "--param-sets", "0*4"], "each 1 or more"),
    (["-w", "optimizer:tiny", "--optimizer", "lion"], "--optimizer"),
])
def test_bad_optimizer_options_are_one_line_and_exit_2_before_anything_runs(tmp_path, args, says):
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "gapbench", "run", "--device", "cpu", "--no-history", *args,
                        "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and says in lines[0], p.stderr
    assert not out.exists()


def test_the_assess_suite_measures_a_whole_optimizer_step():
    from gapbench import suites

    assert ("optimizer", "quick") in suites.entries("assess", "cpu")
    assert om.SETS["quick"][2] == [(1048576, 24), (4096, 48)]


def test_an_item_of_the_optimizer_class_is_no_operator_of_the_trace():
    # the plan's stand-in for a whole step carries its elements, never FLOPs or bytes
    from gapbench.assess.speed import optimizer_item

    it = optimizer_item(OptimizerStep("adamw", "bf16", ((4096, 2),)))
    assert it == Item("optimizer.adamw", "optimizer", "bf16", "optimizer", 0.0, 0.0, elements=8192)
