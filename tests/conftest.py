"""Shared test set-up: keep every test (and every subprocess it starts) away from the user's history DB."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"


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
