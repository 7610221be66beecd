"""Shared test set-up: keep every test (and every subprocess it starts) away from the user's history DB.

`make test` runs every test. Tests that start real `gapbench run` processes, rank groups or audits for more than
a few seconds are marked `slow` (informational only): `pytest -n auto -m "not slow" tests` is the quick loop
while editing, and the full run stays the check."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.fixture(autouse=True, scope="session")
def _torch_threads_share_the_cores_between_xdist_workers():
    """Under pytest-xdist, torch in each worker gets its share of the cores, not all of them: two workers with two
    intra-op threads each on two cores wait on each other (a spinning thread holds the core another needs), and the
    in-process measurements take several times longer. Subprocesses keep their own settings."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(max(1, min(before, (os.cpu_count() or 1) // workers)))
    yield
    torch.set_num_threads(before)


@pytest.fixture(autouse=True)
def _isolated_history(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("GAPBENCH_DB", str(tmp_path_factory.mktemp("db") / "history.sqlite"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def gapbench(*args, timeout=300, env=None, cwd=None):
    """Run the real CLI in a subprocess; returns CompletedProcess with text output."""
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "gapbench", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=e, cwd=cwd)
