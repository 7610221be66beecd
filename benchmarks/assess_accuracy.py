"""Predicted against measured: how far gapbench assess's step-time model is from the gaps one machine measures.

The platform pairs one CPU can make: 1 thread against 2 threads (at fp32 and at bf16), and fp32 against bf16 (at
1 and at 2 threads). For each thread count one `gapbench run` measures the `assess` suite (the rates the prediction
reads: GEMM per dtype, bandwidth, per-operator cost) and, right after, one per dtype the model workloads, each in
--runs interleaved passes (llm-infer in a run of its own at the batch its trace stands for, its e2e_ms row the
time of one generation). Then,
for every pair and workload, it traces the workload's measured iteration at each side's dtype, predicts the gap
from the two sides' rates (gapbench.assess.speed.predict, the code `gapbench assess` uses), and sets it against
the gap of the two measured rows. The error is predicted − measured, in percentage points.

    python benchmarks/assess_accuracy.py --out results/cpu-epyc-2core-assess-accuracy
    python benchmarks/assess_accuracy.py --out DIR --reuse            # predict again from the files in DIR

Writes DIR/*.json (the runs), DIR.json (every pair) and DIR.md (the table). A workload that is not installed, or
that has no build_iteration (its trace would not be the iteration it measures), is skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gapbench import results, workloads  # noqa: E402
from gapbench.assess.rates import platform_rates  # noqa: E402
from gapbench.assess.speed import predict  # noqa: E402
from gapbench.assess.step import trace_like  # noqa: E402
from gapbench.workloads.inference.llm_infer import TRACE_BATCH  # noqa: E402

WORKLOADS = ("llm-train:tiny", "bert-finetune:tiny", "diffusion-infer:tiny", "llm-infer:tiny")
THREADS = (1, 2)
DTYPES = ("fp32", "bf16")
INFER = "llm-infer"  # measured at the one point its trace stands for (llm_infer.TRACE_BATCH), its e2e_ms row


def gapbench(*args: str) -> dict:
    """Run the real CLI; returns what the runner needs to record (the command, the wall time, the load)."""
    cmd = [sys.executable, "-m", "gapbench", *args]
    load0, t0 = os.getloadavg()[0], time.time()
    p = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True,
                       text=True)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return {"command": "gapbench " + " ".join(args), "wall_s": round(time.time() - t0, 1),
            "load_before": round(load0, 2), "load_after": round(os.getloadavg()[0], 2)}


def usable(specs: list[str]) -> tuple[list[str], list[dict]]:
    """The workloads that can be measured and traced as measured here, and the others with why not."""
    keep, skipped = [], []
    for spec in specs:
        name = spec.split(":")[0]
        if name not in workloads.names():
            skipped.append({"workload": spec, "reason": f"the {name} workload is not in this gapbench"})
        elif not callable(getattr(workloads.get(name), "build_iteration", None)):
            skipped.append({"workload": spec, "reason": f"{name} has no build_iteration: its trace would not be "
                                                        "the iteration it measures"})
        else:
            keep.append(spec)
    return keep, skipped


def measure(out: Path, specs: list[str], runs: int, reuse: bool) -> list[dict]:
    """Per thread count: the rates (the `assess` suite, every dtype, as a user runs it on a stack), then the model
    workloads at each dtype right after, each in --runs interleaved passes, so that the rates and the models of a
    side are measured close together in time on a shared machine."""
    log = []
    for t in THREADS:
        plan = [(rates_file(t), ["--suite", "assess", "--label", label(t)])]
        plan += [(name, [*args, "--dtype", d, "--label", label(t, d)]) for d in DTYPES
                 for name, args in model_runs(specs, t, d)]
        log += run_passes(out, plan, runs, t, reuse)
    return log


def run_passes(out: Path, plan: list[tuple[str, list[str]]], runs: int, threads: int, reuse: bool,
               run=None) -> list[dict]:
    """Each (file name, run arguments) of `plan` measured on the CPU at `threads` threads in --runs passes, into
    `out` (one already there is kept with `reuse`); what each command was, through `run` (default: gapbench)."""
    run = run or gapbench
    log = []
    for name, args in plan:
        path = out / name
        if reuse and path.exists():
            continue
        print(f"measuring {name} …", file=sys.stderr, flush=True)
        entry = run("run", "--device", "cpu", "--no-history", "--runs", str(runs), "--threads", str(threads),
                    *args, "-o", str(path))
        log.append(entry | {"file": name})
    return log


def passes(value: str) -> int:
    """A number of interleaved passes, refused before anything is measured unless it is a whole number of 1 or more."""
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of passes") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} passes: at least 1")
    return n


def label(threads: int, dtype: str = "") -> str:
    return f"{threads} thread{'s' * (threads > 1)}" + (f" {dtype}" if dtype else "")


def rates_file(threads: int) -> str:
    return f"rates-{threads}t.json"


def models_file(threads: int, dtype: str) -> str:
    return f"models-{threads}t-{dtype}.json"


def infer_file(threads: int, dtype: str) -> str:
    return f"infer-{threads}t-{dtype}.json"


def model_runs(specs: list[str], threads: int, dtype: str) -> list[tuple[str, list[str]]]:
    """(file, run arguments): the training and diffusion workloads in one run; llm-infer in its own, restricted to
    the point its trace stands for (--batch-size applies to every workload of a run, and its default sweep of
    batch 1…256 is minutes)."""
    wl = [x for s in specs if not s.startswith(INFER) for x in ("-w", s)]
    out = [(models_file(threads, dtype), wl)] if wl else []
    out += [(infer_file(threads, dtype), ["-w", s, "--batch-size", str(TRACE_BATCH)]) for s in specs
            if s.startswith(INFER)]
    return out


def side(out: Path, threads: int, dtype: str) -> results.ResultSet:
    """One platform: a thread count's rates and the model rows measured at a dtype, as one result set whose run
    id is the rates file's (two sides that read the same rates share their draws)."""
    rates = results.load(out / rates_file(threads))
    models = [results.load(out / name) for name in (models_file(threads, dtype), infer_file(threads, dtype))
              if (out / name).exists()]
    merged = results.ResultSet(host=rates.host, device=rates.device, label=label(threads, dtype),
                               measurements=rates.measurements + [m for rs in models for m in rs.measurements],
                               run_id=rates.run_id)
    merged.path = str(out / models_file(threads, dtype))
    return merged


