"""Shared terminal helpers for the verbs: consoles, number formatting, the results table of a run."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from gapbench import specs
from gapbench.compare import fmt_num, percent_of_peak, variant_text
from gapbench.results import Measurement, ResultSet

__all__ = ["out", "err", "value_text", "variant_text", "results_table"]

out = Console(highlight=False, soft_wrap=False)
if not out.is_terminal:  # files and pipes get full-width tables instead of rich's 80-column default
    out = Console(highlight=False, soft_wrap=False, width=160)
err = Console(stderr=True, highlight=False)


def value_text(m: Measurement) -> str:
    if not m.ok:
        return "-"
    text = fmt_num(m.value)
    if m.stats and m.stats.n > 1:
        text += f" ± {fmt_num(m.stats.half_width, 2)}"
    return text


def results_table(rs: ResultSet) -> Table:
    t = Table(title=f"{rs.name} — {rs.device.get('type', '?')} · torch {rs.device.get('torch', '?')}",
              title_justify="left")
    t.add_column("workload")
    t.add_column("variant")
    t.add_column("value ± 95% CI", justify="right")
    t.add_column("unit")
    t.add_column("% peak", justify="right")
    t.add_column("status / note")
    spec = specs.match(rs.device)
    for m in rs.measurements:
        pct, kind = percent_of_peak(m, spec)
        if m.ok:
            note = "[yellow]noisy (IQR/median > 10%)[/]" if m.stats and m.stats.noisy else "ok"
            if "best_m" in m.metrics:
                note += f" · best {m.metrics['best_m']}×{m.metrics['best_n']}×{m.metrics['best_k']}"
        else:
            color = {"unsupported": "cyan", "too_slow": "yellow"}.get(m.status, "red")
            note = f"[{color}]{m.status}[/]: {escape(m.reason)}"
        t.add_row(m.workload, variant_text(m.variant), value_text(m), m.unit,
                  f"{pct:.1f}%{' MFU' if kind == 'MFU' else ''}" if pct is not None else "", note)
    return t
