"""benchmarks/assess_per_op.py: a development model's step priced and timed operator by operator, in a real
subprocess (it starts itself again with a worker's allocator settings), against a committed folder's rates; the
held-aside models and bad values refused with one line and exit code 2."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import assess_models  # noqa: E402

FOLDER = "results/cpu-xeon-2core-assess-r14-held-aside"
SCRIPT = str(ROOT / "benchmarks" / "assess_per_op.py")


def per_op(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_reduced_step_is_priced_and_timed_per_operator_with_the_optimizer_step_as_one():
    r = per_op("--out", FOLDER, "--model", "t5", "--scale", "0.125", "--steps", "2", "--top", "500")
    assert r.returncode == 0, r.stderr
    head = re.search(r"priced ([\d.]+) ms .* step alone ([\d.]+) ms, under the timing mode ([\d.]+) ms, "
                     r"its operators ([\d.]+) ms", r.stdout)
    assert head, r.stdout
    priced, alone, under, operators = map(float, head.groups())
    assert priced > 0 and alone > 0 and 0 < operators <= under
    # the window of a call that does no work, over the step's timed calls, and each class less it
    empty = re.search(r"\((\d+) calls; the window of a call that does no work ([\d.]+) µs, ([\d.]+) ms over the calls\)",
                      r.stdout)
    assert empty, r.stdout
    calls, window_us, over_ms = int(empty.group(1)), float(empty.group(2)), float(empty.group(3))
    assert calls > 0 and 0 < window_us < 1000 and over_ms == pytest.approx(calls * window_us / 1e3,
                                                                              abs=0.05 + calls * 0.005e-3)
    classes = re.findall(r"^\| (\w[\w ]*) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \|$", r.stdout, re.M)
    assert classes and all(float(less) <= float(t) for _, _, t, less in classes)
    rows = {m.group(1): m.groups() for m in re.finditer(r"^\| (\S[^|]*?) \| (\S+) \| (\d+) / (\d+) \| ([\d.]+) \| "
                                                         r"([\d.]+) \|", r.stdout, re.M)}
    # the trace and the timing see the same calls of the step's GEMMs, and one optimizer step priced whole
    assert rows["mm"][2] == rows["mm"][3] and int(rows["mm"][2]) > 0
    assert rows["optimizer step"][1] == "optimizer" and rows["optimizer step"][2] == "1"
    assert int(rows["optimizer step"][3]) > 10  # its timed calls: the per-parameter updates
    assert "| gemm |" in r.stdout and "| elementwise |" in r.stdout


@pytest.mark.parametrize("args, says", [
    (["--model", "no-such-model"], "unknown model"),
    (["--model", next(n for n, m in assess_models.models().items() if m["split"] == "held-aside")], "held aside"),
    (["--model", "t5", "--steps", "0"], "--steps"),
    (["--model", "t5", "--scale", "2"], "--scale"),
])
def test_bad_input_is_one_line_and_exit_2(args, says, tmp_path):
    r = per_op("--out", FOLDER, *args)
    assert r.returncode == 2 and says in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_a_folder_without_the_thread_counts_rates_is_refused(tmp_path):
    r = per_op("--out", str(tmp_path), "--model", "t5")
    assert r.returncode == 2 and "has no rates-1t.json" in r.stderr, r.stderr
