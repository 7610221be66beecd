"""Migration readiness: one verdict for moving a codebase to a stack — what breaks, how long the port takes, and
how fast the model will run there.

    a = gapbench.assess("./repo", target="rocm", like="llm-train:tiny", coverage="cov-mi300x.json",
                        results=["h100.json", "mi300x.json"])
    a.code.counts, a.operators.not_native, a.speed.gap_pct, a.speed.lo, a.speed.hi, a.to_dict()

It joins three measurements that exist apart: the scan of the code (gapbench.scan), the operators the model's
step needs and their status in a coverage audit of the target (gapbench.coverage), and a step-time prediction
from the rates both platforms measured (assess.speed). The scan never runs the code; tracing `entry` imports and
runs the user's function (opt-in). The words are gapbench.report.assess's.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable

from gapbench.assess.model import Assessment, CodePart, FindingRow, OperatorsPart
from gapbench.assess.speed import DRAWS, SEED, SpeedPrediction, predict
from gapbench.assess.work import Work
from gapbench.compare.gaps import HistoryChoice
from gapbench.errors import GapbenchError
from gapbench.results import ResultSet
from gapbench.scan.stacks import Stack, stack, stacks

__all__ = ["assess", "Assessment", "CodePart", "OperatorsPart", "SpeedPrediction", "Work", "code_part",
           "stacks", "stack"]

VERDICT_ORDER = ("blocker", "manual", "auto")


def code_part(path: str | os.PathLike, st: Stack, rules: Iterable[str] = ()) -> CodePart:
    """The scan of `path`, judged for the stack (by the scanner target that stands in for it, when it has none)."""
    from gapbench.scan import scan

    report = scan(path, targets=(st.scan_target,), rules=list(rules))
    d = report.to_dict()
    summary = d["summary"][st.scan_target]
    rows = []
    for f in d["findings"]:
        v = f["verdicts"][st.scan_target]
        if v in VERDICT_ORDER:
            rows.append(FindingRow(f["path"], int(f["line"]), f["rule"], v, f["message"], f["fix"], f["text"]))
    rows.sort(key=lambda r: (VERDICT_ORDER.index(r.verdict), r.path, r.line))
    effort = summary["effort_person_days"]
    return CodePart(root=d["root"], scan_target=st.scan_target, counts=dict(summary["counts"]),
                    effort_days=(float(effort["low"]), float(effort["high"])), effort_basis=summary["effort_basis"],
                    blockers=list(summary["blockers"]), findings=rows, files_scanned=d["stats"]["files_scanned"],
                    skipped=d["stats"]["files_skipped"])


def _load_results(paths: list) -> list[ResultSet]:
    from gapbench import results

    if len(paths) not in (0, 2):
        raise GapbenchError(f"--results takes two files, the source stack's and then the target's; got {len(paths)}")
    return [p if isinstance(p, ResultSet) else results.load(p) for p in paths]


def _check_coverage(path: str) -> ResultSet:
    from gapbench import results

    rs = results.load(path)
    cov = rs.coverage
    if not cov or not isinstance(cov.get("ops"), list):
        raise GapbenchError(f"{path}: no coverage section (make one with gapbench coverage on the target)")
    return rs


def device_text(rs: ResultSet) -> str:
    """'cpu (AMD EPYC)': the stack a results or coverage file ran on, as its device identity records it."""
    d = rs.device
    product = d.get("product")
    return f"{side_stack(rs)}" + (f" ({product})" if product else "")


def side_stack(rs: ResultSet) -> str:
    """The stack a file ran on: its backend's name (the names --target takes), else its device type."""
    return str(rs.device.get("backend") or rs.device.get("type") or "?")


def mismatches(st: Stack, sets: list[ResultSet], coverage: ResultSet | None) -> list[str]:
    """A line for each file given for the target that ran on another stack: the prediction (or the operator
    statuses) would be that other stack's."""
    out = []
    given = ([("the target's results", sets[1])] if len(sets) == 2 else []) + (
        [("the coverage file", coverage)] if coverage is not None else [])
    for what, rs in given:
        if side_stack(rs) != st.key:
            out.append(f"{what} {rs.path or rs.name} ran on {device_text(rs)}, not on {st.name} (--target "
                       f"{st.key}): its numbers are that device's, not {st.name}'s")
    return out


