"""The collective workload: nccl-tests bus-bandwidth factors, its correctness check on a real (one-rank)
gloo group, and a real two-rank gloo run through the runner (with the straggler view of gemm)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist

from gapbench import run as runner
from gapbench.workloads.micro.collective import OPS, PLATEAU_FRACTION, _Call, bus_factor, busbw_gbps


def test_bus_factors_are_the_nccl_tests_ones():
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(op, 8) == pytest.approx(7 / 8)
    assert bus_factor("broadcast", 8) == 1.0
    assert bus_factor("sendrecv", 8) == 1.0
    assert bus_factor("all_reduce", 2) == 1.0
    # 1 GiB all_reduce on 8 ranks in 10 ms: algbw 107.4 GB/s, busbw 1.75 x that
    assert busbw_gbps("all_reduce", 8, 2**30, 0.010) == pytest.approx(2**30 / 0.010 / 1e9 * 1.75)
    with pytest.raises(ValueError):
        bus_factor("gossip", 2)


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_check_passes_on_a_real_result_and_catches_corruption(one_rank_group):
    for op, modes in OPS.items():
        if op == "sendrecv":
            continue  # needs a peer
        for mode in modes:
            call = _Call(op, mode, 4096, torch.float32, 0, 1, torch.device("cpu"))
            call.fill_check()
            call()
            assert call.verify() == "", (op, mode)
            target = getattr(call, "out", None)
            target = target if target is not None else call.buf
            target[3] = 99.0
            assert "elements wrong" in call.verify(), (op, mode)


@pytest.mark.slow
def test_collectives_on_two_gloo_ranks_and_the_spread_of_gemm(tmp_path):
    out = tmp_path / "out.json"
    rs = runner.run_suite(device="cpu", workload_specs=["collective:tiny", "gemm:tiny"], nproc=2,
                          variant_budget_s=10, min_time_s=0.005, repeats=3, output=str(out), history=False,
                          options={"dtype": "fp32"})
    assert sorted(os.listdir(tmp_path)) == ["out.json"]  # one results file, no journal left, nothing per rank
    d = rs.device["distributed"]
    assert d["world_size"] == 2 and d["backend"] == "gloo" and d["nodes"] == 1 and d["launcher"] == "gapbench"

    coll = [m for m in rs.measurements if m.workload == "collective"]
    assert coll and all(m.ok for m in coll), [(m.variant, m.reason) for m in coll if not m.ok]
    sizes = [m for m in coll if "summary" not in m.variant]
    assert {m.variant["op"] for m in sizes} == set(OPS)
    assert {m.variant["mode"] for m in sizes if m.variant["op"] == "all_gather"} == {"in-place", "out-of-place"}
    for m in sizes:
        n, size, t = m.variant["ranks"], m.variant["bytes"], m.metrics["time_per_iter_s"]
        assert n == 2
        # the headline number is busbw = size / time × factor, by hand from the recorded row
        assert m.metrics["busbw_gbps"] == pytest.approx(size / t * bus_factor(m.variant["op"], n) / 1e9)
        assert m.metrics["algbw_gbps"] == pytest.approx(size / t / 1e9)
        assert m.value == pytest.approx(m.stats.median)
        assert m.stats.min <= m.metrics["busbw_gbps"] <= m.stats.max

    for op, modes in OPS.items():
        rows = {m.variant["bytes"]: m for m in sizes if m.variant["op"] == op and m.variant["mode"] == modes[0]}
        plateau = next(m for m in coll if m.variant.get("summary") == "plateau" and m.variant["op"] == op)
        large = [r.value for s, r in rows.items() if s >= max(rows) / PLATEAU_FRACTION]
        assert plateau.value == max(large) and plateau.unit == "GB/s"
        latency = next(m for m in coll if m.variant.get("summary") == "latency" and m.variant["op"] == op)
        assert latency.unit == "us" and not latency.higher_is_better
        assert latency.value == pytest.approx(rows[min(rows)].metrics["time_us"])

    gemm = [m for m in rs.measurements if m.workload == "gemm"]
    per_rank = [m for m in gemm if "rank" in m.variant]
    heads = [m for m in gemm if "rank" not in m.variant and m.ok]
    assert {m.variant["rank"] for m in per_rank} == {0, 1}
    assert heads
    spread = heads[0].metrics["spread"]
    values = [m.value for m in per_rank if m.variant | {"rank": 0} == heads[0].variant | {"rank": 0}]
    assert spread["devices"] == 2 and sorted(spread["values"]) == sorted(values)
    assert spread["max_over_min"] == pytest.approx(max(values) / min(values))
    assert spread["slowest_rank"] == min(range(2), key=lambda r: spread["values"][r])
    assert "ranks" in spread["note"]
