"""The records of a claims check: the table as read, each number's verdict with its evidence, each row's, and the
whole table's. Pydantic models (gapbench.record.Record), so the JSON output and its schema come from them."""

from __future__ import annotations

from pydantic import Field

from gapbench.record import Record

# how bad a finding is, worst last; `--fail-on implausible` fails on the last
SEVERITIES = ("ok", "unknown", "note", "unlike", "implausible")


class Evidence(Record):
    """One fact behind a verdict, with where it comes from."""

    text: str
    source: str = ""
    date: str = ""
    run_by: str = ""  # "vendor", "cloud", "independent" or "" (not said)


class NumberVerdict(Record):
    """One published number, read and judged."""

    platform: str  # the column header as written
    spec: str = ""  # the accelerators.toml key it was matched to; "" when none
    text: str  # the cell as written
    value: float | None = None  # in the unit as written
    unit: str = ""
    si_value: float | None = Field(default=None, description="FLOP/s, bytes/s, or work units per second")
    verdict: str = Field(description="datasheet, above_peak, above_bound, unit_mismatch, within_measured, "
                         "above_measured, below_measured, plausible, no_reference, unreadable, no_platform, no_row")
    severity: str = "unknown"
    peak_kind: str = ""  # for a datasheet figure: "dense", "sparse" or "bandwidth"
    dtype: str = ""  # the precision the number was judged in ("" when none applies)
    implied_flops: float | None = None  # model rows: the FLOP/s the figure implies
    peak_share: float | None = None  # implied or stated FLOP/s (bytes/s) over one device's peak
    devices_needed: int | None = None  # model rows: the fewest devices at which the figure is plausible
    evidence: list[Evidence] = Field(default_factory=list)


class GapCheck(Record):
    """The stated gap against the one the values give (first platform against the second)."""

    stated_text: str = ""
    stated_pct: float | None = None
    computed_pct: float | None = None
    verdict: str = Field(default="not_stated", description="agrees, sign_reversed, other_baseline, disagrees, "
                         "not_stated, no_values")
    convention: str = ""
    direction: str = ""  # a winner the gap text names, and whether the values agree


class LikeForLike(Record):
    """A gap between measured references of the two platforms for the same row."""

    pct: float
    value: float
    baseline_value: float
    unit: str
    variant: dict = Field(default_factory=dict)
    source: str
    baseline_source: str
    same_source: bool = False


class MeasuredGap(Record):
    """The user's own measurement of the row on the first two platforms, with the gap and its interval
    (gapbench.compare: gap = first / second − 1, the second platform the baseline)."""

    workload: str
    variant: dict = Field(default_factory=dict)
    values: list[float | None] = Field(default_factory=list)  # per platform, in `unit`; None: not measured ok
    unit: str = ""
    intervals: list[list[float] | None] = Field(default_factory=list, description="each value's 95% interval")
    runs: list[int] = Field(default_factory=list, description="independent runs behind each value")
    status: list[str] = Field(default_factory=list, description="each cell's status ('ok', 'missing', a failure)")
    share_of_claim: list[float | None] = Field(default_factory=list,
                                               description="each measured value over the table's figure")
    pct: float | None = None
    lo: float | None = None
    hi: float | None = None
    significant: bool | None = None
    basis: str = ""  # "runs", "single run" (an assumed run-to-run spread), "" (no interval)
    flagged: str = ""  # a side was measured on a disturbed host: why, and no verdict
    stated_within: bool | None = Field(default=None, description="whether the table's stated gap lies inside "
                                       "the measured gap's interval; None when either is missing")
    note: str = ""


class RowVerdict(Record):
    label: str
    workload: str = ""  # "" when the label matched no workload
    variant: dict = Field(default_factory=dict)
    verdict: str = "unknown"  # the worst severity of its numbers and comparisons
    numbers: list[NumberVerdict] = Field(default_factory=list)
    gap: GapCheck = Field(default_factory=GapCheck)
    unlike: list[str] = Field(default_factory=list, description="why the pair is not like for like")
    like_for_like: list[LikeForLike] = Field(default_factory=list)
    measured: list[MeasuredGap] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class Platform(Record):
    header: str
    spec: str = ""
    spec_name: str = ""
    also: list[str] = Field(default_factory=list)
    note: str = ""
    stacks: dict[str, str] = Field(default_factory=dict)
    date: str = ""
    results: list[str] = Field(default_factory=list, description="the --results files matched to this platform")
    results_by: list[str] = Field(default_factory=list, description="how they were matched: label, spec row")
    results_notes: list[str] = Field(default_factory=list)


class ClaimReport(Record):
    """The whole check: what was read, every verdict, and the one line that sums it up."""

    file: str
    title: str = ""
    verdict: str
    summary: str
    platforms: list[Platform] = Field(default_factory=list)
    rows: list[RowVerdict] = Field(default_factory=list)
    counts: dict[str, int] = Field(default_factory=dict)
    bounds: dict[str, float] = Field(default_factory=dict)
    unmatched: list[str] = Field(default_factory=list)
    results: list[str] = Field(default_factory=list)

    def fails(self, level: str) -> bool:
        """Whether any number or row is at `level` or worse (for --fail-on)."""
        limit = SEVERITIES.index(level)
        return any(SEVERITIES.index(r.verdict) >= limit for r in self.rows) or any(
            SEVERITIES.index(n.severity) >= limit for r in self.rows for n in r.numbers)
