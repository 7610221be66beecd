"""The step-time model's own error: the calibration rule, the shipped calibration (its σ follows from its pairs,
which come from development models only), and a prediction's interval that draws it — and draws nothing where
both sides are one platform running one trace."""

from __future__ import annotations

import math

import pytest
from benchmarks import assess_models
from tests.test_assess_speed import _m, rates_file, step_work

from gapbench import results
from gapbench.assess import calibration
from gapbench.assess.calibration import (
    Calibration,
    Pair,
    Shift,
    calibrate,
    checked_weights,
    covered,
    fitted_weights,
    leanings,
    left_out_check,
    log_error,
    needed,
    pair_kind,
    reference_weights,
    shifts,
    sigma_of_interval,
    sign_test,
    unshifted,
)
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import Reference, predict, reference_of, side_kind
from gapbench.assess.work import Work
from gapbench.report.assess import _method_text


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
    assert cal.shifts == shifts(cal.pairs) and all(p.kind for p in cal.pairs)
    assert cal.weights == reference_weights(cal.pairs) and cal.weights  # the weights follow from the pairs too
    left = unshifted(cal.pairs, cal.shifts)
    assert cal.sigma == pytest.approx(calibrate(left, cal.level), abs=1e-4)
    assert covered(left, cal.sigma, cal.level) >= math.ceil(0.95 * (len(cal.pairs) + 1))
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


def test_a_kind_is_shifted_only_where_its_sessions_lean_to_one_side_beyond_chance():
    a, b, c = "cpu X (2 cores, 1 threads) → cpu X (2 cores, 2 threads), one trace", "kind b", "kind c"
    # kind a: seven sessions of two pairs, each session's median above zero
    lean = (0.07, 0.12, 0.09, 0.13, 0.10, 0.08, 0.15)
    biased = [Pair(f"a{i}{j}", e + d, 0.05, a, f"session {i}") for i, e in enumerate(lean) for j, d in
              enumerate((-0.01, 0.01))]
    noisy = [Pair(f"b{i}", e, 0.05, b, f"session {i}") for i, e in enumerate((0.2, -0.25, 0.15, -0.1, 0.1, 0.05, 0.3,
                                                                                -0.2, 0.1))]
    # kind c: seventeen pairs above zero, but from five sessions — one machine's state, five times, not seventeen
    clustered = [Pair(f"c{i}", 0.1, 0.05, c, f"session {i % 5}") for i in range(17)]
    assert shifts(biased + noisy + clustered + [Pair("no kind", 0.5, 0.05)]) == ()  # 7 of 7: p = 2 / 2⁷ = 0.016
    lean_c = next(k for k in leanings(clustered) if k.kind == c)
    assert (lean_c.pairs, lean_c.sessions, lean_c.above, lean_c.p) == (17, 5, 5, 0.0625)
    biased.append(Pair("a7", 0.40, 0.05, a, "session 7"))  # an eighth session: 2 / 2⁸ = 0.0078
    found = shifts(biased + noisy + clustered)
    assert [s.kind for s in found] == [a] and (found[0].pairs, found[0].sessions, found[0].above) == (15, 8, 8)
    assert found[0].shift == pytest.approx(0.11, abs=1e-9)  # the median of .07 .08 .09 .10 .12 .13 .15 .40
    assert found[0].p == pytest.approx(2 / 2 ** 8, rel=1e-4)
    assert sign_test(8, 8) == pytest.approx(0.0078125) and sign_test(4, 8) == 1.0 and sign_test(1, 8) == sign_test(7, 8)
    left = unshifted(biased + noisy, found)
    assert [p.error for p in left[:15]] == pytest.approx([p.error - 0.11 for p in biased], abs=1e-9)
    assert left[15:] == noisy
    # the kind names each side's processor, cores and threads, and whether both run one trace
    one = {"type": "cpu", "product": "AMD EPYC", "cores": 2, "threads": 1}
    assert pair_kind(one, {**one, "threads": 2}, True) == \
        "cpu AMD EPYC (2 cores, 1 threads) → cpu AMD EPYC (2 cores, 2 threads), one trace"
    assert pair_kind(one, {"type": "cuda", "name": "H100"}, False).endswith("accelerator H100 (? cores, ? threads), "
                                                                          "two traces")


