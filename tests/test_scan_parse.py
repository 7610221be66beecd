"""The scanner reads structure: port branches are already ported, a mention is not a use, a statement is one
finding, and each kind of lock-in has its own fixture (tests/fixtures/scan_kinds)."""


import pytest

from gapbench.scan.branches import condition_polarity, cpp_port_lines
from scan_kinds import hits, kinds_report


@pytest.fixture(scope="module")
def report():
    return kinds_report()


def test_extension_glue(report):
    lines = {line for line, rule, _ in hits(report, "ext_glue.cpp") if rule == "cpp-torch-cuda"}
    assert {6, 7, 8, 9} <= lines     # x.is_cuda(), the CUDA guard, the stream, torch::kCUDA


def test_warp_size_arithmetic_and_masks(report):
    got = hits(report, "warp.cu")
    assert {(2, "cpp-warp-size-arith", False), (6, "cpp-warp-size-arith", False),
            (7, "cpp-warp-size-arith", False), (8, "cpp-warp-size-arith", False),
            (10, "cpp-warp-full-mask", False)} <= got
    assert not any(line == 9 for line, _, _ in got)     # threadIdx alone is HIP as it is


def test_port_branches_are_already_ported(report):
    got = hits(report, "port_branch.cu")
    assert (8, "cpp-cub", True) in got                  # cub:: is hipcub's through the ROCm branch's alias
    assert (12, "cpp-cuda-runtime-api", True) in got    # inside #if defined(__HIP_PLATFORM_AMD__)
    assert (14, "cpp-cuda-runtime-api", False) in got   # its #else is the CUDA side
    assert report.ported >= 2
    assert all(s.counts["manual"] + s.counts["auto"] + s.counts["works"] + s.counts["blocker"]
               == len(report.findings) - report.ported for s in report.summaries.values())


def test_a_builder_chain_is_one_finding(report):
    got = hits(report, "chain.cpp")
    assert (5, "cpp-cudnn-frontend", False) in got
    assert not any(line in (6, 7) for line, _, _ in got)
    (f,) = [f for f in report.findings if f.path == "chain.cpp" and f.line == 5]
    assert f.last_line == 7


def test_triton_kernels_and_tuned_configs(report):
    got = hits(report, "triton_kernels.py")
    assert got == {(7, "py-triton-config", False), (8, "py-triton-config", False),   # num_warps tuned
                   (13, "py-triton-kernel", False), (18, "py-triton-kernel", False)}  # @triton.jit, triton.jit(f)


def test_mentions_are_not_uses_and_python_port_branches(report):
    got = hits(report, "mentions.py")
    assert got == {(4, "py-import-flash-attn", False), (8, "py-torch-cuda-amp", False),
                   (16, "py-import-flash-attn", False),            # the call; not `= None` (6), `is None` (14)
                   (21, "py-torch-cuda-portable", True),           # under `if torch.version.hip:`
                   (24, "py-cuda-device-string", False)}           # `custom_fwd` passed along (10) is a mention


def test_build_script_tooling(report):
    got = {(line, rule) for line, rule, _ in hits(report, "setup.py")}
    assert {(4, "py-cuda-extension"), (5, "py-cuda-extension"), (8, "py-nvcc-flag"), (9, "py-cuda-link-library"),
            (10, "py-cuda-extension")} <= got


def test_ci_workflow(report):
    got = {(line, rule) for line, rule, _ in hits(report, "workflows/build.yml")}
    assert {(4, "build-ci-cuda-version"), (11, "build-ci-cuda-toolkit-action"), (13, "build-ci-cuda-version"),
            (14, "build-torch-cuda-wheels"), (15, "build-nvidia-registry")} <= got
    assert not any(line in (1, 7, 8, 9) for line, _ in got)


def test_cmake_nvidia_libraries(report):
    got = {line for line, rule, _ in hits(report, "CMakeLists.txt") if rule == "build-cmake-nvidia-library"}
    assert got == {2, 3, 5}


def test_rule_firing_counts(report):
    fired = report.firings()
    # triton_kernels.py's two, triton_tuned_numbers.py's four, pyrules/vendor_tables.py's three (one ported),
    # unfamiliar/pkg_build.py's two (a choice between two numbers; a Config whose num_warps runs a line on),
    # tuning/heuristics.py's four (a heuristic's two returns, a table's lambda, a count from 32-wide warps)
    assert fired["py-triton-config"]["findings"] == 15
    # port_branch.cu's two (one ported), cute_struct_fields.cu's six, macros/kernels.cu's six (two ported),
    # hipalias/'s seven in four files (five ported through its port header), unfamiliar/binding.cpp's two (a
    # cudaDeviceProp and a field of it read for a capability gate), tuning/raytrace/trace.cu's two (cudaStream_t,
    # cudaMalloc: not the newer calls the fallback rule reports)
    assert fired["cpp-cuda-runtime-api"] == {"findings": 25, "ported": 8, "files": 9}


@pytest.mark.parametrize("kind, cond, polarity", [
    ("ifdef", "USE_ROCM", 1), ("ifndef", "USE_ROCM", -1), ("if", "defined(__HIP_PLATFORM_AMD__)", 1),
    ("if", "defined(__HIP_PLATFORM_NVIDIA__)", 0), ("if", "!defined(USE_ROCM) && CUDA_VERSION >= 11000", 0),
    ("if", "defined(USE_ROCM) || defined(__HIPCC__)", 1), ("if", "CUDA_VERSION >= 12000 || defined(USE_ROCM)", 0),
    ("ifdef", "__CUDA_ARCH__", 0),
])
def test_condition_polarity(kind, cond, polarity):
    assert condition_polarity(kind, cond) == polarity


def test_port_lines_follow_nesting_and_else():
    text = "#ifndef USE_ROCM\na\n#else\nb\n#ifdef X\nc\n#endif\n#endif\nd\n"
    assert cpp_port_lines(text) == [(3, 8)]


def test_cute_bare_names_and_cuda_struct_fields(report):
    got = {(line, rule) for line, rule, _ in hits(report, "cute_struct_fields.cu")}
    # `using namespace cute;` and the bare CuTe calls after it; make_shape on the argument line is not a call of its own
    assert {(4, "cpp-cutlass"), (8, "cpp-cutlass"), (10, "cpp-cutlass")} <= got
    assert not any(line == 9 for line, _ in got)
    # a field HIP's twin struct keeps (16) is ported with its declaration; a compute-capability gate is not
    assert (22, "cpp-cuda-runtime-api") in got and not any(line == 16 for line, _ in got)
    assert {(27, "cpp-cuda-runtime-api-no-hip"), (28, "cpp-cuda-runtime-api-no-hip"),
            (29, "cpp-cuda-runtime-api-no-hip")} <= got     # cudaLaunchKernelEx has no HIP twin
    # an error code has no fields: `e.mean` below is another variable of the same name
    assert not any(line in (33, 34) for line, _ in got)


def test_warp_counts_written_as_numbers(report):
    got = hits(report, "triton_tuned_numbers.py")
    # a dataclass default, plain assignments and a config's keyword, in a file importing triton
    assert got == {(8, "py-triton-config", False), (12, "py-triton-config", False),
                   (14, "py-triton-config", False), (22, "py-triton-config", False)}
    # not: a number chosen by a port condition (16), a kernel launch's keyword (27), a variable passed on (28)
