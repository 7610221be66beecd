"""Builders of real ResultSet objects (and files) for the compare/report/store/history tests."""

from __future__ import annotations

from gapbench.results import Measurement, ResultSet, save
from gapbench.stats import Stats

CPU_HOST = {"hostname": "box", "os": "Linux 6.1", "machine": "x86_64", "cpu": "Test CPU 9000", "cpu_count": 2,
            "cpu_max_mhz": 2000.0, "isa": ["avx", "avx2", "fma", "avx512f"], "memory_bytes": 8 * 2**30}


def cpu_device(threads: int = 2, product: str = "Test CPU 9000") -> dict:
    return {"type": "cpu", "product": product, "vendor": "Test", "arch": "x86_64", "cores": 2, "threads": threads,
            "isa": ["avx", "avx2", "fma", "avx512f"], "torch": "2.13.0+cpu", "runtime": {},
            "libraries": {"blas": "mkl", "mkl": "2024.2"}, "env": {}}


def gpu_device(product: str) -> dict:
    return {"type": "cuda", "product": product, "vendor": "NVIDIA" if "NVIDIA" in product else "AMD",
            "torch": "2.5.0", "runtime": {"cuda": "12.4"}, "count": 1}


def stats_around(center: float, spread: float, n: int = 7) -> Stats:
    """Samples evenly spread over center ± spread (so the 95% CI is about that wide)."""
    step = 2 * spread / (n - 1)
    return Stats.from_samples([center - spread + i * step for i in range(n)])


def gemm(value: float | None, dtype: str = "fp32", size: int = 1024, spread: float | None = None,
         status: str = "ok", reason: str = "", **extra) -> Measurement:
    flops = 2.0 * size**3
    nbytes = 3.0 * size * size * 4
    st = stats_around(value, spread if spread is not None else value * 0.01) if status == "ok" else None
    return Measurement(workload="gemm", preset="quick", variant={"dtype": dtype, "m": size, "n": size, "k": size},
                       unit="TFLOP/s", value=value if status == "ok" else None, status=status, reason=reason,
                       stats=st, flops=flops, bytes=nbytes, metrics={"time_per_iter_s": flops / (value * 1e12)}
                       if status == "ok" else {}, **extra)


def membw(value: float, kernel: str = "triad", spread: float | None = None, **extra) -> Measurement:
    n = 1 << 24
    return Measurement(workload="membw", preset="quick", variant={"kernel": kernel, "dtype": "fp32", "elements": n},
                       unit="GB/s", value=value, stats=stats_around(value, spread if spread is not None else value * 0.01),
                       flops=2.0 * n, bytes=12.0 * n, metrics={"time_per_iter_s": 12.0 * n / (value * 1e9)}, **extra)


def latency(value_ms: float, spread: float | None = None) -> Measurement:
    return Measurement(workload="decode-latency", preset="tiny", variant={"batch": 1}, unit="ms", value=value_ms,
                       higher_is_better=False,
                       stats=stats_around(value_ms, spread if spread is not None else value_ms * 0.01))


def model(value: float, mfu: float | None = None, workload: str = "llm-train", unit: str = "tokens/s",
          **extra) -> Measurement:
    metrics = dict(extra.pop("metrics", {}))
    if mfu is not None:
        metrics["mfu"] = mfu
    return Measurement(workload=workload, preset="tiny", variant={"model": "tiny", "dtype": "bf16"}, unit=unit,
                       value=value, stats=stats_around(value, value * 0.01), metrics=metrics, **extra)


def result_set(measurements, device=None, label=None, suite="quick", run_id=None, **extra) -> ResultSet:
    kw = {"run_id": run_id} if run_id else {}
    return ResultSet(host=dict(CPU_HOST), device=device or cpu_device(), measurements=list(measurements), suite=suite,
                     label=label, complete=True, started_at=extra.pop("started_at", "2026-01-01T00:00:00+00:00"),
                     **kw, **extra)


def write(rs: ResultSet, path) -> str:
    save(rs, path)
    rs.path = str(path)
    return str(path)
