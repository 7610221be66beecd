"""Launching: the CLI with --nproc (torch's elastic launcher), gapbench under an external torchrun, input
errors, and what the device identity records about the interconnect."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import gapbench
from gapbench.devices.cuda import nvlink_summary
from gapbench.distributed.info import backend_for


@pytest.mark.slow
def test_collectives_suite_through_the_cli(tmp_path):
    out = tmp_path / "out.json"
    r = gapbench("run", "--suite", "collectives", "--nproc", "2", "--device", "cpu", "--min-time", "0.005",
                 "--repeats", "3", "--output", out, "--no-history", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "all_reduce on 2 ranks: busbw plateau" in r.stdout
    assert "latency" in r.stdout
    data = json.loads(out.read_text())
    assert data["suite"] == "collectives" and data["device"]["distributed"]["world_size"] == 2
    assert all(m["status"] == "ok" for m in data["measurements"])


@pytest.mark.slow
def test_gapbench_joins_an_external_torchrun_job(tmp_path):
    out = tmp_path / "out.json"
    r = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                        "-m", "gapbench", "run", "--workload", "collective:tiny", "--device", "cpu",
                        "--min-time", "0.005", "--repeats", "3", "--output", str(out), "--no-history", "--quiet"],
                       capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("results: ") == 1  # rank 0 reports; rank 1 prints and writes nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
    data = json.loads(out.read_text())
    d = data["device"]["distributed"]
    assert d["launcher"] == "torchrun" and d["world_size"] == 2
    assert data["measurements"] and all(m["status"] == "ok" for m in data["measurements"])


def test_bad_launch_options_are_one_line_errors(tmp_path, capsys):
    from gapbench.cli import main

    assert main(["run", "--workload", "collective:tiny", "--device", "cpu", "--nproc", "0"]) == 2
    assert "--nproc must be at least 1" in capsys.readouterr().err
    assert main(["run", "--workload", "llm-train:tiny", "--device", "cpu", "--parallel", "ddp"]) == 2
    assert "add --nproc N" in capsys.readouterr().err


def test_backends_per_device():
    assert [backend_for(t) for t in ("cuda", "cpu", "npu", "xpu")] == ["nccl", "gloo", "hccl", "xccl"]


def test_nvlink_summary_counts_link_kinds_between_gpu_pairs():
    topo = (
        "\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\x1b[0m\n"
        "GPU0\t X \tNV18\tNV18\tSYS\tPXB\t0-47\t0\n"
        "GPU1\tNV18\t X \tNV18\tSYS\tSYS\t0-47\t0\n"
        "GPU2\tNV18\tNV18\t X \tPIX\tSYS\t48-95\t1\n"
        "GPU3\tSYS\tSYS\tPIX\t X \tSYS\t48-95\t1\n"
        "NIC0\tPXB\tSYS\tSYS\tSYS\t X\n"
    )
    assert nvlink_summary(topo) == {"NV18": 3, "SYS": 2, "PIX": 1}


def test_a_follower_rank_checks_no_output_rank_0_has_begun(tmp_path, monkeypatch):
    """Rank 0 of an external torchrun job may start its journal before rank 1 reads its command line; rank 1 writes
    nothing, so that journal must not stop it (rank 0, or a plain run, is still refused)."""
    from gapbench.cli import build_parser
    from gapbench.cli.cmd_run import _check
    from gapbench.errors import GapbenchError

    out = tmp_path / "out.json"
    (tmp_path / "out.json.journal.jsonl").write_text('{"event": "header"}\n')
    args = build_parser().parse_args(["run", "--workload", "collective:tiny", "--device", "cpu", "--output",
                                      str(out), "--no-history"])
    for k, v in (("RANK", "1"), ("WORLD_SIZE", "2"), ("LOCAL_RANK", "1")):
        monkeypatch.setenv(k, v)
    _check(args)
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(GapbenchError, match="journal of an interrupted run"):
        _check(args)


def test_xccl_ranks_need_a_torch_that_has_xccl():
    """XPU ranks talk through xccl (torch 2.6 on, built with XCCL): without it the plan is one line before any rank
    starts, not init_process_group's own error in each rank."""
    from types import SimpleNamespace

    import torch
    import torch.distributed as dist

    from gapbench.devices import Device
    from gapbench.devices.xpu import Xpu, xccl_missing
    from gapbench.errors import GapbenchError
    from gapbench.run.plan import build_plan, check_dist_backend

    def words(version):
        return f"torch {version} has no xccl backend (XPU rank groups need torch 2.6 with XCCL); use --backend gloo"

    older = SimpleNamespace(is_available=lambda: True)  # torch.distributed of 2.5: no is_xccl_available
    assert xccl_missing(getattr(older, "is_xccl_available", None), "2.5.1") == words("2.5.1")
    assert xccl_missing(lambda: False, "2.6.0") == words("2.6.0")  # a 2.6 build without XCCL
    assert xccl_missing(lambda: True, "2.6.0") == ""
    # this torch, an XPU device's backend: xccl as --backend or as the device's default
    xpu = Device(Xpu(), 0)
    assert xpu.dist_backend == "xccl"
    check_dist_backend("gloo", xpu)
    if dist.is_xccl_available():
        check_dist_backend("xccl", xpu)
    else:  # a CPU or CUDA build of torch 2.6 and later
        with pytest.raises(GapbenchError) as e:
            check_dist_backend("xccl", xpu)
        assert str(e.value) == words(torch.__version__)
    # a CPU rank group still plans (its backend is checked too: gloo)
    assert build_plan(device="cpu", workload_specs=["collective:tiny"], nproc=1).backend is None
