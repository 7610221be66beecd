"""attention-libs: its float64 reference is attention's (forward and gradients, grouped-query heads too); SDPA
kernels a device lacks are unsupported with the reason; FlexAttention compiles where torch.compile runs and
says why not elsewhere; an attention that drops its causal mask is wrong_result."""

import json

import pytest
import torch
import torch.nn.functional as F

from conftest import FIXTURES, gapbench
from gapbench.devices import resolve
from gapbench.workloads.libs import attention_libs as al


def run(tmp_path, *args, device="test"):
    """`gapbench run`, three repeats of 10 ms each (not seven of 100 ms): these tests check each path's status,
    FLOPs and reasons, not the precision of its number."""
    out = tmp_path / "r.json"
    p = gapbench("run", "--device", device, "--no-history", "-q", "-o", out, "--variant-budget", "1", "--min-time",
                 "0.01", "--repeats", "3", *args, env={"OMP_NUM_THREADS": "1"})
    assert p.returncode == 0, p.stderr[-3000:]
    return {(m["variant"]["mode"], m["variant"]["path"]): m for m in json.loads(out.read_text())["measurements"]}


def test_reference_is_float64_attention_with_its_gradients():
    """The written-out softmax backward agrees with autograd through SDPA in float64, grouped-query heads too."""
    shape = al.Shape(1, 4, 2, 48, 16)
    inp = al.Inputs.make(shape, "fp32", resolve("cpu"), grad=True)
    ref = al.reference(inp, grad=True)
    q, k, v = (t.detach().double().requires_grad_() for t in (inp.q, inp.k, inp.v))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), inp.dout.double())
    torch.testing.assert_close(ref["out"], out[0, :2])
    torch.testing.assert_close(ref["dq"], dq[0, :2])
    torch.testing.assert_close(ref["dk"], dk[0, 0])
    torch.testing.assert_close(ref["dv"], dv[0, 0])
    assert al.compare(al.sample(inp, out, (dq, dk, dv)), ref, "fp32") is None
    assert "dk" in al.compare(al.sample(inp, out, (dq, dk * 1.01, dv)), ref, "fp32")  # 1% off is caught


@pytest.mark.slow
def test_sdpa_kernels_the_device_lacks_are_unsupported(tmp_path):
    rows = run(tmp_path, "-w", "attention-libs:tiny", "--dtype", "fp32")
    for mode in al.MODES:
        for path in ("sdpa", "flash", "math"):
            m = rows[(mode, path)]
            assert m["status"] == "ok", (mode, path, m["reason"])
            assert m["flops"] == al.attention_flops(al.Shape(1, 4, 2, 128, 64), mode)
        assert rows[(mode, "sdpa")]["metrics"]["library"].startswith("SDPA's choice: ")
        for path in ("efficient", "cudnn", "overrideable"):
            m = rows[(mode, path)]
            assert m["status"] == "unsupported" and f"no {path} SDPA kernel" in m["reason"], (mode, path)
        assert rows[(mode, "flex")]["status"] == "unsupported" and "torch.compile" in rows[(mode, "flex")]["reason"]
    fwd, both = rows[("fwd", "sdpa")], rows[("fwd+bwd", "sdpa")]
    assert both["flops"] == pytest.approx(3.5 * fwd["flops"])


@pytest.mark.slow
def test_an_attention_that_drops_its_mask_is_wrong_result(tmp_path):
    rows = run(tmp_path, "--workload-file", FIXTURES / "wrong_paths.py", "-w", "attention-libs-unmasked:tiny",
               "--dtype", "bf16")
    for mode in al.MODES:
        assert rows[(mode, "sdpa")]["status"] == "ok"
        bad = rows[(mode, "drops-the-mask")]
        assert bad["status"] == "wrong_result" and "exceeds tolerance" in bad["reason"], bad


@pytest.mark.slow
def test_flex_attention_compiles_on_the_cpu_forward_only(tmp_path):
    # inductor compiles flex attention's kernel in the worker: 25 s on a quiet 2-core host, more on a busy one
    rows = run(tmp_path, "-w", "attention-libs:tiny", "--dtype", "fp32", "--timeout", "150", device="cpu")
    fwd = rows[("fwd", "flex")]
    assert fwd["status"] == "ok", fwd["reason"]
    assert fwd["metrics"]["compile_s"] > 0 and fwd["metrics"]["path_kind"] == "portable"
    both = rows[("fwd+bwd", "flex")]
    assert both["status"] == "unsupported" and "backward" in both["reason"]
    assert rows[("fwd", "efficient")]["status"] == "unsupported"


# torch 2.4.0's schemas of the two operators (native_functions.yaml): no enable_gqa yet
TORCH_2_4_SCHEMAS = (
    "aten::scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, "
    "float dropout_p=0.0, bool is_causal=False, *, float? scale=None) -> Tensor",
    "aten::_fused_sdp_choice(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0.0, "
    "bool is_causal=False, *, float? scale=None) -> int",
)


def test_grouped_query_sdpa_is_unsupported_where_the_schema_has_no_enable_gqa():
    """torch 2.4's SDPA takes no enable_gqa (passing it raises TypeError): grouped-query heads are unsupported
    there with the reason, multi-head ones still run; this torch's schemas have the keyword."""
    for text in TORCH_2_4_SCHEMAS:
        names = [a.name for a in torch._C.parse_schema(text).arguments]
        assert names[:3] == ["query", "key", "value"] and "is_causal" in names
        assert al.gqa_missing(True, names, "2.4.1") == (
            "torch 2.4.1's scaled_dot_product_attention has no enable_gqa (grouped-query attention needs torch 2.5)")
        assert al.gqa_missing(False, names, "2.4.1") == ""
    assert al.sdpa_gqa_missing(True) == "" and al.sdp_choice_gqa_missing(True) == ""


def test_grouped_query_sdpa_still_measures_on_this_torch():
    """The tiny preset's grouped-query shape, through the guard, on the CPU: measured and checked against float64."""
    from gapbench.workloads.base import Context

    w = al.AttentionLibs()
    ctx = Context(device=resolve("cpu"), preset="tiny", budget_s=5, min_time_s=0.005, repeats=3,
                  options={"dtype": "fp32"})
    variants = [v for v in w.variants("tiny", ctx) if v.params["path"] in ("sdpa", "math")
                and v.params["mode"] == "fwd"]
    assert len(variants) == 2 and all(v.params["heads"] != v.params["kv_heads"] for v in variants)
    rows = {v.params["path"]: w.run(v, ctx) for v in variants}
    for path, m in rows.items():
        assert m.status == "ok", (path, m.reason)
        assert m.value > 0
    assert rows["sdpa"].metrics["library"].startswith("SDPA's choice: ")  # _fused_sdp_choice(enable_gqa=True)
