"""What the library workloads share: every row names its path's kind (vendor, tuned, portable, compiled,
beside torch), also the rows of a dtype the stack cannot compute in, which the engine records before run()."""

from __future__ import annotations

from gapbench.results import Measurement
from gapbench.workloads.base import Context, Variant, Workload


class PathWorkload(Workload):
    category = "micro"

    def kind(self, path: str) -> str:
        """The kind of a path (gapbench.workloads.libs.paths)."""
        raise NotImplementedError

    def failed(self, variant: Variant, ctx: Context, status: str, reason: str, **extra) -> Measurement:
        m = super().failed(variant, ctx, status, reason, **extra)
        path = variant.params.get("path")
        if path is None or "path_kind" in m.metrics:
            return m
        return m.replace(metrics=m.metrics | {"path_kind": self.kind(path)})
