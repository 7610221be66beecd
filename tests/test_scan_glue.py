"""Extension and build glue read as a migration edits it (tests/fixtures/scan_kinds/kernels2, buildglue): CUTLASS
macros and types in headers that include no CUDA header themselves, PyTorch's stable ABI, a full-warp mask passed
through a parameter, the flags and probes of a setup script, CI expressions choosing CUDA, and imports that both
sides of a port conditional make."""

import pytest

from scan_kinds import hits, kinds_report


@pytest.fixture(scope="module")
def report():
    return kinds_report()


def test_cutlass_macros_and_types_in_a_header_of_the_project(report):
    got = {(line, rule) for line, rule, _ in hits(report, "kernels2/tile_sort.h")}
    # uint2b_t, CUTLASS_HOST_DEVICE, CUTLASS_DEVICE, cutlass::ceil_div, CUTLASS_PRAGMA_UNROLL
    assert {(6, "cpp-cutlass"), (7, "cpp-cutlass"), (8, "cpp-cutlass"), (9, "cpp-cutlass"),
            (10, "cpp-cutlass")} <= got
    assert not {line for line, _ in got} & {11, 12, 18}      # a loop, plain arithmetic, a plain function


def test_the_stable_abi_and_the_cuda_dispatch_key(report):
    got = {(line, rule) for line, rule, _ in hits(report, "kernels2/stable_ops.cu")}
    assert {(7, "cpp-torch-cuda"), (10, "cpp-torch-cuda"), (18, "cpp-torch-cuda")} <= got
    assert not {line for line, _ in got} & {14, 15}          # operators registered for the CPU


def test_a_full_warp_mask_through_a_parameter(report):
    got = {(line, rule) for line, rule, _ in hits(report, "kernels2/shfl_mask.cuh")}
    assert {(3, "cpp-warp-full-mask"), (4, "cpp-warp-full-mask")} <= got
    assert not {line for line, _ in got} & {9, 10}           # the active lanes' mask is no assumption


def test_a_setup_scripts_flags_probes_and_paths(report):
    got = {(line, rule) for line, rule, _ in hits(report, "buildglue/setup.py")}
    assert {(13, "py-nvcc-variable"),           # [nvcc_bin, "-V"]: the toolkit run for its version
            (21, "py-nvidia-library-path"),     # third_party/cutlass/include located
            (22, "py-cuda-header-name"),        # a CUDA header looked for by name
            (23, "py-cuda-env-name"),           # FORCE_CUDA
            (24, "build-env-nccl"),             # NCCL_DEBUG
            (25, "py-cuda-extension"),          # `extension = CUDAExtension`: the builder chosen
            (26, "py-nvcc-variable"),           # a flag list holding nvcc-only flags
            (28, "py-nvcc-flag"), (29, "py-nvcc-flag"),
            (32, "py-cuda-version-call"),       # a cuDNN version helper called with the release it needs
            (34, "py-load-cuda"),               # a JIT build of .cu sources
            (35, "py-import-project-extension"), (35, "py-cuda-version-gate")} <= got
    # not: the project's own switch naming NCCL (8), a flag list of no CUDA flag (31), the project's own name in a
    # path and in setup() (37, 39)
    assert not {line for line, _ in got} & {8, 31, 37, 39, 41}
    assert not any(line == 40 and rule.startswith(("py-requirement", "deps")) for line, rule in got)


def test_a_projects_own_name_in_its_pyproject(report):
    got = {line for line, _, _ in hits(report, "buildglue/pyproject.toml")}
    assert got == {3}        # a kernel package depended on; not the project's own name (2)


def test_a_cuda_build_switch_given_to_pip(report):
    assert {line for line, _, _ in hits(report, "buildglue/Dockerfile")} == {2}


def test_ci_conditions_and_expressions_choosing_cuda(report):
    got = hits(report, "buildglue/.github/workflows/wheels.yml")
    assert {(12, "build-ci-cuda-step", False), (18, "build-nvidia-source", False),
            (21, "build-ci-cuda-expression", False)} <= got
    lines = {line for line, _, ported in got if not ported}
    assert not lines & {9, 14, 15}      # a job's name; the step run only for ROCm


def test_a_name_both_sides_of_a_port_conditional_import(report):
    got = hits(report, "buildglue/te_port.py")
    # the port side (10) and the uses after the conditional (15) are ported; the CUDA side (12, 14) is not
    assert {(10, "py-import-transformer-engine", True), (12, "py-import-transformer-engine", False),
            (14, "py-import-transformer-engine", False), (15, "py-import-transformer-engine", True)} <= got
    # an operand of `torch.version.hip and ...` runs on the port only
    assert (19, "py-torch-cuda-is-available", True) in got
