"""Gap tables between result sets: matched rows, gaps with their uncertainty, % of peak, efficiency, takeaway.

    comp = gapbench.compare(["mi300x.json", "h100.json"], baseline="h100.json")   # a Comparison of numbers

compare computes and returns numbers (gapbench.compare.model); the words and formatted numbers of every
output format are the renderers' (gapbench.report). The sign convention is in gapbench.compare.gaps.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections import Counter

from gapbench import specs as specs_mod
from gapbench.compare.frontier import frontiers_side
from gapbench.compare.gaps import Gap, HistoryChoice, Spread, gap_pct, intervals_overlap, judge, pair_spread, row_spread
from gapbench.compare.keys import as_row, row_key, row_variant
from gapbench.compare.model import (
    Cell,
    ClassLead,
    Comparison,
    Platform,
    PlatformTakeaway,
    Row,
    Takeaway,
)
from gapbench.compare.numerics import WORKLOAD as NUMERICS
from gapbench.compare.numerics import numerics_side
from gapbench.compare.rates import (
    arithmetic_intensity,
    byte_rate,
    classify,
    flop_rate,
    measurement_dtype,
    per_unit,
    percent_of_peak,
    time_per_iter,
)
from gapbench.compare.ratios import library_ratios
from gapbench.compare.references import published_for, reference_matches, reference_result_set, unstated_lines
from gapbench.compare.sides import coverage_side, frameworks_side
from gapbench.compare.takeaway import ridge_of, takeaway
from gapbench.errors import GapbenchError
from gapbench.results import Measurement, ResultSet, load, merge_runs

__all__ = ["compare", "Comparison", "Platform", "Row", "Cell", "Gap", "Takeaway", "PlatformTakeaway", "ClassLead",
           "gap_pct", "intervals_overlap", "flop_rate", "byte_rate", "time_per_iter", "arithmetic_intensity",
           "measurement_dtype", "percent_of_peak", "classify", "per_unit", "parse_prices", "platform_identity",
           "reference_matches", "reference_result_set", "history_choice", "Spread"]


def platform_identity(rs: ResultSet) -> dict:
    """The device identity with the host facts a CPU spec needs (clock, ISA, cores) merged in from the results
    file's host section, as the run recorded them: `specs.cpu_identity`'s one join, so that a CPU's peak is the
    same in every verb."""
    if rs.device.get("type") == "cpu":
        return specs_mod.cpu_identity(rs.host, rs.device)
    return dict(rs.device)


def parse_prices(items: list[str] | None) -> dict[str, float]:
    """['NAME=USD_PER_HOUR', ...] -> {NAME: price}; malformed -> GapbenchError."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, val = str(item).rpartition("=")
        try:
            price = float(val)
        except ValueError:
            price = -1.0
        if not sep or not name or not math.isfinite(price) or price <= 0:
            raise GapbenchError(f"--price {item!r}: expected NAME=USD_PER_HOUR with a positive number, e.g. 'H100=2.99'")
        out[name] = price
    return out


def _as_result_set(x) -> ResultSet:
    if isinstance(x, ResultSet):
        return x
    if isinstance(x, (str, os.PathLike)):
        return load(x)
    raise GapbenchError(f"cannot compare {type(x).__name__}: expected a ResultSet or a results file path")


def _platform_sets(items, by_run_label: bool = True) -> list[ResultSet]:
    """One ResultSet per platform: a list of inputs is one platform measured in several runs, and so are inputs
    that carry the same run label (unless the caller names the inputs itself)."""
    groups: list[list[ResultSet]] = []
    by_label: dict[str, int] = {}
    for x in items:
        members = [_as_result_set(y) for y in x] if isinstance(x, (list, tuple)) else [_as_result_set(x)]
        if not members:
            raise GapbenchError("an empty group of results files")
        label = members[0].label if len({m.label for m in members}) == 1 else None
        if (by_run_label and not isinstance(x, (list, tuple)) and label and label in by_label
                and members[0].run_id not in {rs.run_id for rs in groups[by_label[label]]}):
            groups[by_label[label]] += members
            continue
        if label:
            by_label.setdefault(label, len(groups))
        groups.append(members)
    return [g[0] if len(g) == 1 else merge_result_sets(g) for g in groups]


