"""Build files read by their structure: CI workflows as YAML, CMake commands and Makefile variables, and the
portability macros a project defines for itself (tests/fixtures/scan_kinds)."""

from pathlib import Path

import pytest

from gapbench.errors import GapbenchError
from gapbench.scan import scan
from gapbench.scan.rules import load_rules

KINDS = Path(__file__).parent / "fixtures" / "scan_kinds"


@pytest.fixture(scope="module")
def report():
    return scan(KINDS, jobs=1)


def hits(report, path):
    return {(f.line, f.rule, f.ported) for f in report.findings if f.path == path}


def test_workflow_matrix_axes_and_conditions(report):
    got = hits(report, "workflows/matrix.yml")
    lines = {line for line, _, ported in got if not ported}
    # a matrix list, an include row (not the ROCm row, 16), an exclude entry, each item of a block list
    assert {(13, "build-ci-cuda-axis", False), (15, "build-ci-cuda-axis", False), (19, "build-ci-cuda-axis", False),
            (21, "build-ci-cuda-axis", False), (22, "build-ci-cuda-axis", False)} <= got
    assert (26, "build-ci-cuda-step", False) in got                 # if: matrix.cuda != ''
    assert (33, "build-env-cuda-visible-devices", True) in got      # inside the step run only for ROCm
    # not: names and ids (9, 24, 25), the ROCm row (16), a step for no CUDA (36), a switch turning CUDA off (38),
    # a cache key (42)
    assert not lines & {9, 16, 24, 25, 36, 38, 42}


def test_structural_rules_are_checked():
    bad = KINDS.parent / "scan_structure_bad_rule.toml"
    bad.write_text('[[rule]]\nid = "x"\nkind = "build"\nstructure = "json-key"\npattern = "a"\nmessage = "m"\n'
                   'fix = "f"\nreference = "r"\nverdict = { rocm = "auto", npu = "auto", xpu = "auto" }\n')
    try:
        with pytest.raises(GapbenchError, match="structure must be one of"):
            load_rules([bad])
    finally:
        bad.unlink()
