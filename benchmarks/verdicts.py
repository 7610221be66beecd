"""How far can a gap table's verdicts be trusted? Same-machine runs compared pairwise, where nothing changed:
every gap called significant between them is a false alarm. And a real difference (1 thread against 2 on
fp32 GEMM, about 2x) must still be called significant in every pairing.

    python benchmarks/verdicts.py --out results/cpu-epyc-2core-verdicts.md        (about 12 minutes on 2 cores)

Runs `gapbench run --device cpu --suite quick --threads 1 --runs 3` N times (and the same with --threads 2 N
times), then compares every pair of the 1-thread runs and every (1-thread, 2-thread) pair three ways:
  - runs: the files as they are, 3 runs a side: Welch's t interval on the log values of the runs, widened by
    the drift between sessions (compare's default for one file a side);
  - runs without the drift: the same, Welch's interval on the runs alone (what the runs of one file can see);
  - single run, run-to-run spread: only the first run of each file, judged with the device class's spread;
  - single run, within-run CIs (what gapbench did before runs): only the first run, 'significant' when the two
    95% CIs of the repeats do not overlap.
Rows the host watch flagged are counted apart (no verdict is given on them). Run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from gapbench.compare import compare
from gapbench.compare.gaps import RUN_TO_RUN_SPREAD
from gapbench.results import ResultSet, load
from gapbench.stats import Stats, compare_runs


def run(out: Path, threads: int, runs: int, budget: float) -> None:
    cmd = [sys.executable, "-m", "gapbench", "run", "--device", "cpu", "--suite", "quick", "--threads", str(threads),
           "--runs", str(runs), "--variant-budget", str(budget), "--no-history", "-q", "-o", str(out)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=dict(os.environ, OMP_NUM_THREADS=str(threads)))


def first_run(rs: ResultSet) -> ResultSet:
    """The same file as if only its first run had been made (value and repeats of run 1)."""
    ms = []
    for m in rs.measurements:
        if m.ok and m.runs and m.metrics.get("run_stats") and m.metrics["run_stats"][0]:
            s = Stats.read(m.metrics["run_stats"][0])
            watch = (m.host_watch or {}).get("runs", [None])[0]
            ms.append(m.replace(value=m.runs[0], runs=None, stats=s, host_watch=watch))
        else:
            ms.append(m)
    first = rs.model_copy(update={"measurements": ms, "run_id": rs.run_id + "-first"})
    first.path = rs.path
    return first


def within_run_verdict(a, b) -> bool | None:
    """The old verdict: significant when the two repeats' 95% CIs do not overlap."""
    sa, sb = a.measurement.stats, b.measurement.stats
    if sa is None or sb is None or sa.n < 2 or sb.n < 2:
        return None
    return not (sa.ci95[0] <= sb.ci95[1] and sb.ci95[0] <= sa.ci95[1])


def tally(pairs, mode: str, rows_filter=None) -> dict:
    called = total = flagged = 0
    for x, y in pairs:
        comp = compare([x, y], history=False)
        for r in comp.rows:
            if rows_filter and not rows_filter(r):
                continue
            g = r.gaps.get(1)
            if g is None or g.pct is None:
                continue
            if mode == "within-run":
                verdict = within_run_verdict(r.cells[1], r.cells[0])
            elif g.flagged:
                flagged += 1
                continue
            elif mode == "runs, no drift":  # Welch's interval on the runs alone, as if one file were every session
                rg = compare_runs(r.cells[1].measurement.run_values, r.cells[0].measurement.run_values, drift=0.0)
                verdict = rg.significant if rg is not None else None
            else:
                verdict = g.significant
            if verdict is None:
                continue
            total += 1
            called += bool(verdict)
    return {"significant": called, "judged": total, "flagged": flagged,
            "share": called / total if total else float("nan")}


def spread(files: list[ResultSet]) -> list[float]:
    """Per row: the standard deviation of the log values of every run of every file."""
    by_row: dict[str, list[float]] = {}
    for rs in files:
        for m in rs.measurements:
            if m.ok:
                by_row.setdefault(m.key_without_preset, []).extend(math.log(v) for v in m.run_values if v > 0)
    return [statistics.stdev(v) for v in by_row.values() if len(v) >= 3]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=5, help="runs of gapbench per thread count (default 5)")
    ap.add_argument("--runs", type=int, default=3, help="--runs of each (default 3)")
    ap.add_argument("--variant-budget", type=float, default=3.0)
    ap.add_argument("--keep", help="folder to keep the results files in")
    ap.add_argument("--out", help="write the report (Markdown) here")
    args = ap.parse_args(argv)
    folder = Path(args.keep or tempfile.mkdtemp(prefix="gapbench-verdicts-"))
    folder.mkdir(parents=True, exist_ok=True)
    one, two = [], []
    for i in range(args.files):  # 1 thread and 2 threads interleaved: a drift of the machine hits both alike
        for threads, into in ((1, one), (2, two)):
            path = folder / f"t{threads}-{i + 1}.json"
            if not path.exists():
                run(path, threads, args.runs, args.variant_budget)
            into.append(load(path))
            print(f"{path.name} done", file=sys.stderr, flush=True)
    same = list(itertools.combinations(one, 2))
    real = [(a, b) for a in one for b in two]
    gemm_fp32 = lambda r: r.workload == "gemm" and r.variant.get("dtype") == "fp32"  # noqa: E731
    results = {
        f"same machine, runs ({args.runs} a side)": tally(same, "runs"),
        f"same machine, runs ({args.runs} a side), without the drift between sessions": tally(same, "runs, no drift"),
        "same machine, single run, run-to-run spread": tally([(first_run(a), first_run(b)) for a, b in same],
                                                              "single"),
        "same machine, single run, within-run CIs": tally([(first_run(a), first_run(b)) for a, b in same],
                                                           "within-run"),
        "1 vs 2 threads, fp32 GEMM rows, runs": tally(real, "runs", gemm_fp32),
        "1 vs 2 threads, fp32 GEMM rows, single run": tally([(first_run(a), first_run(b)) for a, b in real],
                                                             "single", gemm_fp32),
    }
    spreads = spread(one)
    lines = ["# Same-machine verdicts on a 2-core CPU", "",
             f"`python benchmarks/verdicts.py --files {args.files} --runs {args.runs} --variant-budget "
             f"{args.variant_budget}`: {args.files} runs of `gapbench run --device cpu --suite quick --threads 1 "
             f"--runs {args.runs}` and {args.files} with `--threads 2`, interleaved.", "",
             "| comparison | significant | judged | share | flagged (no verdict) |", "|---|---:|---:|---:|---:|"]
    for name, t in results.items():
        lines.append(f"| {name} | {t['significant']} | {t['judged']} | {t['share']:.1%} | {t['flagged']} |")
    if spreads:
        lines += ["", f"Run-to-run spread of the 1-thread rows (standard deviation of log values over "
                      f"{args.files * args.runs} runs): median {statistics.median(spreads):.3f}, max "
                      f"{max(spreads):.3f} over {len(spreads)} rows; gapbench assumes "
                      f"{RUN_TO_RUN_SPREAD['cpu']:.2f} for a single CPU run."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    print(json.dumps(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
