"""Recall and precision of `gapbench scan` on the hand-labelled corpus (benchmarks/data/scan_corpus/*.toml).

Fetches nothing: give it checkouts of the labelled repositories at the labelled commits.

    python benchmarks/scan_corpus.py owner/name=PATH [owner/name=PATH ...] [--split S] [--misses] [--by-rule]
    python benchmarks/scan_corpus.py owner/name=PATH ... --fresh-held-out-once

Each labelled file carries a split fixed before labelling (README.md in the corpus folder):

- `development`: the files the rules were first written on;
- `held-out`: scored once (results/scan-corpus-scores.md) and since tuned on, so it is reported as
  "held-out (scored once before, now tuned on)": a second development set, no longer a test;
- `second-held-out`, `third-held-out`, `fourth-held-out`, `fifth-held-out`,
  `sixth-held-out`, `seventh-held-out`, `eighth-held-out`, `ninth-held-out`, `tenth-held-out`, `eleventh-held-out`, `twelfth-held-out`,
  `thirteenth-held-out`, `fourteenth-held-out`, `fifteenth-held-out`,
  `sixteenth-held-out`, `seventeenth-held-out`, `eighteenth-held-out`,
  `nineteenth-held-out`, `twentieth-held-out`, `twenty-first-held-out`: the next sets of files labelled blind to the scanner, each scored once
  in the round after it was labelled and tuned on since, reported as such;
- `reviewed`: files a reviewer labelled by reading them in full, then compared with the scanner's findings: a
  development set from the start;
- `fresh-held-out`: the files nobody tunes on, scored once, at the end.

By default the tuned splits are scored, each reported on its own (`--split` picks one); `--misses` lists their missed lines and false alarms, `--by-rule` their false alarms per rule. For each
repository the files of the tuned splits are scanned together in one tree, as a scan of the whole repository
would see them (a portability macro defined in one file and tested in another), and scored per split.

--fresh-held-out-once scores the fresh held-out split instead: totals and counts per repository and per kind
only, never a line, a missed label or a false alarm, so that nobody tunes the rules to it by accident. Its
files are scanned in a tree with the tuned splits' files of the same repository beside them (context a real
scan has), and only its own files are scored. --held-out-once is kept for the commands of the first report:
the old held-out split alone, totals only, as it was scored then. A fresh-held-out file is read only under
--fresh-held-out-once.

A labelled line is found when the scan reports at least one finding there that is not marked already ported; a
line flagged (not as ported) without a label is a false alarm. A `ported` line counts as right when the scanner
reports it as already ported or not at all; reported as a plain finding it is a false alarm.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

from gapbench.scan import scan

CORPUS = Path(__file__).resolve().parent / "data" / "scan_corpus"
DEVELOPMENT, HELD_OUT, SECOND, THIRD, REVIEWED, FOURTH, FIFTH, SIXTH, SEVENTH, EIGHTH, NINTH, TENTH, ELEVENTH, TWELFTH, \
    THIRTEENTH, FOURTEENTH, FIFTEENTH, SIXTEENTH, SEVENTEENTH, EIGHTEENTH, NINETEENTH, TWENTIETH, TWENTY_FIRST, FRESH = (
    "development", "held-out", "second-held-out", "third-held-out", "reviewed", "fourth-held-out", "fifth-held-out",
    "sixth-held-out", "seventh-held-out", "eighth-held-out", "ninth-held-out", "tenth-held-out",
    "eleventh-held-out", "twelfth-held-out", "thirteenth-held-out",
    "fourteenth-held-out", "fifteenth-held-out", "sixteenth-held-out", "seventeenth-held-out", "eighteenth-held-out",
    "nineteenth-held-out", "twentieth-held-out", "twenty-first-held-out", "fresh-held-out")
# the splits rules may be tuned on
TUNED = (DEVELOPMENT, HELD_OUT, SECOND, THIRD, REVIEWED, FOURTH, FIFTH, SIXTH, SEVENTH, EIGHTH, NINTH, TENTH,
         ELEVENTH, TWELFTH, THIRTEENTH, FOURTEENTH, FIFTEENTH,
         SIXTEENTH, SEVENTEENTH, EIGHTEENTH, NINETEENTH, TWENTIETH, TWENTY_FIRST)
TITLES = {DEVELOPMENT: "development split", HELD_OUT: "held-out split (scored once before, now tuned on)",
          SECOND: "second held-out set (scored once before, now tuned on)",
          THIRD: "third held-out set (scored once before, now tuned on)",
          REVIEWED: "reviewed set (judged against the scanner's findings, tuned on)",
          FOURTH: "fourth held-out set (scored once before, now tuned on)",
          FIFTH: "fifth held-out set (scored once before, now tuned on)",
          SIXTH: "sixth held-out set (scored once before, now tuned on)",
          SEVENTH: "seventh held-out set (scored once before, now tuned on)",
          EIGHTH: "eighth held-out set (scored once before, now tuned on)",
          NINTH: "ninth held-out set (scored once before, now tuned on)",
          TENTH: "tenth held-out set (scored once before, now tuned on)",
          ELEVENTH: "eleventh held-out set (scored once before, now tuned on)",
          TWELFTH: "twelfth held-out set (scored once before, now tuned on)",
          THIRTEENTH: "thirteenth held-out set (scored once before, now tuned on)",
          FOURTEENTH: "fourteenth held-out set (scored once before, now tuned on)",
          FIFTEENTH: "fifteenth held-out set (scored once before, now tuned on)",
          SIXTEENTH: "sixteenth held-out set (scored once before, now tuned on)",
          SEVENTEENTH: "seventeenth held-out set (scored once before, now tuned on)",
          EIGHTEENTH: "eighteenth held-out set (scored once before, now tuned on)",
          NINETEENTH: "nineteenth held-out set (scored once before, now tuned on)",
          TWENTIETH: "twentieth held-out set (scored once before, now tuned on)",
          TWENTY_FIRST: "twenty-first held-out set (scored once before, now tuned on)",
          FRESH: "fresh held-out split (scored once)"}


@dataclass
class Score:
    files: int = 0
    labelled: int = 0
    found: int = 0
    flagged: int = 0
    false_alarms: int = 0
    ported_lines: int = 0
    ported_right: int = 0
    misses: list[str] = field(default_factory=list)
    alarms: list[str] = field(default_factory=list)
    by_kind: Counter = field(default_factory=Counter)
    found_by_kind: Counter = field(default_factory=Counter)
    alarms_by_rule: Counter = field(default_factory=Counter)

    def add(self, other: Score) -> None:
        for name in ("files", "labelled", "found", "flagged", "false_alarms", "ported_lines", "ported_right"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.misses += other.misses
        self.alarms += other.alarms
        for name in ("by_kind", "found_by_kind", "alarms_by_rule"):
            getattr(self, name).update(getattr(other, name))

    @property
    def recall(self) -> float:
        return self.found / self.labelled if self.labelled else 1.0

    @property
    def precision(self) -> float:
        return (self.flagged - self.false_alarms) / self.flagged if self.flagged else 1.0


def load_corpus(folder: Path = CORPUS) -> dict[str, dict]:
    """Repository name -> its corpus file's data (repo table and files)."""
    out = {}
    for path in sorted(folder.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        repo = data.get("repo", {})
        if "name" in repo and "commit" in repo:
            out[repo["name"]] = {"repo": repo, "files": data.get("file", []), "source": path.name}
    return out


def head_commit(path: Path) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def scan_files(root: Path, paths: list[str]):
    """The scan of only these files of a checkout: each is linked into a temporary tree at its own path, so that
    nothing else of the repository (other splits' files among it) is read."""
    with tempfile.TemporaryDirectory(prefix="gapbench-corpus-") as tmp:
        for rel in paths:
            src = root / rel
            if not src.is_file():
                print(f"warning: {root}: {rel} is missing", file=sys.stderr)
                continue
            dst = Path(tmp) / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
        report = scan(tmp, jobs=1, respect_gitignore=False)
    for skip in report.skipped:     # a labelled file the scanner failed on would score as all misses
        print(f"warning: {root}: {skip.path} was not scanned: {skip.reason}", file=sys.stderr)
    return report


def score_files(report, files: list[dict]) -> Score:
    plain: dict[str, dict[int, set[str]]] = {}
    ported: dict[str, set[int]] = {}
    for f in report.findings:
        if getattr(f, "ported", False):
            ported.setdefault(f.path, set()).add(f.line)
        else:
            plain.setdefault(f.path, {}).setdefault(f.line, set()).add(f.rule)
    score = Score(files=len(files))
    for entry in files:
        path = entry["path"]
        labels = {int(line): kind for line, kind in entry.get("labels", [])}
        port_lines = {int(line) for line, _ in entry.get("ported", [])}
        hits = plain.get(path, {})
        score.labelled += len(labels)
        score.flagged += len(hits)
        for line, kind in sorted(labels.items()):
            score.by_kind[kind] += 1
            if line in hits:
                score.found += 1
                score.found_by_kind[kind] += 1
            else:
                score.misses.append(f"{path}:{line} [{kind}]")
        for line in sorted(hits.keys() - labels.keys()):
            score.false_alarms += 1
            rules = ",".join(sorted(hits[line]))
            score.alarms.append(f"{path}:{line} [{rules}]" + (" (a ported line)" if line in port_lines else ""))
            score.alarms_by_rule.update(hits[line])
        score.ported_lines += len(port_lines)
        score.ported_right += len(port_lines - hits.keys())
    return score


def _row(name: str, commit: str, s: Score) -> str:
    return (f"{name:<36} {commit:<12} {s.files:>5} {s.labelled:>8} {s.found:>6} {s.recall:>7.3f} {s.flagged:>7} "
            f"{s.false_alarms:>6} {s.precision:>9.3f} {s.ported_right:>4}/{s.ported_lines:<4}")


def parse_checkouts(parser: argparse.ArgumentParser, items: list[str], corpus: dict[str, dict]) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or name not in corpus:
            parser.error(f"{item!r}: expected OWNER/NAME=PATH with a labelled repository ({', '.join(corpus)})")
        if not Path(path).is_dir():
            parser.error(f"{name}: {path} is not a folder (a checkout of the repository at the labelled commit)")
        paths[name] = Path(path)
    for name, root in paths.items():
        head, want = head_commit(root), corpus[name]["repo"]["commit"]
        if head is None:
            print(f"note: {name}: {root} is not a git checkout; its commit is not checked", file=sys.stderr)
        elif head != want:
            parser.error(f"{name} is checked out at {head[:12]}, the labels are for {want[:12]}")
    return paths


def _header(title: str) -> None:
    print(title)
    print(f"{'repository':<36} {'commit':<12} {'files':>5} {'labelled':>8} {'found':>6} {'recall':>7} "
          f"{'flagged':>7} {'false':>6} {'precision':>9} ported")


def score_split(corpus: dict[str, dict], paths: dict[str, Path], split: str, context: tuple[str, ...],
                details: bool, by_rule: bool) -> Score:
    """Score one split, printing a row per repository; each repository's tree holds the split's files and those
    of the `context` splits (scanned, not scored). `details`: list the misses and false alarms."""
    _header(TITLES[split])
    total = Score()
    for name, root in paths.items():
        entries = corpus[name]["files"]
        files = [f for f in entries if f.get("split") == split]
        if not files:
            continue
        extra = [f["path"] for f in entries if f.get("split") in context and f.get("split") != split]
        report = scan_files(root, [f["path"] for f in files] + extra)
        s = score_files(report, files)
        total.add(s)
        print(_row(name, corpus[name]["repo"]["commit"][:12], s))
        if details:
            for m in s.misses:
                print(f"    missed      {m}")
            for a in s.alarms:
                print(f"    false alarm {a}")
    print(_row("overall", "", total))
    print("recall by kind: " + ", ".join(f"{k} {total.found_by_kind[k]}/{n}" for k, n in sorted(total.by_kind.items())))
    if by_rule:
        print("false alarms by rule: " + ", ".join(f"{r} {n}" for r, n in total.alarms_by_rule.most_common()))
    return total


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkouts", nargs="+", metavar="OWNER/NAME=PATH")
    p.add_argument("--corpus", type=Path, default=CORPUS)
    p.add_argument("--split", choices=TUNED, action="append",
                   help="a split to score with details (default: every tuned split, each on its own)")
    p.add_argument("--fresh-held-out-once", action="store_true",
                   help="score the fresh held-out split instead: totals and counts per kind only, no lines")
    p.add_argument("--held-out-once", action="store_true",
                   help="the old held-out split alone, totals only (the first report's command)")
    p.add_argument("--misses", action="store_true", help="list every missed line and false alarm (tuned splits)")
    p.add_argument("--by-rule", action="store_true", help="false alarms per rule (tuned splits)")
    args = p.parse_args(argv)
    once = args.fresh_held_out_once or args.held_out_once
    if args.fresh_held_out_once and args.held_out_once:
        p.error("--fresh-held-out-once and --held-out-once are two different scorings: give one")
    if once and (args.misses or args.by_rule or args.split):
        p.error("a once-only scoring prints totals only: --split, --misses and --by-rule are for the tuned splits")
    corpus = load_corpus(args.corpus)
    paths = parse_checkouts(p, args.checkouts, corpus)
    if args.fresh_held_out_once:
        score_split(corpus, paths, FRESH, TUNED, details=False, by_rule=False)
        return 0
    if args.held_out_once:
        _header("held-out split")
        total = Score()
        for name, root in paths.items():
            files = [f for f in corpus[name]["files"] if f.get("split") == HELD_OUT]
            s = score_files(scan_files(root, [f["path"] for f in files]), files)
            total.add(s)
            print(_row(name, corpus[name]["repo"]["commit"][:12], s))
        print(_row("overall", "", total))
        print("recall by kind: " + ", ".join(f"{k} {total.found_by_kind[k]}/{n}"
                                             for k, n in sorted(total.by_kind.items())))
        return 0
    for i, split in enumerate(args.split or TUNED):
        if i:
            print()
        score_split(corpus, paths, split, TUNED, details=args.misses, by_rule=args.by_rule)
    return 0


if __name__ == "__main__":
    sys.exit(main())
