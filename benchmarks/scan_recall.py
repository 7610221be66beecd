"""Recall and precision of `gapbench scan` against hand-reviewed lock-in lines (benchmarks/data/scan_labels.toml).

Fetches nothing: give it checkouts of the labelled repositories at the labelled commits.

    python benchmarks/scan_recall.py karpathy/nanoGPT=/src/nanoGPT karpathy/llm.c=/src/llm.c \\
        jzhang38/TinyLlama=/src/TinyLlama [--misses]
    python benchmarks/scan_recall.py --speed [PATH]     # default PATH: the installed torch package

--speed: the scanner's speed on a tree: one process (`jobs=1`, its CPU time: files per CPU-second, the figure
that depends least on what else the machine runs) and the default two workers (files/s, wall time; CPU time of
all processes), best of --repeat runs each, the load average before and after, and how many files the
prefilter (gapbench.scan.prefilter) let through unread.

A labelled line counts as found when the scanner reports at least one finding on it, or on the statement it
belongs to (these labels mark every line of a statement spread over several, the scanner reports a statement
once, at its first flagged line); a flagged line in a labelled file that carries no label is a false alarm. Files that are not labelled are not counted either way.
Scores are given per split of the labels: the files the rules were developed on, and the held-out files.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gapbench.scan import scan  # noqa: E402

LABELS = Path(__file__).resolve().parent / "data" / "scan_labels.toml"


from scan_corpus import Score  # noqa: E402 - the corpus scorer's tally, shared (run from benchmarks/)


def head_commit(path: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def score_repo(report, files: list[dict]) -> Score:
    flagged: dict[str, set[int]] = {}
    covered: dict[str, set[int]] = {}    # every line of a flagged statement
    for f in report.findings:
        flagged.setdefault(f.path, set()).add(f.line)
        covered.setdefault(f.path, set()).update(range(f.line, max(f.line, f.last_line) + 1))
    score = Score()
    for entry in files:
        path = entry["path"]
        labels = {line: kind for line, kind in entry["labels"]}
        hits = flagged.get(path, set())
        score.labelled += len(labels)
        score.flagged += len(hits)
        for line, kind in sorted(labels.items()):
            score.by_kind[kind] += 1
            if line in covered.get(path, ()):
                score.found += 1
                score.found_by_kind[kind] += 1
            else:
                score.misses.append(f"{path}:{line} [{kind}]")
        for line in sorted(hits - labels.keys()):
            score.false_alarms += 1
            score.alarms.append(f"{path}:{line}")
    return score


def _children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def prefiltered(root: str) -> tuple[int, int]:
    """(files the scan reads, files of them the prefilter lets through unread)."""
    from gapbench.scan import load_rules
    from gapbench.scan.engine import Matcher, kinds_of
    from gapbench.scan.walker import walk

    pre = getattr(Matcher(load_rules(), 2 * 1024 * 1024), "prefilter", None)     # None: a scanner without one
    entries, _, _ = walk(root)
    items = [(e, k) for e in entries if (k := kinds_of(e.rel))]
    if pre is None:
        return len(items), 0
    skipped = 0
    for e, kinds in items:
        with open(e.path, "rb") as f:
            skipped += not pre.may_match(f.read(), kinds, e.rel.rsplit("/", 1)[-1])
    return len(items), skipped


def speed(root: str, repeat: int) -> int:
    """Files per CPU-second (one process) and files/s (two workers) on a tree, best of `repeat` runs."""
    print(f"tree {root}\nload average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    best1 = best2 = None
    for _ in range(repeat):
        c = time.process_time()
        r = scan(root, jobs=1)
        cpu = time.process_time() - c
        best1 = cpu if best1 is None else min(best1, cpu)
        c, k, w = time.process_time(), _children_cpu(), time.perf_counter()
        r = scan(root, jobs=2)
        wall, cpu2 = time.perf_counter() - w, time.process_time() - c + _children_cpu() - k
        best2 = (wall, cpu2) if best2 is None or wall < best2[0] else best2
    n = r.files_scanned
    print(f"files scanned {n:,} (of {r.files_seen:,} seen), findings {len(r.findings):,}")
    print(f"one process: {best1:.2f} CPU-s, {n / best1:,.0f} files per CPU-second")
    print(f"two workers: {best2[0]:.2f} s, {n / best2[0]:,.0f} files/s ({best2[1]:.2f} CPU-s in all processes, "
          f"{n / best2[1]:,.0f} files per CPU-second)")
    read, skipped = prefiltered(root)
    print(f"prefilter: {skipped:,} of {read:,} files let through unread ({read - skipped:,} decoded and matched)")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


def _torch_tree() -> str:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("--speed: torch is not installed; give a PATH")
    return list(spec.submodule_search_locations)[0]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkouts", nargs="*", metavar="OWNER/NAME=PATH")
    p.add_argument("--labels", type=Path, default=LABELS)
    p.add_argument("--misses", action="store_true", help="list every missed line and every false alarm")
    p.add_argument("--speed", nargs="?", const="", metavar="PATH",
                   help="measure the scanner's speed on PATH (default: the installed torch package)")
    p.add_argument("--repeat", type=int, default=2, help="--speed: runs of each (the best is shown)")
    args = p.parse_args(argv)
    if args.speed is not None:
        return speed(args.speed or _torch_tree(), max(1, args.repeat))
    if not args.checkouts:
        p.error("give OWNER/NAME=PATH checkouts, or --speed")
    data = tomllib.loads(args.labels.read_text(encoding="utf-8"))
    commits = {r["name"]: r["commit"] for r in data["repo"]}
    paths: dict[str, Path] = {}
    for item in args.checkouts:
        name, sep, path = item.partition("=")
        if not sep or name not in commits:
            p.error(f"{item!r}: expected OWNER/NAME=PATH with a labelled repository ({', '.join(commits)})")
        paths[name] = Path(path)
    for name, root in paths.items():
        head = head_commit(root)
        if head and head != commits[name]:
            print(f"warning: {name} is checked out at {head[:12]}, the labels are for {commits[name][:12]}",
                  file=sys.stderr)
    reports = {name: scan(root, jobs=1) for name, root in paths.items()}
    splits = sorted({f.get("split", "development") for f in data["file"]}, key=lambda x: x != "development")
    for split in splits:
        print(f"\n{split} files")
        print(f"{'repository':<22} {'commit':<12} {'files':>5} {'labelled':>8} {'found':>6} {'recall':>7} "
              f"{'flagged':>7} {'false':>6} {'precision':>9}")
        total = Score()
        nfiles = 0
        for name in paths:
            files = [f for f in data["file"] if f["repo"] == name and f.get("split", "development") == split]
            s = score_repo(reports[name], files)
            total.add(s)
            nfiles += len(files)
            print(f"{name:<22} {commits[name][:12]:<12} {len(files):>5} {s.labelled:>8} {s.found:>6} "
                  f"{s.recall:>7.3f} {s.flagged:>7} {s.false_alarms:>6} {s.precision:>9.3f}")
            if args.misses:
                for m in s.misses:
                    print(f"    missed      {m}")
                for a in s.alarms:
                    print(f"    false alarm {a}")
        print(f"{'overall':<22} {'':<12} {nfiles:>5} {total.labelled:>8} {total.found:>6} {total.recall:>7.3f} "
              f"{total.flagged:>7} {total.false_alarms:>6} {total.precision:>9.3f}")
        print("recall by kind: " + ", ".join(f"{k} {total.found_by_kind[k]}/{n}"
                                             for k, n in sorted(total.by_kind.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