def pairs() -> list[tuple[str, tuple[int, str], tuple[int, str]]]:
    out = [(f"1 vs 2 threads, {d}", (1, d), (2, d)) for d in DTYPES]
    out += [(f"fp32 vs bf16, {t} thread{'s' * (t > 1)}", (t, "fp32"), (t, "bf16")) for t in THREADS]
    return out


def evaluate(out: Path, specs: list[str], model_sigma: float | None = None) -> list[dict]:
    """Predicted against measured for every pair; `model_sigma` as predict takes it (None: the calibrated model
    error drawn into the interval; 0: the rates' noise alone)."""
    traces = {(s, d): trace_like(s, {"dtype": d})[1] for s in specs for d in DTYPES}
    rows = []
    for label, a, b in pairs():
        ra, rb = platform_rates(side(out, *a)), platform_rates(side(out, *b))
        for spec in specs:
            pred, missing = predict([(traces[(spec, a[1])], ra), (traces[(spec, b[1])], rb)],
                                    model_sigma=model_sigma)
            row = {"pair": label, "workload": spec}
            if pred is None or pred.measured is None:
                row["skipped"] = "; ".join(missing) if pred is None else pred.measured_note
                rows.append(row)
                continue
            m = pred.measured
            row.update({
                "predicted_gap_pct": round(pred.gap_pct, 2), "predicted_interval_pct": [round(pred.lo, 2),
                                                                                         round(pred.hi, 2)],
                "measured_gap_pct": round(m.measured_gap.pct, 2),
                "measured_interval_pct": [round(m.measured_gap.lo, 2), round(m.measured_gap.hi, 2)]
                if m.measured_gap.lo is not None else None,
                "error_pp": round(m.error_pp, 2),
                "kind": pred.kind, "shift": pred.shift,
                "predicted_step_ms": [round(x * 1e3, 3) for x in m.predicted_s],
                "measured_step_ms": [round(x * 1e3, 3) for x in m.measured_s],
                "step_error_pct": [round(x, 1) for x in m.step_error_pct],
                "classes_ms": {p.platform: {c.cls: round(c.seconds * 1e3, 3) for c in p.classes}
                               for p in (pred.source, pred.target)},
            })
            rows.append(row)
    return rows


