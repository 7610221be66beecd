"""Running a vendor's command-line tool (nvidia-smi, rocm-smi, npu-smi, xpu-smi) for facts torch does not give."""

from __future__ import annotations

import re
import shutil
import subprocess


def run_tool(cmd: list[str], timeout_s: float = 20.0) -> str | None:
    """The tool's standard output, or None when it is missing, fails or prints nothing."""
    if not shutil.which(cmd[0]):
        return None
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        return None
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else None


def strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)
