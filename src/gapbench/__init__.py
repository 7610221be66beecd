"""gapbench: measure the gap between AI accelerator stacks, and what it costs to move between them.

The Python API (lazily imported so that `import gapbench` stays cheap):
    run(...)       -> ResultSet        gapbench.run.run_suite
    load(path)     -> ResultSet        gapbench.results.load
    compare(...)   -> Comparison       gapbench.compare.compare
    report(...)    -> str              gapbench.report.render
    scan(...)      -> ScanReport       gapbench.scan.scan
    coverage(...)  -> ResultSet        gapbench.coverage.audit (its .coverage section filled)
    assess(...)    -> Assessment       gapbench.assess.assess (code, operators and speed on a target stack)
    claims(path)   -> ClaimReport      gapbench.claims.claims (a published benchmark table, checked)

Seven of these names are also packages (gapbench.run, gapbench.compare, …). Python binds a package to its
parent's attribute when it is imported, which would hide the function; this module keeps both faces in one
place: such a package, once imported, is callable and calls its API function.
"""

from __future__ import annotations

import importlib
import sys
import types

__version__ = "0.1.0"

_API = {
    "run": "gapbench.run:run_suite",
    "load": "gapbench.results:load",
    "save": "gapbench.results:save",
    "compare": "gapbench.compare:compare",
    "report": "gapbench.report:render",
    "scan": "gapbench.scan:scan",
    "coverage": "gapbench.coverage:audit",
    "trace_ops": "gapbench.coverage.trace:trace_ops",
    "assess": "gapbench.assess:assess",
    "claims": "gapbench.claims:claims",
}

__all__ = ["__version__", *_API]


def _function(name: str):
    mod, attr = _API[name].split(":")
    return getattr(importlib.import_module(mod), attr)


class _CallablePackage(types.ModuleType):
    """A package named like an API function: calling it calls the function."""

    def __call__(self, *args, **kwargs):
        return _function(self.__name__.rpartition(".")[2])(*args, **kwargs)


class _Gapbench(types.ModuleType):
    """This module: an API-named package bound here on import becomes callable (see the module docstring)."""

    def __setattr__(self, name: str, value) -> None:
        if name in _API and isinstance(value, types.ModuleType) and value.__name__ == f"{__name__}.{name}":
            value.__class__ = _CallablePackage
        super().__setattr__(name, value)


def __getattr__(name: str):
    if name in _API:
        fn = _function(name)
        bound = globals().get(name)  # importing a same-named package bound it (callable) on the way
        return bound if isinstance(bound, types.ModuleType) else fn
    raise AttributeError(f"module 'gapbench' has no attribute {name!r}")


sys.modules[__name__].__class__ = _Gapbench