def merge_result_sets(group: list[ResultSet]) -> ResultSet:
    """Several results files of one platform as one: every row's runs from every file (results.merge_runs)."""
    first = group[0]
    devices = {json.dumps({k: rs.device.get(k) for k in ("type", "product", "arch")}, sort_keys=True) for rs in group}
    if len(devices) > 1:
        raise GapbenchError(f"files given as one platform ran on different devices: "
                            f"{', '.join(str(rs.path or rs.run_id) for rs in group)}")
    versions = {rs.schema_version for rs in group}
    merged = ResultSet(host=first.host, device=first.device, suite=first.suite, label=first.label or first.name,
                       run_id=_merged_id([rs.run_id for rs in group]), started_at=first.started_at,
                       complete=all(rs.complete for rs in group), gapbench_version=first.gapbench_version,
                       schema_version=versions.pop() if len(versions) == 1 else first.schema_version,
                       coverage=next((rs.coverage for rs in group if rs.coverage), None),
                       frameworks=next((rs.frameworks for rs in group if rs.frameworks), None),
                       options=dict(first.options) | {"files": [rs.path or rs.run_id for rs in group]})
    merged.measurements = merge_runs([[as_row(m) for m in rs.measurements] for rs in group])  # one row, one key
    merged.path = first.path
    merged.merged_from = [rs.run_id for rs in group]
    return merged


def _merged_id(run_ids: list[str]) -> str:
    """The run id of files merged as one platform: theirs joined by '+', or where that outgrows a run id (more than
    a few files), their count and a digest of them (merged_from keeps every one)."""
    joined = "+".join(run_ids)
    if len(joined) <= 100:
        return joined
    import hashlib

    return f"{len(run_ids)}-runs-{hashlib.sha256(joined.encode()).hexdigest()[:16]}"


def _unique_names(names: list[str], sets: list[ResultSet]) -> list[str]:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    out, seen = [], {}
    for n, rs in zip(names, sets, strict=True):
        if counts[n] > 1:
            stem = os.path.splitext(os.path.basename(rs.path))[0] if rs.path else None
            seen[n] = seen.get(n, 0) + 1
            n = f"{n} [{stem}]" if stem and stem != n else f"{n} #{seen[n]}"
        out.append(n)
    if len(set(out)) != len(out):  # same file stem twice
        out = [f"{n} #{i + 1}" if out.count(n) > 1 else n for i, n in enumerate(out)]
    return out


def _pick_baseline(baseline, sets: list[ResultSet], names: list[str], default: int) -> int:
    if baseline is None:
        return default
    if isinstance(baseline, int) and not isinstance(baseline, bool):
        if 0 <= baseline < len(sets):
            return baseline
        raise GapbenchError(f"baseline index {baseline} out of range (0..{len(sets) - 1})")
    if isinstance(baseline, ResultSet):
        for i, rs in enumerate(sets):
            if rs is baseline:
                return i
        raise GapbenchError("the baseline result set is not among the compared ones")
    b = str(baseline)
    for i, rs in enumerate(sets):
        if rs.path and (os.path.abspath(rs.path) == os.path.abspath(b)):
            return i
    for i, n in enumerate(names):
        if b == n or b == sets[i].name or b == sets[i].run_id:
            return i
    raise GapbenchError(f"baseline {b!r} is not one of the compared inputs: {', '.join(names)}")


def _price_names(p_name: str, rs: ResultSet, spec) -> list[str]:
    names = [p_name, rs.name, rs.label, rs.device.get("product"), spec.key if spec else None]
    if rs.path:
        names += [rs.path, os.path.splitext(os.path.basename(rs.path))[0]]
    return [n for n in names if n]


def _price_for(p_name: str, rs: ResultSet, spec, prices: dict[str, float]) -> tuple[float | None, str]:
    for n in _price_names(p_name, rs, spec):
        if n in prices:
            return prices[n], "--price"
    if spec and spec.price_usd_per_hour:
        return spec.price_usd_per_hour, f"spec {spec.key}, {spec.price_date}"
    return None, ""


