"""Predicted against measured on models gapbench does not ship: the development models of
benchmarks/data/assess_models.toml (transformers architectures, random weights), one platform pair at a time.

Pairs this one CPU can make: 1 thread against 2 threads at fp32, and (with --bf16) fp32 against bf16 at 1 thread.
For each thread count one `gapbench run --suite assess` measures the rates the prediction reads (GEMM per dtype
and shape, grouped GEMM, convolution, attention, element-wise, bandwidth, per-operator cost), one
`gapbench run -w gemm:listed --flush-cache` the GEMM shapes the models' steps use (the shapes `gapbench assess`
names: those that carry 99% of each step's GEMM FLOPs), each with the cache overwritten before every call, one
`gapbench run -w conv:listed` their convolutions likewise, one `gapbench run -w attention:listed` their attentions
(keys' sequence and causality as called), one `gapbench run -w grouped-gemm:listed` their grouped GEMMs at the group
sizes the step's routing gave (mixture-of-experts layers), one
`gapbench run -w optimizer:listed` their optimizer steps over each model's own parameter set, and,
right after, one `gapbench run --workload-file benchmarks/assess_models.py` measures each model's training step
(forward, loss, backward, AdamW), each in --runs interleaved passes. Each model's step is traced through `--entry`
(benchmarks.assess_models:NAME, on real tensors: `gapbench assess --real`), the gap is predicted from the two
sides' rates by gapbench.assess.speed.predict (the code `gapbench assess` uses) and set against the measured gap
of the two rows, judged as `compare` judges it. The error is predicted − measured, in percentage points.

    python benchmarks/assess_unseen.py                        # the development models, 1 vs 2 threads fp32
    python benchmarks/assess_unseen.py --bf16                 # and fp32 vs bf16 at 1 thread
    python benchmarks/assess_unseen.py --reuse                # predict again from the files in --out
    python benchmarks/assess_unseen.py --held-aside-once      # the held-aside models instead: once, at the end

The held-aside models are never measured or scored without --held-aside-once: they are for one final score of
the step-time model after the work on it, not for tuning it. Writes OUT/*.json (the runs), OUT-accuracy.json (the scores: named so that nothing takes it for a results file)
and OUT.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from benchmarks import assess_accuracy as accuracy  # noqa: E402
from benchmarks import assess_models  # noqa: E402
from benchmarks.assess_accuracy import label  # noqa: E402

WORKLOAD = assess_models.AssessModel.name
WORKLOAD_FILE = "benchmarks/assess_models.py"
THREADS = (1, 2)
DEFAULT_OUT = {"development": "results/cpu-2core-assess-unseen-development",
               "held-aside": "results/cpu-2core-assess-unseen-held-aside"}


class BadModels(SystemExit):
    """A --models list this split cannot take: one line on stderr, exit code 2 (the message is the exception's
    text too)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.code = 2


class Refused(BadModels):
    """Scoring a held-aside model without --held-aside-once."""


def chosen(split: str, names: list[str] | None) -> list[str]:
    """The models of `split` to measure (all of them, or those named); a model of the other split is refused."""
    table = assess_models.models()
    if names:
        unknown = [n for n in names if n not in table]
        if unknown:
            raise BadModels(f"assess_unseen: unknown model(s) {', '.join(unknown)}; known: {', '.join(table)}")
        other = [n for n in names if table[n]["split"] != split]
        if other:
            if split == "development":
                raise Refused(f"assess_unseen: {', '.join(other)} {'is' if len(other) == 1 else 'are'} held aside: "
                              "scored only once, with --held-aside-once, never while the step-time model is tuned")
            raise BadModels(f"assess_unseen: --held-aside-once scores the held-aside models only, not "
                             f"{', '.join(other)}")
        return list(names)
    return [n for n, m in table.items() if m["split"] == split]


