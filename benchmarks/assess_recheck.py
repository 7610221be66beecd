"""Predict a finished accuracy run's pairs again with one workload's rows measured anew: what a change to a
workload (new rows, a new shape) does to the predictions, without measuring every rate and model again.

    python benchmarks/assess_recheck.py RUN_DIR --rows conv=ONE_THREAD.json,TWO_THREADS.json --models convnext
    python benchmarks/assess_recheck.py RUN_DIR --add --rows conv=LISTED_1T.json,LISTED_2T.json --models mobilenet

RUN_DIR is a folder `benchmarks/assess_unseen.py` wrote (its rates, GEMM shapes and model rows per thread count).
For each thread count the named workload's rows of the rates file are dropped and the rows of the given file (a
`gapbench run -w WORKLOAD:PRESET --threads N` of that thread count) put in their place; the measured model rows stay
the run's own. With --add the run's rows of the workload are kept and the new ones put beside them (conv:listed
rows at a step's own convolutions beside the assess suite's). Each pair is predicted twice, with the run's rows and with the new ones, and printed side by side.
Development models only: a held-aside model is refused here as in assess_unseen.py.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from benchmarks import assess_unseen as unseen  # noqa: E402


def sides(run: Path, threads: int, dtype: str, workload: str | None, new: dict[int, Path], add: bool = False):
    from gapbench import results
    from gapbench.assess.rates import platform_rates

    merged = unseen.side(run, threads, dtype)
    if workload is not None:
        rows = results.load(new[threads]).measurements
        merged.measurements = [m for m in merged.measurements if add or m.workload != workload] + rows
    return platform_rates(merged)


def recheck(run: Path, workload: str, new: dict[int, Path], names: list[str], bf16: bool,
            add: bool = False) -> list[dict]:
    from gapbench.assess.speed import predict

    works = unseen.traced_all(names, bf16)
    out = []
    for plabel, a, b in unseen.pairs(bf16):
        for n in names:
            row = {"pair": plabel, "model": n}
            for key, wl in (("run", None), ("new", workload)):
                pred, missing = predict([(works[(n, a[1])], sides(run, *a, wl, new, add)),
                                         (works[(n, b[1])], sides(run, *b, wl, new, add))])
                if pred is None or pred.measured is None:
                    row[key] = {"skipped": "; ".join(missing) if pred is None else pred.measured_note}
                    continue
                m = pred.measured
                row[key] = {"predicted_gap_pct": round(pred.gap_pct, 1),
                            "interval_pct": [round(pred.lo, 1), round(pred.hi, 1)],
                            "measured_gap_pct": round(m.measured_gap.pct, 1), "error_pp": round(m.error_pp, 1),
                            "predicted_step_ms": [round(x * 1e3) for x in m.predicted_s],
                            "measured_step_ms": [round(x * 1e3) for x in m.measured_s]}
            out.append(row)
    return out


def _cell(r: dict) -> str:
    if "skipped" in r:
        return "skipped: " + r["skipped"]
    return (f"{r['predicted_gap_pct']:+.1f}% [{r['interval_pct'][0]:+.1f}, {r['interval_pct'][1]:+.1f}], "
            f"error {r['error_pp']:+.1f} pp, steps {' → '.join(map(str, r['predicted_step_ms']))} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("run", type=Path, help="a folder assess_unseen.py wrote")
    ap.add_argument("--rows", required=True, metavar="WORKLOAD=FILE_1T,FILE_2T",
                    help="the workload whose rows are replaced, and the new runs for 1 and 2 threads")
    ap.add_argument("--models", nargs="+", required=True, metavar="NAME")
    ap.add_argument("--bf16", action="store_true", help="add the fp32 vs bf16 pair at 1 thread")
    ap.add_argument("--add", action="store_true", help="keep the run's rows of the workload and add the new ones "
                    "beside them (instead of replacing them)")
    args = ap.parse_args(argv)
    workload, _, files = args.rows.partition("=")
    paths = [Path(f) for f in files.split(",")]
    if not workload or len(paths) != len(unseen.THREADS):
        ap.error("--rows takes WORKLOAD=FILE_1T,FILE_2T")
    missing = [str(p) for p in [args.run, *paths] if not p.exists()]
    if missing:
        print(f"assess_recheck: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    names = unseen.chosen("development", args.models)
    rows = recheck(args.run, workload, dict(zip(unseen.THREADS, paths, strict=True)), names, args.bf16, args.add)
    print(f"measured gap and predictions of {args.run}, with its own {workload} rows and with "
          f"{'those and ' if args.add else ''}{', '.join(map(str, paths))}")
    for r in rows:
        measured = r["run"].get("measured_gap_pct")
        print(f"{r['pair']}, {r['model']}: measured {measured:+.1f}%" if measured is not None
              else f"{r['pair']}, {r['model']}:")
        print(f"  its own rows: {_cell(r['run'])}")
        print(f"  new rows:     {_cell(r['new'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
