"""gapbench scan on the lock-in that hand review of real training code finds: build files, vendor C++ APIs behind
namespace aliases, enums and types, cache hints, warp-size idioms, CUDA-only Python extensions; and the names
that only look like vendor APIs. The fixtures in fixtures/scan/realcode were written for these tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gapbench.errors import GapbenchError
from gapbench.scan import cuda_api, load_rules, scan
from gapbench.scan.cuda_api_build import device_library, table_rows

FIX = Path(__file__).resolve().parent / "fixtures" / "scan" / "realcode"
DATA = Path(__file__).resolve().parent / "data" / "scan"


@pytest.fixture(scope="module")
def report():
    return scan(FIX, jobs=1)


def hits(report, path: str) -> set[tuple[int, str]]:
    return {(f.line, f.rule) for f in report.findings if f.path == path}


def test_makefile_flags_libraries_switches_and_nvcc_in_a_variable(report):
    assert hits(report, "build/Makefile") == {
        (2, "build-nvcc"),                   # NVCC := $(shell which nvcc)
        (3, "build-nvcc-flags"),             # --use_fast_math -lineinfo -maxrregcount -Xptxas
        (4, "build-cuda-libs"),              # -lcublas -lcublasLt -lnvidia-ml
        (5, "build-cuda-arch"),              # -gencode arch=compute_$(SM),code=sm_$(SM)
        (6, "build-cuda-feature-switch"),    # USE_CUDNN ?= 0
        (7, "build-cuda-feature-switch"),    # ifeq ($(USE_CUDNN), 1)
        (8, "build-nvidia-source"),          # $(HOME)/cudnn-frontend/include
        (9, "build-cuda-libs"),              # -lcudnn
        (10, "build-cuda-feature-switch"),   # -DENABLE_CUDNN
        (12, "build-cuda-packages"),         # dpkg -l | grep -q nccl
        (13, "build-cuda-libs"),             # -lnccl
        (15, "build-nvcc"),                  # ifeq ($(NVCC),)
        (20, "build-nvcc"),                  # $(NVCC) in a recipe
    }
    # the comment (1), the $(info ...) message naming nvcc (16), CFLAGS and $(CC) (18, 22) are not lock-in


def test_cmake_ci_yaml_and_shell(report):
    assert hits(report, "build/CMakeLists.txt") == {(3, "build-nvcc-flags"), (5, "build-cuda-libs")}
    assert hits(report, "build/ci.yml") == {(6, "build-ci-nvidia-image"), (9, "build-nvidia-source"),
                                            (11, "build-cuda-feature-switch"), (13, "build-cuda-toolkit-path")}
    assert hits(report, "build/setup.sh") == {(3, "build-nvidia-source"), (4, "build-cuda-packages"),
                                              (5, "build-nvidia-tool"), (6, "build-cuda-toolkit-path"),
                                              (6, "build-env-cuda-misc")}


def test_cudnn_frontend_through_a_namespace_alias_and_vendor_enums(report):
    assert hits(report, "cpp/attention.cpp") == {
        (2, "cpp-cudnn-frontend"), (3, "cpp-cuda-header"),           # cudnn_frontend.h, cuda_profiler_api.h
        (5, "cpp-cudnn-frontend"),                                   # namespace fe = cudnn_frontend;
        (7, "cpp-cudnn"), (11, "cpp-cudnn"), (12, "cpp-cudnn"),      # cudnnHandle_t, cudnnStatus_t, CUDNN_STATUS_*
        (16, "cpp-cudnn-frontend"), (17, "cpp-cudnn-frontend"),      # fe::graph::Graph, set_io_data_type, fe::DataType_t
        (19, "cpp-cudnn-frontend"),                                  # a builder chain is one statement: 17-18, 19-20
        (21, "cpp-cudnn-frontend"), (22, "cpp-cudnn-frontend"),      # SDPA_attributes, graph->sdpa
        (23, "cpp-cudnn-frontend"),                                  # graph->validate()
        (27, "cpp-cublas"), (28, "cpp-cublas"), (29, "cpp-cublas"),  # cublasStatus_t, CUDA_R_16BF, CUBLASLT_EPILOGUE_*
        (30, "cpp-cublas"),                                          # CUBLAS_STATUS_SUCCESS
        (34, "cpp-cuda-runtime-api"),                                # cudaProfilerStart
    }
    # cudnn_workspace and cudnn_workspace_size (8, 9) are the project's own names


def test_names_that_only_share_a_prefix_are_not_vendor_apis(report):
    # cudaCheck_, cudaCheck, cudaFreeCheck, cublasCheck, nvmlCheck, ncclCheck, cudaMallocConditionallyManaged,
    # cuda_num_SMs (lines 9-15) and a validate() that is not the cuDNN frontend's (5, 18) give nothing.
    assert hits(report, "cpp/config.cpp") == {(2, "cpp-cuda-header"), (8, "cpp-cuda-runtime-api"),
                                              (21, "cpp-cuda-runtime-api"), (22, "cpp-cuda-runtime-api")}
    shown = {f.text for f in report.findings if f.path == "cpp/config.cpp"}
    assert shown == {"#include <cuda_runtime.h>", "cudaError_t", "cudaStream_t", "cudaMemsetAsync"}


def test_cache_hints_warp_size_idioms_and_bfloat16(report):
    assert hits(report, "cpp/reduce.cu") == {
        (1, "cpp-cuda-header"), (2, "cpp-warp-size-32"),             # #define WARP_SIZE 32U
        (4, "cpp-half-types"),                                       # __nv_bfloat16
        (7, "cpp-warp-size-32"),                                     # for (offset = 16; offset > 0; offset /= 2)
        (8, "cpp-warp-full-mask"),
        (14, "cpp-cache-hint"), (15, "cpp-cache-hint-no-hip"), (16, "cpp-cache-hint-no-hip"),   # __ldcs, __stcs, __stcg
        (19, "cpp-half-types-no-hip"), (20, "cpp-half-types-no-hip"),  # nv_bfloat16, __bfloat162float
    }
    # a loop from 16 that does not halve (25) and half_n (24) are not warp code


def test_rocm_verdict_follows_the_mapping(report):
    by_text = {f.text: f for f in report.findings if f.path == "cpp/reduce.cu"}
    assert report.verdict(by_text["__ldcs"], "rocm") == "works"       # HIP has __ldcs
    assert report.verdict(by_text["__stcs"], "rocm") == "manual"      # HIPIFY lists no HIP __stcs
    assert report.verdict(by_text["__nv_bfloat16"], "rocm") == "auto"  # hipify maps it to __hip_bfloat16
    assert report.verdict(by_text["nv_bfloat16"], "rocm") == "manual"
    assert report.verdict(by_text["__stcs"], "npu") == "blocker", "the other targets keep the rule's verdicts"


def test_cuda_only_extensions_requirements_and_profiler(report):
    assert hits(report, "python/extensions.py") == {
        (4, "py-import-cuda-extension"), (5, "py-import-cuda-extension"), (6, "py-import-cuda-extension"),
        (7, "py-import-cuda-extension"), (9, "py-import-xformers"),
        (11, "py-requirement-cuda-package"),                          # RequirementCache("flash-attn>=2.0.0.post1")
        (16, "py-import-cuda-extension"),                             # rotary_emb.apply_rotary(...)
        (21, "py-import-cuda-extension"), (27, "py-import-cuda-extension"),
        (32, "py-import-cuda-extension"), (32, "py-import-xformers"),  # linear_act_forward(...), SwiGLU(...)
        (37, "py-profiler-cuda-activity"),
        (41, "py-nsight-metric"), (42, "py-nvidia-tool"),
    }
    # RequirementCache("torch>=2.1.0") (12) and a state-dict key naming rotary_emb (40) are not lock-in


def test_the_dictionary_knows_the_api_and_not_the_prefix():
    api = cuda_api.dictionary()
    assert api.names["cudaMalloc"] == cuda_api.ApiName("cuda-runtime", True)
    assert api.names["CUDNN_STATUS_SUCCESS"].library == "cudnn"
    assert api.names["CUBLAS_STATUS_NOT_SUPPORTED"].library == "cublas"
    assert api.names["nvmlDeviceGetHandleByIndex_v2"].library == "nvml"
    assert api.names["ncclAllReduce"] == cuda_api.ApiName("nccl", True)
    assert api.names["__stcs"] == cuda_api.ApiName("cuda-cache-hint", False)
    for own in ("cudaCheck", "cudaCheck_", "cudaFreeCheck", "cudnn_workspace", "cublasCheck", "nvmlCheck", "texture"):
        assert own not in api.names, own
    assert api.namespaces["cudnn_frontend"] == "cudnn-frontend"
    assert "validate" in api.members["cudnn-frontend"]
    if cuda_api.hipify_tables() is not None:
        # a name only torch.utils.hipify's tables carry, filed by its prefix
        assert api.names["CUDA_R_4F_E2M1"] == cuda_api.ApiName("cuda-runtime", True)


def test_tables_of_older_torch_mark_unsupported_names():
    # torch < 2.2 kept (hip name, conversion, api[, HIP_UNSUPPORTED]) tuples instead of strings
    api = cuda_api.CudaApi()
    tables = [{"cudaGraphInstantiateWithParams": ("hipGraphInstantiateWithParams", 21, 1, 47),
               "cudaMallocAsync": ("hipMallocAsync", 9, 1), "include <cuda.h": ("include <hip/hip_runtime.h", 1)}]
    cuda_api._add_hipify(api, tables, {"cuda": "cuda-runtime"})
    assert api.names == {"cudaGraphInstantiateWithParams": cuda_api.ApiName("cuda-runtime", False),
                         "cudaMallocAsync": cuda_api.ApiName("cuda-runtime", True)}


def test_the_generator_reads_hipify_tables():
    rows = table_rows((DATA / "hipify_table.md").read_text())
    assert rows == [("__ldcs", True), ("__stcs", False), ("__float2bfloat16_rn", False), ("__half2float", True),
                    ("__syncthreads", True), ("__double2float_rn", True), ("sinf", True)]   # cub:: rows left out
    assert [device_library(n) for n, _ in rows] == ["cuda-cache-hint", "cuda-cache-hint", "cuda-fp16", "cuda-fp16",
                                                     None, None, None]


def test_api_rules_are_checked(tmp_path):
    rs = load_rules()
    assert rs.rules["cpp-cache-hint-no-hip"].verdicts["rocm"] == "manual"
    assert rs.api_rules()["cudnn-frontend"][0].id == "cpp-cudnn-frontend"
    bad = tmp_path / "bad.toml"
    bad.write_text('[[rule]]\nid = "mine"\nkind = "cpp"\napi = ["cudart"]\nmessage = "m"\nfix = "f"\n'
                   'reference = "r"\nverdict = { rocm = "auto", npu = "auto", xpu = "auto" }\n')
    with pytest.raises(GapbenchError, match="unknown api library 'cudart'"):
        load_rules([bad])
    twice = tmp_path / "twice.toml"
    twice.write_text('[[rule]]\nid = "mine"\nkind = "cpp"\napi = ["nccl"]\nmessage = "m"\nfix = "f"\n'
                     'reference = "r"\nverdict = { rocm = "auto", npu = "auto", xpu = "auto" }\n')
    with pytest.raises(GapbenchError, match="claimed by rules"):
        load_rules([twice])


def test_scanning_cuda_code_does_not_import_torch():
    code = ("import sys; from gapbench.scan import scan; r = scan(sys.argv[1], jobs=1); "
            "print(len(r.findings), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(FIX / "cpp")], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert int(out[0]) > 20 and out[1] == "False"
