"""TF32 as its own dtype: fp32 rows compute with every TF32 switch of torch off, tf32 rows with them on, and the
switches are what they were afterwards (an exception too).

The switches are read from inside the operators the workloads time: a TorchFunctionMode notes them at each call of
conv2d, scaled_dot_product_attention and linear. A workload that forgot its math mode would run its fp32 row under
the state the test set before it (every switch on) and its tf32 row under every switch off, and fail here."""

import os

import pytest
import torch
from torch.overrides import TorchFunctionMode

from gapbench.devices import resolve
from gapbench.devices.base import Device, tf32_switch
from gapbench.devices.cuda import BACKEND as CUDA
from gapbench.devices.rocm import BACKEND as ROCM
from gapbench.devices.rocm import HIPBLASLT_TF32
from gapbench.engine.variant import run_variant
from gapbench.workloads import get
from gapbench.workloads.base import Context

F = torch.nn.functional
WATCHED = {F.conv2d: "conv2d", F.scaled_dot_product_attention: "sdpa", F.linear: "linear"}


def switches() -> tuple:
    """What the operators see: float32 matmul precision, the two legacy flags, the per-operator settings resolved."""
    return (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32, tf32_switch("cuda.matmul"), tf32_switch("cudnn.conv"))


ON = ("high", True, True, True, True)
OFF = ("highest", False, False, False, False)


def set_all(on: bool) -> None:
    """The state before a row, set with torch's own calls (not gapbench's): the opposite of what the row needs."""
    torch.set_float32_matmul_precision("high" if on else "highest")
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    if hasattr(torch.backends.cudnn, "conv"):
        torch.backends.cudnn.conv.fp32_precision = "tf32" if on else "ieee"
        torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    assert switches() == (ON if on else OFF)


class SwitchWatch(TorchFunctionMode):
    """Notes the TF32 switches at every call of a watched operator, by operator."""

    def __init__(self):
        super().__init__()
        self.seen: dict[str, set] = {}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = WATCHED.get(func)
        if name:
            self.seen.setdefault(name, set()).add(switches())
        return func(*args, **(kwargs or {}))


@pytest.fixture(autouse=True)
def _torch_switches_as_they_were():
    """Leave torch's switches to the next test as this one found them."""
    keep = (torch.get_float32_matmul_precision(), torch.backends.cuda.matmul.allow_tf32,
            torch.backends.cudnn.allow_tf32)
    fine = {}
    if hasattr(torch.backends.cudnn, "conv"):
        fine = {"conv": torch.backends.cudnn.conv.fp32_precision, "mm": torch.backends.cuda.matmul.fp32_precision}
    yield
    torch.backends.cuda.matmul.allow_tf32 = keep[1]
    torch.set_float32_matmul_precision(keep[0])
    torch.backends.cudnn.allow_tf32 = keep[2]
    if fine:
        torch.backends.cudnn.conv.fp32_precision = fine["conv"]
        torch.backends.cuda.matmul.fp32_precision = fine["mm"]


def _ctx(device="test", budget_s=3.0, **opts):
    return Context(device=resolve(device), preset="tiny", budget_s=budget_s, min_time_s=0.005, repeats=3,
                   options=opts)


def _rows_watched(workload: str, dtype: str, op: str, budget_s: float = 3.0, **opts):
    """Every row of `workload` in `dtype` (tiny preset, test accelerator), run as the worker runs them with the
    switches set the other way first; (rows, switches seen inside `op`, switches after)."""
    set_all(dtype == "fp32")
    w = get(workload)
    ctx = _ctx(budget_s=budget_s, dtype=[dtype], **opts)
    variants = [v for v in w.variants("tiny", ctx) if v.params.get("dtype") == dtype]
    watch = SwitchWatch()
    with watch:
        rows = [run_variant(w, v, ctx) for v in variants]
    return rows, watch.seen.get(op, set()), switches()


@pytest.mark.parametrize("workload, op", [("conv", "conv2d"), ("attention", "sdpa")])
@pytest.mark.parametrize("dtype", ["fp32", "tf32"])
def test_operator_rows_compute_in_their_math_mode_and_restore_it(workload, op, dtype):
    rows, seen, after = _rows_watched(workload, dtype, op)
    assert {r.variant["pass"] for r in rows} == {"forward", "backward"}
    assert all(r.ok for r in rows), [(r.status, r.reason) for r in rows]
    assert seen == {ON if dtype == "tf32" else OFF}  # forward, backward and the check, every call
    assert after == (OFF if dtype == "tf32" else ON)  # as the test left them before the rows


def test_a_model_row_in_fp32_computes_outside_tf32():
    rows, seen, after = _rows_watched("bert-finetune", "fp32", "linear", budget_s=30)
    assert rows and all(r.ok for r in rows), [(r.status, r.reason) for r in rows]
    assert seen == {OFF}  # forward and backward of every step
    assert after == ON


def test_tf32_rows_are_refused_with_the_reason_where_there_is_no_tf32():
    w = get("conv")
    ctx = _ctx("cpu", dtype=["tf32"])
    rows = [run_variant(w, v, ctx) for v in w.variants("tiny", ctx)]
    assert rows and all(r.status == "unsupported" and "TF32" in r.reason for r in rows)


@pytest.mark.parametrize("backend", [CUDA, ROCM], ids=["cuda", "rocm"])
def test_gpu_math_modes_set_every_switch_and_restore_it_after_an_exception(backend):
    """The CUDA and ROCm backends' math modes set torch's process-wide switches, which a CPU build of torch holds
    too: no GPU is needed to see them set and restored."""
    dev = Device(backend, 0)
    for want, before in (("fp32", True), ("tf32", False)):
        set_all(before)
        env = os.environ.get(HIPBLASLT_TF32)
        with pytest.raises(ValueError, match="inside"):
            with dev.math_mode(want):
                assert switches() == (ON if want == "tf32" else OFF)
                if backend is ROCM:  # torch 2.7+ on ROCm also asks this variable before hipBLASLt computes xf32
                    assert os.environ[HIPBLASLT_TF32] == ("1" if want == "tf32" else "0")
                raise ValueError("inside the math mode")
        assert switches() == (ON if before else OFF)
        assert os.environ.get(HIPBLASLT_TF32) == env


def test_gpu_stacks_say_which_operators_have_no_tf32_switch(monkeypatch):
    from gapbench.devices import cuda, rocm

    monkeypatch.setattr(cuda.Cuda, "_capability", lambda self, index: (9, 0))
    monkeypatch.setattr(rocm.Rocm, "arch", lambda self, index: "gfx942")
    assert CUDA.tf32_unsupported(0, "conv") == "" and CUDA.tf32_unsupported(0, "matmul") == ""
    assert "3×TF32" in CUDA.tf32_unsupported(0, "attention")
    assert "MIOpen" in ROCM.tf32_unsupported(0, "conv") and ROCM.tf32_unsupported(0, "matmul") == ""
    monkeypatch.setattr(rocm.Rocm, "arch", lambda self, index: "gfx90a")
    assert "gfx90a" in ROCM.tf32_unsupported(0, "matmul")
    monkeypatch.setattr(rocm, "torch_version", lambda: (2, 6))
    assert "torch 2.7" in ROCM.dtype_unsupported(0, "tf32")
