"""What sits beside the gap table: each platform's operator coverage per family, and its framework matrix,
lined up by family and by framework (data; the renderers word them)."""

from __future__ import annotations

COVERAGE_KEYS = ("total", "native", "cpu_fallback", "unsupported", "wrong_result", "error", "skipped", "native_pct")


def coverage_side(platforms) -> dict | None:
    """{"families": [...], "summaries": [per platform: {"all operators": summary, family: summary} or None]};
    None when no input has a coverage section."""
    covs = [p.result_set.coverage if isinstance(p.result_set.coverage, dict) else None for p in platforms]
    if not any(covs):
        return None
    families: list[str] = []
    for c in covs:
        for fam in (c or {}).get("families", {}) or {}:
            if fam not in families:
                families.append(fam)
    summaries = []
    for c in covs:
        if c is None:
            summaries.append(None)
            continue
        fams = c.get("families") or {}
        summaries.append({"all operators": c.get("summary"), **{f: fams.get(f) for f in families}})
    return {"families": ["all operators", *families], "summaries": summaries}


def frameworks_side(platforms) -> dict | None:
    """{"names": [framework, ...], "rows": [per platform: {framework: row dict} or None]}; None when no input
    probed frameworks."""
    lists = [p.result_set.frameworks if isinstance(p.result_set.frameworks, list) else None for p in platforms]
    if not any(lists):
        return None
    names: list[str] = []
    for fl in lists:
        for f in fl or []:
            n = str((f or {}).get("framework", "?")) if isinstance(f, dict) else "?"
            if n not in names:
                names.append(n)
    rows = []
    for fl in lists:
        if fl is None:
            rows.append(None)
            continue
        rows.append({str(f.get("framework")): f for f in fl if isinstance(f, dict)})
    return {"names": names, "rows": rows}
