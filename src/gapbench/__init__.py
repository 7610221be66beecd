"""gapbench: measure the gap between AI accelerator stacks, and what it costs to move between them.

The Python API (lazily imported so that `import gapbench` stays cheap):
    run(...)       -> ResultSet        gapbench.runner.run_suite
    load(path)     -> ResultSet        gapbench.results.load
    compare(...)   -> Comparison       gapbench.compare.compare
    report(...)    -> str              gapbench.report.render
    scan(...)      -> ScanReport       gapbench.scan.scan
    coverage(...)  -> ResultSet        gapbench.coverage.audit (its .coverage section filled)
    assess(...)    -> Assessment       gapbench.assess.assess (code, operators and speed on a target stack)
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = {
    "run": "gapbench.runner:run_suite",
    "load": "gapbench.results:load",
    "save": "gapbench.results:save",
    "compare": "gapbench.compare:compare",
    "report": "gapbench.report:render",
    "scan": "gapbench.scan:scan",
    "coverage": "gapbench.coverage:audit",
    "trace_ops": "gapbench.coverage.trace:trace_ops",
    "assess": "gapbench.assess:assess",
}

__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name in _API:
        mod, attr = _API[name].split(":")
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'gapbench' has no attribute {name!r}")
