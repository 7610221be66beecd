"""The table of one run's results: value [95% CI], % of peak, status or note per measurement, and the
history of a workload across runs."""

from __future__ import annotations

import json

from gapbench import specs
from gapbench.compare import gap_pct, percent_of_peak, platform_identity
from gapbench.report.kit import Table, fmt_num, fmt_pct, interval_text, measurement_text, one_line, variant_text
from gapbench.results import ResultSet


def results_table(rs: ResultSet) -> Table:
    spec = specs.match(platform_identity(rs))
    rows, styles = [], []
    for m in rs.measurements:
        pct, kind = percent_of_peak(m, spec)
        if m.ok:
            note, style = ("noisy (IQR/median > 10%)", "noisy") if m.stats and m.stats.noisy else ("ok", "ok")
            if "best_m" in m.metrics:
                note += f" · best {m.metrics['best_m']}×{m.metrics['best_n']}×{m.metrics['best_k']}"
        else:
            note, style = f"{m.status}: {one_line(m.reason)}", m.status
        rows.append([m.workload, variant_text(m.variant), measurement_text(m), m.unit,
                     f"{pct:.1f}%{' MFU' if kind == 'MFU' else ''}" if pct is not None else "", note])
        styles.append(["", "", "", "", "", style])
    title = f"{rs.name} — {rs.device.get('type', '?')} · torch {rs.device.get('torch', '?')}"
    return Table(["workload", "variant", "value [95% CI]", "unit", "% peak", "status / note"], rows,
                 numeric=(2, 4), title=title, styles=styles)


def history_table(workload: str, rows) -> Table:
    """history.HistoryRow rows, oldest first, with the change against the previous run of the same device, CPU
    threads and variant."""
    out, last = [], {}
    for r in rows:
        key = (r.device_product, r.threads, json.dumps(r.variant, sort_keys=True), r.preset)
        if r.status == "ok" and r.value is not None:
            val = fmt_num(r.value) + (f" {interval_text(r.ci95)}" if r.ci95 else "")
            prev = last.get(key)
            g = gap_pct(r.value, prev, True) if prev is not None else None
            change = fmt_pct(g) if g is not None else "—"
            last[key] = r.value
        else:
            val, change = f"{r.status}", one_line(r.reason or "", 60)
        out.append([str(x) for x in (
            (r.started_at or "")[:19], r.device_product or r.device_type or "?",
            "" if r.threads is None else r.threads, r.label or "", variant_text(r.variant),
            val, r.unit or "", change, r.gapbench_version or "", r.torch_version or "", r.runtime or "")])
    return Table(["started", "device", "threads", "label", "variant", "value [95% CI]", "unit", "change", "gapbench",
                  "torch", "runtime"], out, numeric=(5, 7),
                 title=f"history of {workload} (change: against the previous run of the same device, CPU threads "
                       "and variant)")