def test_a_prediction_of_a_shifted_kind_takes_the_shift_off_its_gap_and_its_check(tmp_path, monkeypatch):
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10)))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5)))
    sides = [(step_work(), a), (step_work(), b)]
    plain, _ = predict(sides)
    assert plain.shift == 0.0 and plain.shift_basis == "" and plain.kind == side_kind(sides)
    shipped = calibration.default()
    shift = Shift(side_kind(sides), 0.1, 8, 8, 8, 0.0078)
    monkeypatch.setattr(calibration, "default", lambda: Calibration(shipped.sigma, shipped.level, shipped.pairs,
                                                                    shipped.basis, shipped.device_classes, (shift,)))
    moved, _ = predict(sides)
    assert moved.shift == 0.1 and "8 sessions of development pairs of this kind" in moved.shift_basis
    assert 1 + moved.gap_pct / 100 == pytest.approx((1 + plain.gap_pct / 100) * math.exp(-0.1), rel=1e-9)
    assert 1 + moved.lo / 100 == pytest.approx((1 + plain.lo / 100) * math.exp(-0.1), rel=1e-9)
    assert "a factor of 0.905 on the ratio" in _method_text(moved) and "factor of" not in _method_text(plain)
    # the rates' noise alone (model σ given): the model as it prices, no shift
    raw, _ = predict(sides, model_sigma=0.0)
    assert raw.shift == 0.0 and raw.gap_pct == plain.gap_pct


def test_a_reference_weight_is_the_regression_of_a_pairs_error_on_its_sessions_other_pairs():
    a, b, c = "kind a", "kind b", "kind c"
    # three sessions of kind a, each its couples' mean product over its mean square: (.02 + .03 + .02) / .1
    alike = [Pair(f"a{s}{i}", e, 0.05, a, f"s{s}") for s, es in enumerate(((0.1, 0.2), (0.3, 0.1), (-0.1, -0.2)))
             for i, e in enumerate(es)]
    # kind b: each session's pairs miss in opposite ways: the regression is negative, clipped to no correction
    apart = [Pair(f"b{s}{i}", e, 0.05, b, f"s{s}") for s, es in enumerate(((0.1, -0.1), (0.2, -0.15), (-0.1, 0.05)))
             for i, e in enumerate(es)]
    # kind c: two sessions of two pairs and one of one pair — fewer than three sessions to fit a weight on
    few = [Pair(f"c{i}", 0.1, 0.05, c, f"s{i % 3}") for i in range(5)]
    unkeyed = [Pair("no session", 0.1, 0.05, a), Pair("no kind", 0.1, 0.05, "", "s0")]
    found = {w.kind: w for w in fitted_weights(alike + apart + few + unkeyed)}
    assert set(found) == {a, b}
    assert found[a].weight == pytest.approx(0.7) and (found[a].couples, found[a].sessions) == (6, 3)
    assert found[b].weight == 0.0
    assert "fitted on 6 couples of development pairs of this kind measured in one session (3 sessions)" in \
        found[a].basis()
    # each session counts once: four pairs that miss two ways (mean product −.16 / 12, mean square .04) against two
    # sessions of two alike (.01 and .01 each) — couple by couple the four's twelve couples would outweigh the two's
    once = [Pair(f"e{s}{i}", e, 0.05, a, f"s{s}") for s, es in enumerate(((0.2, -0.2, 0.2, -0.2), (0.1, 0.1),
                                                                           (0.1, 0.1))) for i, e in enumerate(es)]
    (w,) = fitted_weights(once)
    assert w.weight == pytest.approx((0.02 - 0.16 / 12) / 0.06, abs=1e-4) and w.couples == 16
    # pairs that miss exactly alike within each session: the reference's error is all of theirs
    same = [Pair(f"d{s}{i}", e, 0.05, a, f"s{s}") for s, e in enumerate((0.1, -0.2, 0.05)) for i in range(3)]
    assert fitted_weights(same)[0].weight == 1.0


def test_a_reference_weight_is_kept_only_where_it_holds_on_sessions_it_was_not_fitted_on():
    shared, one_off = "kind shared", "kind one-off"
    # four sessions whose pairs miss alike: each left out, the other three fit a weight near 1 and it narrows them
    alike = [Pair(f"a{s}{i}", e, 0.05, shared, f"s{s}") for s, es in enumerate(((0.1, 0.12), (-0.1, -0.08),
                                                                                 (0.2, 0.18), (0.05, 0.07)))
             for i, e in enumerate(es)]
    # three sessions alike and one whose pairs miss apart: fitted on all four w = (.01·3 − .09) / .12 < 0, nothing;
    # the fourth left out, the three fit 1 and correct its +.3 by its −.3 into +.6: worse, so no weight is kept
    mixed = [Pair(f"b{s}{i}", e, 0.05, one_off, f"s{s}") for s, es in enumerate(((0.1, 0.1), (0.1, 0.1), (0.1, 0.1),
                                                                                  (0.3, -0.3)))
             for i, e in enumerate(es)]
    kept, dropped = checked_weights(alike + mixed)
    assert [w.kind for w in kept] == [shared] and [w.kind for w in dropped] == [one_off]
    n, without, with_ = left_out_check(alike, shared)
    assert n == 8 and with_ < without / 3 and (kept[0].checked, kept[0].without, kept[0].with_) == (n, without, with_)
    n, without, with_ = left_out_check(mixed, one_off)
    assert n == 8 and with_ > without
    assert reference_weights(alike + mixed) == kept
    assert "the mean |error| of 8 pairs" in kept[0].basis()


