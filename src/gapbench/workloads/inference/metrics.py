"""LLM inference metrics from token timestamps, by the definitions the serving benchmarks converged on (vLLM's
`bench serve`, SGLang's bench_serving, NVIDIA AIPerf, InferenceMAX; stated in docs/inference.md).

Pure numbers: a request is when it was sent and when each piece of its output arrived; a round is the requests
of one repeat; the metrics of a round are computed here, once, and their uncertainty comes from the repeats
(`summarize`: a Stats per metric).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from gapbench.stats import Stats, quantile


@dataclass(frozen=True)
class RequestTrace:
    """One request as its client saw it. Times are seconds on one monotonic clock (time.perf_counter)."""

    start: float  # when the request was sent
    token_times: tuple[float, ...]  # when each piece of output (a token, or a streamed chunk) became available
    input_tokens: int
    output_tokens: int  # tokens generated (a chunk may carry several; the server's count where it gives one)
    request_id: str = ""

    @property
    def ttft(self) -> float:
        """Time to first token: from sending the request to the first output token (prefill and queueing)."""
        return self.token_times[0] - self.start

    @property
    def e2e(self) -> float:
        """End-to-end latency: from sending the request to its last output token."""
        return self.token_times[-1] - self.start

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first: (E2E - TTFT) / (output tokens - 1); None for one token."""
        if self.output_tokens < 2:
            return None
        return (self.e2e - self.ttft) / (self.output_tokens - 1)

    @property
    def itls(self) -> list[float]:
        """Inter-token latencies: the gaps between successive arrivals of output."""
        t = self.token_times
        return [b - a for a, b in zip(t, t[1:], strict=False)]


@dataclass(frozen=True)
class MetricDef:
    unit: str
    higher_is_better: bool
    help: str


# The rows an inference point produces, in the order they are listed. Per-user and per-device throughput are
# the two axes of the throughput-interactivity curve (compare.frontier).
METRICS: dict[str, MetricDef] = {
    "output_tokens_per_s": MetricDef("tokens/s", True, "output tokens of all requests / duration of the round "
                                     "(throughput per device)"),
    "tokens_per_s_per_user": MetricDef("tokens/s/user", True, "1 / median TPOT: the rate one user sees tokens "
                                       "arrive (InferenceMAX's interactivity)"),
    "ttft_ms": MetricDef("ms", False, "time to first token, median over the round's requests"),
    "tpot_ms": MetricDef("ms", False, "time per output token after the first, median over the round's requests"),
    "itl_p50_ms": MetricDef("ms", False, "inter-token latency, median of every gap of every request"),
    "itl_p90_ms": MetricDef("ms", False, "inter-token latency, 90th percentile of every gap of every request"),
    "itl_p99_ms": MetricDef("ms", False, "inter-token latency, 99th percentile of every gap of every request"),
    "e2e_ms": MetricDef("ms", False, "end-to-end request latency, median over the round's requests"),
    "total_tokens_per_s": MetricDef("tokens/s", True, "input + output tokens of all requests / duration"),
    "prefill_tokens_per_s": MetricDef("tokens/s", True, "input tokens / time until the last first token "
                                      "(static batches and offline engines, where prefill is a phase)"),
    "decode_tokens_per_s": MetricDef("tokens/s", True, "output tokens after the first / time from the last "
                                     "first token to the last token (static batches and offline engines)"),
    "slo_attainment_pct": MetricDef("%", True, "share of requests within both the TTFT and the TPOT limit"),
    "goodput_requests_per_s": MetricDef("requests/s", True, "requests within both limits / duration of the round"),
}
PHASE_METRICS = ("prefill_tokens_per_s", "decode_tokens_per_s")
ITL_METRICS = ("itl_p50_ms", "itl_p90_ms", "itl_p99_ms")
SLO_METRICS = ("slo_attainment_pct", "goodput_requests_per_s")


@dataclass(frozen=True)
class Slo:
    """Latency limits of a request, as MLPerf Inference's Server scenario sets them (p99 TTFT and TPOT)."""

    ttft_ms: float | None = None
    tpot_ms: float | None = None

    def met(self, r: RequestTrace) -> bool:
        if self.ttft_ms is not None and r.ttft * 1e3 > self.ttft_ms:
            return False
        tpot = r.tpot
        return self.tpot_ms is None or tpot is None or tpot * 1e3 <= self.tpot_ms

    @property
    def given(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None


def round_metrics(traces: list[RequestTrace], *, phases: bool = False, slo: Slo | None = None) -> dict[str, float]:
    """The metrics of one round of requests (see METRICS). `phases`: the round is a static batch or an offline
    engine call, where prefill and decode are phases of the whole round."""
    if not traces:
        raise ValueError("a round needs at least one request")
    begin = min(r.start for r in traces)
    end = max(r.token_times[-1] for r in traces)
    duration = end - begin
    out_tokens = sum(r.output_tokens for r in traces)
    in_tokens = sum(r.input_tokens for r in traces)
    tpots = [t for r in traces if (t := r.tpot) is not None]
    gaps = [g for r in traces for g in r.itls]
    m = {
        "output_tokens_per_s": out_tokens / duration,
        "total_tokens_per_s": (in_tokens + out_tokens) / duration,
        "ttft_ms": statistics.median(r.ttft for r in traces) * 1e3,
        "e2e_ms": statistics.median(r.e2e for r in traces) * 1e3,
    }
    if tpots:
        tpot = statistics.median(tpots)
        m["tpot_ms"] = tpot * 1e3
        m["tokens_per_s_per_user"] = 1.0 / tpot if tpot > 0 else math.inf
    if gaps:
        m.update({name: quantile(gaps, q / 100) * 1e3 for name, q in zip(ITL_METRICS, (50, 90, 99), strict=True)})
    if phases:
        m.update(_phases(traces, begin, end, in_tokens))
    if slo is not None and slo.given:
        good = sum(1 for r in traces if slo.met(r))
        m["slo_attainment_pct"] = 100.0 * good / len(traces)
        m["goodput_requests_per_s"] = good / duration
    return m


def _phases(traces: list[RequestTrace], begin: float, end: float, in_tokens: int) -> dict[str, float]:
    """Prefill: the input tokens over the time until the last first token; decode: the tokens after the first
    over the time from there to the last token."""
    first = max(r.token_times[0] for r in traces)
    out = {"prefill_tokens_per_s": in_tokens / (first - begin)}
    if end > first:
        out["decode_tokens_per_s"] = sum(r.output_tokens - 1 for r in traces) / (end - first)
    return out


def summarize(rounds: list[dict[str, float]]) -> dict[str, Stats]:
    """Each metric's Stats over the rounds (the repeats) that have it."""
    names = [n for n in METRICS if any(n in r for r in rounds)]
    return {n: Stats.from_samples([r[n] for r in rounds if n in r and math.isfinite(r[n])])
            for n in names if any(n in r and math.isfinite(r[n]) for r in rounds)}


def request_percentiles(traces: list[RequestTrace]) -> dict[str, float]:
    """p50/p90/p99 of TTFT, TPOT and E2E over requests (ms), as the serving benchmarks print them beside means."""
    out: dict[str, float] = {}
    series = {"ttft": [r.ttft for r in traces], "e2e": [r.e2e for r in traces],
              "tpot": [t for r in traces if (t := r.tpot) is not None]}
    for name, xs in series.items():
        if xs:
            for q in (50, 90, 99):
                out[f"{name}_p{q}_ms"] = quantile(xs, q / 100) * 1e3
            out[f"{name}_mean_ms"] = statistics.fmean(xs) * 1e3
    return out
