"""Shared terminal helpers for the verbs: consoles, number formatting, the results table of a run."""

from __future__ import annotations

import math

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gapbench.results import Measurement, ResultSet

out = Console(highlight=False, soft_wrap=False)
if not out.is_terminal:  # files and pipes get full-width tables instead of rich's 80-column default
    out = Console(highlight=False, soft_wrap=False, width=160)
err = Console(stderr=True, highlight=False)


def fmt(x: float | None, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    if x == 0:
        return "0"
    mag = math.floor(math.log10(abs(x)))
    decimals = max(0, digits - 1 - mag)
    return f"{x:,.{decimals}f}"


def variant_text(params: dict) -> str:
    p = dict(params)
    parts = []
    if {"m", "n", "k"} <= p.keys():
        shape = f"{p.pop('m')}×{p.pop('n')}×{p.pop('k')}"
        parts.append(f"{p.pop('dtype', '')} {shape}".strip())
    parts += [f"{k}={v}" for k, v in p.items()]
    return " ".join(parts) or "-"


def value_text(m: Measurement) -> str:
    if not m.ok:
        return "-"
    text = fmt(m.value)
    if m.stats and m.stats.n > 1:
        text += f" ± {fmt(m.stats.half_width, 2)}"
    return text


def _peak_fraction(m: Measurement, device: dict) -> float | None:
    """Achieved fraction of the device's peak (FLOP/s for compute units, bandwidth for GB/s)."""
    try:
        from gapbench import specs
    except ImportError:
        return None
    if not m.ok or m.value is None:
        return None
    try:
        if m.unit == "TFLOP/s":
            peak = specs.peak_tflops(device, str(m.variant.get("dtype", "fp32")))
            return m.value / peak if peak else None
        if m.unit == "GB/s" and m.variant.get("kernel") not in ("h2d", "d2h"):
            bw = specs.peak_bandwidth_tbs(device)
            return m.value / (bw * 1e3) if bw else None
        mfu = m.metrics.get("mfu")
        return float(mfu) if mfu is not None else None
    except Exception:
        return None


def results_table(rs: ResultSet) -> Table:
    t = Table(title=f"{rs.name} — {rs.device.get('type', '?')} · torch {rs.device.get('torch', '?')}",
              title_justify="left")
    t.add_column("workload")
    t.add_column("variant")
    t.add_column("value ± 95% CI", justify="right")
    t.add_column("unit")
    t.add_column("% peak", justify="right")
    t.add_column("status / note")
    for m in rs.measurements:
        frac = _peak_fraction(m, rs.device)
        if m.ok:
            note = "[yellow]noisy (IQR/median > 10%)[/]" if m.stats and m.stats.noisy else "ok"
            if "best_m" in m.metrics:
                note += f" · best {m.metrics['best_m']}×{m.metrics['best_n']}×{m.metrics['best_k']}"
        else:
            color = {"unsupported": "cyan", "too_slow": "yellow"}.get(m.status, "red")
            note = f"[{color}]{m.status}[/]: {escape(m.reason)}"
        t.add_row(m.workload, variant_text(m.variant), value_text(m), m.unit,
                  f"{frac * 100:.1f}%" if frac is not None else "", note)
    return t
