"""Attention rows at a model step's own attentions: `attention:listed --attention-shapes` (the keys' sequence and
causality as the model calls them), refused without shapes or with a bad one before anything runs; the trace
records both and names each attention as attention:listed measures it; a call is priced among the rows as causal
as it, nearest in both sequences; assess names those a side has no row near."""

from __future__ import annotations

import json

import pytest
import torch
from tests.test_assess_speed import _m, rates_file
from tests.test_gemm_listed import _gapbench

from gapbench import results
from gapbench.assess.rates import platform_rates
from gapbench.assess.speed import predict, unmeasured_attention
from gapbench.assess.work import Work, WorkRecorder
from gapbench.workloads.micro.attention import sdpa_flops


def test_listed_measures_exactly_the_attentions_given(tmp_path):
    out = tmp_path / "listed.json"
    p = _gapbench("run", "--device", "cpu", "-w", "attention:listed", "--attention-shapes", "2x64x16x8,2x32x16c",
                  "--dtype", "fp32", "--no-history", "--variant-budget", "1", "--repeats", "3", "-o", str(out),
                  cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = json.loads(out.read_text())["measurements"]
    assert [r["variant"] for r in rows] == [
        {"dtype": "fp32", "batch_heads": 2, "seq": 64, "head_dim": 16, "pass": "forward", "kv": 8},
        {"dtype": "fp32", "batch_heads": 2, "seq": 64, "head_dim": 16, "pass": "backward", "kv": 8},
        {"dtype": "fp32", "batch_heads": 2, "seq": 32, "head_dim": 16, "pass": "forward", "causal": True},
        {"dtype": "fp32", "batch_heads": 2, "seq": 32, "head_dim": 16, "pass": "backward", "causal": True}]
    # each checked against float64 (a causal one against a causal reference), FLOPs as the trace counts them
    assert all(r["status"] == "ok" for r in rows), [r.get("reason") for r in rows]
    assert rows[0]["flops"] == 4 * 2 * 64 * 8 * 16 == sdpa_flops(2, 64, 16, False, 8)
    assert rows[1]["flops"] == 2.5 * rows[0]["flops"]


@pytest.mark.parametrize("shapes, says", [
    (None, "the listed preset measures the attentions of --attention-shapes"),
    ("2x64", "'2x64' is not an attention shape BHxSxD[xKV][c]"),
    ("2x64x0", "each 1 to"),
])
def test_listed_without_shapes_or_with_a_bad_one_is_one_line_and_exit_2(tmp_path, shapes, says):
    out = tmp_path / "r.json"
    args = ["--attention-shapes", shapes] if shapes else []
    p = _gapbench("run", "--device", "cpu", "-w", "attention:listed", *args, "--no-history", "-o", str(out),
                  cwd=tmp_path)
    assert p.returncode == 2
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and says in lines[0], p.stderr
    assert not out.exists()


def _traced() -> list:
    """A reduced-sequence attention (queries 64, keys 8) and a causal one, forward and backward, recorded."""
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 64, 16, generator=g, requires_grad=True)
    kv = torch.randn(1, 2, 8, 16, generator=g, requires_grad=True)
    c = torch.randn(1, 2, 32, 16, generator=g, requires_grad=True)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    rec = WorkRecorder()
    with rec:
        (sdpa(q, kv, kv).sum() + sdpa(c, c, c, is_causal=True).sum()).backward()
    return [i for i in rec.work("attention").items if i.cls == "attention"]


def test_the_trace_records_the_keys_sequence_and_causality_forward_and_backward():
    items = _traced()
    assert {(("backward" in i.op), i.attention_spec) for i in items} == {
        (False, "2x64x16x8"), (True, "2x64x16x8"), (False, "2x32x16c"), (True, "2x32x16c")}
    reduced = next(i for i in items if i.kv)
    assert reduced.kv == 8 and not reduced.causal and reduced.to_dict()["kv"] == 8


def _att(spec: str, pas: str, tflops: float):
    bh, seq, d, *rest = spec.rstrip("c").split("x")
    v = {"dtype": "fp32", "batch_heads": int(bh), "seq": int(seq), "head_dim": int(d), "pass": pas}
    v |= {"kv": int(rest[0])} if rest else {}
    v |= {"causal": True} if spec.endswith("c") else {}
    return _m("attention", v, tflops, "TFLOP/s")


def test_a_call_is_priced_among_rows_as_causal_as_it_nearest_in_both_sequences(tmp_path):
    items = _traced()
    far = [_att(s, p, 0.01) for s in ("16x128x32", "16x512x64") for p in ("forward", "backward")]
    a = platform_rates(results.load(rates_file(tmp_path / "a.json", gemm_tflops=0.001, per_op_us=1, extra=far)))
    named, share = unmeasured_attention(Work("x", items), a)
    assert {s for _, s in named} == {"2x64x16x8", "2x32x16c"} and share == 1.0
    listed = [_att(s, p, v) for s, v in (("2x64x16x8", 0.002), ("2x64x16", 0.02), ("2x32x16c", 0.004),
                                         ("2x32x16", 0.03)) for p in ("forward", "backward")]
    b = platform_rates(results.load(rates_file(tmp_path / "b.json", gemm_tflops=0.001, per_op_us=1,
                                               extra=far + listed)))
    for it in items:
        point = b.attention_rate(it.dtype, "backward" in it.op, it.shape, it.kv, it.causal)
        # the reduced one at its own row, not at the same query's full-length row; the causal one at the causal row
        assert point.rate.value == (0.002e12 if it.kv else 0.004e12)
        assert "keys 8" in point.rate.source if it.kv else "causal" in point.rate.source

    work = Work("x", items)
    assert unmeasured_attention(work, b) == ((), 0.0)
    pred, missing = predict([(work, b), (work, b)])
    assert not missing
    att_s = next(c for c in pred.source.classes if c.cls == "attention").seconds
    want = sum(i.flops * i.count / (0.002e12 if i.kv else 0.004e12) for i in items)
    assert att_s == pytest.approx(want, rel=1e-6)
