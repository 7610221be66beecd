"""Calibrate the step-time model's own error (gapbench.assess.calibration) on the development models' runs.

Predicts every measured pair again with the code as it is, from the run folders that the accuracy benchmarks left
(nothing is measured here), with the rates' noise alone (model σ = 0), and finds the smallest model σ whose
intervals hold the stated level of the measured gaps; writes the pairs and σ to
src/gapbench/assess/calibration.toml with --write.

    python benchmarks/assess_calibrate.py --shipped results/cpu-epyc-2core-assess-accuracy \\
        --unseen results/cpu-xeon-2core-assess-unseen-development --write

--shipped: folders of benchmarks/assess_accuracy.py (gapbench's own tiny models); --unseen: folders of
benchmarks/assess_unseen.py on development models (the split as benchmarks/data/assess_models.toml has it now). A
folder holding a model held aside now is refused: those models score the calibrated model once, they never tune
it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from gapbench.assess.calibration import (  # noqa: E402
    CALIBRATION_FILE,
    Pair,
    Shift,
    Weight,
    calibrate,
    checked_weights,
    covered,
    leanings,
    log_error,
    shifts,
    sigma_of_interval,
    unshifted,
)
from gapbench.errors import GapbenchError  # noqa: E402

LEVEL = 0.95


class Refused(Exception):
    """Input the calibration cannot take: said in one line, exit 2."""


def _pairs(rows: list[dict], source: str, key: str) -> list[tuple[Pair, dict]]:
    out = []
    for r in rows:
        if "error_pp" not in r:
            continue
        lo, hi = r["predicted_interval_pct"]
        p = Pair(f"{source}: {r[key]}, {r['pair']}", log_error(r["predicted_gap_pct"], r["measured_gap_pct"]),
                 sigma_of_interval(lo, hi, LEVEL), r.get("kind", ""), source)
        out.append((p, r))
    return out


def shipped_pairs(folder: Path) -> list[tuple[Pair, dict]]:
    from benchmarks import assess_accuracy

    specs, _ = assess_accuracy.usable(list(assess_accuracy.WORKLOADS))
    return _pairs(assess_accuracy.evaluate(folder, specs, model_sigma=0.0), folder.name, "workload")


def unseen_pairs(folder: Path) -> list[tuple[Pair, dict]]:
    from benchmarks import assess_models, assess_unseen

    scores = Path(f"{folder}-accuracy.json")
    if not scores.exists():
        raise Refused(f"{scores} is missing (run benchmarks/assess_unseen.py --out {folder})")
    data = json.loads(scores.read_text())
    # the models' split as it stands now: a round's held-aside models, once scored, are development models of the
    # next round (benchmarks/data/assess_models.toml); a model held aside now never calibrates
    split = {n: assess_models.models()[n]["split"] for n in data["models"]}
    held = sorted(n for n, s in split.items() if s != "development")
    if held:
        raise Refused(f"{folder} holds {', '.join(held)}, held aside: only development models "
                         "calibrate the model")
    names = [n for n in data["models"] if split[n] == "development"]
    bf16 = any("bf16" in r["pair"] for r in data["pairs"])
    works = assess_unseen.traced_all(names, bf16)
    return _pairs(assess_unseen.evaluate(folder, names, bf16, works, model_sigma=0.0), folder.name, "model")


def _commit() -> str:
    p = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True)
    return p.stdout.strip() if p.returncode == 0 else "unknown"


def toml_text(pairs: list[Pair], sigma: float, basis: str, command: str, found: tuple[Shift, ...] = (),
              weights: tuple[Weight, ...] = ()) -> str:
    lines = ["# The step-time model's own error, calibrated on the development models' runs (never on the models",
             "# held aside to score it): written by benchmarks/assess_calibrate.py; gapbench.assess.calibration reads",
             "# it and tests/test_assess_calibration.py checks that sigma follows from the pairs below.",
             f"# Command: {command}", f"# At commit {_commit()}.", "",
             f"sigma = {sigma}", f"level = {LEVEL}", 'device_classes = ["cpu"]', f"basis = {json.dumps(basis)}", ""]
    for s in found:
        lines += ["[[shift]]", f"kind = {json.dumps(s.kind)}", f"shift = {s.shift}", f"pairs = {s.pairs}",
                  f"sessions = {s.sessions}", f"above = {s.above}", f"p = {s.p}", ""]
    for w in weights:
        lines += ["[[reference]]", f"kind = {json.dumps(w.kind)}", f"weight = {w.weight}", f"couples = {w.couples}",
                  f"sessions = {w.sessions}", f"checked = {w.checked}", f"without = {w.without}", f"with = {w.with_}",
                  ""]
    for p in pairs:
        lines += ["[[pair]]", f"name = {json.dumps(p.name)}", f"kind = {json.dumps(p.kind)}",
                  f"session = {json.dumps(p.session)}", f"error = {p.error:.5f}", f"sigma_rates = {p.sigma_rates:.5f}",
                  ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shipped", nargs="*", default=[], type=Path, help="assess_accuracy.py run folders")
    ap.add_argument("--unseen", nargs="*", default=[], type=Path, help="assess_unseen.py development run folders")
    ap.add_argument("--write", action="store_true", help=f"write {CALIBRATION_FILE.relative_to(ROOT)}")
    args = ap.parse_args(argv)
    try:
        return calibrate_and_write(args, argv)
    except (Refused, GapbenchError) as e:  # a folder without its runs, a malformed results file
        print(f"assess_calibrate: {e}", file=sys.stderr)
        return 2


def calibrate_and_write(args, argv: list[str] | None) -> int:
    found = [x for f in args.shipped for x in shipped_pairs(f)] + [x for f in args.unseen for x in unseen_pairs(f)]
    if not found:
        raise Refused("no scored pairs in the folders given")
    pairs = [p for p, _ in found]
    shifted = shifts(pairs)
    left = unshifted(pairs, shifted)
    sigma = calibrate(left, LEVEL)
    for p, r in found:
        print(f"{p.name:70s} predicted {r['predicted_gap_pct']:+7.1f}% measured {r['measured_gap_pct']:+7.1f}% "
              f"log error {p.error:+.3f} rates σ {p.sigma_rates:.3f}")
    for k in leanings(pairs):
        print(f"{'shift' if k in shifted else 'no shift'} {k.shift:+.4f} ({k.above} of {k.sessions} sessions above "
              f"zero, sign test p = {k.p:.2g}; {k.pairs} pairs): {k.kind}")
    weights, dropped = checked_weights(pairs)
    for w in weights + dropped:
        print(f"{'reference weight' if w in weights else 'no reference weight (fitted'} {w.weight:.4f}"
              f"{'' if w in weights else ')'} ({w.couples} couples, {w.sessions} sessions; one session left out in "
              f"turn, {w.checked} pairs: mean |error| {w.without:.1f}% without a reference, {w.with_:.1f}% with one): "
              f"{w.kind}")
    before, after = covered(left, 0.0, LEVEL), covered(left, sigma, LEVEL)
    print(f"{len(pairs)} pairs; the measured gap inside the {LEVEL:.0%} interval: {before} with the rates' noise "
          f"alone, {after} with the model's own σ = {sigma}" + (" (less their kind's shift)" if shifted else ""))
    basis = (f"{len(pairs)} CPU platform pairs of the development models "
             f"({', '.join(sorted({f.name for f in [*args.shipped, *args.unseen]}))}), {after} of them inside "
             f"the {LEVEL:.0%} interval" + (f", once the shifts of {len(shifted)} pair kinds are taken off" if shifted
                                            else ""))
    if args.write:
        command = "python benchmarks/assess_calibrate.py " + " ".join(argv if argv is not None else sys.argv[1:])
        CALIBRATION_FILE.write_text(toml_text(pairs, sigma, basis, command, shifted, weights), encoding="utf-8")
        print(f"wrote {CALIBRATION_FILE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
