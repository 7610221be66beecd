"""benchmarks/assess_calibrate.py refuses what it cannot calibrate on in one line and exit 2, writing nothing: a
folder without its runs or its scores, a folder of models held aside now, no folder at all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks import assess_models

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "assess_calibrate.py"


def refused(*args: str) -> str:
    before = (ROOT / "src" / "gapbench" / "assess" / "calibration.toml").read_bytes()
    r = subprocess.run([sys.executable, str(SCRIPT), *args, "--write"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("assess_calibrate: "), r.stderr
    assert (ROOT / "src" / "gapbench" / "assess" / "calibration.toml").read_bytes() == before
    return lines[0]


def test_bad_folders_are_refused_in_one_line_and_nothing_is_written(tmp_path):
    assert "rates-1t.json: no such file" in refused("--shipped", str(tmp_path / "none"))
    assert "none-accuracy.json is missing" in refused("--unseen", str(tmp_path / "none"))
    assert "no scored pairs" in refused()
    held = next(n for n, m in assess_models.models().items() if m["split"] == "held-aside")
    (tmp_path / "round-accuracy.json").write_text(json.dumps({"models": [held], "pairs": []}))
    assert f"holds {held}, held aside" in refused("--unseen", str(tmp_path / "round"))
