"""gapbench port: CUDA C++ -> HIP with torch.utils.hipify, into a new folder, with what stayed unmapped.

The expected HIP lines below were checked by hand against the CUDA source in fixtures/scan/port/src."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from gapbench.errors import GapbenchError
from gapbench.scan.port import port

SRC = Path(__file__).resolve().parent / "fixtures" / "scan" / "port" / "src"


def tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def ported(tmp_path_factory):
    out = tmp_path_factory.mktemp("port") / "hip"
    before = tree_digest(SRC)
    report = port(SRC, out)
    assert tree_digest(SRC) == before, "the input is never written"
    return report, out


def test_translation_exact_lines(ported):
    _, out = ported
    lines = (out / "vadd.cu").read_text().splitlines()
    assert lines[0] == "#include <hip/hip_runtime.h>"                 # was <cuda_runtime.h>
    assert lines[1] == "#include <cstdio>"
    assert lines[2] == '#include "helpers.h"'
    assert lines[14] == "  hipMalloc(&a, n * sizeof(float));"           # cudaMalloc
    assert lines[17] == "  hipStream_t stream;"
    assert lines[18] == "  hipStreamCreate(&stream);"
    # <<<grid, block>>> -> hipLaunchKernelGGL with dim3() and 0 shared memory, 0 (default) stream
    assert lines[20] == " hipLaunchKernelGGL(( vadd), dim3(blocks), dim3(threads), 0, 0, a, b, c, n);"
    assert lines[21] == " hipLaunchKernelGGL(( vadd), dim3(blocks), dim3(threads), 0, stream, a, b, c, n);"
    assert lines[22] == "  hipError_t err = hipDeviceSynchronize();"
    assert lines[23] == '  if (err != hipSuccess) printf("%s\\n", hipGetErrorString(err));'
    assert lines[24] == "  hipMemcpy(a, b, n * sizeof(float), hipMemcpyDeviceToDevice);"
    assert lines[27] == "  hipFree(a); hipFree(b); hipFree(c);"
    assert "<<<" not in "\n".join(lines)
    header = (out / "helpers.h").read_text().splitlines()
    assert header[1] == "#include <hip/hip_fp16.h>"                     # was <cuda_fp16.h>
    # ATen's CUDA headers have hipified twins in the ROCm torch; at::cuda:: stays (ROCm torch keeps it).
    assert header[7] == "#include <ATen/hip/HIPContext.h>"
    assert header[8] == "inline auto torch_stream() { return at::cuda::getCurrentCUDAStream(); }"


def test_report_lists_unmapped_and_remaining_work(ported):
    report, out = ported
    d = report.to_dict()
    assert {u["identifier"]: u["first"] for u in d["unmapped"]} == {"__CUDA_ARCH__": "vadd.cu:7",
                                                                    "cudaAccessPolicyWindow": "vadd.cu:26"}
    assert {(w["path"], w["rule"]) for w in d["remaining_work"]} == {("helpers.h", "cpp-warp-full-mask"),
                                                                    ("helpers.h", "cpp-warp-size-32"),
                                                                    ("vadd.cu", "cpp-cuda-arch-macro")}
    assert {p["source"]: p["kernel_launches"] for p in d["translated"]} == {"vadd.cu": 2, "helpers.h": 0}
    assert d["copied"] == 1
    assert (out / "README.md").read_bytes() == (SRC / "README.md").read_bytes(), "other files copied unchanged"


def test_refuses_unsafe_outputs(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    with pytest.raises(GapbenchError, match="not empty"):
        port(SRC, full)
    with pytest.raises(GapbenchError, match="inside"):
        port(SRC, SRC / "out")
    with pytest.raises(GapbenchError, match="inside"):
        port(SRC, SRC)
    with pytest.raises(GapbenchError, match="rocm only"):
        port(SRC, tmp_path / "new", target="xpu")
    with pytest.raises(GapbenchError, match="no such folder"):
        port(tmp_path / "missing", tmp_path / "new")
    assert not (SRC / "out").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert port(SRC, empty, scan_output=False).translated, "an existing empty folder is accepted"


def test_options_keep_launch_syntax_and_rename(tmp_path):
    r = port(SRC, tmp_path / "o", keep_launch_syntax=True, rename=True, scan_output=False)
    text = (tmp_path / "o" / "vadd.hip").read_text()
    assert "  vadd<<<blocks, threads>>>(a, b, c, n);" in text and "hipMalloc(&a" in text
    assert not (tmp_path / "o" / "vadd.cu").exists()
    assert {p.output for p in r.translated} == {"vadd.hip", "helpers.h"}