def default_dtype(like: str, sets: list[ResultSet]) -> str:
    """The precision to trace a built-in workload at: that of its measured row in the source results file (so
    that the prediction is of what was measured), else fp32."""
    from gapbench import workloads

    name, preset = workloads.parse_spec(like)
    for m in (sets[0].measurements if sets else []):
        if m.ok and m.workload == name and (preset is None or m.variant.get("model") in (None, preset)):
            d = m.variant.get("dtype")
            if d:
                return str(d)
    return "fp32"


def _operators(trace, how: str, coverage: str | None, index: dict | None) -> OperatorsPart:
    part = OperatorsPart(trace.target, how, trace.fake, dict(trace.forward), dict(trace.backward), coverage)
    if coverage:
        from gapbench.coverage.trace import against

        verdict = against(trace, coverage, index=index)
        part.where, part.statuses, part.warnings = verdict.where, dict(verdict.statuses), list(verdict.warnings)
    return part


def _speed(work: Work | None, sets: list[ResultSet], draws: int, seed: int, history: HistoryChoice = True,
           reference: str | None = None, fake: bool = True) -> tuple[SpeedPrediction | None, list]:
    from gapbench.assess.rates import platform_rates
    from gapbench.assess.speed import reference_of
    from gapbench.assess.step import trace_like

    if work is None:
        return None, ["no step traced: give --entry MODULE:FUNCTION or --like WORKLOAD:PRESET"]
    if not sets:
        return None, ["no rates: give --results SOURCE.json --results TARGET.json (gapbench run --suite assess on "
                      "each stack)"]
    rates = [platform_rates(s) for s in sets]
    ref = None
    if reference:  # traced at its measured row's dtype; its error on these two files corrects the step's
        with contextlib.redirect_stdout(sys.stderr):
            _, ref_work = trace_like(reference, {"dtype": default_dtype(reference, sets)}, fake=fake)
        ref = reference_of(reference, [(ref_work, r) for r in rates], history)
    return predict([(work, rates[0]), (work, rates[1])], draws=draws, seed=seed, history=history, reference=ref)


def checked_inputs(path: str | os.PathLike, target: str, *, entry: str | None = None, like: str | None = None,
                   dtype: str | None = None, coverage: str | None = None, results: Iterable = (),
                   rules: Iterable[str] = (),
                   reference: str | None = None) -> tuple[Stack, str, list[ResultSet], ResultSet | None]:
    """Every argument of `assess` checked before any scan or trace — the target, the path, --entry or --like and
    its --dtype, the files (they exist and read) — so that a bad command line is one line at once, not after
    minutes of tracing. Returns the stack, the path, the results sets and the coverage file's set."""
    st = stack(target)
    root = os.fspath(path)
    if not os.path.exists(root):
        raise GapbenchError(f"{root}: no such file or folder")
    if entry and like:
        raise GapbenchError("give --entry or --like, not both")
    if dtype and not like:
        raise GapbenchError("--dtype is the precision a --like workload is traced at; your --entry sets its own")
    if like:
        _check_like(like, dtype)
    if reference:
        _check_like(reference, None, "--reference")
    for r in rules:
        _check_readable(r, "--rules")
    sets = _load_results(list(results))
    cov_set = _check_coverage(coverage) if coverage else None
    if coverage and not (entry or like):
        raise GapbenchError("--coverage needs a step to check: give --entry MODULE:FUNCTION or --like WORKLOAD:PRESET")
    if reference and (len(sets) != 2 or not (entry or like)):
        raise GapbenchError("--reference corrects a predicted speed: give the step (--entry or --like) and both "
                            "results files (--results SOURCE.json --results TARGET.json)")
    return st, root, sets, cov_set


