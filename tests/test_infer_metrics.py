"""The inference metrics by their definitions (docs/inference.md), on timestamps computed by hand."""

from __future__ import annotations

import pytest

from gapbench.stats import quantile
from gapbench.workloads.inference import metrics as im


def trace(start, times, n_in=4, n_out=None):
    return im.RequestTrace(start, tuple(times), n_in, len(times) if n_out is None else n_out)


def test_one_request_ttft_tpot_itl_e2e():
    r = trace(0.0, [0.5, 0.6, 0.8, 1.1])
    assert r.ttft == pytest.approx(0.5)
    assert r.e2e == pytest.approx(1.1)
    assert r.tpot == pytest.approx((1.1 - 0.5) / 3)  # (E2E - TTFT) / (output tokens - 1)
    assert r.itls == pytest.approx([0.1, 0.2, 0.3])


def test_one_token_has_no_tpot_and_chunks_may_carry_several_tokens():
    assert trace(0.0, [0.2]).tpot is None
    chunked = trace(0.0, [0.2, 0.8], n_out=4)  # two chunks, four tokens (the server's usage count)
    assert chunked.tpot == pytest.approx(0.6 / 3)
    assert chunked.itls == pytest.approx([0.6])


def test_a_round_of_two_requests():
    a = trace(0.0, [0.5, 0.6, 0.8, 1.1], n_in=4)
    b = trace(0.2, [0.4, 0.5], n_in=10)
    m = im.round_metrics([a, b])
    assert m["output_tokens_per_s"] == pytest.approx(6 / 1.1)  # 6 tokens between 0 and 1.1 s
    assert m["total_tokens_per_s"] == pytest.approx((14 + 6) / 1.1)
    assert m["ttft_ms"] == pytest.approx(350.0)  # median of 500 and 200
    assert m["tpot_ms"] == pytest.approx(150.0)  # median of 200 and 100
    assert m["tokens_per_s_per_user"] == pytest.approx(1 / 0.15)
    assert m["e2e_ms"] == pytest.approx(700.0)  # median of 1100 and 300
    # every gap of every request, token-weighted: 0.1, 0.2, 0.3 (a) and 0.1 (b)
    assert m["itl_p50_ms"] == pytest.approx(150.0)
    assert m["itl_p90_ms"] == pytest.approx(270.0)  # sorted 0.1 0.1 0.2 0.3, position 2.7
    assert m["itl_p99_ms"] == pytest.approx(297.0)
    assert "prefill_tokens_per_s" not in m and "slo_attainment_pct" not in m


def test_static_batch_phases():
    # two sequences of one batch: prefill ends with both first tokens at 0.5 s, the last token at 2.5 s
    batch = [trace(0.0, [0.5, 1.5, 2.5], n_in=8), trace(0.0, [0.5, 1.5, 2.5], n_in=8)]
    m = im.round_metrics(batch, phases=True)
    assert m["prefill_tokens_per_s"] == pytest.approx(16 / 0.5)
    assert m["decode_tokens_per_s"] == pytest.approx(4 / 2.0)
    assert m["tokens_per_s_per_user"] == pytest.approx(1.0)  # TPOT 1 s


def test_slo_attainment_and_goodput():
    a = trace(0.0, [0.5, 0.6, 0.8, 1.1])  # TTFT 500 ms: over a 400 ms limit
    b = trace(0.2, [0.4, 0.5])  # TTFT 200 ms, TPOT 100 ms: within both
    m = im.round_metrics([a, b], slo=im.Slo(ttft_ms=400, tpot_ms=150))
    assert m["slo_attainment_pct"] == pytest.approx(50.0)
    assert m["goodput_requests_per_s"] == pytest.approx(1 / 1.1)
    tight = im.round_metrics([a, b], slo=im.Slo(tpot_ms=50))  # neither TPOT is within 50 ms
    assert tight["slo_attainment_pct"] == 0.0


def test_summarize_gives_each_metric_its_stats_over_rounds():
    rounds = [im.round_metrics([trace(0.0, [t, t + 0.1, t + 0.2])]) for t in (0.1, 0.2, 0.3)]
    s = im.summarize(rounds)
    assert s["ttft_ms"].median == pytest.approx(200.0) and s["ttft_ms"].n == 3
    assert s["ttft_ms"].ci95 == pytest.approx((100.0, 300.0))  # under 6 samples: min..max
    assert s["tpot_ms"].median == pytest.approx(100.0)


def test_percentile_is_linear_between_order_statistics():
    assert quantile([4, 1, 3, 2], 0.5) == pytest.approx(2.5)
    assert quantile([1, 2, 3, 4, 5], 0.9) == pytest.approx(4.6)
    with pytest.raises(ValueError):
        quantile([], 0.5)
