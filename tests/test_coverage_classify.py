"""Classification rules of the coverage audit, on real torch errors and real operator outputs."""

from __future__ import annotations

import pytest
import torch

from gapbench import devices
from gapbench.coverage.classify import aggregate, classify_exception, compare_outputs, fallback_ops, family_of
from gapbench.coverage.summary import headline, summarize


def _raised(fn) -> BaseException:
    try:
        fn()
    except Exception as e:  # the real error torch raises
        return e
    raise AssertionError("expected the op to raise")


def test_real_missing_dtype_kernels_are_unsupported():
    # CPU kernels that do not exist for Half in torch: fft, avg_pool3d, linalg.inv
    for fn in (lambda: torch.fft.fft(torch.randn(8).half()),
               lambda: torch.nn.functional.avg_pool3d(torch.randn(1, 1, 4, 4, 4).half(), 2),
               lambda: torch.linalg.inv(torch.eye(3).half())):
        status, reason = classify_exception(_raised(fn))
        assert status == "unsupported", reason


def test_a_bad_argument_is_an_error_not_unsupported():
    e = _raised(lambda: torch.mm(torch.randn(2, 3), torch.randn(4, 5)))
    status, reason = classify_exception(e)
    assert status == "error"
    assert "RuntimeError" in reason and "\n" not in reason


def test_compare_accepts_float32_rounding_and_reports_its_size():
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(0))
    expected = torch.linalg.matrix_norm(x.double() @ x.double().T)
    actual = torch.linalg.matrix_norm(x @ x.T)
    c = compare_outputs(actual, expected, torch.float32)
    assert c.ok
    assert c.max_error is not None and 0 <= c.max_error < 1e-2


def test_compare_flags_a_perturbed_result_with_its_max_error():
    x = torch.randn(50, generator=torch.Generator().manual_seed(1))
    expected = torch.sin(x.double())
    actual = torch.sin(x)
    actual[7] += 0.25  # one value off: a wrong kernel, not rounding
    c = compare_outputs(actual, expected, torch.float32)
    assert not c.ok
    assert c.max_error == pytest.approx(0.25, rel=1e-3)
    assert "1 of 50" in c.detail


def test_compare_bf16_tolerance_is_bf16_sized():
    x = torch.linspace(-3, 3, 100)
    expected = torch.exp(x.to(torch.bfloat16).double())
    assert compare_outputs(torch.exp(x.to(torch.bfloat16)), expected, torch.bfloat16).ok
    # the same bf16 result is far outside float32's tolerance
    assert not compare_outputs(torch.exp(x.to(torch.bfloat16)).float(), expected, torch.float32).ok


def test_compare_structure_nan_and_integer_outputs():
    v, i = torch.tensor([3.0, 1.0, 2.0]).sort()
    assert compare_outputs((v, i), (v.double(), i.clone()), torch.float32).ok
    assert not compare_outputs((v, i.flip(0)), (v.double(), i), torch.float32).ok
    assert not compare_outputs((v,), (v, i), torch.float32).ok
    nan = torch.tensor([float("nan"), 1.0])
    assert compare_outputs(nan, nan.double(), torch.float32).ok
    assert not compare_outputs(torch.tensor([0.0, 1.0]), nan.double(), torch.float32).ok


def test_fallback_warnings_name_the_operator():
    """Each backend knows its own fallback warning (gapbench.devices: Backend.fallback_patterns)."""
    text = ("The operator 'aten::linalg_qr.out' is not currently supported on the XPU backend and will fall back "
            "to run on the CPU. This may have performance implications.")
    xpu, cpu = devices.by_name("xpu").fallback_patterns, devices.by_name("cpu").fallback_patterns
    assert fallback_ops([text], xpu) == ["aten::linalg_qr.out"]
    assert fallback_ops([text], cpu) == []  # nothing falls back on the CPU itself
    assert fallback_ops(["unrelated warning"], xpu) == []
    mps = devices.by_name("mps").fallback_patterns
    assert fallback_ops([text.replace("XPU", "MPS")], mps) == ["aten::linalg_qr.out"]
    assert fallback_ops([text], mps) == []


def test_aggregate_worst_sample_wins_and_counts():
    assert aggregate([("native", ""), ("native", "")]) == ("native", "")
    status, reason = aggregate([("native", ""), ("unsupported", "no Half"), ("native", "")])
    assert status == "unsupported" and reason.startswith("1 of 3 samples")
    assert aggregate([("unsupported", "x"), ("wrong_result", "off")])[0] == "wrong_result"
    assert aggregate([("skipped", "random")])[0] == "skipped"
    assert aggregate([("skipped", "random"), ("native", "")])[0] == "native"


def test_families_and_summary():
    assert family_of("linalg.svd", "OpInfo") == "linalg"
    assert family_of("nn.functional.conv2d", "OpInfo") == "nn.functional"
    assert family_of("sum", "ReductionOpInfo") == "reductions"
    assert family_of("abs", "UnaryUfuncInfo") == "unary"
    rows = [
        {"op": "abs", "variant": "", "family": "unary", "dtype": "float32", "status": "native"},
        {"op": "abs", "variant": "", "family": "unary", "dtype": "bfloat16", "status": "wrong_result"},
        {"op": "linalg.inv", "variant": "", "family": "linalg", "dtype": "float32", "status": "native"},
        {"op": "linalg.inv", "variant": "", "family": "linalg", "dtype": "bfloat16", "status": "skipped"},
        {"op": "bitwise_and", "variant": "", "family": "binary", "dtype": "float32", "status": "skipped"},
    ]
    summary, families = summarize(rows)
    assert summary["total"] == 3 and summary["native"] == 1 and summary["wrong_result"] == 1
    assert summary["skipped"] == 1 and summary["native_pct"] == 50.0
    assert families["linalg"]["native"] == 1 and families["unary"]["wrong_result"] == 1
    assert headline(summary).startswith("1 of 2 ops native (50.0%), 1 wrong, 0 fall back to CPU")
