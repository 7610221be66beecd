"""gapbench ops: the ATen operators of a real small model, fake vs real, bad input, and --against a real audit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch

from gapbench import results
from gapbench.coverage import audit
from gapbench.coverage.dispatch import packet_name
from gapbench.coverage.index import build_index, match_entries
from gapbench.coverage.trace import against, trace_ops
from gapbench.errors import GapbenchError

MODELS = textwrap.dedent('''
    import torch

    def linear_relu():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
        return model, (torch.randn(3, 8),)

    def with_loss():
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(4, 2)

            def forward(self, x, y):
                out = self.lin(x)
                return {"logits": out, "loss": torch.nn.functional.mse_loss(out, y)}
        return M(), {"x": torch.randn(5, 4), "y": torch.randn(5, 2)}

    def raises():
        raise ValueError("no weights here")

    def wrong_shape():
        return torch.nn.Linear(2, 2)
''')


@pytest.fixture()
def models(tmp_path, monkeypatch):
    (tmp_path / "gb_test_models.py").write_text(MODELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    sys.modules.pop("gb_test_models", None)


def test_linear_relu_has_the_known_op_set(models):
    t = trace_ops("gb_test_models:linear_relu")
    assert t.fake
    assert set(t.forward) == {"aten.t.default", "aten.addmm.default", "aten.relu.default", "aten.sum.default"} | (
        set(t.forward) & {"aten.detach.default"})
    assert t.forward["aten.addmm.default"] == 1 and t.forward["aten.relu.default"] == 1
    # backward of relu and of the linear layer (weight grad by mm, bias grad by a sum)
    assert {"aten.threshold_backward.default", "aten.mm.default", "aten.sum.dim_IntList"} <= set(t.backward)
    assert "aten.addmm.default" not in t.backward and "aten.relu.default" not in t.backward
    assert "aten.ones_like.default" in t.backward  # the loss's gradient seed belongs to backward
    assert t.dtypes["aten.addmm.default"] == {"float32"}


def test_fake_and_real_traces_agree(models):
    fake = trace_ops("gb_test_models:linear_relu")
    real = trace_ops("gb_test_models:linear_relu", fake=False)
    kernels = lambda c: {k: v for k, v in c.items() if k != "aten.detach.default"}  # noqa: E731
    assert kernels(fake.forward) == kernels(real.forward)
    assert kernels(fake.backward) == kernels(real.backward)


def test_loss_attribute_and_keyword_inputs(models):
    t = trace_ops("gb_test_models:with_loss")
    assert "aten.mse_loss.default" in t.forward
    assert "aten.mse_loss_backward.default" in t.backward


@pytest.mark.slow
@pytest.mark.parametrize("target, words", [
    ("gb_test_models:raises", "raised ValueError: no weights here"),
    ("gb_test_models:wrong_shape", "must return (model, example_inputs)"),
    ("gb_no_such_module:build", "cannot import 'gb_no_such_module'"),
    ("gb_test_models:missing", "has no attribute 'missing'"),
    ("no_colon", "expected MODULE:CALLABLE"),
])
def test_bad_targets_are_one_line_and_exit_2(models, target, words):
    with pytest.raises(GapbenchError, match="."):
        trace_ops(target)
    p = subprocess.run([sys.executable, "-m", "gapbench", "ops", target], capture_output=True, text=True,
                       cwd=models, timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert words in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_a_workload_without_build_step_is_refused():
    with pytest.raises(GapbenchError, match="build_step"):
        trace_ops(workload="gemm:tiny")


AUDITED = r"addmm|mm|t|nn\.functional\.relu|sum|nn\.functional\.linear"


@pytest.fixture(scope="module")
def small_audit(tmp_path_factory):
    d = tmp_path_factory.mktemp("ops")
    out = d / "cov.json"
    audit(device="cpu", dtypes="float32", ops=AUDITED, grad=True, output=out, max_samples=3)
    return out, build_index(ops=AUDITED)


@pytest.mark.slow
def test_index_maps_overloads_to_opinfo_entries(small_audit):
    _, index = small_audit
    hits, phase = match_entries("aten.addmm.default", index)
    assert phase == "forward" and hits[0]["op"] == "addmm"
    hits, phase = match_entries("aten.threshold_backward.default", index)
    assert phase == "backward" and hits[0]["op"] == "nn.functional.relu"
    assert match_entries("aten.no_such_op.default", index) == ([], "")


@pytest.mark.slow
def test_against_a_real_audit_gives_each_op_a_status(models, small_audit):
    cov_file, index = small_audit
    t = trace_ops("gb_test_models:linear_relu")
    v = against(t, str(cov_file), index=index)
    assert v.statuses["aten.addmm.default"]["status"] == "native"
    assert v.statuses["aten.addmm.default"]["entry"] == "addmm"
    assert v.statuses["aten.threshold_backward.default"]["status"] == "native"  # audited with --grad
    assert v.statuses["aten.ones_like.default"]["status"] == "unknown"  # not in this small audit
    assert v.line.startswith(f"uses {len(t.ops())} ops; 0 not native on ")
    assert "aten.ones_like.default" in v.unknown and "not covered by the audit" in v.line
    assert not v.warnings
    # the same file from another torch version: a warning, then matching by name
    data = json.loads(cov_file.read_text())
    data["coverage"]["torch"] = "1.13.0"
    other = cov_file.with_name("other.json")
    other.write_text(json.dumps(data))
    v2 = against(t, str(other), index=index)
    assert v2.warnings and "torch 1.13.0" in v2.warnings[0]
    assert v2.statuses["aten.addmm.default"]["status"] == "native"
    # a device where addmm is missing: the verdict names it
    for r in data["coverage"]["ops"]:
        if r["op"] == "addmm":
            r["status"], r["reason"] = "unsupported", "not implemented for 'Float'"
    other.write_text(json.dumps(data))
    v3 = against(t, str(other), index=index)
    assert "aten.addmm.default" in v3.not_native
    assert all(v3.statuses[o]["entry"] == "addmm" for o in v3.not_native)  # this small index has few entries
    assert f" {len(v3.not_native)} not native on " in v3.line and "aten.addmm.default (unsupported)" in v3.line


def test_against_a_file_without_coverage_is_refused(models, tmp_path):
    rs = results.ResultSet(host={}, device={"type": "cpu"})
    results.save(rs, tmp_path / "plain.json")
    t = trace_ops("gb_test_models:linear_relu")
    with pytest.raises(GapbenchError, match="no coverage section"):
        against(t, str(tmp_path / "plain.json"), index={"entries": []})


def _llm_workload():
    from gapbench import workloads

    if "llm-train" not in workloads.names():
        pytest.skip("the llm-train workload is not present in this tree")
    w = workloads.get("llm-train")
    if not callable(getattr(w, "build_step", None)):
        pytest.skip("llm-train has no build_step(preset, device) yet")
    return w


@pytest.mark.slow
def test_llm_train_tiny_trace_matches_an_independent_profiler_trace():
    w = _llm_workload()
    real = trace_ops(workload="llm-train:tiny", fake=False)  # dispatch mode on real tensors
    # independent: the autograd profiler on a real step of the same model, no dispatch mode involved
    torch.manual_seed(0)
    step = w.build_step("tiny", torch.device("cpu"))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    counts = {e.key: e.count for e in prof.key_averages() if e.key.startswith("aten::")}
    ours = {packet_name(o) for o in real.ops()}
    # every kernel we traced really ran (the profiler also lists composites: ours is a subset)
    missing = ours - set(counts)
    assert not missing, f"traced but not seen by the profiler: {sorted(missing)}"
    for op in ("aten.mm.default", "aten.embedding.default", "aten.nll_loss_forward.default"):
        assert real.forward.get(op, 0) > 0, op
    for op in ("aten.mm.default", "aten.embedding_dense_backward.default", "aten.nll_loss_backward.default"):
        assert real.backward.get(op, 0) > 0, op
    # call counts agree for kernels only ever called directly
    for op in ("aten.mm.default", "aten.embedding_dense_backward.default", "aten.nll_loss_forward.default",
               "aten.silu_backward.default"):
        total = real.forward.get(op, 0) + real.backward.get(op, 0)
        assert counts[packet_name(op)] == total, op


@pytest.mark.slow
def test_llm_train_tiny_fake_trace_has_the_real_compute_kernels():
    _llm_workload()
    fake = trace_ops(workload="llm-train:tiny")
    real = trace_ops(workload="llm-train:tiny", fake=False)
    # the compute kernels are the same, call for call; fake tensors may differ only where the model branches on
    # data (attention-mask construction), which is why this compares the heavy kernels, not the whole set
    heavy = [o for o in real.ops() if any(k in o for k in ("mm", "attention", "embedding", "nll_loss", "silu",
                                                             "softmax", "rsqrt"))]
    assert len(heavy) >= 6
    for op in heavy:
        assert (fake.forward.get(op, 0), fake.backward.get(op, 0)) == (real.forward.get(op, 0),
                                                                      real.backward.get(op, 0)), op
