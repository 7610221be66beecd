"""The name workload files written for gapbench 0.1 import the timing engine by; it is gapbench.timing."""

from gapbench.timing import DEFAULT_BUDGET, LOCAL, Agreement, Budget, Timing, TooSlow, time_fn, time_once

__all__ = ["DEFAULT_BUDGET", "LOCAL", "Agreement", "Budget", "Timing", "TooSlow", "time_fn", "time_once"]
