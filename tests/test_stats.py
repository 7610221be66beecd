import math
import random
import statistics
import subprocess
import sys

import pytest

from gapbench.stats import RunGap, Stats, compare_runs, median_ci95, normal_quantile, t_quantile


def test_median_iqr_min_max_of_known_samples():
    s = Stats.from_samples([5, 1, 4, 2, 3])
    assert (s.median, s.min, s.max, s.n) == (3, 1, 5, 5)
    assert s.iqr == pytest.approx(2.0)  # quartiles 2 and 4 (linear interpolation)
    assert s.mean == 3 and s.stdev == pytest.approx(math.sqrt(2.5))


def test_even_count_median_and_iqr_match_numpy_linear_quantiles():
    np = pytest.importorskip("numpy")
    xs = [0.3, 1.7, 2.2, 9.0, 4.4, 5.1, 0.9, 3.3]
    s = Stats.from_samples(xs)
    assert s.median == pytest.approx(float(np.median(xs)))
    assert s.iqr == pytest.approx(float(np.quantile(xs, 0.75) - np.quantile(xs, 0.25)))


def test_ci95_uses_binomial_order_statistics():
    xs = list(range(1, 11))  # n=10: P(B<=1)=11/1024 <= 2.5% < P(B<=2) -> [x(2), x(9)]
    assert median_ci95(xs) == (2, 9)
    xs = list(range(1, 21))  # n=20: P(B<=5)=2.07% -> [x(6), x(15)]
    assert median_ci95(xs) == (6, 15)


def test_ci95_of_few_samples_is_the_full_range():
    assert median_ci95([3.0, 1.0, 2.0]) == (1.0, 3.0)


def test_ci95_covers_the_true_median_about_95_percent_of_the_time():
    rng = random.Random(7)
    hits = 0
    trials = 2000
    for _ in range(trials):
        xs = [rng.expovariate(1.0) for _ in range(15)]
        lo, hi = median_ci95(xs)
        hits += lo <= math.log(2) <= hi
    assert 0.93 <= hits / trials <= 0.995


def test_noise_flag_at_ten_percent_iqr_over_median():
    assert not Stats.from_samples([100, 101, 99, 100, 102]).noisy
    assert Stats.from_samples([100, 130, 70, 100, 140]).noisy