def reference_of(name: str | None, names: list[str]) -> list[str]:
    """The --reference model as a list (empty without one): a development model, measured beside the scored
    models in each side's run so that its own predicted and measured gap tell the session's lean; a held-aside
    model, an unknown one, or one of the scored models is refused."""
    if name is None:
        return []
    table = assess_models.models()
    if name not in table:
        raise BadModels(f"assess_unseen: unknown reference model {name}; known: {', '.join(table)}")
    if table[name]["split"] != "development":
        raise Refused(f"assess_unseen: the reference {name} is held aside; a reference is a development model")
    if name in names:
        raise BadModels(f"assess_unseen: {name} is scored; the reference is measured beside the scored models, "
                        "not one of them")
    return [name]


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return "load average: " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


def gapbench(*args: str) -> dict:
    """Run the real CLI; what it ran, how long, and the load before and after (the uptime lines too)."""
    up0 = uptime()
    return accuracy.gapbench(*args) | {"uptime_before": up0, "uptime_after": uptime()}


def rates_file(threads: int) -> str:
    return f"rates-{threads}t.json"


def models_file(threads: int) -> str:
    return f"models-{threads}t.json"


def shapes_file(threads: int) -> str:
    """The steps' GEMM shapes measured hot (the cache warm from the call before): a folder measured before the
    cold rows has them; the prediction takes a cold row over it at the same shape."""
    return f"shapes-{threads}t.json"


def cold_shapes_file(threads: int) -> str:
    """The steps' GEMM shapes measured cold (`gemm:listed --flush-cache`): a step streams its weights and
    activations through the cache, and its GEMMs run near the cold rows' rates (bf16's most of all)."""
    return f"shapes-cold-{threads}t.json"


def convs_file(threads: int) -> str:
    return f"convs-{threads}t.json"


def attentions_file(threads: int) -> str:
    return f"attentions-{threads}t.json"


def step_attentions(works) -> list[str]:
    """The attentions ('BHxSxD[xKV][c]', as attention:listed measures them) that carry SHAPE_SHARE of each traced
    step's attention FLOPs, most FLOPs first, each once over all the steps."""
    return _carrying(works, lambda it: it.attention_spec)


def grouped_file(threads: int) -> str:
    return f"grouped-{threads}t.json"


def step_grouped(works) -> list[str]:
    """The grouped GEMMs at their routed group sizes ('SIZESxNxK' | 'MxNxSIZES', as grouped-gemm:listed measures
    them) that carry SHAPE_SHARE of each traced step's grouped GEMM FLOPs, most FLOPs first, each once over all the
    steps."""
    return _carrying(works, lambda it: it.grouped_spec)


def pools_file(threads: int) -> str:
    """Pooling rows (elementwise --elementwise-ops …pool…) measured after a folder's rates, in a folder whose
    suite run predates them."""
    return f"pools-{threads}t.json"


def optims_file(threads: int) -> str:
    return f"optims-{threads}t.json"


def step_param_sets(works) -> list[str]:
    """The parameter sets of the traced steps' optimizers ('NUMEL*COUNT+…', as optimizer:listed measures them),
    each once over all the steps."""
    return list(dict.fromkeys(s.spec for w in works for s in w.optimizers))


UPDATE_OPS = ("lerp", "addcmul", "addcdiv")  # the optimizer's update operators, measured after the first runs


def updates_file(threads: int) -> str:
    return f"updates-{threads}t.json"


def updates_rows(out: Path, threads: int) -> list:
    """The optimizer-update rows of a later `elementwise:quick` run in the folder (only those: its other rows are
    the rates file's already), or none."""
    from gapbench import results

    path = out / updates_file(threads)
    if not path.exists():
        return []
    return [m for m in results.load(path).measurements if m.variant.get("op") in UPDATE_OPS]


SHAPE_SHARE = 0.99  # of a step's dense GEMM (convolution) FLOPs: the shapes that carry it are measured
MAX_SHAPES = 60


def step_shapes(works) -> list[str]:
    """The dense GEMM shapes ('MxNxK') that carry SHAPE_SHARE of each traced step's GEMM FLOPs, most FLOPs first,
    each once over all the steps."""
    return _carrying(works, lambda it: "x".join(map(str, it.shape))
                     if it.cls == "gemm" and not it.groups and it.shape else None)


