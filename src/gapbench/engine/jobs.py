"""The job a workload worker receives: what to run, where, under which limits. JSON on the worker's stdin (a
rank group's: a file), written with model_dump_json and read back with model_validate_json."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from gapbench.record import Json, Record
from gapbench.timing import DEFAULT_BUDGET


class WorkloadJob(Record):
    """One workload's variants (all but `skip`) on one device, in one worker or one rank group."""

    model_config = ConfigDict(frozen=False, extra="ignore")

    workload: str
    device: str
    preset: str | None = None
    workload_files: list[str] = Field(default_factory=list)
    skip: list[str] = Field(default_factory=list)  # variant keys already measured
    workload_budget_s: float | None = None  # what is left of the run's budget for this workload
    variant_budget_s: float = DEFAULT_BUDGET.seconds
    min_time_s: float = DEFAULT_BUDGET.min_time_s
    repeats: int = DEFAULT_BUDGET.repeats
    options: dict[str, Json] = Field(default_factory=dict)  # the run's workload options, as JSON values
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
