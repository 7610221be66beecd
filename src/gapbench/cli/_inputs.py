"""The results files of `compare` and `report` as platforms: files named one by one, and
`--label NAME FILE [FILE ...]` for one platform measured in several runs (several files)."""

from __future__ import annotations

from gapbench.errors import GapbenchError

LABEL_HELP = ("name the inputs in order (repeatable); or --label NAME FILE [FILE ...]: the files are one platform "
              "measured in several runs (default name: the run's label or device product; files with the same "
              "run label are one platform)")


def add_label_argument(p) -> None:
    p.add_argument("--label", action="append", nargs="+", default=[], metavar="NAME [FILE",
                   help=LABEL_HELP)
    p.add_argument("--allow-flagged", action="store_true",
                   help="judge gaps even where the host watch flagged a side (busy, stolen or throttled host)")


def platform_inputs(files: list[str], label_args: list[list[str]]) -> tuple[list, list[str]]:
    """(inputs, labels) for compare(): the named files first, each of them one platform, then each
    `--label NAME FILE ...` group as one platform; a one-word --label names the next named file."""
    names = [a[0] for a in label_args if len(a) == 1]
    groups = [a for a in label_args if len(a) > 1]
    if len(names) > len(files):
        raise GapbenchError(f"{len(names)} one-word --label(s) for {len(files)} file(s): give at most one per file, "
                            "or --label NAME FILE [FILE ...] for a platform of several files")
    inputs: list = list(files) + [g[1:] for g in groups]
    labels = [*names, *[None] * (len(files) - len(names)), *[g[0] for g in groups]]
    if not groups:
        labels = names
    return inputs, labels