def _cell(m: Measurement | None, platform: Platform) -> Cell:
    if m is None:
        return Cell(None, "missing", "not measured in this input")
    if not m.ok:
        return Cell(m, m.status, m.reason)
    pct, kind = percent_of_peak(m, platform.spec)
    power = m.power_w
    t = time_per_iter(m)
    if power is None and m.energy_j and t:
        power = float(m.energy_j) / t
    rate = None if platform.reference else per_unit(m.unit)  # a published figure has no power or price
    per_watt = m.value / power if power and m.higher_is_better and rate else None
    per_dollar = (m.value * 3600.0 / platform.price_usd_per_hour
                  if platform.price_usd_per_hour and m.higher_is_better and rate else None)
    return Cell(m, "ok", "", pct, kind, power, per_watt, per_dollar)


def _gap(cell: Cell, base: Cell, higher_is_better: bool, spreads: tuple[Spread | None, Spread | None],
         one_file: tuple[bool, bool], allow_flagged: bool) -> Gap:
    if cell.status != "ok":
        return Gap(None, None, cell.status)
    if base.status != "ok":
        return Gap(None, None, f"baseline {base.status}")
    if cell.measurement.unit != base.measurement.unit:
        return Gap(None, None, "unit differs")
    if gap_pct(cell.value, base.value, higher_is_better) is None:
        return Gap(None, None, "n/a (zero)")
    spread, drift = pair_spread(*spreads, *one_file)
    return judge(cell.measurement, base.measurement, higher_is_better, spread, allow_flagged, drift,
                 tuple(s for s in spreads if s is not None))


def _spread(platform: Platform, m: Measurement | None, history: HistoryChoice) -> Spread | None:
    """The run-to-run spread of this row on this platform (compare.gaps.row_spread); None for a published figure
    (no runs at all) or no measurement."""
    if platform.reference or m is None:
        return None
    rs = platform.result_set
    return row_spread(platform_identity(rs), m.workload, m.variant, history, exclude_runs=tuple(rs.run_ids))


def _input_warnings(sets: list[ResultSet], names: list[str]) -> list[str]:
    warnings = []
    suites = {rs.suite for rs in sets if rs.suite}
    if len(suites) > 1:
        warnings.append(f"inputs ran different suites ({', '.join(sorted(suites))}): only the rows they share have gaps")
    seen_runs: dict[str, int] = {}
    for i, rs in enumerate(sets):
        if rs.run_id in seen_runs:
            warnings.append(f"{names[i]} and {names[seen_runs[rs.run_id]]} are the same run ({rs.run_id})")
        seen_runs.setdefault(rs.run_id, i)
        if not rs.complete:
            warnings.append(f"{names[i]}: the run did not complete (interrupted or still running); rows may be missing")
    gv = {rs.gapbench_version for rs in sets}
    if len(gv) > 1:
        warnings.append(f"inputs come from different gapbench versions ({', '.join(sorted(gv))})")
    return warnings


def _label_warnings(labels: list[str], sets: list[ResultSet]) -> list[str]:
    """A --label that names a stack (a backend's name, as a word) other than the one its files ran on: the column
    would claim a stack it did not measure."""
    from gapbench.devices import backends

    names = {b.name for b in backends()}
    out = []
    for label, rs in zip(labels, sets, strict=False):
        ran = str(rs.device.get("backend") or rs.device.get("type") or "?")
        claimed = [w for w in re.findall(r"[a-z0-9]+", str(label or "").lower()) if w in names and w != ran]
        if claimed:
            product = rs.device.get("product")
            out.append(f"--label {label!r} names the {claimed[0]} stack, but {rs.path or rs.name} ran on {ran}"
                       + (f" ({product})" if product else "") + f": the column {label!r} is {ran}'s numbers")
    return out


def _platforms(all_sets: list[ResultSet], names: list[str], prices: dict[str, float]) -> list[Platform]:
    platforms = []
    for i, rs in enumerate(all_sets):
        spec = specs_mod.match(platform_identity(rs))
        price, psrc = _price_for(names[i], rs, spec, prices)
        platforms.append(Platform(names[i], rs, spec, price, psrc, reference=rs.device.get("type") == "reference"))
    known = {n for p in platforms for n in _price_names(p.name, p.result_set, p.spec)}
    unused = set(prices) - known
    if unused:
        raise GapbenchError(f"--price names {', '.join(sorted(unused))} match no input; inputs: {', '.join(names)}")
    return platforms


