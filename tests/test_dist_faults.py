"""Faults in a distributed run: a rank killed mid-run, a rank that hangs. Real gloo ranks, started by
torch's elastic launcher through the runner; the failing rank must be named and finished results kept."""

from __future__ import annotations

import textwrap
import time

import pytest

from gapbench import run as runner

FAULTY = textwrap.dedent('''
    import os, signal, time

    import torch
    import torch.distributed as dist

    from gapbench.workloads import Variant, Workload


    class Faulty(Workload):
        name = "faulty"
        category = "collective"
        unit = "ranks"
        presets = {"tiny": "three all_reduce steps; rank 1 fails on step 1"}
        distributed = True

        def variants(self, preset, ctx):
            return [Variant({"step": i}) for i in range(3)]

        def run(self, variant, ctx):
            if variant.params["step"] == 1 and ctx.dist.rank == 1:
                if os.environ["FAULT"] == "kill":
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(3600)
            t = torch.ones(4)
            dist.all_reduce(t)
            return self.result(variant, ctx, value=float(t[0]))
''')


def _run(tmp_path, monkeypatch, fault: str, timeout_s: float):
    path = tmp_path / "faulty.py"
    path.write_text(FAULTY)
    monkeypatch.setenv("FAULT", fault)
    t0 = time.monotonic()
    rs = runner.run_suite(device="cpu", workload_specs=["faulty"], workload_files=[str(path)], nproc=2,
                          timeout_s=timeout_s, variant_budget_s=5, min_time_s=0.01, repeats=3,
                          output=str(tmp_path / "out.json"), history=False)
    return rs, time.monotonic() - t0


@pytest.mark.slow
def test_killed_rank_is_named_and_finished_results_are_kept(tmp_path, monkeypatch):
    rs, took = _run(tmp_path, monkeypatch, "kill", timeout_s=60)
    by_step = {m.variant["step"]: m for m in rs.measurements}
    assert sorted(by_step) == [0, 1, 2]
    assert by_step[0].ok and by_step[0].value == 2.0  # finished before the fault: kept
    bad = by_step[1]
    assert bad.status == "crashed"
    assert "rank 1" in bad.reason and "SIGKILL" in bad.reason, bad.reason
    assert by_step[2].ok and by_step[2].value == 2.0  # the ranks were restarted for what was left
    assert took < 60  # the death was noticed, not waited out
    assert rs.complete


@pytest.mark.slow
def test_hung_rank_times_out_and_is_named(tmp_path, monkeypatch):
    # the limit also covers restarting both ranks for step 2 (two interpreters importing torch on a busy host)
    rs, took = _run(tmp_path, monkeypatch, "hang", timeout_s=15)
    by_step = {m.variant["step"]: m for m in rs.measurements}
    assert by_step[0].ok
    hung = by_step[1]
    assert hung.status == "timeout"
    assert "rank 1 is busy outside any collective" in hung.reason, hung.reason
    assert "rank(s) 0 wait" in hung.reason, hung.reason
    assert by_step[2].ok
    assert took < 60


@pytest.mark.slow
def test_a_rank_that_fails_at_set_up_is_named_with_its_message(tmp_path):
    path = tmp_path / "half.py"
    path.write_text(textwrap.dedent('''
        import os

        from gapbench.workloads import Variant, Workload

        if os.environ.get("RANK") == "1":
            raise RuntimeError("rank one cannot import this")


        class Half(Workload):
            name = "half"
            category = "collective"
            unit = "x"
            presets = {"tiny": "never runs"}
            distributed = True

            def variants(self, preset, ctx):
                return [Variant({"step": 0})]

            def run(self, variant, ctx):
                return self.result(variant, ctx, value=1.0)
    '''))
    rs = runner.run_suite(device="cpu", workload_specs=["half"], workload_files=[str(path)], nproc=2,
                          timeout_s=60, variant_budget_s=5, output=str(tmp_path / "out.json"), history=False)
    [m] = rs.measurements
    assert m.status == "error"
    assert m.reason.count("rank 1") >= 1 and "rank one cannot import this" in m.reason, m.reason
    assert m.reason.index("rank 1") < m.reason.index("rank 0")  # the cause first, the peer that lost it after