def summary(rows: list[dict]) -> dict:
    errs = [abs(r["error_pp"]) for r in rows if "error_pp" in r]
    if not errs:
        return {"pairs": 0}
    return {"pairs": len(errs), "mean_abs_error_pp": round(statistics.fmean(errs), 2),
            "median_abs_error_pp": round(statistics.median(errs), 2), "max_abs_error_pp": round(max(errs), 2),
            "within_10pp": sum(e <= 10 for e in errs)}


def markdown(rows: list[dict], skipped: list[dict], summ: dict, log: list[dict]) -> str:
    def pct(x):
        return f"{x:+.1f}%".replace("-", "−")

    lines = ["| pair | workload | predicted gap [95%] | measured gap [95%] | error | predicted / measured step (ms) |",
             "|---|---|---:|---:|---:|---|"]
    for r in rows:
        if "error_pp" not in r:
            lines.append(f"| {r['pair']} | {r['workload']} | — | — | — | skipped: {r['skipped']} |")
            continue
        pi, mi = r["predicted_interval_pct"], r["measured_interval_pct"]
        lines.append(
            f"| {r['pair']} | {r['workload']} | {pct(r['predicted_gap_pct'])} [{pct(pi[0])}, {pct(pi[1])}] | "
            f"{pct(r['measured_gap_pct'])}" + (f" [{pct(mi[0])}, {pct(mi[1])}]" if mi else "") +
            f" | {r['error_pp']:+.1f} pp | ".replace("-", "−") + " → ".join(
                f"{p:g} / {m:g}" for p, m in zip(r["predicted_step_ms"], r["measured_step_ms"], strict=True)) + " |")
    lines += ["", f"Pairs: {summ.get('pairs', 0)}; mean |error| {summ.get('mean_abs_error_pp')} pp, median "
                  f"{summ.get('median_abs_error_pp')} pp, max {summ.get('max_abs_error_pp')} pp; within 10 pp: "
                  f"{summ.get('within_10pp')}."]
    lines += [f"Skipped {s['workload']}: {s['reason']}." for s in skipped]
    if log:
        lines += ["", "Runs (load average before → after, on 2 cores):", ""]
        lines += [f"- `{e['command']}`: {e['wall_s']} s, load {e['load_before']} → {e['load_after']}" for e in log]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="results/cpu-assess-accuracy", help="folder for the runs; OUT.json and OUT.md")
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS))
    ap.add_argument("--runs", type=passes, default=2, help="interleaved passes per gapbench run (--runs)")
    ap.add_argument("--reuse", action="store_true", help="keep runs already in --out; measure only what is missing")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    specs, skipped = usable(args.workloads)
    for s in skipped:
        print(f"skipping {s['workload']}: {s['reason']}", file=sys.stderr)
    log_file = out / "runs.json"
    log = json.loads(log_file.read_text()) if args.reuse and log_file.exists() else []
    log += measure(out, specs, args.runs, args.reuse)
    log_file.write_text(json.dumps(log, indent=1) + "\n", encoding="utf-8")
    rows = evaluate(out, specs)
    summ = summary(rows)
    data = {"command": "python benchmarks/assess_accuracy.py " + " ".join(sys.argv[1:]), "summary": summ,
            "pairs": rows, "skipped": skipped, "runs": log}
    Path(f"{out}.json").write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    md = markdown(rows, skipped, summ, log)
    Path(f"{out}.md").write_text(md, encoding="utf-8")
    sys.stdout.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