def _line_up(all_sets: list[ResultSet]) -> tuple[list[tuple[str, str]], list[dict]]:
    """Every (workload, variant) present anywhere, in order of first appearance, and each input's row table.
    Linear in the number of measurements."""
    order: dict[tuple[str, str], None] = {}
    by_set: list[dict[tuple[str, str], Measurement]] = []
    for rs in all_sets:
        table: dict[tuple[str, str], Measurement] = {}
        for m in rs.measurements:
            k = row_key(m.workload, m.variant)
            if k not in table or (not table[k].ok and m.ok):  # a retried variant: keep the ok result
                table[k] = m
            order.setdefault(k, None)
        by_set.append(table)
    return list(order), by_set


def _rows(platforms: list[Platform], base_i: int, order, by_set, history: HistoryChoice = True,
          allow_flagged: bool = False) -> list[Row]:
    rows = []
    ridges: dict[str, float] = {}
    specs = [p.spec for p in platforms]
    for k in order:
        ms = [t.get(k) for t in by_set]
        first = next(m for m in ms if m is not None)
        lead = ms[base_i] if ms[base_i] is not None else first
        hib = lead.higher_is_better
        cells = [_cell(m, platforms[i]) for i, m in enumerate(ms)]
        spreads = [_spread(p, ms[i], history) if ms[i] is not None and ms[i].ok else None
                   for i, p in enumerate(platforms)] if len(platforms) > 1 else []
        one_file = [len(p.result_set.run_ids) < 2 for p in platforms]
        gaps = {i: _gap(c, cells[base_i], hib, (spreads[i], spreads[base_i]), (one_file[i], one_file[base_i]),
                        allow_flagged)
                for i, c in enumerate(cells) if i != base_i} if len(platforms) > 1 else {}
        d = measurement_dtype(lead)
        if d not in ridges:
            ridges[d] = ridge_of(platforms, base_i, d)[0]
        probe = lead if (lead.flops is not None or lead.bytes is not None) else next(
            (m for m in ms if m is not None and (m.flops is not None or m.bytes is not None)), lead)
        bound, ai = row_bound(probe, ridges[d], ms)
        variant = row_variant(first.workload, first.variant)
        rows.append(Row(first.workload, variant, lead.unit, hib, cells, gaps, ai, bound,
                        published_for(specs, base_i, first.workload, variant)))
    return rows


def row_bound(probe: Measurement, ridge: float, ms: list) -> tuple[str, float | None]:
    """The row's class and arithmetic intensity: classify's, or "host" where a side says the host bounded it (it
    measured its own dispatch more than the device)."""
    bound, ai = classify(probe, ridge)
    return ("host" if any(host_bound(m) for m in ms) else bound), ai


def host_bound(m: Measurement | None) -> bool:
    """Whether an ok measurement says the host bounded it (metrics.bound == "host": llm-infer's eager decode on an
    accelerator, every token's step dispatched from Python)."""
    return m is not None and m.ok and (m.metrics or {}).get("bound") == "host"