def test_round_trip_through_dict():
    s = Stats.from_samples([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    d = s.model_dump(mode="json")
    assert d["ci95"] == list(s.ci95) and d["noisy"] == s.noisy
    assert Stats.read(d) == s


def test_no_samples_is_an_error():
    with pytest.raises(ValueError):
        Stats.from_samples([])


# ---- Student's t and the gap between two sets of runs ----------------------------------------------------

# Upper critical values of Student's t distribution, to three decimals: NIST/SEMATECH e-Handbook of Statistical
# Methods, section 1.3.6.7.2, "Critical Values of the Student's t Distribution" (the row "inf" is the normal).
T_TABLE = [  # (probability below, degrees of freedom, t)
    (0.975, 1, 12.706), (0.975, 2, 4.303), (0.975, 5, 2.571), (0.975, 10, 2.228), (0.975, 30, 2.042),
    (0.95, 10, 1.812), (0.95, 1, 6.314), (0.995, 5, 4.032), (0.975, math.inf, 1.960), (0.95, math.inf, 1.645),
]


@pytest.mark.parametrize(("p", "df", "t"), T_TABLE)
def test_t_quantile_matches_the_published_table(p, df, t):
    assert t_quantile(p, df) == pytest.approx(t, abs=5e-4)
    assert t_quantile(1 - p, df) == pytest.approx(-t, abs=5e-4)  # symmetric about 0


def test_t_quantile_of_a_fractional_df_lies_between_its_neighbours():
    # Welch–Satterthwaite gives fractional degrees of freedom: t(2.5) lies between t(2) = 4.303 and t(3) = 3.182
    q = t_quantile(0.975, 2.5)
    assert t_quantile(0.975, 3) < q < t_quantile(0.975, 2)
    assert 3.182 < q < 4.303
    assert t_quantile(0.975, 1e7) == pytest.approx(1.960, abs=5e-4)  # very many: the normal


def test_t_quantile_refuses_no_degrees_of_freedom():
    for df in (0, -1, math.nan):
        with pytest.raises(ValueError):
            t_quantile(0.975, df)


def test_normal_quantile():
    assert normal_quantile(0.975) == pytest.approx(1.959964, abs=1e-6)
    assert normal_quantile(0.5) == 0


def test_importing_stats_does_not_import_scipy():
    code = "import sys, gapbench.stats; assert 'scipy' not in sys.modules, 'scipy imported'"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr


def _log_symmetric(g: RunGap) -> None:
    assert math.log(g.hi) - math.log(g.ratio) == pytest.approx(math.log(g.ratio) - math.log(g.lo))


def test_the_centre_is_the_ratio_of_the_geometric_means():
    # geometric means: (1·1·8)^(1/3) = 2 and (0.5·1·2)^(1/3) = 1, so 2; the medians (1 and 1) would say 1
    g = compare_runs([1.0, 1.0, 8.0], [0.5, 1.0, 2.0])
    assert g.basis == "runs" and g.runs == (3, 3)
    assert g.ratio == pytest.approx(2.0)
    assert g.lo < g.ratio < g.hi
    _log_symmetric(g)


def test_identical_sides_have_ratio_one_inside_their_interval():
    runs = [1.0, 1.1, 0.95, 1.02]
    g = compare_runs(runs, list(runs))
    assert g.ratio == pytest.approx(1.0) and g.lo < 1.0 < g.hi and not g.significant
    g = compare_runs([3.0, 3.0], [3.0, 3.0])  # no spread at all: a point, and no verdict of a difference
    assert (g.ratio, g.lo, g.hi) == (pytest.approx(1.0),) * 3 and not g.significant


def test_welch_interval_by_hand():
    values, baseline = [10.0, 11.0, 12.5, 10.5], [8.0, 8.4, 9.1]
    a, b = [math.log(v) for v in values], [math.log(v) for v in baseline]
    d = sum(a) / 4 - sum(b) / 3
    va = sum((x - sum(a) / 4) ** 2 for x in a) / 3
    vb = sum((x - sum(b) / 3) ** 2 for x in b) / 2
    se2 = va / 4 + vb / 3
    df = se2 ** 2 / ((va / 4) ** 2 / 3 + (vb / 3) ** 2 / 2)  # Welch–Satterthwaite
    assert df != int(df) and 2 < df < 5
    from scipy.stats import t, ttest_ind

    q = t.ppf(0.975, df)
    g = compare_runs(values, baseline)
    assert g.ratio == pytest.approx(math.exp(d))
    assert g.lo == pytest.approx(math.exp(d - q * math.sqrt(se2)))
    assert g.hi == pytest.approx(math.exp(d + q * math.sqrt(se2)))
    assert g.significant
    # and scipy's own Welch test on the log values gives the same interval of the difference
    ci = ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (math.log(g.lo), math.log(g.hi)) == (pytest.approx(ci.low), pytest.approx(ci.high))
    # at 90% the interval is narrower, with the same centre
    g90 = compare_runs(values, baseline, level=0.90)
    assert g90.ratio == pytest.approx(g.ratio) and g.lo < g90.lo < g90.hi < g.hi
    assert g90.hi == pytest.approx(math.exp(d + t.ppf(0.95, df) * math.sqrt(se2)))


def test_one_run_on_one_side_uses_the_other_sides_spread():
    # centre: log 1.2 minus the mean of the logs; variance: the baseline's, for 1/1 + 1/3 runs; its 2 df
    base = [1.0, 1.1, 0.9]
    b = [math.log(v) for v in base]
    d = math.log(1.2) - statistics.fmean(b)
    se = math.sqrt(statistics.variance(b) * (1 + 1 / 3))
    from scipy.stats import t

    g = compare_runs([1.2], base)
    assert g.basis == "runs" and g.runs == (1, 3)
    assert g.ratio == pytest.approx(math.exp(d))
    assert g.lo == pytest.approx(math.exp(d - t.ppf(0.975, 2) * se))
    assert g.hi == pytest.approx(math.exp(d + t.ppf(0.975, 2) * se))
    swapped = compare_runs(base, [1.2])
    assert swapped.ratio == pytest.approx(1 / g.ratio) and swapped.lo == pytest.approx(1 / g.hi)


def test_the_drift_widens_the_interval_about_the_same_centre():
    values, baseline = [1.1, 1.12, 1.08], [1.0, 1.02, 0.98]
    bare = compare_runs(values, baseline)
    drifted = compare_runs(values, baseline, drift=0.01)
    assert drifted.ratio == pytest.approx(bare.ratio)
    assert drifted.lo < bare.lo < bare.hi < drifted.hi
    _log_symmetric(drifted)
    # an allowance stands for a drift of 2·allowance²; an explicit drift replaces it
    assert compare_runs(values, baseline, allowance=0.08) == compare_runs(values, baseline, drift=2 * 0.08 ** 2)
    assert compare_runs(values, baseline, allowance=0.08, drift=0.0) == bare


def test_single_runs_are_a_normal_interval_with_the_allowance():
    # one run a side: se = allowance·√2 (two independent runs, each with the allowance's spread), normal quantile
    g = compare_runs([1.3], [1.0], allowance=0.08)
    z = statistics.NormalDist().inv_cdf(0.975)
    assert g.basis == "allowance" and g.runs == (1, 1)
    assert g.ratio == pytest.approx(1.3)
    assert g.lo == pytest.approx(1.3 * math.exp(-z * 0.08 * math.sqrt(2)))
    assert g.hi == pytest.approx(1.3 * math.exp(z * 0.08 * math.sqrt(2)))
    assert g.significant
    assert compare_runs([1.3], [1.0]) is None  # and without an allowance, no interval


def test_no_positive_run_on_a_side_gives_no_interval():
    assert compare_runs([0.0, -1.0], [1.0, 1.1]) is None
    assert compare_runs([1.0, 1.1], []) is None
