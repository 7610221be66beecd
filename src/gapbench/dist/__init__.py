"""torch.distributed glue: launching ranks (launch), who a rank is (info), agreement between ranks
(control, timing), data-parallel wrapping and training (parallel, training), the per-rank worker."""

from gapbench.dist.info import DistInfo, backend_for, under_launcher

__all__ = ["DistInfo", "backend_for", "under_launcher"]
