"""The `--server` path against a real local HTTP server that streams tokens from the tiny model (a subprocess
on 127.0.0.1): the TTFT and ITL the client reports agree with the server's own timestamps within 10 ms; the
workload's rows, Poisson arrivals, SLO attainment, and a server that is not there."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gapbench import devices
from gapbench.workloads.base import Context
from gapbench.workloads.inference import client as sc
from gapbench.workloads.inference import llm_infer as li
from gapbench.workloads.inference import metrics as im

ROOT = Path(__file__).resolve().parents[1]
TOLERANCE_MS = 10.0  # same machine, same monotonic clock; loopback HTTP and a busy host add a few ms


@pytest.fixture(scope="module")
def server():
    p = subprocess.Popen([sys.executable, "-m", "gapbench.testing.tiny_server", "--port", "0", "--threads", "1"],
                         stdout=subprocess.PIPE, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT / "src")))
    try:
        line = p.stdout.readline()
        m = re.search(r"http://\S+", line)
        assert m, f"the server did not start: {line!r}"
        yield m.group(0)
    finally:
        p.terminate()
        p.wait(timeout=30)


def server_traces(url: str, traces: list[im.RequestTrace]) -> list[im.RequestTrace]:
    """The same requests as the server timed them: received → each chunk written (its own monotonic clock)."""
    timings = sc.get_json(sc.Target(url), "/gapbench/timings")
    out = []
    for t in traces:
        s = timings[t.request_id]
        out.append(im.RequestTrace(s["received"], tuple(s["token_times"]), s["prompt_tokens"], len(s["token_times"]),
                                   t.request_id))
    return out


def close(a: dict, b: dict, names) -> dict:
    return {n: (round(a[n], 2), round(b[n], 2)) for n in names if abs(a[n] - b[n]) > TOLERANCE_MS}


@pytest.mark.parametrize("concurrency", [1, 2])
def test_client_timings_agree_with_the_servers_own(server, concurrency):
    target = sc.Target(server)
    model, info = sc.probe(target)
    assert model == "gapbench-tiny" and info["version_endpoint"] == "/version"
    prompts, outs = sc.random_requests(10 * concurrency, 32, 12, 512, 0.0, seed=concurrency)
    r = sc.run_round(target, model, prompts, outs, concurrency)
    assert not r.failures and len(r.traces) == 10 * concurrency
    assert all(t.output_tokens == 12 and len(t.token_times) == 12 for t in r.traces)
    client = im.round_metrics(r.traces)
    own = im.round_metrics(server_traces(server, r.traces))
    assert not close(client, own, ("ttft_ms", "itl_p50_ms", "itl_p90_ms", "tpot_ms", "e2e_ms"))


def test_the_workload_measures_a_server_and_reports_what_the_server_saw(server):
    w = li.LlmInfer()
    opts = {"server": server, "concurrency": "1,2", "input_len": 32, "output_len": 10, "num_prompts": 6,
            "engine_args": "--threads 1", "slo_ttft_ms": 2000, "slo_tpot_ms": 1000}
    c = Context(device=devices.resolve("cpu"), preset="tiny", budget_s=60, min_time_s=0.05, repeats=3, options=opts)
    vs = [v for v in w.variants("tiny", c) if v.params["concurrency"] == 2]
    rows = {v.params["metric"]: w.run(v, c) for v in vs}
    assert all(m.status == "ok" for m in rows.values()), {k: m.reason for k, m in rows.items()}
    assert "prefill_tokens_per_s" not in rows  # a server's prefill is not a phase of the round
    assert rows["slo_attainment_pct"].value == 100.0
    info = rows["ttft_ms"].metrics["engine_info"]
    assert info["served_model"] == "gapbench-tiny" and info["launch_args"] == "--threads 1"
    assert rows["ttft_ms"].variant["engine"] == "server" and rows["ttft_ms"].variant["request_rate"] == "inf"
    # the same rounds from the server's timestamps: rounds run one after another, after one warm-up request
    timings = sc.get_json(sc.Target(server), "/gapbench/timings")
    mine = sorted((t for t in timings.values() if len(t["token_times"]) == 10 and t["prompt_tokens"] == 32),
                  key=lambda t: t["received"])[-(6 * rows["ttft_ms"].metrics["rounds"] + 1):]
    rounds = [mine[1 + 6 * k: 1 + 6 * (k + 1)] for k in range(rows["ttft_ms"].metrics["rounds"])]
    own = im.summarize([im.round_metrics([im.RequestTrace(t["received"], tuple(t["token_times"]), 32, 10)
                                          for t in rnd]) for rnd in rounds])
    for name in ("ttft_ms", "itl_p50_ms", "itl_p90_ms"):
        assert abs(rows[name].value - own[name].median) <= TOLERANCE_MS, (name, rows[name].value, own[name].median)


def test_poisson_arrivals_and_a_tight_slo(server):
    target = sc.Target(server)
    prompts, outs = sc.random_requests(8, 16, 4, 512, 0.5, seed=7)
    assert all(8 <= len(p) <= 24 for p in prompts) and all(2 <= o <= 6 for o in outs)
    r = sc.run_round(target, "gapbench-tiny", prompts, outs, concurrency=4, request_rate=20.0, seed=1)
    assert not r.failures
    starts = sorted(t.start for t in r.traces)
    assert starts[-1] - starts[0] > 0.05  # spread out by the arrivals (mean gap 50 ms), not all at once
    m = im.round_metrics(r.traces, slo=im.Slo(ttft_ms=1e-3))
    assert m["slo_attainment_pct"] == 0.0 and m["goodput_requests_per_s"] == 0.0


def test_a_server_that_is_not_there_is_an_error_row():
    w = li.LlmInfer()
    c = Context(device=devices.resolve("cpu"), preset="tiny", budget_s=10, options={
        "server": "http://127.0.0.1:9", "concurrency": "1", "input_len": 8, "output_len": 4})
    rows = [w.run(v, c) for v in w.variants("tiny", c)]
    assert {m.status for m in rows} == {"error"}
    assert "http://127.0.0.1:9" in rows[0].reason
