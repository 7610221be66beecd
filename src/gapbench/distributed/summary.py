"""One-line summaries of a distributed run for the terminal: the collectives' headline rows, the
straggler spread of each single-device workload, and the scaling of parallel training."""

from __future__ import annotations

from gapbench.results import ResultSet


def _size(n: float) -> str:
    for unit, f in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= f:
            return f"{n / f:g} {unit}"
    return f"{n:g} B"


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def headline_lines(rs: ResultSet) -> list[str]:
    """Text lines (no markup); empty when the run was not distributed."""
    lines: list[str] = []
    coll: dict[str, dict] = {}
    for m in rs.measurements:
        if m.workload == "collective" and m.ok and "summary" in m.variant:
            coll.setdefault(m.variant["op"], {})[m.variant["summary"]] = m
    for op, rows in coll.items():
        parts = []
        if "plateau" in rows:
            p = rows["plateau"]
            parts.append(f"busbw plateau {p.value:.3g} GB/s (at {_size(p.metrics.get('from_size_bytes', 0))})")
        if "latency" in rows:
            t = rows["latency"]
            parts.append(f"latency {t.value:.3g} µs (at {_size(t.metrics.get('from_size_bytes', 0))})")
        any_row = next(iter(rows.values()))
        lines.append(f"{op} on {any_row.variant.get('ranks')} ranks: " + ", ".join(parts))
    for m in rs.measurements:
        spread = m.metrics.get("spread") if m.ok else None
        if spread:
            what = " ".join(f"{k}={v}" for k, v in m.variant.items())
            ratio = spread.get("max_over_min")
            lines.append(f"{m.workload} {what}: {spread['devices']} devices, min {spread['min']:.4g} / median "
                         f"{spread['median']:.4g} / max {spread['max']:.4g} {m.unit}, max/min "
                         f"{ratio:.3f}, slowest: rank {spread['slowest_rank']} ({spread['slowest_device']})"
                         if ratio else f"{m.workload} {what}: {spread['devices']} devices")
        if m.ok and m.variant.get("parallel") and "per_device_throughput" in m.metrics:
            eff = m.metrics.get("scaling_efficiency")
            lines.append(f"{m.workload} {m.variant['parallel']} × {m.variant.get('world_size')}: {_num(m.value)} "
                         f"{m.unit} total, {_num(m.metrics['per_device_throughput'])} per device"
                         + (f", scaling efficiency {eff:.2f}" if eff is not None else ""))
    return lines