def step_convs(works) -> list[str]:
    """The convolutions ('NxCINxCOUTxHWxKxG', as conv:listed measures them) that carry SHAPE_SHARE of each traced
    step's convolution FLOPs, most FLOPs first, then those that carry SHAPE_SHARE of its convolutions' bytes, each
    once over all the steps: a depthwise convolution moves as many bytes as a pointwise one for a fraction of its
    FLOPs and runs memory-bound (SwiftFormer's depthwise 3×3s: 0.5% of its convolution FLOPs, priced at a preset
    row of another width and side without their own)."""
    by_flops = _carrying(works, _conv_spec)
    by_bytes = _carrying(works, _conv_spec, weight=lambda it: it.bytes)
    return list(dict.fromkeys(by_flops + by_bytes))[:MAX_SHAPES]


def _conv_spec(it) -> str | None:
    return it.conv_spec


def _carrying(works, key_of, weight=lambda it: it.flops) -> list[str]:
    """The keys that carry SHAPE_SHARE of each work's weight (FLOPs unless given), the heaviest first."""
    out: dict[str, None] = {}
    for work in works:
        flops: dict[str, float] = {}
        for it in work.items:
            key = key_of(it)
            if key is not None:
                flops[key] = flops.get(key, 0.0) + weight(it) * it.count
        total, acc = sum(flops.values()), 0.0
        for key in sorted(flops, key=lambda k: -flops[k]):
            if total and acc >= SHAPE_SHARE * total:
                break
            out[key] = None
            acc += flops[key]
    return list(out)[:MAX_SHAPES]


def dtypes_at(threads: int, bf16: bool) -> list[str]:
    return ["fp32", "bf16"] if bf16 and threads == 1 else ["fp32"]


def measure(out: Path, names: list[str], runs: int, bf16: bool, reuse: bool, shapes: list[str],
            convs: list[str] = (), model_runs: int | None = None, param_sets: list[str] = (),
            attentions: list[str] = (), grouped: dict[str, list[str]] | None = None) -> list[dict]:
    """Per thread count: the rates (the `assess` suite, the steps' GEMM shapes, convolutions, attentions, grouped
    GEMMs at their group sizes (`grouped`: per dtype, the specs its steps call) and optimizer steps), then the models
    right after, so that a side's rates and its models are measured close together in time on a shared machine.
    The models in `model_runs` passes (default: `runs`): the measured gap is the yardstick, and its interval
    narrows with the passes."""
    log = []
    for t in THREADS:
        wl = [x for n in names for x in ("-w", f"{WORKLOAD}:{n}")]
        dtypes = ",".join(dtypes_at(t, bf16))
        plan = [(rates_file(t), ["--suite", "assess", "--label", label(t)])]
        if shapes:
            plan.append((cold_shapes_file(t), ["-w", "gemm:listed", "--gemm-shapes", ",".join(shapes), "--dtype",
                                               dtypes, "--flush-cache", "--label", label(t)]))
        if convs:
            plan.append((convs_file(t), ["-w", "conv:listed", "--conv-shapes", ",".join(convs), "--dtype", dtypes,
                                         "--label", label(t)]))
        if attentions:
            plan.append((attentions_file(t), ["-w", "attention:listed", "--attention-shapes", ",".join(attentions),
                                              "--dtype", dtypes, "--label", label(t)]))
        grouped_here = {d: specs for d, specs in (grouped or {}).items() if d in dtypes_at(t, bf16) and specs}
        if grouped_here:
            specs = list(dict.fromkeys(s for specs in grouped_here.values() for s in specs))
            plan.append((grouped_file(t), ["-w", "grouped-gemm:listed", "--grouped-shapes", ",".join(specs),
                                           "--dtype", ",".join(grouped_here), "--label", label(t)]))
        if param_sets:
            plan.append((optims_file(t), ["-w", "optimizer:listed", "--param-sets", ",".join(param_sets), "--dtype",
                                          dtypes, "--flush-cache", "--label", label(t)]))
        log += accuracy.run_passes(out, plan, runs, t, reuse, run=gapbench)
        models = [(models_file(t), ["--workload-file", WORKLOAD_FILE, *wl, "--dtype", dtypes, "--label", label(t)])]
        log += accuracy.run_passes(out, models, model_runs or runs, t, reuse, run=gapbench)
    return log


CLOCK_TOLERANCE = 0.10  # one host's measured clock varies by a few %; a VM moved to another host class, by half


