"""Agreement between ranks outside the timed regions: one decides, all follow.

Every rank must call the same collectives the same number of times, so each decision that depends
on a clock (iteration counts, budgets, too-slow) is taken from values all ranks agree on. The
control traffic runs over a gloo group on the CPU, away from the device streams being timed.
"""

from __future__ import annotations

from datetime import timedelta

import torch
import torch.distributed as dist


class Control:
    """Small CPU-side collectives for decisions: max of a float, barrier, gather/broadcast of objects.

    It is the timing engine's `measure.Agreement` under torch.distributed: every clock-dependent decision
    is the slowest rank's."""

    def __init__(self, timeout_s: float | None = None):
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        if dist.get_backend() == "gloo":
            self.group = None  # the default group is already a CPU group
        else:
            kw = {"timeout": timedelta(seconds=timeout_s)} if timeout_s else {}
            self.group = dist.new_group(backend="gloo", **kw)

    def max(self, x: float) -> float:
        t = torch.tensor([float(x)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return float(t.item())

    def min(self, x: float) -> float:
        return -self.max(-float(x))

    def max_each(self, xs: list[float]) -> list[float]:
        t = torch.tensor([float(x) for x in xs], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.group)
        return [float(v) for v in t.tolist()]

    def sum(self, x: float) -> float:
        t = torch.tensor([float(x)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.group)
        return float(t.item())

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def all_gather(self, obj) -> list:
        out = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def broadcast(self, obj):
        """rank 0's obj on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.group)
        return box[0]
