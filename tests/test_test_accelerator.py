"""The test accelerator drives every accelerator branch on a machine without one, through `gapbench run`:
gemm's accelerator shapes and dtype table, membw's host<->device copies, the cache flush, energy per
iteration, % of peak from a spec row, out-of-memory back-off in llm-train, and a two-rank collective group.
If an accelerator branch breaks, these fail."""

import json
from pathlib import Path

import pytest

from conftest import gapbench

DATA = Path(__file__).resolve().parent / "data"
ENV = {"GAPBENCH_SPECS": str(DATA / "test-accelerator.toml"), "OMP_NUM_THREADS": "1"}


def run(tmp_path, *args, env=None, timeout=600):
    """`gapbench run` on the test accelerator, three repeats of 10 ms each (not seven of 100 ms): these tests check
    which branch each measurement took and what it recorded, not how precise its numbers are."""
    out = tmp_path / "r.json"
    p = gapbench("run", "--device", "test", "--no-history", "-q", "-o", out, "--min-time", "0.01", "--repeats", "3",
                 *args, env={**ENV, **(env or {})}, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(out.read_text()), out


def rows(data, workload):
    return [m for m in data["measurements"] if m["workload"] == workload]


def test_the_test_accelerator_is_never_chosen_by_auto():
    from gapbench import devices

    assert "test" not in devices.available_types()
    assert devices.resolve(None).kind != "test"
    assert devices.resolve("test").is_accelerator


@pytest.mark.slow
def test_gemm_takes_the_accelerator_branch(tmp_path):
    from gapbench import devices
    from gapbench.workloads import Context, get

    ctx = Context(device=devices.resolve("test"), preset="quick")
    shapes = {(v.params.get("m"), v.params.get("k")) for v in get("gemm").variants("quick", ctx)}
    assert (4096, 4096) in shapes and (1024, 1024) not in shapes  # the accelerator's quick shape

    data, out = run(tmp_path, "-w", "gemm:tiny", "--variant-budget", "3", "--flush-cache")
    by = {m["variant"]["dtype"]: m for m in rows(data, "gemm")}
    assert by["int8"]["status"] == "unsupported" and "int8" in by["int8"]["reason"]  # its dtype table
    for d in ("fp32", "tf32", "bf16", "fp8"):  # tf32 and fp8 present on it (absent on the CPU)
        m = by[d]
        assert m["status"] == "ok", (d, m["reason"])
        assert m["metrics"]["timer"] == "device-events"
        assert m["metrics"]["cache_flush_bytes"] == 2 * 4 * 2**20  # twice its 4 MiB last-level cache
        assert m["energy_j"] > 0 and m["power_w"] > 0 and m["metrics"]["energy_source"] == "test-accelerator-model"
    assert data["device"]["product"] == "gapbench test accelerator" and data["device"]["type"] == "test"


@pytest.mark.slow
def test_percent_of_peak_comes_from_the_spec_row(tmp_path, monkeypatch):
    """1 TFLOP/s fp32 and 4 bf16 in tests/data/test-accelerator.toml."""
    monkeypatch.setenv("GAPBENCH_SPECS", str(DATA / "test-accelerator.toml"))
    _, out = run(tmp_path, "-w", "gemm:tiny", "--variant-budget", "2", "--dtype", "fp32,bf16")
    from gapbench.compare import compare

    comp = compare([str(out)])
    assert comp.platforms[0].spec.key == "gapbench-test"
    for r in comp.rows:
        c = r.cells[0]
        peak = {"fp32": 1.0, "bf16": 4.0}[r.variant["dtype"]]
        assert c.pct_peak == pytest.approx(c.value / peak * 100)


@pytest.mark.slow
def test_membw_copies_between_host_and_device(tmp_path):
    data, _ = run(tmp_path, "-w", "membw:tiny", "--variant-budget", "2")
    kernels = {(m["variant"]["kernel"], m["variant"].get("memory")): m for m in rows(data, "membw")}
    for key in (("h2d", "pinned"), ("h2d", "pageable"), ("d2h", "pinned"), ("d2h", "pageable"), ("triad", None)):
        assert key in kernels, key
        assert kernels[key]["status"] == "ok", kernels[key]["reason"]


@pytest.mark.slow
def test_out_of_memory_backs_off_on_its_own_allocator(tmp_path):
    cap = 160 * 2**20
    data, _ = run(tmp_path, "-w", "llm-train:tiny", "--batch-size", "auto", "--variant-budget", "60",
                  env={"GAPBENCH_TEST_ACCELERATOR_MEMORY": str(cap)})
    (m,) = rows(data, "llm-train")
    assert m["status"] == "ok", m["reason"]
    tried = m["metrics"]["auto_batch_tried"]
    assert any(not fitted for _, fitted in tried), tried  # at least one try ran out of its memory
    assert m["metrics"]["batch_size"] < tried[0][0]
    assert m["metrics"]["peak_memory_source"] == "device-allocator"
    assert 0 < m["peak_memory_bytes"] <= cap
    assert m["metrics"]["mfu"] is not None  # its spec row gives the peak


@pytest.mark.slow
def test_collectives_on_two_ranks_of_it(tmp_path):
    data, _ = run(tmp_path, "-w", "collective:tiny", "--nproc", "2", "--variant-budget", "2", timeout=900)
    coll = rows(data, "collective")
    assert coll and all(m["status"] == "ok" for m in coll), [m["reason"] for m in coll if m["status"] != "ok"]
    assert data["device"]["distributed"]["world_size"] == 2
    assert {r["device"] for r in data["device"]["distributed"]["ranks"]} == {"test:0", "test:1"}


@pytest.mark.slow
def test_its_own_spec_row_runs_peak_mfu_and_too_slow_checks(tmp_path):
    """Without a user spec file the package's made-up row for the test accelerator is found: the fp32 % of peak
    comes from it (4 TFLOP/s), llm-train's MFU is computed, and a 7B-parameter step is too slow at its peak
    before any model is built; `gapbench specs` does not list it among products."""
    env = {"GAPBENCH_SPECS": ""}
    data, out = run(tmp_path, "-w", "gemm:tiny", "-w", "llm-train:tiny", "-w", "llm-train:llama2-7b",
                    "--dtype", "fp32", "--variant-budget", "6", env=env)
    from gapbench import specs
    from gapbench.compare import compare

    assert specs.match(data["device"]).key == "gapbench-test-accelerator"
    comp = compare([str(out)], history=False)
    gemm = next(r for r in comp.rows if r.workload == "gemm")
    assert gemm.cells[0].pct_peak == pytest.approx(gemm.cells[0].value / 4.0 * 100)
    tiny = next(m for m in rows(data, "llm-train") if m["preset"] == "tiny")
    assert tiny["status"] == "ok" and tiny["metrics"]["peak_tflops"] == 4.0 and tiny["metrics"]["mfu"] > 0
    big = next(m for m in rows(data, "llm-train") if m["preset"] == "llama2-7b")
    assert big["status"] == "too_slow" and "peak" in big["reason"], big["reason"]
    listed = gapbench("specs", "--json", "--no-cpu")
    assert listed.returncode == 0 and "gapbench-test-accelerator" not in listed.stdout
