"""Shared test set-up: keep every test (and every subprocess it starts) away from the user's history DB.

`make test` runs every test. Tests that start real `gapbench run` processes, rank groups or audits for more than
a few seconds are marked `slow` (informational only): `pytest -n auto -m "not slow" tests` is the quick loop
while editing, and the full run stays the check."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


_OMP_AT_START = os.environ.get("OMP_NUM_THREADS")


@pytest.fixture(autouse=True, scope="session")
def _torch_threads_share_the_cores_between_xdist_workers():
    """Under pytest-xdist, torch in each worker, and in every process a test starts, gets its share of the cores,
    not all of them: two workers whose processes run two OpenMP threads each on two cores wait on each other (a
    spinning thread holds the core another needs), and measurements take several times longer. A test or a
    `--threads` flag that sets its own thread count keeps it; a serial run keeps torch's default."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if workers <= 1:
        yield
        return
    import torch

    before = torch.get_num_threads()
    share = max(1, min(before, (os.cpu_count() or 1) // workers))
    torch.set_num_threads(share)
    if _OMP_AT_START is None:
        os.environ["OMP_NUM_THREADS"] = str(share)
    yield
    torch.set_num_threads(before)
    if _OMP_AT_START is None:
        os.environ.pop("OMP_NUM_THREADS", None)


def env_with_default_threads() -> dict:
    """os.environ with OMP_NUM_THREADS as the test run started with, for a subprocess whose test depends on it."""
    e = dict(os.environ)
    if _OMP_AT_START is None:
        e.pop("OMP_NUM_THREADS", None)
    else:
        e["OMP_NUM_THREADS"] = _OMP_AT_START
    return e


def pytest_collection_modifyitems(config, items):
    """In each xdist worker, the `slow` tests first (the order the controller hands tests out in; see
    pytest_xdist_make_scheduler). A serial run keeps the collection order, so that the tests of a module stay
    together and its module-scoped fixtures are built once."""
    if hasattr(config, "workerinput"):
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


_MODULE_FIXTURE = re.compile(r"""@pytest\.fixture\([^)]*scope=["'](?:module|class|package)["']""")


def pytest_xdist_make_scheduler(config, log):
    """`-n N` (xdist's `load` distribution) hands tests out one at a time, longest (`slow`) first, so that the run
    ends with short tests and neither worker waits for the other; and a module with a module-scoped fixture (a
    real audit, a tiny server, a built wheel) goes to one worker whole, so that the fixture is built once. (xdist's
    own `loadgroup` would do the grouping, but its xdist_group names do not reach the scheduler under pytest 9.)"""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    shared: dict[str, bool] = {}

    def has_module_fixture(module: str) -> bool:
        if module not in shared:
            path = config.rootpath / module
            shared[module] = path.suffix == ".py" and path.is_file() and bool(_MODULE_FIXTURE.search(path.read_text()))
        return shared[module]

    class SlowFirstModulesWithSharedFixturesWhole(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return module if has_module_fixture(module) else nodeid

    return SlowFirstModulesWithSharedFixturesWhole(config, log)


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
