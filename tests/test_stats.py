import math
import random

import pytest

from gapbench.stats import Stats, median_ci95


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
