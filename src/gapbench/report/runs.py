"""The table of one run's results: value [95% CI], % of peak, status or note per measurement, and the
history of a workload across runs."""

from __future__ import annotations

import json
import math
import statistics

from gapbench import specs
from gapbench.compare import percent_of_peak, platform_identity
from gapbench.compare.gaps import Spread, class_default, judge_runs
from gapbench.compare.keys import row_variant
from gapbench.report.kit import (
    FLAGGED_MARK,
    Table,
    fmt_num,
    gap_text,
    interval_text,
    measurement_text,
    one_line,
    shared_and_varying,
    unit_text,
    variant_text,
)
from gapbench.results import ResultSet

BUSY_HINT = "measured on a busy host: rerun idle, or compare with --allow-flagged"


def host_watch_text(m) -> str:
    """The host watch's reasons for a flagged measurement, one line; "" when it was not flagged."""
    if not m.flagged:
        return ""
    return one_line("; ".join(str(r) for r in (m.host_watch or {}).get("reasons", [])) or "flagged")


def results_table(rs: ResultSet) -> Table:
    """One line per measurement; measurements of one workload that failed with one status and one reason (the
    metrics of a failed inference batch) are one line, with what varies among them, as the report's failures
    table says them."""
    spec = specs.match(platform_identity(rs))
    rows, styles = [], []
    for group in _row_groups(rs.measurements):
        row, style = _result_row(group[0], spec) if len(group) == 1 else _failed_row(group)
        rows.append(row)
        styles.append(style)
    title = f"{rs.name} — {rs.device.get('type', '?')} · torch {rs.device.get('torch', '?')}"
    return Table(["workload", "variant", "value [95% CI]", "unit", "% peak", "status / note", "host watch"], rows,
                 numeric=(2, 4), title=title, styles=styles)


def _row_groups(measurements) -> list[list]:
    """The measurements in order, those that failed alike (workload, status, reason, host watch) gathered at the
    first of them."""
    groups: dict[object, list] = {}
    for n, m in enumerate(measurements):
        key = (m.workload, m.status, one_line(m.reason), host_watch_text(m)) if not m.ok else n
        groups.setdefault(key, []).append(m)
    return list(groups.values())


def _result_row(m, spec) -> tuple[list, list]:
    pct, kind = percent_of_peak(m, spec)
    if m.ok:
        note, style = ("noisy (IQR/median > 10%)", "noisy") if m.stats and m.stats.noisy else ("ok", "ok")
        if "best_m" in m.metrics:
            note += f" · best {m.metrics['best_m']}×{m.metrics['best_n']}×{m.metrics['best_k']}"
    else:
        note, style = f"{m.status}: {one_line(m.reason)}", m.status
    flag = host_watch_text(m)
    return ([m.workload, variant_text(m.variant), measurement_text(m), unit_text(m.unit),
             f"{pct:.1f}%{' MFU' if kind == 'MFU' else ''}" if pct is not None else "", note,
             f"{FLAGGED_MARK} {flag}" if flag else ""],
            ["", "", "", "", "", style, "noisy" if flag else ""])


def _failed_row(group: list) -> tuple[list, list]:
    """Several measurements that failed alike, on one line: the variant they share and what varies among them."""
    m = group[0]
    same, what = shared_and_varying([x.variant or {} for x in group])
    variant = (variant_text(same) + " " if same else "") + f"({len(group)} rows{': ' + what if what else ''})"
    units = ", ".join(dict.fromkeys(unit_text(x.unit) for x in group if x.unit))
    flag = host_watch_text(m)
    return ([m.workload, variant, measurement_text(m), units, "", f"{m.status}: {one_line(m.reason)}",
             f"{FLAGGED_MARK} {flag}" if flag else ""],
            ["", "", "", "", "", m.status, "noisy" if flag else ""])


def busy_summary(rs: ResultSet) -> str:
    """A line when most measured rows were flagged by the host watch: what to do about it; "" otherwise."""
    ok = [m for m in rs.measurements if m.ok]
    flagged = sum(1 for m in ok if m.flagged)
    if not ok or flagged * 2 <= len(ok):
        return ""
    return f"{flagged} of {len(ok)} measurements {FLAGGED_MARK} {BUSY_HINT}"


def _change(r, prev, spread: Spread) -> str:
    """The change against the previous run, judged by the one verdict policy (compare.gaps)."""
    flagged = "; ".join(x for x in (r.flag, prev.flag) if x)
    g = judge_runs([r.value], [prev.value], True, spread.value, flagged=flagged, spreads=(spread,))
    return f"{gap_text(g)} ({spread.label})"


def _spreads(rows) -> dict:
    """Per (device, threads, torch, variant): the class default, or the spread of its unflagged runs (three or
    more), the way the history judges a single run (history.run_spread)."""
    logs: dict = {}
    for r in rows:
        if r.status == "ok" and r.value and not r.flag:
            logs.setdefault(_key(r), []).append(math.log(r.value))
    out = {}
    for r in rows:
        k = _key(r)
        vals = logs.get(k, [])
        out[k] = (Spread(statistics.stdev(vals), "history", len(vals)) if len(vals) >= 3
                  else class_default(r.device_type))
    return out


def _key(r) -> tuple:
    """One row of one stack: its variant as compare matches rows (compare.keys.row_variant: an fp8 gemm row of a
    file written before gemm named its accumulation is the "fp32" one)."""
    return (r.device_product, r.threads, r.torch_version, json.dumps(row_variant(r.workload, r.variant),
                                                                     sort_keys=True), r.preset)


def history_table(workload: str, rows) -> Table:
    """history.HistoryRow rows, oldest first, with the change against the previous run of the same device, CPU
    threads and variant, judged as compare judges a single run; the host watch's flag of each row."""
    out, last = [], {}
    spreads = _spreads(rows)
    for r in rows:
        key = _key(r)
        if r.status == "ok" and r.value is not None:
            val = fmt_num(r.value) + (f" {interval_text(r.ci95)}" if r.ci95 else "")
            prev = last.get(key)
            change = _change(r, prev, spreads[key]) if prev is not None else "—"
            last[key] = r
        else:
            val, change = f"{r.status}", one_line(r.reason or "", 60)
        out.append([str(x) for x in (
            (r.started_at or "")[:19], r.device_product or r.device_type or "?",
            "" if r.threads is None else r.threads, r.label or "", variant_text(r.variant),
            val, r.unit or "", change, f"{FLAGGED_MARK} {one_line(r.flag)}" if r.flag else "",
            r.gapbench_version or "", r.torch_version or "", r.runtime or "")])
    return Table(["started", "device", "threads", "label", "variant", "value [95% CI]", "unit", "change",
                  "host watch", "gapbench", "torch", "runtime"], out, numeric=(5, 7),
                 title=f"history of {workload} (change: against the previous run of the same device, CPU threads "
                       "and variant; ≈ within the run-to-run spread — the history's unflagged runs of the row "
                       f"(n), else the class default; {FLAGGED_MARK} measured on a disturbed host: no verdict)")