def compare(result_sets, baseline=None, labels: list[str] | None = None, refs: list[str] | None = None,
            prices: dict[str, float] | None = None, allow_flagged: bool = False, history: HistoryChoice = True,
            interactivity: list[float] | None = None) -> Comparison:
    """Line up result sets into a gap table against a baseline.

    result_sets: ResultSet objects or paths, one platform each — or a list of them for one platform measured in
    several runs (several files); files that carry the same run label are one platform too.
    baseline: index, path, platform name/label, run id or ResultSet; default the first input, or the first
    reference when refs are given. labels name the inputs in order. refs are reference platform keys
    (specs/references.toml). prices: {name: USD per hour} (name = label, platform name, file stem or spec key).
    allow_flagged: give verdicts on rows the host watch flagged. history: use the history database's measured
    run-to-run spread for single runs (True: the default database; a path: that file; False: the class defaults).
    interactivity: tokens/s per user at which inference curves are compared (default: where they all reach).
    """
    sets = _platform_sets(list(result_sets), by_run_label=not labels)
    if not sets and not refs:
        raise GapbenchError("nothing to compare: give at least one results file")
    versions = sorted({rs.schema_version for rs in sets})
    if len(versions) > 1:
        raise GapbenchError(f"cannot compare results of different schema versions ({', '.join(map(str, versions))}); "
                            "re-run with one gapbench version")
    labels = list(labels or [])
    if len(labels) > len(sets):
        raise GapbenchError(f"{len(labels)} labels for {len(sets)} input(s): give at most one --label per file")
    names = [labels[i] if i < len(labels) and labels[i] else rs.name for i, rs in enumerate(sets)]
    ref_sets = [reference_result_set(r, like=sets) for r in (refs or [])]
    all_sets = sets + ref_sets
    names = _unique_names(names + [rs.label for rs in ref_sets], all_sets)
    base_i = _pick_baseline(baseline, all_sets, names, default=len(sets) if ref_sets else 0)
    warnings = [] if len(all_sets) >= 2 else ["only one input: showing its values, no gaps"]
    warnings += _input_warnings(sets, names)
    warnings += _label_warnings(labels, sets)
    warnings += unstated_lines(ref_sets)
    platforms = _platforms(all_sets, names, prices or {})
    rows = _rows(platforms, base_i, *_line_up(all_sets), history=history, allow_flagged=allow_flagged)
    rows = [r for r in rows if r.workload != NUMERICS]  # compared layer by layer instead (comp.numerics)
    if len(all_sets) > 1 and rows and not any(g.pct is not None for r in rows for g in r.gaps.values()):
        warnings.append("no row has a number on both sides: the inputs share no successfully measured "
                        "workload variant, so there is no gap to show")
    comp = Comparison(platforms, base_i, rows, Takeaway(), warnings)
    comp.takeaway = _with_spreads(takeaway(comp), rows)
    comp.coverage = coverage_side(platforms)
    comp.frameworks = frameworks_side(platforms)
    comp.datasheet_figures = _datasheet_figures(platforms)
    comp.frontiers = frontiers_side(platforms, base_i, interactivity)
    comp.library_ratios = library_ratios(platforms)
    comp.numerics = numerics_side(platforms, base_i)
    return comp


def _with_spreads(t: Takeaway, rows: list[Row]) -> Takeaway:
    """The takeaway with the spreads the gaps were judged by: how many gaps each basis judged, and only the class
    defaults that some single run actually assumed."""
    gaps = [g for r in rows for g in r.gaps.values() if g.lo is not None]
    bases = Counter(g.spread_basis for g in gaps if g.spread_basis)
    defaults = {s.device_class: s.value for g in gaps for s in g.spreads if s.source == "class default"}
    return dataclasses.replace(t, spread_bases=tuple(bases.items()),
                               spreads=tuple(sorted(defaults.items())) if "single run" in t.bases else ())


def _datasheet_figures(platforms: list[Platform]) -> list[dict]:
    """Published figures (reference platforms) that equal a datasheet peak, once per figure."""
    out, seen = [], set()
    for i, p in enumerate(platforms):
        if not p.reference:
            continue
        for m in p.result_set.measurements:
            peak = (m.metrics or {}).get("datasheet_peak")
            key = (i, m.workload, json.dumps((m.metrics or {}).get("reference_variant"), sort_keys=True))
            if peak and key not in seen:
                seen.add(key)
                out.append({"platform": i, "workload": m.workload, "variant": m.metrics.get("reference_variant"),
                            "value": m.value, "unit": m.unit, "source": m.metrics.get("source"), **peak})
    return out


def history_choice(db: str | None, no_history: bool = False) -> HistoryChoice:
    """What a verb's --db and --no-history say: False (no history), True (the default database) or a file. A --db
    that names no file is bad input, not an empty history (a typo would otherwise judge by the class defaults)."""
    if no_history:
        if db:
            raise GapbenchError("--db names the history to judge by and --no-history says not to read one; give one")
        return False
    if db is None:
        return True
    if not os.path.isfile(db):
        raise GapbenchError(f"--db {db}: no such history database")
    return db
