"""gapbench scan: each rule kind on fixture files written for it, suppression, per-target verdicts, effort."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gapbench.errors import GapbenchError
from gapbench.scan import TARGETS, VERDICTS, load_rules, scan
from gapbench.scan.effort import format_days, nice_range, summarize
from gapbench.scan.findings import Finding

FIX = Path(__file__).resolve().parent / "fixtures" / "scan"


def hits(report, path: str) -> set[tuple[int, str]]:
    return {(f.line, f.rule) for f in report.findings if f.path == path}


@pytest.fixture(scope="module")
def report():
    return scan(FIX, jobs=1)


def test_rules_file_is_complete():
    rs = load_rules()
    assert rs.source and rs.date
    kinds = {k for r in rs.rules.values() for k in r.kinds}
    assert kinds == {"python-attr", "python-method", "python-string", "python-import", "deps", "cpp", "build"}
    for r in rs.rules.values():
        assert set(r.verdicts) == set(TARGETS) and all(v in VERDICTS for v in r.verdicts.values())
        assert r.message and r.fix and r.reference


def test_python_torch_cuda_uses(report):
    got = hits(report, "python/torch_cuda.py")
    expected = {
        (6, "py-torch-cuda-other"),         # from torch import cuda as gpu
        (7, "py-torch-cuda-amp"),           # from torch.cuda.amp import autocast
        (8, "py-cuda-extension"),           # from torch.utils.cpp_extension import CUDAExtension
        (13, "py-dot-cuda"),
        (14, "py-torch-cuda-is-available"),
        (15, "py-torch-cuda-portable"),     # torch.cuda.synchronize
        (16, "py-torch-cuda-portable"),     # T.cuda.empty_cache through `import torch as T`
        (17, "py-torch-cuda-graphs"),       # gpu.CUDAGraph through `from torch import cuda as gpu`
        (18, "py-torch-cuda-amp"),          # autocast() imported from torch.cuda.amp
        (20, "py-torch-backends-cudnn"),
        (21, "py-torch-version-cuda"),
        (22, "py-cuda-device-string"),      # "cuda:0"
        (23, "py-cuda-device-string"),      # .to("cuda")
        (24, "py-nccl-backend"),
        (25, "py-load-inline-cuda"),        # load_inline with cuda_sources=
        (27, "py-is-cuda"),
        (28, "py-torch-cuda-nvtx"),
        (29, "py-torch-cuda-nvidia-feature"),
        (30, "build-env-cuda-visible-devices"),
        (31, "py-torch-cuda-only"),
        (32, "py-cuda-extension"),
        (33, "py-torch-cuda-runtime"),
        (35, "py-cuda-device-string"),      # f"cuda:{...}"
        (38, "py-import-flash-attn"),       # two names from one import: one finding
    }
    assert got == expected
    assert sum(1 for f in report.findings if f.path == "python/torch_cuda.py" and f.line == 38) == 1
    # load_inline without cuda_sources (line 26), the docstring "cuda", "cudaless" and the prose message
    # naming CUDA_HOME (line 37) are not findings.


def test_python_columns_point_at_the_code(report):
    by_line = {f.line: f for f in report.findings if f.path == "python/torch_cuda.py"}
    assert (by_line[13].column, by_line[13].text) == (24, ".cuda()")
    assert (by_line[15].column, by_line[15].text) == (9, "torch.cuda.synchronize")


def test_python_imports_of_nvidia_bound_packages(report):
    got = hits(report, "python/imports.py")
    assert got == {(2, "py-import-apex"), (3, "py-import-flash-attn"), (4, "py-import-xformers"),
                   (6, "py-import-tensorrt"), (7, "py-import-tensorrt"),
                   (8, "py-import-dali"), (9, "py-import-cupy"), (10, "py-import-pycuda"),
                   (11, "py-import-numba-cuda"), (12, "py-import-transformer-engine"),  # 13: import triton alone is portable (its kernels are findings)
                   (14, "py-import-deepspeed-ops"), (15, "py-import-vllm"), (16, "py-import-nvml")}
    # 15 is vLLM's NCCL wrapper: vLLM itself builds for ROCm, XPU and TPU, so `import vllm` is none; 5,
    # bitsandbytes, builds for CUDA, ROCm, XPU and the CPU from one source: its import is none either
    # plain `import deepspeed`, `import numba`, `import numpy` (lines 17-19) are not lock-in


def test_dependency_files(report):
    assert hits(report, "deps/requirements.txt") == {
        (1, "deps-cuda-local-version"), (2, "deps-cuda-index-url"), (3, "deps-nvidia-wheel"),
        (4, "deps-cupy-cuda"), (5, "deps-cuda-kernel-package"), (6, "deps-nvidia-only-package"),
        (9, "deps-cuda-bindings"), (10, "deps-cuda-bindings")}
    assert hits(report, "deps/environment.yml") == {(4, "deps-conda-cuda"), (7, "deps-conda-cuda"),
                                                     (8, "deps-conda-cuda")}
    assert hits(report, "deps/pyproject.toml") == {(3, "deps-nvidia-wheel"), (3, "deps-cuda-kernel-package")}


def test_cuda_cpp(report):
    got = hits(report, "cpp/kernels.cu")
    for line, rule in [(1, "cpp-cuda-header"), (2, "cpp-cublas"), (3, "cpp-cudnn"), (4, "cpp-cufft"),
                       (5, "cpp-cusparse"), (6, "cpp-nccl"), (7, "cpp-cutlass"), (8, "cpp-cub"), (9, "cpp-thrust"),
                       (10, "cpp-tensor-core"), (12, "cpp-warp-size-32"), (13, "cpp-warp-full-mask"),
                       (15, "cpp-global-kernel"), (17, "cpp-warp-full-mask"), (18, "cpp-warp-full-mask"),
                       (18, "cpp-warp-size-32"), (19, "cpp-warp-size-32"), (21, "cpp-inline-ptx"),
                       (22, "cpp-tensor-core"), (23, "cpp-cuda-arch-macro"), (30, "cpp-cuda-runtime-api"),
                       (31, "cpp-kernel-launch"), (32, "cpp-cublas"), (33, "cpp-cudnn"), (34, "cpp-cufft"),
                       (35, "cpp-cusparse"), (36, "cpp-nccl"), (37, "cpp-cutlass"), (38, "cpp-thrust"),
                       (39, "cpp-cuda-driver-api")]:
        assert (line, rule) in got, (line, rule)
    assert not any(line == 29 for line, _ in got), "a CUDA call inside a // comment is not a finding"
    assert hits(report, "cpp/host.cpp") == {(1, "cpp-cuda-header"), (2, "cpp-cuda-runtime-api")}
    assert hits(report, "cpp/plain.cpp") == set(), "C++ without CUDA headers is not scanned as CUDA code"


def test_build_and_run_files(report):
    assert hits(report, "buildrun/Dockerfile") == {(1, "build-docker-nvidia-base"), (2, "build-nvidia-smi"),
                                                (2, "build-nvcc"), (3, "build-env-cuda-visible-devices"),
                                                (3, "build-env-nccl")}
    assert hits(report, "buildrun/run.sh") == {(3, "build-nvidia-smi"), (4, "build-cuda-arch"),
                                            (5, "build-env-cuda-visible-devices"), (6, "build-container-gpus")}
    assert hits(report, "buildrun/Makefile") == {(2, "build-nvcc"), (2, "build-cuda-arch")}
    assert hits(report, "buildrun/CMakeLists.txt") == {(2, "build-cmake-cuda"), (3, "build-cmake-cuda"),
                                                    (4, "build-cmake-cuda"), (5, "build-cmake-cuda"),
                                                    (5, "build-cuda-libs")}


def test_notebook_code_cells_and_shell_lines(report):
    # Lines are the .ipynb file's own; the alias `T` from cell 1 is used in cell 2; the markdown cell,
    # the %matplotlib magic and the suppressed line give nothing.
    assert hits(report, "notebook/train.ipynb") == {(18, "build-nvidia-smi"), (20, "py-dot-cuda"),
                                                    (30, "py-cuda-device-string"), (40, "build-nvcc")}
    f = next(f for f in report.findings if f.path == "notebook/train.ipynb" and f.line == 20)
    assert (f.column, f.text) == (21, ".cuda()")


def test_inline_suppression(report):
    # ignore[rule], bare ignore, and ignore[glob, other] drop the finding; ignore[other-rule] does not.
    assert hits(report, "suppress/suppressed.py") == {(5, "py-dot-cuda"), (7, "py-dot-cuda")}
    assert hits(report, "suppress/suppressed.cu") == {(3, "cpp-cuda-runtime-api")}
    assert report.suppressed == 6   # 5 in suppress/, 1 in the notebook


def test_per_target_verdicts(report):
    by_rule = {f.rule: f for f in report.findings}
    v = lambda rule: {t: report.verdict(by_rule[rule], t) for t in TARGETS}  # noqa: E731
    assert v("py-import-tensorrt") == {"rocm": "blocker", "npu": "blocker", "xpu": "blocker"}
    assert v("py-import-flash-attn") == {"rocm": "auto", "npu": "manual", "xpu": "manual"}
    assert report.ruleset.rules["py-triton-kernel"].verdicts == {"rocm": "manual", "npu": "manual", "xpu": "manual"}
    assert v("py-torch-cuda-portable") == {"rocm": "works", "npu": "auto", "xpu": "auto"}
    assert v("py-torch-cuda-only") == {"rocm": "works", "npu": "manual", "xpu": "manual"}
    assert v("cpp-inline-ptx") == {"rocm": "blocker", "npu": "blocker", "xpu": "blocker"}
    assert v("cpp-warp-full-mask")["rocm"] == "manual"
    assert v("cpp-global-kernel") == {"rocm": "works", "npu": "blocker", "xpu": "auto"}
    # The summary counts per target follow the verdicts, and blockers come first in the findings.
    s = report.summaries
    assert s["rocm"].counts["blocker"] < s["npu"].counts["blocker"]
    assert report.worst(report.findings[0]) == "blocker"
    assert [r.rule for r in s["rocm"].blockers][:1] and all(r.verdict == "blocker" for r in s["rocm"].blockers)


def test_target_selection_and_fail_on():
    r = scan(FIX / "python", targets=["rocm"], jobs=1)
    assert r.targets == ("rocm",) and set(r.summaries) == {"rocm"}
    assert r.fails("blocker")            # tensorrt / gds
    r2 = scan(FIX / "buildrun", targets=["rocm"], jobs=1)
    assert not r2.fails("manual") and not r2.fails("blocker")
    assert r2.summaries["rocm"].counts["manual"] == 0
    with pytest.raises(GapbenchError, match="unknown target"):
        scan(FIX, targets=["cuda"])
    assert scan(FIX / "buildrun", targets=["npu,xpu"], jobs=1).targets == ("npu", "xpu")


def test_effort_formula_by_hand():
    rs = load_rules()
    fs = [Finding("a.py", 1, 1, "py-dot-cuda", ""), Finding("b.py", 1, 1, "py-dot-cuda", ""),   # auto on xpu
          *[Finding("c.py", i, 1, "py-torch-cuda-only", "") for i in range(4)],                 # manual on xpu
          Finding("d.py", 1, 1, "py-import-tensorrt", ""), Finding("e.py", 1, 1, "py-import-tensorrt", "")]
    s = summarize(fs, rs, "xpu")
    assert s.counts == {"works": 0, "auto": 2, "manual": 4, "blocker": 2}
    assert s.auto_files == 2 and s.manual_units == 1 + math.log2(4) and s.blocker_units == 1 + math.log2(2)
    lo = 2 * 5 / 60 / 8 + 3 * 1 / 8 + 2 * 3
    hi = 2 * 20 / 60 / 8 + 3 * 4 / 8 + 2 * 10
    assert s.effort_days == pytest.approx((lo, hi))
    assert nice_range(lo, hi) == (6.3, 22.0)
    assert format_days(lo, hi) == "6.3–22 person-days"
    assert format_days(0, 0) == "none"


def test_effort_counts_a_blocker_group_once():
    rs = load_rules()
    fs = [Finding("a.cu", 1, 1, "cpp-global-kernel", ""), Finding("a.cu", 2, 1, "cpp-kernel-launch", ""),
          Finding("b.cu", 1, 1, "cpp-half-types", ""), Finding("c.py", 1, 1, "py-import-tensorrt", "")]
    s = summarize(fs, rs, "npu")
    assert s.counts["blocker"] == 4
    # one Ascend rewrite of the CUDA device code over {a.cu, b.cu} (1 + log2 2 = 2) plus TensorRT (1)
    assert s.blocker_units == 3
    assert s.effort_days == pytest.approx((3 * 3, 3 * 10))


def test_user_rules_file_extends_and_overrides(tmp_path):
    extra = tmp_path / "mine.toml"
    extra.write_text('''
[effort]
blocker_days = [1, 2]

[[rule]]
id = "py-dot-cuda"
kind = "python-method"
match = "cuda"
message = "overridden"
fix = "f"
reference = "r"
verdict = { rocm = "blocker", npu = "blocker", xpu = "blocker" }

[[rule]]
id = "my-gpu-helper"
kind = "python-attr"
match = "mylib.gpu_only"
message = "our own CUDA-only helper"
fix = "use mylib.device_agnostic"
reference = "internal wiki"
verdict = { rocm = "works", npu = "manual", xpu = "manual" }
''')
    src = tmp_path / "src"
    src.mkdir()
    (src / "m.py").write_text("import mylib\nmylib.gpu_only()\nx.cuda()\n")
    r = scan(src, rules=[extra], jobs=1)
    assert {(f.line, f.rule) for f in r.findings} == {(2, "my-gpu-helper"), (3, "py-dot-cuda")}
    assert r.summaries["rocm"].counts["blocker"] == 1
    assert r.summaries["rocm"].effort_days == (1.0, 2.0)
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rule]]\nid = "x"\nkind = "nope"\n')
    with pytest.raises(GapbenchError, match="kind"):
        scan(src, rules=[bad])
