"""The job a workload worker receives: what to run, where, under which limits. JSON on the worker's stdin."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from gapbench.timing import DEFAULT_BUDGET


@dataclass
class WorkloadJob:
    """One workload's variants (all but `skip`) on one device, in one worker or one rank group."""

    workload: str
    device: str
    preset: str | None = None
    workload_files: list[str] = field(default_factory=list)
    skip: list[str] = field(default_factory=list)  # variant keys already measured
    workload_budget_s: float | None = None  # what is left of the run's budget for this workload
    variant_budget_s: float = DEFAULT_BUDGET.seconds
    min_time_s: float = DEFAULT_BUDGET.min_time_s
    repeats: int = DEFAULT_BUDGET.repeats
    options: dict = field(default_factory=dict)
    threads: int | None = None
    memory_limit_bytes: int | None = None  # RLIMIT_AS of the worker (where device memory is host memory)
    describe: bool = False  # only import the workload files and describe their workloads
    # a rank group (gapbench.distributed): ranks to start here, torch.distributed backend, who launched
    nproc: int | None = None
    backend: str | None = None
    launcher: str | None = None
    dist_timeout_s: float | None = None

    @property
    def distributed(self) -> bool:
        return self.dist_timeout_s is not None

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> WorkloadJob:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("a job is a JSON object")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})
