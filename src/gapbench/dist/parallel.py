"""Data-parallel wrapping of a model for multi-device training: DDP, or FSDP2's fully_shard.

    model = wrap_model(model, "ddp", device)   # or "fsdp"

FSDP shards each repeated block (every module of a ModuleList whose items share one type, such as a
transformer's decoder layers) and then the root, as the FSDP2 tutorials do; it needs
torch.distributed.fsdp.fully_shard (torch 2.6 or newer; 2.4 and 2.5 have it under _composable).
"""

from __future__ import annotations

import torch

from gapbench.devices import Device

MODES = ("ddp", "fsdp")


def _fully_shard():
    """FSDP2's fully_shard: public since torch 2.6, under _composable in 2.4-2.5; None before."""
    try:
        from torch.distributed.fsdp import fully_shard
    except ImportError:
        try:
            from torch.distributed._composable.fsdp import fully_shard
        except ImportError:
            return None
    return fully_shard


def fsdp2_available() -> bool:
    return _fully_shard() is not None


def unsupported_reason(mode: str) -> str:
    """'' when this torch can wrap with `mode`, else why not."""
    if mode not in MODES:
        return f"unknown parallel mode {mode!r}; expected one of {', '.join(MODES)}"
    if mode == "fsdp" and not fsdp2_available():
        return f"FSDP2 (torch.distributed.fsdp.fully_shard) is not in torch {torch.__version__}; use ddp"
    return ""


def repeated_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The items of every ModuleList whose members all have one type (the layers FSDP shards one by one)."""
    out = []
    for mod in model.modules():
        if isinstance(mod, torch.nn.ModuleList) and len(mod) > 1 and len({type(m) for m in mod}) == 1:
            out.extend(mod)
    return out


def wrap_model(model: torch.nn.Module, mode: str, device: Device) -> torch.nn.Module:
    """The model wrapped for data-parallel training on the current process group."""
    why = unsupported_reason(mode)
    if why:
        raise ValueError(why)
    if mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        ids = None if device.is_cpu else [device.index]
        return DistributedDataParallel(model, device_ids=ids)
    fully_shard = _fully_shard()
    for block in repeated_blocks(model):
        fully_shard(block)
    fully_shard(model)
    return model
