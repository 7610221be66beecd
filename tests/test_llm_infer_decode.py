"""llm-infer says how it decoded: every row carries its decode mode; an eager decode on an accelerator marks its rows
host-bound, and compare says so beside them; --decode graph where the device captures no graphs is refused with the
reason; the graph path itself (capture once, replay per token on static buffers) generates the eager path's tokens,
and a capture that fails falls back to eager with the reason in the row."""

from __future__ import annotations

import pytest
import torch

from gapbench import compare as compare_mod
from gapbench.devices import resolve, testaccel
from gapbench.devices.base import Device
from gapbench.engine.variant import run_variant
from gapbench.report import render
from gapbench.results import ResultSet
from gapbench.workloads.base import Context
from gapbench.workloads.inference import generate as gen
from gapbench.workloads.inference import llm_infer as li
from gapbench.workloads.inference import local as infer_local
from gapbench.workloads.inference.options import InferOptions


class ReplayingAccelerator(testaccel.TestAccelerator):
    """The test accelerator with a graph capture that keeps a graph's contract without a graph: a replay writes
    fn's outputs into the tensors of the capture, reading the inputs the capture read (fn's closure)."""

    def __init__(self, fail: str = ""):
        super().__init__()
        self.fail, self.captures = fail, 0

    def graph_unsupported(self, index: int) -> str:
        return ""

    def capture_graph(self, index: int, fn):
        self.captures += 1
        if self.fail:
            raise RuntimeError(self.fail)
        out = fn()

        def replay():
            for kept, new in zip(out, fn(), strict=True):
                kept.copy_(new)

        return replay, out


def _ctx(device, **options) -> Context:
    opts = dict({"input_len": 16, "output_len": 6, "batch_size": [2], "dtype": "fp32"}, **options)
    return Context(device=device, preset="tiny", budget_s=20, min_time_s=0.02, repeats=3, options=opts)


def _rows(device, **options):
    w = li.LlmInfer()
    c = _ctx(device, **options)
    return {v.params["metric"]: run_variant(w, v, c) for v in w.variants("tiny", c)}


def test_a_cpu_row_says_it_decoded_eagerly_and_why_not_as_a_graph():
    rows = _rows(resolve("cpu"))
    assert rows and all(m.ok for m in rows.values()), [(k, m.reason) for k, m in rows.items()]
    for m in rows.values():
        assert m.metrics["decode"] == "eager" and m.metrics["decode_asked"] == "auto"
        assert "no graph capture" in m.metrics["decode_fallback"]
        assert "bound" not in m.metrics  # the host is the device: no host-bound claim against it
        assert "a synchronize per token" in m.metrics["timer"]


def test_an_eager_decode_on_an_accelerator_is_host_bound_in_its_rows():
    rows = _rows(resolve("test"), decode="eager")
    assert all(m.ok for m in rows.values()), [(k, m.reason) for k, m in rows.items()]
    for name, m in rows.items():
        assert m.metrics["decode"] == "eager" and "host's dispatch rate" in m.metrics["decode_note"]
        assert m.metrics.get("bound") == (None if name in infer_local.PREFILL_ROWS else "host"), name
        assert "device events after each token" in m.metrics["timer"]  # no host synchronisation per token
    assert "decode_fallback" not in rows["tpot_ms"].metrics  # eager was asked for: no fallback to explain


@pytest.mark.parametrize("kind", ["cpu", "test"])
def test_decode_graph_where_the_device_captures_none_is_refused_with_the_reason(kind):
    rows = _rows(resolve(kind), decode="graph")
    assert rows and {m.status for m in rows.values()} == {"unsupported"}
    assert all(m.reason.startswith("--decode graph: ") and "no graph capture" in m.reason for m in rows.values())


def test_decode_is_the_transformers_engines_choice():
    with pytest.raises(ValueError, match="--decode chooses the transformers engine"):
        InferOptions.model_validate({"server": "http://localhost:1", "decode": "graph"})
    assert InferOptions.model_validate({}).decode == "auto"


def test_the_replayed_decode_step_generates_the_eager_tokens():
    torch.manual_seed(0)
    device = Device(ReplayingAccelerator(), 0)
    model = gen.build_random_llama(li.TINY, "sdpa", device.torch_device, torch.float32)
    prompts = gen.random_prompts(2, 16, li.TINY["vocab_size"], seed=3)
    eager = gen.StaticGenerator(model, 2, 16, 8, device.torch_device, torch.float32, timing=device)(prompts)
    g = gen.StaticGenerator(model, 2, 16, 8, device.torch_device, torch.float32, decode="graph", timing=device)
    first, again = g(prompts), g(prompts)
    assert device.backend.captures == 1 and g.decode_mode == "graph" and not g.graph_failed  # captured once
    assert torch.equal(first.tokens, eager.tokens) and torch.equal(again.tokens, eager.tokens)
    assert len(first.token_times) == 8 and first.finite


def test_auto_decodes_as_a_graph_where_one_is_captured_and_falls_back_with_the_reason():
    rows = _rows(Device(ReplayingAccelerator(), 0))
    assert all(m.ok for m in rows.values()), [(k, m.reason) for k, m in rows.items()]
    assert {m.metrics["decode"] for m in rows.values()} == {"graph"}
    assert not any("bound" in m.metrics or "decode_fallback" in m.metrics for m in rows.values())
    failing = Device(ReplayingAccelerator(fail="operation not permitted when stream is capturing"), 0)
    rows = _rows(failing)
    assert all(m.ok for m in rows.values()), [(k, m.reason) for k, m in rows.items()]
    tpot = rows["tpot_ms"].metrics
    assert tpot["decode"] == "eager" and tpot["bound"] == "host"
    assert "could not be captured" in tpot["decode_fallback"] and "stream is capturing" in tpot["decode_fallback"]
    rows = _rows(failing, decode="graph")  # asked for a graph: the failed capture fails the point, said why
    assert {m.status for m in rows.values()} == {"unsupported"}
    assert "could not be captured" in rows["tpot_ms"].reason


def _result_set(rows: dict, label: str, kind: str) -> ResultSet:
    return ResultSet(host={}, device={"type": kind, "product": label}, measurements=list(rows.values()),
                     label=label, complete=True)


def test_compare_says_an_eager_row_is_host_bound():
    eager = _rows(resolve("test"), decode="eager", batch_size=[1, 2])
    host = _rows(resolve("cpu"), batch_size=[1, 2])
    sets = [_result_set(eager, "eager", "test"), _result_set(host, "cpu", "cpu")]
    comp = compare_mod.compare(sets, baseline=1, history=False)
    bounds = {r.variant["metric"]: r.bound for r in comp.rows}
    assert bounds["tpot_ms"] == "host" and bounds["ttft_ms"] != "host"
    assert any(c.host_bound for c in comp.frontiers.curves)
    for fmt in ("terminal", "md"):
        text = render(sets, format=fmt, comparison=comp)
        assert "host-bound (eager decode)" in text, fmt  # the takeaway's class of those rows
        assert "Host-bound rows" in text and "InferenceMAX" in text, fmt
        assert "eager decode, host-bound" in text, fmt  # beside the curve of the eager platform
    quiet = compare_mod.compare([_result_set(host, "cpu", "cpu"), _result_set(host, "cpu2", "cpu")], history=False)
    assert not any(r.bound == "host" for r in quiet.rows)  # rows that decoded on the host itself claim nothing
