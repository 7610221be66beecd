"""torch.distributed: launching rank groups (launch), who a rank is (info), how ranks agree (control),
data-parallel wrapping (parallel), the per-rank worker (rank_worker), and one-line summaries (summary)."""

from gapbench.distributed.info import DistInfo, backend_for, under_launcher

__all__ = ["DistInfo", "backend_for", "under_launcher"]
