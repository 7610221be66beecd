"""Independent runs of the same variants (the passes of one `--runs N` run, or several results files of one
platform) merged into one measurement per variant."""

from __future__ import annotations

from gapbench.results.records import Measurement
from gapbench.stats import Stats


def merge_runs(groups: list[list[Measurement]]) -> list[Measurement]:
    """Measurements of the same variants from independent runs (passes of one `--runs N` run, or several
    results files of one platform) as one measurement per variant, in order of first appearance.

    The value is the median of the run values (every run's own `runs`, else its value), `runs` lists them
    all, `stats` is computed over them (n = the number of runs), and `metrics.run_stats` keeps each run's
    own statistics; the other fields come from the run whose value is nearest the median. A run that failed
    is listed in `metrics.failed_runs`; only when every run failed is the merged measurement a failure (the
    last one). A variant seen once, without runs of its own, comes back unchanged.
    """
    order: dict[str, list[Measurement]] = {}
    for group in groups:
        for m in group:
            order.setdefault(m.key_without_preset, []).append(m)
    out = []
    for ms in order.values():
        ok = [m for m in ms if m.ok]
        if len(ms) == 1 and not ms[0].runs:
            out.append(ms[0])
        elif not ok:
            out.append(ms[-1])
        else:
            out.append(_merged(ok, [m for m in ms if not m.ok]))
    return out


def _merged(ok: list[Measurement], failed: list[Measurement]) -> Measurement:
    values = [v for m in ok for v in m.run_values]
    stats = Stats.from_samples(values)
    pick = min(ok, key=lambda m: abs(float(m.value) - stats.median))
    metrics = dict(pick.metrics)
    metrics["run_stats"] = [m.stats.model_dump(mode="json") if m.stats else None for m in ok]
    if failed:
        metrics["failed_runs"] = [{"status": m.status, "reason": m.reason} for m in failed]
    watched = [m.host_watch for m in ok if m.host_watch]
    watch = None
    if watched:
        reasons = [f"run {i + 1}: {r}" for i, m in enumerate(ok) for r in (m.host_watch or {}).get("reasons", [])]
        watch = {"flagged": bool(reasons), "reasons": reasons, "runs": watched}
    return pick.replace(value=stats.median, stats=stats, runs=values, metrics=metrics, host_watch=watch,
                   duration_s=sum(m.duration_s or 0.0 for m in ok) or None)
