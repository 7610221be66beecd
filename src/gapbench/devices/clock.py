"""The CPU clock, measured: where the OS reports only a nominal clock (a VM without cpufreq), a dependent
chain of fused multiply-adds runs for a fraction of a second and its speed gives the clock the core really
ran at, assuming the FMA latency of today's x86 and Arm cores (4 cycles).

The chain is C, compiled once per boot with the system compiler into the user's cache folder; without a
compiler there is no measured clock and the nominal one stands (and says so).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

import psutil

FMA_LATENCY_CYCLES = 4  # Intel since Skylake, AMD Zen 3 to 5, Arm Neoverse and Apple cores (Zen 2: 5)
METHOD = f"dependent FMA chain, {FMA_LATENCY_CYCLES}-cycle latency assumed"
CHAIN = 100_000_000

SOURCE = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000000L;
  volatile double seed = 1.0000001;
  double x = seed, a = 0.9999999, b = 1e-9;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (long i = 0; i < n; i++) x = fma(x, a, b);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("%.9f %.17g\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, x);
  return 0;
}
"""


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gapbench"


def _boot_id() -> str:
    """This boot: the kernel's boot_id (Linux; psutil has no boot identity), else the boot time psutil reports
    (macOS), so that a clock measured before a reboot is measured again."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        pass
    try:
        return f"booted {psutil.boot_time():.0f}"
    except OSError:
        return ""


def _compile(folder: Path) -> Path | None:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
    if not cc:
        return None
    key = hashlib.sha256((SOURCE + platform.machine()).encode()).hexdigest()[:12]
    exe = folder / f"fma-chain-{key}"
    if exe.is_file():
        return exe
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "chain.c"
        src.write_text(SOURCE)
        out = Path(tmp) / "chain"
        try:
            p = subprocess.run([cc, "-O2", "-march=native", "-o", str(out), str(src), "-lm"], capture_output=True,
                               timeout=60)
        except (OSError, subprocess.SubprocessError):
            return None
        if p.returncode != 0:
            return None
        shutil.move(str(out), exe)
    return exe


def measure_mhz(runs: int = 3) -> float | None:
    """The clock (MHz) of one core running a dependent FMA chain: the fastest of `runs` runs; None without a
    C compiler or when the chain does not run."""
    exe = _compile(_cache_dir())
    if exe is None:
        return None
    best = None
    for _ in range(runs):
        try:
            p = subprocess.run([str(exe), str(CHAIN)], capture_output=True, text=True, timeout=60)
            seconds = float(p.stdout.split()[0])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return None
        if seconds > 0:
            best = seconds if best is None else min(best, seconds)
    return FMA_LATENCY_CYCLES * CHAIN / best / 1e6 if best else None


def measured_mhz(model: str) -> float | None:
    """measure_mhz(), once per boot and CPU model (cached in the user's cache folder)."""
    cache = _cache_dir() / "cpu-clock.json"
    key = f"{_boot_id()}|{model}"
    try:
        data = json.loads(cache.read_text())
        if data.get("key") == key and isinstance(data.get("mhz"), (int, float)):
            return float(data["mhz"])
    except (OSError, ValueError, AttributeError):
        pass
    mhz = measure_mhz()
    if mhz is not None:
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"key": key, "mhz": mhz, "method": METHOD}))
            tmp.replace(cache)
        except OSError:
            pass
    return mhz
