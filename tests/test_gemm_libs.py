"""gemm-libs through `gapbench run`: every path is a row; what a device lacks is unsupported with its backend's
reason; TunableOp's tuning is timed apart from the product and its results file reused by the next run; a
path that computes a wrong product is wrong_result; on the CPU numpy's BLAS runs on torch's thread count."""

import json
import math
from pathlib import Path

import pytest

from conftest import FIXTURES, gapbench
from gapbench.workloads.libs.paths import GEMM_PATHS


def run(tmp_path, *args, device="test", env=None, name="r.json"):
    """`gapbench run`, three repeats of 10 ms each (not seven of 100 ms): these tests check each path's status,
    library and tuning, not the precision of its number."""
    out = tmp_path / name
    p = gapbench("run", "--device", device, "--no-history", "-q", "-o", out, "--min-time", "0.01", "--repeats", "3",
                 *args,
                 env={"OMP_NUM_THREADS": "1", "GAPBENCH_TUNING_DIR": str(tmp_path / "tuning"), **(env or {})})
    assert p.returncode == 0, p.stderr[-3000:]
    return {m["variant"]["path"]: m for m in json.loads(out.read_text())["measurements"]}


@pytest.mark.slow
def test_paths_the_test_accelerator_lacks_are_unsupported_and_tuning_is_timed_apart(tmp_path):
    rows = run(tmp_path, "-w", "gemm-libs:tiny", "--dtype", "fp32", "--variant-budget", "1")
    assert set(rows) == set(GEMM_PATHS)  # no BLAS library choice on the test accelerator: no blas-* rows
    for path in ("matmul", "linear", "tunableop"):
        assert rows[path]["status"] == "ok", (path, rows[path]["reason"])
        assert rows[path]["metrics"]["library"]
    assert "Triton" in rows["triton"]["reason"] and rows["triton"]["status"] == "unsupported"
    for path in ("compile", "compile-max-autotune", "compile-triton", "compile-cpp"):
        assert rows[path]["status"] == "unsupported" and "torch.compile" in rows[path]["reason"], path
    for path in ("numpy", "onednn"):
        assert rows[path]["status"] == "unsupported" and "no such library" in rows[path]["reason"], path
    assert {m["metrics"]["path_kind"] for m in rows.values()} >= {"default", "vendor", "tuned", "portable", "library"}

    tuned = rows["tunableop"]["metrics"]
    assert tuned["tuned_new"] == 1 and tuned["tuned_known"] == 0
    # every candidate timed for up to 30 ms: tuning takes far longer than one tuned product, and is not in it
    assert tuned["tuning_s"] > 20 * tuned["time_per_iter_s"]
    results = Path(tuned["tuning_file"])
    assert results.parent == tmp_path / "tuning"
    line = next(ln for ln in results.read_text().splitlines() if "nn_128_128_128" in ln)
    assert line.startswith("GemmTunableOp_float32_NN,") and line.split(",")[2] in ("Default", "RowBlocks_64",
                                                                                  "RowBlocks_256")

    again = run(tmp_path, "-w", "gemm-libs:tiny", "--dtype", "fp32", "--variant-budget", "1", name="again.json")
    kept = again["tunableop"]["metrics"]
    assert again["tunableop"]["status"] == "ok"
    # the shape's result came from the file: nothing was tuned again (its tuning time is not compared with the
    # first run's: at 128³ a hundred calls per candidate take milliseconds, which a loaded host blurs)
    assert kept["tuned_new"] == 0 and kept["tuned_known"] == 1


@pytest.mark.slow
def test_a_path_that_computes_a_wrong_product_is_wrong_result(tmp_path):
    rows = run(tmp_path, "--workload-file", FIXTURES / "wrong_paths.py", "-w", "gemm-libs-rounding:tiny",
               "--dtype", "fp32", "--variant-budget", "1")
    assert rows["matmul"]["status"] == "ok"
    bad = rows["rounds-to-bf16"]
    assert bad["status"] == "wrong_result" and bad["value"] is None
    assert "rounds-to-bf16" in bad["reason"] and "exceeds tolerance 1e-05" in bad["reason"]


