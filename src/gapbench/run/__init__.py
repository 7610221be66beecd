"""One run's path: the plan (what to run, typed and checked before any worker starts), the suite (passes over
the plan's workloads, journaled, resumable), each workload's workers (restarted after a failure); the engine
runs each variant in its worker and the timing engine times it."""

from gapbench.engine.journal import journal_path
from gapbench.run.plan import RunPlan, build_plan, default_output, describe_files
from gapbench.run.resume import read_journal
from gapbench.run.suite import Interrupted, run_suite
from gapbench.run.workload import Reporter

__all__ = ["RunPlan", "Reporter", "Interrupted", "build_plan", "run_suite", "read_journal", "journal_path",
           "default_output", "describe_files"]
