"""A dispatch mode that records which ATen overloads run, and whether in forward or in backward."""

from __future__ import annotations

from collections import Counter

import torch
from torch.utils._python_dispatch import TorchDispatchMode


def in_backward() -> bool:
    """True while the autograd engine is executing a backward node (what runs there is 'backward')."""
    return torch._C._current_autograd_node() is not None


class OpRecorder(TorchDispatchMode):
    """Counts each ATen overload (e.g. 'aten.addmm.default') seen below autograd, split by phase.

    Below autograd means after composite operators have decomposed: the names are the kernels a backend
    has to provide.
    """

    def __init__(self):
        super().__init__()
        self.forward: Counter[str] = Counter()
        self.backward: Counter[str] = Counter()
        self.dtypes: dict[str, set[str]] = {}
        self.backward_call = False  # set while the caller runs loss.backward() (its grad seed is backward)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if name.startswith("prim."):  # metadata queries (prim.device), not kernels a backend provides
            return func(*args, **(kwargs or {}))
        (self.backward if self.backward_call or in_backward() else self.forward)[name] += 1
        for a in (*args, *(kwargs or {}).values()):
            if isinstance(a, torch.Tensor):
                self.dtypes.setdefault(name, set()).add(str(a.dtype).replace("torch.", ""))
                break
        return func(*args, **(kwargs or {}))

    @property
    def all_ops(self) -> set[str]:
        return set(self.forward) | set(self.backward)


def packet_name(overload: str) -> str:
    """'aten.addmm.default' -> 'aten::addmm' (how backends and profilers name an operator)."""
    parts = overload.split(".")
    return f"{parts[0]}::{parts[1]}" if len(parts) >= 2 else overload
