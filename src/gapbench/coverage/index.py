"""Which ATen overloads each OpInfo entry reaches: built once per torch version in a worker, cached on disk.

The cache lives in $XDG_CACHE_HOME/gapbench (default ~/.cache/gapbench), one file per torch version:
opinfo-index-torch-<version>.json = {"torch": ..., "entries": [{op, variant, family, forward, backward}]}.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch

from gapbench.coverage.children import ChildFailed, run_simple
from gapbench.errors import GapbenchError
from gapbench.results import write_json_atomic

INDEX_TIMEOUT_S = 1800.0
INDEX_FORMAT = 2  # bump when what an index holds changes: older cached files are rebuilt


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gapbench"


def index_path(torch_version: str | None = None) -> Path:
    v = (torch_version or torch.__version__).replace("/", "_").replace("+", "_")
    return cache_dir() / f"opinfo-index-torch-{v}.json"


def build_index(ops: str | None = None, extra_ops: str | None = None) -> dict:
    """Trace up to 64 samples of every OpInfo entry (or those matching `ops`), forward and backward, in a
    worker process. Only the full index (ops=None) is cached by load_index()."""
    try:
        entries = [e for e in run_simple({"mode": "index", "ops": ops, "extra_ops": extra_ops}, INDEX_TIMEOUT_S)
                   if e.get("event") == "index"]
    except ChildFailed as e:
        raise GapbenchError(f"could not index the OpInfo database ({e})") from None
    for e in entries:
        e.pop("event", None)
    return {"torch": torch.__version__, "format": INDEX_FORMAT, "entries": entries}


def load_index(rebuild: bool = False) -> dict:
    """The cached index for this torch, built (a minute or two) when absent."""
    p = index_path()
    if p.is_file() and not rebuild:
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
            if data.get("torch") == torch.__version__ and data.get("format") == INDEX_FORMAT and \
                    isinstance(data.get("entries"), list):
                return data
        except (OSError, json.JSONDecodeError):
            pass
    data = build_index()
    try:
        write_json_atomic(p, data)
    except OSError:
        pass  # a read-only home still gets an answer, just not a cached one
    return data


def base_name(overload: str) -> str:
    """'aten.addmm.default' -> 'addmm'; 'aten.linalg_svd.default' -> 'linalg_svd'."""
    parts = overload.split(".")
    return parts[1] if len(parts) > 1 else overload


def _entry_names(e: dict) -> set[str]:
    names = {e["op"].replace(".", "_"), e["op"].split(".")[-1]}
    if e.get("aten_name"):
        names.add(e["aten_name"])
    return names


def match_entries(overload: str, index: dict) -> tuple[list[dict], str]:
    """OpInfo entries that reach `overload`, best first, and which list matched ('forward' or 'backward').

    Best = named like the ATen op, then the entry that reaches the fewest other operators (most specific).
    An operator that runs in a model's backward (aten.mm) is usually some entry's forward kernel too; only
    backward-only kernels (aten.threshold_backward) are matched through entries' backward lists.
    """
    name = base_name(overload)
    for phase in ("forward", "backward"):
        hits = [e for e in index["entries"] if overload in e.get(phase, [])]
        if hits:
            hits.sort(key=lambda e: (name not in _entry_names(e), bool(e.get("variant")), len(e.get(phase, [])),
                                     e["op"]))
            return hits, phase
    return [], ""
