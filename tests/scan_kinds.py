"""The scan of tests/fixtures/scan_kinds (a regression fixture per kind of lock-in), shared by the scanner's test
files: made once per process, read by each."""

from functools import lru_cache
from pathlib import Path

from gapbench.scan import scan

KINDS = Path(__file__).parent / "fixtures" / "scan_kinds"


@lru_cache(maxsize=1)
def kinds_report():
    return scan(KINDS, jobs=1)


def hits(report, path):
    return {(f.line, f.rule, f.ported) for f in report.findings if f.path == path}