def test_numpy_and_onednn_paths_on_the_cpu():
    """Fast, in process: numpy's BLAS is named and runs on torch's thread count; bf16 has no numpy path."""
    import torch

    from gapbench.devices import resolve
    from gapbench.workloads import get
    from gapbench.workloads.base import Context

    w = get("gemm-libs")
    ctx = Context(device=resolve("cpu"), preset="tiny", budget_s=1, min_time_s=0.01, repeats=3)
    variants = {(v.params["dtype"], v.params["path"]): v for v in w.variants("tiny", ctx)}
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        numpy_row = w.run(variants[("fp32", "numpy")], ctx)
        onednn_row = w.run(variants[("fp32", "onednn")], ctx)
    finally:
        torch.set_num_threads(before)
    assert numpy_row.ok and numpy_row.metrics["threads"] == [1]
    import numpy

    blas = numpy.show_config(mode="dicts")["Build Dependencies"]["blas"]
    assert str(blas["version"]) in numpy_row.metrics["library"]
    assert onednn_row.ok and "oneDNN" in onednn_row.metrics["library"]
    bf16 = w.run(variants[("bf16", "numpy")], ctx)
    assert bf16.status == "unsupported" and "bfloat16" in bf16.reason
    assert w.run(variants[("fp32", "tunableop")], ctx).status == "unsupported"


@pytest.mark.slow
def test_inductor_cpu_template_is_a_checked_row_with_its_compile_time(tmp_path):
    rows = run(tmp_path, "-w", "gemm-libs:tiny", "--dtype", "fp32", "--variant-budget", "1", device="cpu")
    cpp = rows["compile-cpp"]
    assert cpp["status"] == "ok", cpp["reason"]
    assert cpp["metrics"]["compile_s"] > 0 and "CPP" in cpp["metrics"]["library"]
    assert rows["compile-triton"]["status"] == "unsupported"
    for path in ("compile", "compile-max-autotune"):  # tiny has every path; a CPU's standard leaves these out
        assert rows[path]["status"] == "ok" and rows[path]["metrics"]["compile_s"] > 0, rows[path]["reason"]
    assert rows["numpy"]["status"] == "ok" and rows["onednn"]["status"] == "ok"


def test_the_check_reads_the_sampled_block_of_b_not_all_of_it():
    """A path's product is checked on gemm's sampled block: only 64 columns of B (and 64 rows of A) become float64,
    a wrong element inside the block is wrong_result's reason, one outside it is not read."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from gapbench.devices import resolve
    from gapbench.workloads.libs.gemm_libs import Operands
    from gapbench.workloads.micro.gemm import TOLERANCE, sample_indices

    class Float64Made(TorchDispatchMode):
        """The shapes of the float64 tensors every operator makes while inside."""

        def __init__(self):
            super().__init__()
            self.shapes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(t, torch.Tensor) and t.dtype == torch.float64:
                    self.shapes.append(tuple(t.shape))
            return out

    m, n, k = 128, 256, 192
    ops = Operands.make("fp32", m, n, k, resolve("cpu"))
    out = ops.a @ ops.b
    with Float64Made() as made:
        assert ops.check(out, TOLERANCE["fp32"], torch.device("cpu")) is None
    assert made.shapes and (k, n) not in made.shapes  # all of B was never made float64
    assert max(math.prod(s) for s in made.shapes) <= 64 * k  # the largest: the 64 sampled columns of B (or rows of A)

    rows, cols = sample_indices(m, n)
    inside = out.clone()
    inside[rows[0], cols[0]] += 1.0
    assert "exceeds tolerance" in ops.check(inside, TOLERANCE["fp32"], torch.device("cpu"))
    outside = out.clone()
    r = next(i for i in range(m) if i not in set(rows.tolist()))
    c = next(j for j in range(n) if j not in set(cols.tolist()))
    outside[r, c] += 1e3
    assert ops.check(outside, TOLERANCE["fp32"], torch.device("cpu")) is None


def test_the_one_preset_is_one_square_product_through_every_path():
    from gapbench import devices
    from gapbench.workloads import Context, get

    w = get("gemm-libs")
    for kind, side in (("test", 4096), ("cpu", 1024)):
        ctx = Context(device=devices.resolve(kind), preset="one")
        variants = w.variants("one", ctx)
        quick = {v.params["path"] for v in w.variants("quick", ctx)}
        assert {(v.params["m"], v.params["n"], v.params["k"]) for v in variants} == {(side, side, side)}
        assert {v.params["path"] for v in variants} == quick  # every path the quick preset has
        assert {v.params["dtype"] for v in variants} == ({"bf16"} if kind == "test" else {"fp32", "bf16"})