def same_host(a: dict, b: dict) -> bool:
    """Whether two results files' host sections describe one machine as it ran: the facts a resumed run checks,
    the OS build, and the measured clock within CLOCK_TOLERANCE (a VM can keep its name and CPU string on a host
    half again as fast)."""
    from gapbench.run.resume import HOST_FACTS

    if any(a.get(k) != b.get(k) for k in (*HOST_FACTS, "os")):
        return False
    ca, cb = a.get("cpu_measured_mhz"), b.get("cpu_measured_mhz")
    return not (ca and cb) or abs(ca - cb) <= CLOCK_TOLERANCE * max(ca, cb)


def listed_files(out: Path, threads: int) -> list[str]:
    """The folder's rows at the steps' own shapes for a thread count, as far as measured."""
    return [f for f in (shapes_file(threads), cold_shapes_file(threads), convs_file(threads),
                        attentions_file(threads), grouped_file(threads), optims_file(threads), pools_file(threads))
            if (out / f).exists()]


def foreign_files(out: Path, threads: int) -> dict[str, str]:
    """The listed files measured on another host than the thread count's rates and model rows, each with what
    differs: the prediction leaves them out, as a rate of one machine says nothing exact of another's step."""
    from gapbench import results

    host = results.load(out / rates_file(threads)).host
    found = {}
    for f in listed_files(out, threads):
        there = results.load(out / f).host
        if not same_host(there, host):
            found[f] = (f"{there.get('os')}, {there.get('cpu_measured_mhz')} MHz measured; the rates': "
                        f"{host.get('os')}, {host.get('cpu_measured_mhz')} MHz")
    return found


def side(out: Path, threads: int, dtype: str):
    """One platform: a thread count's rates, its rows at the steps' own shapes measured on the same host, and its
    model rows, as one result set whose run id is the rates file's; named by the thread count and dtype."""
    from gapbench import results

    rates = results.load(out / rates_file(threads))
    models = results.load(out / models_file(threads))
    foreign = foreign_files(out, threads)
    listed = [m for f in listed_files(out, threads) if f not in foreign for m in results.load(out / f).measurements]
    updates = updates_rows(out, threads)
    merged = results.ResultSet(host=rates.host, device=rates.device, label=label(threads, dtype),
                               measurements=rates.measurements + listed + updates + models.measurements,
                               run_id=rates.run_id)
    merged.path = str(out / models_file(threads))
    return merged


def pairs(bf16: bool) -> list[tuple[str, tuple[int, str], tuple[int, str]]]:
    out = [("1 vs 2 threads, fp32", (1, "fp32"), (2, "fp32"))]
    if bf16:
        out.append(("fp32 vs bf16, 1 thread", (1, "fp32"), (1, "bf16")))
    return out


def traced(name: str, dtype: str):
    """The model's step traced through its --entry, on real tensors (as `gapbench assess --real`: the fake
    kernel of grouped_mm, Mixtral's experts, takes bf16 only), named as its measured row so that the prediction
    finds the row to check against."""
    from gapbench.assess.step import trace_entry

    _, work = trace_entry(assess_models.entry_spec(name, dtype), fake=False)
    work.target = f"{WORKLOAD}:{name}"
    work.variant = {"model": name, "dtype": dtype}
    work.dtype = dtype
    return work


def traced_all(names: list[str], bf16: bool) -> dict:
    import torch

    torch.set_num_threads(1)  # the trace runs each step once for real; its threads do not change what it records
    dtypes = ["fp32", "bf16"] if bf16 else ["fp32"]
    return {(n, d): traced(n, d) for n in names for d in dtypes}


