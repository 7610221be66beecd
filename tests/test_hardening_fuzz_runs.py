"""benchmarks/fuzz_runs.py in small: hostile event streams through the parent's reader, a hostile workload file
through a real `gapbench run`, and hostile command lines through every verb, with protected files checked after
each call. The benchmark runs the same questions over 10,000 event streams and 10,000 command lines; here a
seeded sample must give no finding of any kind (the script's exit code)."""

import json
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.mark.slow
def test_a_sample_of_hostile_events_workload_files_and_command_lines_gives_no_finding(tmp_path):
    out = tmp_path / "summary.json"
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "fuzz_runs.py"), "--events", "300",
                        "--event-runs", "1", "--workload-files", "1", "--argv", "25", "--seed", "7", "--out", str(out)],
                       capture_output=True, text=True, timeout=600)
    summary = json.loads(out.read_text())
    findings = {part: {k: v for k, v in summary[part].items() if k not in ("calls", "exits", "examples") and v}
                for part in ("event streams", "event lines in runs", "workload files", "command lines")}
    assert p.returncode == 0, (findings, p.stderr[-3000:])
    assert summary["cases"] == 300 + 1 + 1 + 25
    assert summary["event streams"]["calls"] == 300 and summary["command lines"]["calls"] == 25