def test_a_reference_takes_its_weighted_error_off_the_gap_in_place_of_the_kinds_shift(tmp_path, monkeypatch):
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10)))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5)))
    sides = [(step_work(), a), (step_work(), b)]
    plain, _ = predict(sides)
    ref = Reference("bert", 0.2)
    shipped = calibration.default()
    kind = side_kind(sides)

    def with_(*, shift=(), weights=()):
        monkeypatch.setattr(calibration, "default", lambda: Calibration(shipped.sigma, shipped.level, shipped.pairs,
                                                                        shipped.basis, shipped.device_classes, shift,
                                                                        weights))
    # no weight for the kind: the reference is said, and changes nothing
    with_()
    unweighted, _ = predict(sides, reference=ref)
    assert unweighted.gap_pct == plain.gap_pct and unweighted.reference_weight == 0.0
    assert "no weight is calibrated" in unweighted.reference_basis and "no weight is calibrated" in \
        _method_text(unweighted)
    # a weight of 0.5 and a shift of the kind: half the reference's error comes off, the shift does not
    with_(shift=(Shift(kind, 0.3, 8, 8, 8, 0.0078),), weights=(calibration.Weight(kind, 0.5, 30, 9),))
    moved, _ = predict(sides, reference=ref)
    assert moved.shift == 0.0 and moved.reference_weight == 0.5 and moved.reference == ref
    assert 1 + moved.gap_pct / 100 == pytest.approx((1 + plain.gap_pct / 100) * math.exp(-0.1), rel=1e-9)
    assert 1 + moved.hi / 100 == pytest.approx((1 + plain.hi / 100) * math.exp(-0.1), rel=1e-9)
    assert "bert, measured on both sides in the same session, missed its own gap by +0.200" in _method_text(moved)
    assert "0.50 of that is taken off this prediction, a factor of 0.905 on the ratio" in _method_text(moved)
    shifted, _ = predict(sides)  # without a reference the kind's shift applies
    assert shifted.shift == 0.3
    # the model's σ given: the model as it prices, neither shift nor reference
    raw, _ = predict(sides, model_sigma=0.0, reference=ref)
    assert raw.gap_pct == plain.gap_pct and raw.reference_weight == 0.0 and "was given" in raw.reference_basis


def test_a_references_error_is_its_own_prediction_against_its_measured_rows(tmp_path):
    def row(seconds: float) -> object:
        return _m("llm-train", {"model": "x", "dtype": "fp32"}, 1 / seconds, "steps/s",
                  metrics={"category": "model", "time_per_iter_s": seconds})

    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=10,
                                               extra=[row(0.010)])))
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.002, per_op_us=5,
                                               extra=[row(0.004)])))
    ref_work = Work("llm-train:x", step_work().items, variant={"model": "x", "dtype": "fp32"})
    ref = reference_of("llm-train:x", [(ref_work, a), (ref_work, b)])
    raw, _ = predict([(ref_work, a), (ref_work, b)], model_sigma=0.0)
    assert ref.name == "llm-train:x"
    assert ref.error == pytest.approx(log_error(raw.gap_pct, raw.measured.measured_gap.pct))
    assert ref.error == pytest.approx(math.log((1 + raw.gap_pct / 100) / 2.5), rel=1e-3)  # measured: 2.5× faster
    # a reference neither file measured: no error, and the prediction it is given to says why it was not applied
    other = Work("llm-train:y", step_work().items, variant={"model": "y", "dtype": "fp32"})
    missing = reference_of("llm-train:y", [(other, a), (other, b)])
    assert missing.error is None and "has no measured gap here" in missing.note
    p, _ = predict([(step_work(), a), (step_work(), b)], reference=missing)
    assert p.reference_weight == 0.0 and "not applied: the reference llm-train:y has no measured gap" in \
        _method_text(p)
