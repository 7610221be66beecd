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

        ids = [device.index] if device.is_accelerator and device.type != "cpu" else None
        return DistributedDataParallel(model, device_ids=ids)
    fully_shard = _fully_shard()
    for block in repeated_blocks(model):
        fully_shard(block)
    fully_shard(model)
    return model


class ParallelWrapper:
    """Context.wrap_model under `--parallel MODE` on a rank group: wraps a model, says why it cannot (a mode
    this torch lacks), and the metrics a parallel training row carries."""

    def __init__(self, mode: str, device: Device, dist_info):
        self.mode, self.device = mode, device
        self.unsupported = unsupported_reason(mode)
        self.metrics = {"parallel": mode, "world_size": dist_info.world_size, "nodes": dist_info.node_count,
                        "backend": dist_info.backend}

    def __call__(self, model: torch.nn.Module) -> torch.nn.Module:
        return wrap_model(model, self.mode, self.device)


def scaling_efficiency(parallel_total: float, world_size: int, single: float) -> float:
    """Total throughput on n devices over n times the throughput on one device (1.0 = linear scaling)."""
    return parallel_total / (world_size * single)


def scaling_pairs(measurements) -> list[tuple]:
    """(parallel row, single-device row, efficiency) for every parallel training row that has a single-device
    row of the same workload, preset and variant (less `parallel`/`world_size`) among `measurements` — for
    reports over results merged from separate runs."""
    import json

    def key(m, params: dict) -> tuple:
        return (m.workload, m.preset, json.dumps(params, sort_keys=True))

    single = {key(m, m.variant): m for m in measurements if m.ok and "parallel" not in m.variant}
    out = []
    for m in measurements:
        if not (m.ok and m.variant.get("parallel") and m.variant.get("world_size")):
            continue
        plain = {k: v for k, v in m.variant.items() if k not in ("parallel", "world_size")}
        s = single.get(key(m, plain))
        if s is not None and s.value:
            out.append((m, s, scaling_efficiency(m.value, int(m.variant["world_size"]), s.value)))
    return out