def evaluate(out: Path, names: list[str], bf16: bool, works: dict, model_sigma: float | None = None,
             reference: str | None = None) -> list[dict]:
    """Predicted against measured for every pair and model; `model_sigma` as predict takes it (None: the
    calibrated model error drawn into the interval; 0: the rates' noise alone); `reference`: a model measured
    beside them (in `works` too), whose own error on each pair corrects theirs by the calibrated weight."""
    from gapbench.assess.rates import platform_rates
    from gapbench.assess.speed import predict

    rows = []
    for plabel, a, b in pairs(bf16):
        ra, rb = platform_rates(side(out, *a)), platform_rates(side(out, *b))
        ref, ref_note = reference_error(reference, works, ra, rb, a[1], b[1]) if reference else (None, "")
        for n in names:
            pred, missing = predict([(works[(n, a[1])], ra), (works[(n, b[1])], rb)], model_sigma=model_sigma,
                                    reference=ref)
            row = {"pair": plabel, "model": n, "split": assess_models.models()[n]["split"],
                   "calls": works[(n, a[1])].calls}
            if reference:
                row["reference"] = {"model": reference, "error": round(ref.error, 5) if ref else None,
                                    "weight": pred.reference_weight if pred else 0.0,
                                    "note": ref_note or (pred.reference_basis if pred else "")}
            measured_rows = [_row(ra, n, a[1]), _row(rb, n, b[1])]
            subnormal = _subnormal(*measured_rows)
            if pred is None or pred.measured is None or subnormal:
                row["skipped"] = subnormal or ("; ".join(missing) if pred is None else pred.measured_note)
                rows.append(row)
                continue
            rows.append(row | scored(pred, measured_rows))
    return rows


def reference_error(name: str, works: dict, ra, rb, dtype_a: str, dtype_b: str):
    """(Reference, "") of the reference model on this pair (speed.reference_of: its own error as the model prices
    it); (None, why) where it has none, or where one of its steps ran on subnormal gradients."""
    from gapbench.assess.speed import reference_of

    subnormal = _subnormal(_row(ra, name, dtype_a), _row(rb, name, dtype_b))
    if subnormal:
        return None, f"the reference {name} has no error on this pair: {subnormal}"
    ref = reference_of(name, [(works[(name, dtype_a)], ra), (works[(name, dtype_b)], rb)])
    return (ref, "") if ref.error is not None else (None, ref.note)


def scored(pred, measured_rows) -> dict:
    """A scored pair's fields: the predicted and measured gaps with their intervals, the error, the steps."""
    m = pred.measured
    mi = [m.measured_gap.lo, m.measured_gap.hi] if m.measured_gap.lo is not None else None
    return {
        "predicted_gap_pct": round(pred.gap_pct, 2),
        "predicted_interval_pct": [round(pred.lo, 2), round(pred.hi, 2)],
        "measured_gap_pct": round(m.measured_gap.pct, 2),
        "measured_interval_pct": [round(x, 2) for x in mi] if mi else None,
        "error_pp": round(m.error_pp, 2),
        "kind": pred.kind, "shift": pred.shift,
        "predicted_in_measured_interval": bool(mi and mi[0] <= pred.gap_pct <= mi[1]),
        "measured_in_predicted_interval": bool(pred.lo <= m.measured_gap.pct <= pred.hi),
        "predicted_step_ms": [round(x * 1e3, 2) for x in m.predicted_s],
        "measured_step_ms": [round(x * 1e3, 2) for x in m.measured_s],
        "step_error_pct": [round(x, 1) for x in m.step_error_pct],
        "classes_ms": {p.platform: {c.cls: round(c.seconds * 1e3, 2) for c in p.classes}
                       for p in (pred.source, pred.target)},
        # rates the prediction read that the host watch flagged (measured while others used the CPUs)
        "flagged_rates": [len(pred.source.flagged), len(pred.target.flagged)],
        "measured_rows_flagged": [bool(r.flagged) for r in measured_rows],
    }


def _subnormal(*ms) -> str:
    """Why a pair is not scored when a measured step ran on subnormal gradients ("" when none did): the rule
    `compare` withholds a verdict by (Measurement.subnormal)."""
    return next((m.subnormal for m in ms if m is not None and m.subnormal), "")


def _row(pr, name: str, dtype: str):
    return next((m for m in pr.models if m.workload == WORKLOAD and m.variant == {"model": name, "dtype": dtype}),
                None)