def _check_like(like: str, dtype: str | None, flag: str = "--like") -> None:
    """--like (or `flag`) names a built-in workload that can be traced, with one of its presets; --dtype one it
    measures."""
    from gapbench import workloads
    from gapbench.devices.dtypes import DTYPE_NAMES, normalize

    name, colon, preset = str(like).partition(":")
    if not name or (colon and not preset):
        raise GapbenchError(f"{flag} {like!r}: expected WORKLOAD:PRESET, e.g. llm-train:tiny")
    try:
        w = workloads.get(name)
    except GapbenchError as e:
        raise GapbenchError(f"{flag} {like!r}: {e}") from None
    if preset and preset not in w.presets:
        raise GapbenchError(f"{flag} {like!r}: workload {name} has no preset {preset!r}; presets: "
                            f"{', '.join(w.presets)}")
    if not callable(getattr(w, "build_iteration", None)) and not callable(getattr(w, "build_step", None)):
        raise GapbenchError(f"{flag} {like!r}: workload {name} cannot be traced (it builds no step)")
    if dtype is not None:
        known = tuple(getattr(w, "dtypes", None) or DTYPE_NAMES)
        if normalize(dtype) not in known:
            raise GapbenchError(f"--dtype {dtype!r}: {name} is traced at {', '.join(known)}")


def _check_readable(path: str, flag: str) -> None:
    if not os.path.isfile(path):
        raise GapbenchError(f"{flag} {path}: no such file" if not os.path.exists(path) else f"{flag} {path}: not a file")
    if not os.access(path, os.R_OK):
        raise GapbenchError(f"{flag} {path}: cannot be read (permission denied)")


def assess(path: str | os.PathLike, target: str, *, entry: str | None = None, like: str | None = None,
           dtype: str | None = None, coverage: str | None = None, results: Iterable = (),
           rules: Iterable[str] = (), index: dict | None = None, fake: bool = True, draws: int = DRAWS,
           seed: int = SEED, allow_flagged: bool = False, history: HistoryChoice = True,
           on_ready: Callable[[], None] | None = None, reference: str | None = None) -> Assessment:
    """Assess moving the codebase at `path` to `target` (rocm, npu, xpu, mps, cpu).

    entry: 'module:function' in the user's code returning (model, example_inputs) or a step function — importing
    it runs that code. like: a built-in workload 'NAME:PRESET' of the same family, traced at `dtype` (default:
    its measured row's in the source results file, else fp32). coverage: a `gapbench coverage` file from the
    target. results: two results files (or ResultSets), the source stack's then the target's. index: an OpInfo
    index (default: the cached one, built on first use). rules: extra scan rule files. allow_flagged: give the
    expected speed a verdict even where the host watch flagged rates it uses. A results or coverage file given for
    the target that ran on another stack is named in `mismatches` (the report leads with it). history: the history
    database whose run-to-run spreads judge the measured check's single runs (True: the default; False: none).
    on_ready: called once every argument is checked, before the scan and the tracing (a verb says there what the
    wait is for). reference: a built-in workload 'NAME:PRESET' that both results files measured, traced at its
    measured row's dtype: its own error on the pair corrects the prediction by the calibrated weight of the pair's
    kind (assess.calibration).
    """
    st, root, sets, cov_set = checked_inputs(path, target, entry=entry, like=like, dtype=dtype, coverage=coverage,
                                             results=results, rules=rules, reference=reference)
    if on_ready is not None:
        on_ready()
    code = code_part(root, st, rules)
    trace = work = None
    if entry or like:
        from gapbench.assess.step import trace_entry, trace_like

        with contextlib.redirect_stdout(sys.stderr):  # what the traced code prints is not the verdict (-f json)
            if entry:
                trace, work = trace_entry(entry, fake=fake)
            else:
                trace, work = trace_like(like, {"dtype": dtype or default_dtype(like, sets)}, fake=fake)
    operators = _operators(trace, "entry" if entry else "like", coverage, index) if trace is not None else None
    speed, missing = _speed(work, sets, draws, seed, history, reference, fake)
    return Assessment(path=root, stack=st, code=code, operators=operators, work=work, speed=speed,
                      speed_missing=missing, results=tuple(str(s.path or s.name) for s in sets),
                      mismatches=mismatches(st, sets, cov_set), allow_flagged=allow_flagged)
