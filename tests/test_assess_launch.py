"""The launch workload (per-operator cost, the rate gapbench assess needs for small models): real runs on the CPU,
the operator count it divides by, and its check against float64."""

import pytest
import torch

from gapbench.devices import resolve
from gapbench.workloads import get, launch
from gapbench.workloads.base import Context


def _ctx():
    return Context(device=resolve("cpu"), preset="quick", budget_s=4, min_time_s=0.05, repeats=3)


def test_operators_of_counts_what_reaches_the_backend():
    a, b = torch.ones(3), torch.ones(3)
    assert launch.operators_of(lambda: torch.add(a, b)) == 1
    lin = torch.nn.Linear(4, 4)
    assert launch.operators_of(lambda: lin(torch.ones(2, 4))) == 3        # ones, t, addmm
    fn, _ = launch._module_step("cpu", train=True)
    n = launch.operators_of(fn)
    assert n == launch.operators_of(fn) and n > 40                        # the same operators on every call


def test_all_variants_measure_per_operator_time():
    w = get("launch")
    ctx = _ctx()
    res = {v.params["kind"]: w.run(v, ctx) for v in w.variants("quick", ctx)}
    assert set(res) == {"op", "train", "infer"}
    for kind, m in res.items():
        assert m.ok, (kind, m.reason)
        assert m.unit == "us" and not m.higher_is_better and 0 < m.value < 10_000 and m.stats.n >= 3
    assert res["op"].metrics["operators_per_call"] == 1 and res["train"].metrics["operators_per_call"] > 40
    t = res["train"]
    per_iteration = t.metrics["operators_per_call"] * t.metrics["calls_per_iteration"]
    assert t.metrics["time_per_iter_s"] == pytest.approx(t.value * 1e-6 * per_iteration, rel=0.3)


def test_the_check_catches_a_wrong_module():
    fn, check = launch._module_step("cpu", train=True)
    fn()
    assert check() == ""
    fn2, check2 = launch._module_step("cpu", train=False)
    fn2()
    assert check2() == ""
    model_fn, bad_check = launch._module_step("cpu", train=False)
    # a backend whose GELU is off: the same module, its output perturbed before the check reads it
    model_fn()
    closure = dict(zip(model_fn.__code__.co_freevars, (c.cell_contents for c in model_fn.__closure__), strict=True))
    closure["out"]["loss"] = closure["out"]["loss"] * 1.01
    assert "float64 gives" in bad_check()