def summary(rows: list[dict]) -> dict:
    scored = [r for r in rows if "error_pp" in r]
    errs = [abs(r["error_pp"]) for r in scored]
    if not errs:
        return {"pairs": 0}
    return {"pairs": len(errs), "mean_abs_error_pp": round(statistics.fmean(errs), 2),
            "median_abs_error_pp": round(statistics.median(errs), 2), "max_abs_error_pp": round(max(errs), 2),
            "within_10pp": sum(e <= 10 for e in errs),
            # the yardstick: measured gaps whose 95% interval lies within ±5 pp of the measured gap
            "measured_within_5pp": sum(_tight(r) for r in scored),
            "predicted_in_measured_interval": sum(r["predicted_in_measured_interval"] for r in scored),
            "measured_in_predicted_interval": sum(r["measured_in_predicted_interval"] for r in scored)}


def _tight(row: dict, pp: float = 5.0) -> bool:
    mi = row.get("measured_interval_pct")
    return bool(mi) and row["measured_gap_pct"] - mi[0] <= pp and mi[1] - row["measured_gap_pct"] <= pp


def _pct(x: float) -> str:
    return f"{x:+.1f}%".replace("-", "−")


def markdown(rows: list[dict], summ: dict, log: list[dict], command: str, loads: list[str],
             left_out: dict[str, str] | None = None) -> str:
    lines = ["| pair | model | predicted gap [95%] | measured gap [95%] | error | measured in predicted 95%? | "
             "predicted in measured 95%? | predicted / measured step (ms) |", "|---|---|---:|---:|---:|---|---|---|"]
    for r in rows:
        if "error_pp" not in r:
            lines.append(f"| {r['pair']} | {r['model']} | — | — | — | — | — | skipped: {r['skipped']} |")
            continue
        pi, mi = r["predicted_interval_pct"], r["measured_interval_pct"]
        lines.append(
            f"| {r['pair']} | {r['model']} | {_pct(r['predicted_gap_pct'])} [{_pct(pi[0])}, {_pct(pi[1])}] | "
            f"{_pct(r['measured_gap_pct'])}" + (f" [{_pct(mi[0])}, {_pct(mi[1])}]" if mi else "") +
            f" | {r['error_pp']:+.1f} pp | ".replace("-", "−") + ("in" if r["measured_in_predicted_interval"]
                                                                    else "out") + " | " +
            ("in" if r["predicted_in_measured_interval"] else "out") + " | " + " → ".join(
                f"{p:g} / {m:g}" for p, m in zip(r["predicted_step_ms"], r["measured_step_ms"], strict=True)) + " |")
    lines += ["", f"Pairs: {summ.get('pairs', 0)}; mean |error| {summ.get('mean_abs_error_pp')} pp, median "
                  f"{summ.get('median_abs_error_pp')} pp, max {summ.get('max_abs_error_pp')} pp; within 10 pp: "
                  f"{summ.get('within_10pp')}; the measured gap inside the predicted 95% interval: "
                  f"{summ.get('measured_in_predicted_interval')}; the predicted gap inside the measured 95% interval: "
                  f"{summ.get('predicted_in_measured_interval')}; measured gaps known within ±5 pp (95%): "
                  f"{summ.get('measured_within_5pp')}."]
    flags = [f"{r['pair']} {r['model']}: {r['flagged_rates'][0]} / {r['flagged_rates'][1]} rates, model rows "
             + " / ".join("flagged" if f else "not flagged" for f in r["measured_rows_flagged"])
             for r in rows if "flagged_rates" in r]
    shifted = {r["kind"]: r["shift"] for r in rows if r.get("shift")}
    if shifted:
        lines += ["", "Calibrated shifts taken off the predicted gaps (the median of the model's log errors over development "
                      "sessions of the kind): " + "; ".join(f"{k}: {v:+.4f}" for k, v in shifted.items()) + "."]
    refs = {r["pair"]: r["reference"] for r in rows if r.get("reference")}
    if refs:
        lines += ["", "Reference, measured beside the models in the same runs (its own log error on the pair × the "
                      "calibrated weight of the pair's kind, taken off each prediction's log gap): " + "; ".join(
                          f"{p}: {v['model']} " + (f"{v['error']:+.4f} × {v['weight']:.2f}" if v["error"] is not None
                                                   else v["note"]) for p, v in refs.items()) + "."]
    if flags:
        lines += ["", "Host watch (source / target; a flagged measurement ran while other processes used the "
                      "CPUs): " + "; ".join(flags) + "."]
    if left_out:
        lines += ["", "Left out, measured on another host than the rates and model rows: " + "; ".join(
            f"{f} ({why})" for f, why in left_out.items()) + "."]
    lines += ["", f"Command: `{command}`", ""]
    lines += ["Load (`uptime`, 2 cores):", ""] + [f"- {u}" for u in loads]
    if log:
        lines += ["", "Runs (load average before → after):", ""]
        lines += [f"- `{e['command']}`: {e['wall_s']} s, load {e['load_before']} → {e['load_after']}" for e in log]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="folder for the runs; OUT-accuracy.json and OUT.md (default: by split)")
    ap.add_argument("--models", nargs="+", metavar="NAME", help="some of the split's models (default: all of them)")
    ap.add_argument("--runs", type=accuracy.passes, default=2, help="interleaved passes per gapbench run (--runs)")
    ap.add_argument("--model-runs", type=accuracy.passes, help="interleaved passes of the models' own rows (default: --runs); "
                    "the measured gaps' intervals narrow with them")
    ap.add_argument("--bf16", action="store_true", help="add the fp32 vs bf16 pair at 1 thread")
    ap.add_argument("--reuse", action="store_true", help="keep runs already in --out; measure only what is missing")
    ap.add_argument("--no-listed", action="store_true", help="do not measure the steps' own GEMM shapes, "
                    "convolutions, attentions, grouped GEMMs and optimizer steps (gemm:listed, conv:listed, "
                    "attention:listed, grouped-gemm:listed, optimizer:listed): the prediction reads the assess "
                    "suite's rows only")
    ap.add_argument("--measure-only", action="store_true",
                    help="measure what is missing in --out and stop before predicting: the score comes later, with "
                         "--reuse, once the step-time model is final")
    ap.add_argument("--reference", metavar="NAME",
                    help="a development model measured beside the scored ones on each side; its own error on the "
                         "pair corrects theirs by the calibrated weight of the pair's kind")
    ap.add_argument("--held-aside-once", action="store_true",
                    help="score the held-aside models (once, after the work on the step-time model), not the "
                         "development ones")
    args = ap.parse_args(argv)
    split = "held-aside" if args.held_aside_once else "development"
    names = chosen(split, args.models)
    reference = reference_of(args.reference, names)
    out = Path(args.out or DEFAULT_OUT[split])
    out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/assess_unseen.py " + " ".join(argv if argv is not None else sys.argv[1:])
    loads = [f"start: {uptime()}"]
    log_file = out / "runs.json"
    log = json.loads(log_file.read_text()) if args.reuse and log_file.exists() else []
    works = traced_all(names + reference, args.bf16)
    shapes = [] if args.no_listed else step_shapes(works.values())
    convs = [] if args.no_listed else step_convs(works.values())
    param_sets = [] if args.no_listed else step_param_sets(works.values())
    attentions = [] if args.no_listed else step_attentions(works.values())
    grouped = {} if args.no_listed else {d: step_grouped([w for (_, wd), w in works.items() if wd == d])
                                         for d in dict.fromkeys(wd for _, wd in works)}
    log += measure(out, names + reference, args.runs, args.bf16, args.reuse, shapes, convs, args.model_runs, param_sets,
                   attentions, grouped)
    log_file.write_text(json.dumps(log, indent=1) + "\n", encoding="utf-8")
    if args.measure_only:
        print(f"measured into {out}; nothing predicted or scored", file=sys.stderr)
        return 0
    rows = evaluate(out, names, args.bf16, works, reference=args.reference)
    loads.append(f"end: {uptime()}")
    summ = summary(rows)
    left_out = {f"{t}t/{f}": why for t in (1, 2) for f, why in foreign_files(out, t).items()}
    data = {"command": command, "split": split, "models": names, "reference": args.reference, "summary": summ,
            "pairs": rows, "runs": log,
            "load": loads, "left_out": left_out}
    Path(f"{out}-accuracy.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    md = markdown(rows, summ, log, command, loads, left_out)
    Path(f"{out}.md").write_text(md, encoding="utf-8")
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BadModels as e:
        print(e.args[0], file=sys.stderr)
        sys.exit(e.code)
