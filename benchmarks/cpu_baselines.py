"""gapbench on the CPU next to plain baselines, in one session, interleaved (A B A B …).

- membw triad GB/s vs a STREAM-style OpenMP C triad (stream_triad.c) at the same array size;
- the best fp32 gemm GFLOP/s (gapbench's sweep) vs numpy's matmul at the same shape.

numpy is run with OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE removed from its environment (this workplace sets
them for old OpenBLAS builds; they hold a current one back), so the baseline is numpy at its best.
Usage: python benchmarks/cpu_baselines.py [ROUNDS]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent


def gapbench(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "gapbench", "run", "--device", "cpu", "--no-history", "--json",
                          "--output", os.path.join(tempfile.mkdtemp(), "r.json"), *args],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def stream(binary: str, n: int) -> float:
    out = subprocess.run([binary, str(n), "30"], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


NUMPY = """
import sys, time, statistics, numpy as np
m, n, k = map(int, sys.argv[1:4])
rng = np.random.default_rng(0)
a = rng.standard_normal((m, k), dtype=np.float32); b = rng.standard_normal((k, n), dtype=np.float32)
c = np.empty((m, n), dtype=np.float32)
np.matmul(a, b, out=c)
per = []
for _ in range(7):
    reps = 0; t0 = time.perf_counter()
    while True:
        np.matmul(a, b, out=c); reps += 1
        dt = time.perf_counter() - t0
        if dt > 0.2: break
    per.append(dt / reps)
print(2 * m * n * k / statistics.median(per) / 1e9)
"""


def numpy_gflops(m: int, n: int, k: int) -> float:
    env = {k_: v for k_, v in os.environ.items() if k_ not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    out = subprocess.run([sys.executable, "-c", NUMPY, str(m), str(n), str(k)], capture_output=True, text=True,
                         check=True, env=env)
    return float(out.stdout.strip())


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    binary = os.path.join(tempfile.mkdtemp(), "stream_triad")
    subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", str(HERE / "stream_triad.c"), "-o", binary],
                   check=True)
    g_triad, c_triad, g_gemm, np_gemm = [], [], [], []
    shape = None
    for r in range(rounds):
        res = gapbench("--workload", "membw:standard")
        triad = next(m for m in res["measurements"] if m["variant"].get("kernel") == "triad")
        n = triad["variant"]["elements"]
        g_triad.append(triad["value"])
        c_triad.append(stream(binary, n))
        res = gapbench("--workload", "gemm:sweep", "--dtype", "fp32", "--variant-budget", "40")
        sweep = res["measurements"][0]
        g_gemm.append(sweep["value"] * 1e3)
        shape = shape or (sweep["metrics"]["best_m"], sweep["metrics"]["best_n"], sweep["metrics"]["best_k"])
        np_gemm.append(numpy_gflops(*shape))
        print(f"round {r + 1}: triad gapbench {g_triad[-1]:.1f} GB/s, C {c_triad[-1]:.1f} GB/s (n={n}); "
              f"gemm gapbench {g_gemm[-1]:.1f} GFLOP/s, numpy {np_gemm[-1]:.1f} GFLOP/s at {shape}", flush=True)
    mt, mc = statistics.median(g_triad), statistics.median(c_triad)
    mg, mn = statistics.median(g_gemm), statistics.median(np_gemm)
    print(json.dumps({"triad_gbs": {"gapbench": mt, "stream_c": mc, "ratio": mt / mc},
                      "gemm_fp32_gflops": {"gapbench": mg, "numpy": mn, "ratio": mg / mn, "shape": shape}}, indent=1))


if __name__ == "__main__":
    main()
