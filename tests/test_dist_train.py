"""Data-parallel training on two real CPU ranks (gloo): DDP on llm-train's tiny model, with the
single-device baseline that scaling efficiency is measured against; the wrapping itself."""

from __future__ import annotations

import pytest
import torch

from gapbench import run as runner
from gapbench.distributed.parallel import repeated_blocks, scaling_pairs, unsupported_reason

pytest.importorskip("transformers")


@pytest.mark.slow
def test_ddp_training_on_two_cpu_ranks(tmp_path):
    rs = runner.run_suite(device="cpu", workload_specs=["llm-train:tiny"], nproc=2, variant_budget_s=60,
                          min_time_s=0.05, repeats=3, output=str(tmp_path / "out.json"), history=False,
                          options={"parallel": "ddp", "dtype": "fp32"})
    par = [m for m in rs.measurements if m.variant.get("parallel") == "ddp"]
    single = [m for m in rs.measurements if "parallel" not in m.variant]
    assert len(par) == 1 and len(single) == 1
    p, s = par[0], single[0]
    assert p.ok and s.ok, (p.reason, s.reason)
    assert p.variant["world_size"] == 2 and p.metrics["world_size"] == 2
    assert p.metrics["global_batch_size"] == 2 * p.metrics["batch_size_per_device"]
    assert p.value == pytest.approx(p.metrics["total_throughput"], rel=0.3)  # median of samples vs of times
    assert p.metrics["total_throughput"] == pytest.approx(2 * p.metrics["per_device_throughput"])
    assert p.metrics["check_losses"][-1] < p.metrics["check_losses"][0]
    assert p.metrics["single_device_throughput"] == s.value
    assert p.metrics["scaling_efficiency"] == pytest.approx(p.value / (2 * s.value))
    assert {k: v for k, v in p.variant.items() if k not in ("parallel", "world_size")} == s.variant
    # the same pairing at report time, from the rows alone
    [(pp, ss, eff)] = scaling_pairs(rs.measurements)
    assert pp is p and ss is s and eff == pytest.approx(p.metrics["scaling_efficiency"])


def test_parallel_modes_and_blocks():
    assert unsupported_reason("ddp") == ""
    assert "unknown parallel mode" in unsupported_reason("pipeline")
    model = torch.nn.Sequential(torch.nn.Embedding(8, 4),
                                torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(3)]))
    assert len(repeated_blocks(model)) == 3


@pytest.mark.slow
def test_fsdp2_training_on_two_cpu_ranks(tmp_path):
    rs = runner.run_suite(device="cpu", workload_specs=["bert-finetune:tiny"], nproc=2, variant_budget_s=60,
                          min_time_s=0.05, repeats=3, output=str(tmp_path / "out.json"), history=False,
                          options={"parallel": "fsdp", "scaling_baseline": False, "dtype": "fp32"})
    [m] = rs.measurements
    assert m.ok, m.reason
    assert m.variant["parallel"] == "fsdp" and m.metrics["parallel"] == "fsdp"
    assert m.metrics["check_losses"][-1] < m.metrics["check_losses"][0]
    assert "scaling_efficiency" not in m.metrics  # no baseline asked for
