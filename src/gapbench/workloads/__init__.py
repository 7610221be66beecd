"""Workload registry: built-ins by name, user workloads from entry points or a file."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import pkgutil
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from gapbench.errors import GapbenchError
from gapbench.workloads.base import Context, Variant, Workload
from gapbench.workloads.options import Flag, Options, declared_in, flag_of

__all__ = ["Context", "Variant", "Workload", "BUILTIN", "get", "names", "load_file", "parse_spec", "option_classes",
           "option_fields", "takes"]

# name -> "module:attribute"; a workload whose module is not present is simply not listed
BUILTIN: dict[str, str] = {
    "gemm": "gapbench.workloads.micro.gemm:Gemm",
    "membw": "gapbench.workloads.micro.membw:MemBandwidth",
    "llm-train": "gapbench.workloads.models.llm_train:LlmTrain",
    "diffusion-infer": "gapbench.workloads.models.diffusion_infer:DiffusionInfer",
    "bert-finetune": "gapbench.workloads.models.bert_finetune:BertFinetune",
    "collective": "gapbench.workloads.micro.collective:Collective",
    "sparse": "gapbench.workloads.probes.sparse:Sparse",
    "dynamic-shapes": "gapbench.workloads.probes.dynamic_shapes:DynamicShapes",
    "amp-train": "gapbench.workloads.probes.amp_train:AmpTrain",
    "numerics": "gapbench.workloads.probes.numerics:Numerics",
    "llm-infer": "gapbench.workloads.inference.llm_infer:LlmInfer",
    "elementwise": "gapbench.workloads.micro.elementwise:Elementwise",
    "gemm-libs": "gapbench.workloads.libs.gemm_libs:GemmLibs",
    "attention-libs": "gapbench.workloads.libs.attention_libs:AttentionLibs",
    "launch": "gapbench.workloads.micro.launch:Launch",
    "attention": "gapbench.workloads.micro.attention:Attention",
    "conv": "gapbench.workloads.micro.conv:Conv",
    "grouped-gemm": "gapbench.workloads.micro.grouped_gemm:GroupedGemm",
    "optimizer": "gapbench.workloads.micro.optimizer:Optimizer",
}

ENTRY_POINT_GROUP = "gapbench.workloads"


def _builtin_present(target: str) -> bool:
    return importlib.util.find_spec(target.split(":")[0]) is not None


def _entry_points() -> dict[str, metadata.EntryPoint]:
    try:
        return {ep.name: ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    except Exception:  # a broken third-party distribution must not break listing
        return {}


def names() -> list[str]:
    out = [n for n, t in BUILTIN.items() if _builtin_present(t)]
    out += [n for n in _entry_points() if n not in out]
    return out


def _instantiate(obj, origin: str) -> Workload:
    if inspect.isclass(obj) and issubclass(obj, Workload):
        obj = obj()
    if not isinstance(obj, Workload):
        raise GapbenchError(f"{origin} is not a gapbench Workload")
    if not obj.name or not obj.unit or not obj.presets:
        raise GapbenchError(f"{origin} must set name, unit and presets")
    return obj


def get(name: str, extra: dict[str, Workload] | None = None) -> Workload:
    """The workload called `name`: from `extra` (a loaded workload file), the built-ins, or entry points."""
    if extra and name in extra:
        return extra[name]
    if name in BUILTIN and _builtin_present(BUILTIN[name]):
        mod, attr = BUILTIN[name].split(":")
        return _instantiate(getattr(importlib.import_module(mod), attr), f"built-in workload {name}")
    eps = _entry_points()
    if name in eps:
        try:
            obj = eps[name].load()
        except Exception as e:
            raise GapbenchError(f"workload {name!r} (entry point {eps[name].value}) failed to load: {e}") from None
        return _instantiate(obj, f"entry point {eps[name].value}")
    known = ", ".join(names() + sorted(extra or {}))
    raise GapbenchError(f"unknown workload {name!r}; known: {known}")


def load_file(path: str) -> dict[str, Workload]:
    """Import a user's workload file and return the workloads it defines (classes or instances)."""
    p = Path(path)
    if not p.is_file():
        raise GapbenchError(f"--workload-file {path}: no such file")
    mod_name = f"gapbench_user_{abs(hash(str(p.resolve())))}"
    spec = importlib.util.spec_from_file_location(mod_name, p)
    if spec is None or spec.loader is None:
        raise GapbenchError(f"--workload-file {path}: cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as e:  # SystemExit and KeyboardInterrupt from user code included
        if isinstance(e, KeyboardInterrupt):
            raise
        raise GapbenchError(f"--workload-file {path}: failed to import: {e.__class__.__name__}: {e}") from None
    found: dict[str, Workload] = {}
    for attr, obj in vars(module).items():
        if attr.startswith("_") or getattr(obj, "__module__", mod_name) != mod_name and inspect.isclass(obj):
            continue
        if (inspect.isclass(obj) and issubclass(obj, Workload) and obj is not Workload and obj.name) or (
            isinstance(obj, Workload)
        ):
            w = _instantiate(obj, f"{path}:{attr}")
            found[w.name] = w
    if not found:
        raise GapbenchError(f"--workload-file {path}: defines no Workload (subclass gapbench.workloads.Workload)")
    return found


def option_classes() -> list[type[Options]]:
    """Every options model the built-in workloads declare, base classes first: the `options` modules of this
    package and its rooms (none of them imports torch, so the command line reads them to build its flags)."""
    for info in pkgutil.walk_packages(__path__, f"{__name__}."):
        if info.name.rsplit(".", 1)[-1] == "options":
            importlib.import_module(info.name)
    out, todo = [], [Options]
    while todo:
        cls = todo.pop(0)
        if cls not in out:
            out.append(cls)
            todo += cls.__subclasses__()
    return [c for c in out if c.__module__.startswith(__name__)]


def option_fields() -> dict[str, Flag]:
    """Each option of the built-in workloads, by name: its flag, first declaration and every declaration."""
    first: dict[str, tuple[Any, type[Options]]] = {}
    every: dict[str, list[Any]] = {}
    for cls in option_classes():
        for owner, names in declared_in(cls).items():
            for name in names:
                field = cls.model_fields[name]
                first.setdefault(name, (field, owner))
                if all(repr(field.rebuild_annotation()) != repr(f.rebuild_annotation()) for f in every.get(name, [])):
                    every.setdefault(name, []).append(field)
    return {name: Flag(name, flag_of(name, field), field, owner, tuple(every[name]))
            for name, (field, owner) in first.items()}


def takes(w: Workload, name: str) -> bool:
    """Whether a workload takes the option `name` (a workload that declares no options takes every one)."""
    return name in w.options.model_fields or w.options.model_config.get("extra") == "allow"


def parse_spec(spec: str) -> tuple[str, str | None]:
    """'gemm:standard' -> ('gemm', 'standard'); 'membw' -> ('membw', None)."""
    name, colon, preset = spec.partition(":")
    if not name or (colon and not preset):
        raise GapbenchError(f"--workload {spec!r}: expected NAME or NAME:PRESET")
    return name, preset or None
