"""The step-time model's own error: the calibration rule, the shipped calibration (its σ follows from its pairs,
which come from development models only), and a prediction's interval that draws it — and draws nothing where
both sides are one platform running one trace."""

from __future__ import annotations

import math

import pytest
from benchmarks import assess_models
from tests.test_assess_speed import rates_file, step_work

from gapbench import results
from gapbench.assess import calibration
from gapbench.assess.calibration import Pair, calibrate, covered, log_error, needed, sigma_of_interval
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import predict


def test_the_smallest_sigma_that_holds_the_conformal_rank():
    z = 1.959964
    exact = [Pair(f"p{i}", 0.0, 0.05) for i in range(19)]
    assert calibrate(exact) == 0.0  # ⌈0.95 · 20⌉ = 19 of 19
    # one pair of twenty off by 0.5 in log gap: ⌈0.95 · 21⌉ = 20 must be held, so σ reaches it (19 of 20, a bare
    # 95% of these pairs, would fall short of 95% on the next pair)
    far = Pair("far", 0.5, 0.05)
    assert calibrate(exact + [far]) == pytest.approx(math.sqrt((0.5 / z) ** 2 - 0.05 ** 2), abs=2e-4)
    # one of forty off: ⌈0.95 · 41⌉ = 39 of 40, held without any model error
    exact = [Pair(f"p{i}", 0.0, 0.05) for i in range(39)]
    assert calibrate(exact + [far]) == 0.0
    # two of forty off: σ must reach the smaller miss, z·√(0.05² + σ²) ≥ 0.3, not the larger
    pairs = exact[:38] + [far, Pair("near", 0.3, 0.05)]
    sigma = calibrate(pairs)
    assert sigma == pytest.approx(math.sqrt((0.3 / z) ** 2 - 0.05 ** 2), abs=2e-4)
    assert covered(pairs, sigma, 0.95) == 39 and covered(pairs, sigma - 0.001, 0.95) == 38
    assert needed(40) == 39 and needed(19) == 19 and needed(1) == 1
    with pytest.raises(ValueError):
        calibrate([])


def test_log_error_and_interval_width_are_in_log_gap():
    assert log_error(50.0, 50.0) == 0.0
    assert log_error(100.0, 0.0) == pytest.approx(math.log(2))
    assert sigma_of_interval(-10.0, 21.0) == pytest.approx(math.log(1.21 / 0.9) / (2 * 1.959964), rel=1e-6)


def test_the_shipped_calibration_follows_from_its_pairs_of_development_models():
    cal = calibration.load()
    assert cal.level == 0.95 and cal.device_classes == ("cpu",) and len(cal.pairs) >= 20
    assert cal.sigma == pytest.approx(calibrate(list(cal.pairs), cal.level), abs=1e-4)
    assert covered(cal.pairs, cal.sigma, cal.level) >= math.ceil(0.95 * (len(cal.pairs) + 1))
    held = [n for n, m in assess_models.models().items() if m["split"] == "held-aside"]
    assert not [p.name for p in cal.pairs if any(f": {h}," in p.name for h in held)]


def test_a_prediction_draws_the_model_error_only_where_there_is_something_to_be_wrong_about(tmp_path):
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10)))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5)))
    noise, _ = predict([(step_work(), a), (step_work(), b)], model_sigma=0.0)
    cal, _ = predict([(step_work(), a), (step_work(), b)])
    assert noise.model_sigma == 0.0 and cal.model_sigma == calibration.default().sigma > 0
    assert cal.gap_pct == noise.gap_pct and cal.lo < noise.lo and cal.hi > noise.hi
    assert "development models" in cal.model_basis
    same, _ = predict([(step_work(), a), (step_work(), a)])
    assert same.model_sigma == 0.0 and same.lo == pytest.approx(0, abs=1e-9)
    accel = platform_rates(results.load(rates_file(tmp_path / "c.json", gemm_tflops=0.002, per_op_us=5,
                                                   device_type="test")))
    beyond, _ = predict([(step_work(), a), (step_work(), accel)])
    assert "not calibrated on accelerator pairs" in beyond.model_basis
