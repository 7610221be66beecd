"""Without the optional model dependencies the model workloads report `unsupported` with the install
command. Real processes in which importing the package raises ImportError (a meta-path finder installed by
a sitecustomize.py on PYTHONPATH, so the runner's worker processes inherit it); no mocking."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HINT = "pip install 'gapbench[models]'"

_BLOCKER = textwrap.dedent("""
    import importlib.abc, os, sys

    BLOCKED = tuple(os.environ.get("GAPBENCH_TEST_BLOCK", "").split(","))

    class _Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ImportError(f"No module named {name!r} (blocked for the test)")
            return None

    sys.meta_path.insert(0, _Block())
""")


def _env(tmp_path: Path, blocked: str) -> dict:
    (tmp_path / "sitecustomize.py").write_text(_BLOCKER)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path)] + [p for p in [env.get("PYTHONPATH")] if p])
    env["GAPBENCH_TEST_BLOCK"] = blocked
    env["HF_HUB_OFFLINE"] = "1"
    return env


def test_the_blocker_really_blocks(tmp_path):
    out = subprocess.run([sys.executable, "-c", "import diffusers"], env=_env(tmp_path, "diffusers"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "blocked for the test" in out.stderr


@pytest.mark.parametrize("blocked, workload", [("diffusers", "diffusion-infer"), ("transformers", "llm-train"),
                                               ("transformers", "bert-finetune")])
def test_workload_without_its_dependency_is_unsupported_in_process(tmp_path, blocked, workload):
    code = textwrap.dedent(f"""
        import json
        from gapbench import devices
        from gapbench.workloads import get
        from gapbench.workloads.base import Context
        w = get({workload!r})
        c = Context(device=devices.resolve("cpu"), preset="tiny", budget_s=30, options={{}})
        (v,) = w.variants("tiny", c)
        print(json.dumps(w.run(v, c).model_dump(mode="json")))
    """)
    out = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path, blocked), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    m = json.loads(out.stdout.strip().splitlines()[-1])
    assert m["status"] == "unsupported"
    assert blocked in m["reason"] and HINT in m["reason"]


@pytest.mark.slow
def test_gapbench_run_reports_unsupported_through_the_runner(tmp_path):
    """The whole path: CLI -> runner -> worker process with diffusers unimportable -> results file."""
    result = tmp_path / "r.json"
    out = subprocess.run([sys.executable, "-m", "gapbench", "run", "--workload", "diffusion-infer:tiny",
                          "--device", "cpu", "--output", str(result), "--no-history", "--quiet"],
                         env=_env(tmp_path, "diffusers"), capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.exists(), out.stderr[-2000:]
    data = json.loads(result.read_text())
    (m,) = [x for x in data["measurements"] if x["workload"] == "diffusion-infer"]
    assert m["status"] == "unsupported" and HINT in m["reason"], m
