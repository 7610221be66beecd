"""A workload's worker runs with glibc's malloc in a training process's steady state (engine.jobs.STEADY_MALLOC):
the setting reaches the worker and its results file, yields to the caller's own, and removes the per-call page
faults a fresh process pays for a convolution's output."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from gapbench.engine.jobs import STEADY_MALLOC, WorkloadJob, worker_env

RUN = ["--device", "cpu", "-w", "membw:tiny", "--variant-budget", "0.5", "--no-history", "--threads", "1"]


def _clean() -> dict:
    return {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}


def _run(tmp_path, env: dict, name: str) -> dict:
    out = tmp_path / name
    p = subprocess.run([sys.executable, "-m", "gapbench", "run", *RUN, "-o", str(out)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())["device"]["env"]


def test_a_run_records_the_steady_allocator_and_keeps_the_callers_own(tmp_path):
    env = _run(tmp_path, _clean(), "steady.json")
    assert {k: env.get(k) for k in STEADY_MALLOC} == STEADY_MALLOC
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(32 * 1024 * 1024)
    # a caller who set the allocator keeps exactly what they set, and the file says so
    mine = _run(tmp_path, {**_clean(), "MALLOC_ARENA_MAX": "2"}, "mine.json")
    assert mine.get("MALLOC_ARENA_MAX") == "2" and not any(k in mine for k in STEADY_MALLOC)
    tuned = worker_env(WorkloadJob(workload="membw", device="cpu", threads=3), {"GLIBC_TUNABLES": "x=1"})
    assert tuned == {"GLIBC_TUNABLES": "x=1", "OMP_NUM_THREADS": "3"}


FAULTS = """
import resource, sys, torch
torch.set_num_threads(2)
x, w = torch.randn(8, 48, 32, 32), torch.randn(192, 48, 1, 1)
def faults(n):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(n):
        with torch.no_grad():
            torch.nn.functional.conv2d(x, w)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / n
faults(5)
print(faults(20))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc settings")
def test_the_steady_allocator_takes_the_page_faults_out_of_each_call():
    """One 1x1 convolution writing 6.3 MB (1,536 pages of 4 KiB): a fresh process faults most of its output's pages
    in on every call; with STEADY_MALLOC, as a model's step after its first, almost none."""
    def per_call(env):
        p = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, timeout=120, env=env,
                           check=True)
        return float(p.stdout.split()[-1])

    pages = 8 * 192 * 32 * 32 * 4 / 4096
    fresh = per_call(_clean())
    steady = per_call(worker_env(WorkloadJob(workload="conv", device="cpu"), _clean()))
    assert fresh > pages / 2, (fresh, steady)
    assert steady < pages / 20, (fresh, steady)
