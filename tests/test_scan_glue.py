"""Extension and build glue read as a migration edits it (tests/fixtures/scan_kinds/kernels2, buildglue): CUTLASS
macros and types in headers that include no CUDA header themselves, PyTorch's stable ABI, a full-warp mask passed
through a parameter, the flags and probes of a setup script, CI expressions choosing CUDA, and imports that both
sides of a port conditional make."""

from pathlib import Path

import pytest

from gapbench.scan import scan
from scan_kinds import hits, kinds_report


def pairs(report, path):
    """(line, rule) of each finding in one file."""
    return {(line, rule) for line, rule, _ in hits(report, path)}


@pytest.fixture(scope="module")
def report():
    return kinds_report()


def test_cutlass_macros_and_types_in_a_header_of_the_project(report):
    got = pairs(report, "kernels2/tile_sort.h")
    # uint2b_t, CUTLASS_HOST_DEVICE, CUTLASS_DEVICE, cutlass::ceil_div, CUTLASS_PRAGMA_UNROLL
    assert {(6, "cpp-cutlass"), (7, "cpp-cutlass"), (8, "cpp-cutlass"), (9, "cpp-cutlass"),
            (10, "cpp-cutlass")} <= got
    assert not {line for line, _ in got} & {11, 12, 18}      # a loop, plain arithmetic, a plain function


def test_the_stable_abi_and_the_cuda_dispatch_key(report):
    got = pairs(report, "kernels2/stable_ops.cu")
    assert {(7, "cpp-torch-cuda"), (10, "cpp-torch-cuda"), (18, "cpp-torch-cuda")} <= got
    assert not {line for line, _ in got} & {14, 15}          # operators registered for the CPU


def test_a_full_warp_mask_through_a_parameter(report):
    got = pairs(report, "kernels2/shfl_mask.cuh")
    assert {(3, "cpp-warp-full-mask"), (4, "cpp-warp-full-mask")} <= got
    assert not {line for line, _ in got} & {9, 10}           # the active lanes' mask is no assumption


def test_a_setup_scripts_flags_probes_and_paths(report):
    got = pairs(report, "buildglue/setup.py")
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


# ---------------------------------------------------------------- tests/fixtures/scan_kinds/unfamiliar: what reviews
# of code the rules were never written on found missing or wrong


def test_warp_width_from_the_block_size_and_per_warp_names(report):
    got = {line for line, rule, _ in hits(report, "unfamiliar/warp_arith.cu") if rule == "cpp-warp-size-arith"}
    # THREADS_PER_WARP = 32, a width defaulting to 32, blockDim.x >> 5, blockDim.x / 32.f, (blockDim.x + 31) / 32,
    # a loop striding a lane by 32
    assert {3, 6, 8, 9, 10, 11} <= got
    assert not got & {4, 14}        # 32 warps is a count; a size divisible by 32 is a shape check


def test_any_inline_assembly_and_pytorchs_cuda_glue(report):
    got = pairs(report, "unfamiliar/asm_and_glue.cu")
    assert {(9, "cpp-inline-ptx"), (10, "cpp-inline-ptx")} <= got      # a memory operand; the string a line on
    assert {(2, "cpp-torch-cuda"), (16, "cpp-torch-cuda"), (18, "cpp-torch-cuda")} <= got
    assert {(3, "cpp-cub"), (4, "cpp-cuda-header"), (20, "cpp-cuda-arch-macro"), (23, "cpp-cuda-arch-macro")} <= got
    assert not {line for line, _ in got} & {6, 12, 19}      # a compiler barrier; the project's own macro


def test_binding_code_that_includes_no_cuda_header(report):
    got = pairs(report, "unfamiliar/binding.cpp")
    assert {(3, "cpp-torch-cuda"), (6, "cpp-capability-gate"), (11, "cpp-torch-cuda")} <= got


def test_cute_names_read_bare_and_one_declaration_over_lines(report):
    got = [(f.line, f.rule) for f in kinds_report().findings if f.path == "unfamiliar/cute_tile.cuh"]
    assert {(5, "cpp-cutlass"), (6, "cpp-cutlass"), (7, "cpp-cutlass"), (11, "cpp-cutlass")} <= set(got)
    assert not {line for line, _ in got} & {12, 13}     # the alias's template arguments: one edit, at its line


def test_container_images_conda_installers_and_continued_commands(report):
    got = pairs(report, "unfamiliar/Dockerfile")
    assert {(1, "build-cuda-image"), (2, "build-conda-cuda"), (3, "build-cuda-kernel-source"),
            (4, "build-cuda-kernel-source"), (6, "build-cuda-installer"), (7, "build-cuda-installer"),
            (8, "build-cuda-variable"), (9, "build-cuda-variable"), (11, "build-cuda-variable"),
            (12, "build-cuda-toolkit-path")} <= got
    # not: making the installer executable (5), the second NVSHMEM setting of one command (10), a plain image (13)
    assert not {line for line, _ in got} & {5, 10, 13}


def test_shell_switches_tags_and_nvidia_tools(report):
    got = pairs(report, "unfamiliar/build_env.sh")
    assert {(2, "build-cuda-feature-switch"), (3, "build-cuda-variable"), (4, "build-shell-cuda-branch"),
            (10, "build-nvidia-tool"), (11, "build-nvidia-tool")} <= got
    assert not {line for line, _ in got} & {5, 7, 8}        # a message; the keys of a table read


def test_ci_runners_images_and_the_rows_that_choose_cuda(report):
    got = hits(report, "unfamiliar/.github/workflows/gpu.yml")
    assert {(6, "build-ci-nvidia-value", False), (8, "build-cuda-image", False),
            (15, "build-ci-nvidia-value", False), (19, "build-ci-nvidia-value", False)} <= got
    assert any(line == 27 and ported for line, _, ported in got)     # in a job run in a ROCm container
    # not: an env value passing the matrix on (10), a job named for its GPU that another needs (14)
    assert not {line for line, _, _ in got} & {10, 14}


def test_build_helpers_in_python(report):
    got = pairs(report, "unfamiliar/pkg_build.py")
    assert {(9, "py-cuda-wheel-tag"), (10, "build-conda-cuda"), (11, "py-cuda-arch-list"),
            (12, "py-cuda-arch-list"), (13, "build-nvcc"), (14, "py-nvcc-flag"), (15, "py-nvidia-library-path"),
            (16, "py-nvidia-library-path"), (17, "py-nvidia-library-path"), (18, "py-cuda-feature-switch"),
            (31, "py-triton-config"), (36, "py-triton-config"), (46, "py-triton-inline-ptx")} <= got
    # not: a multi-vendor package's version read (19), a chat template's "capability" (27), the num_warps
    # keyword of the Config call already reported (38)
    assert not {line for line, _ in got} & {19, 27, 38}


def test_packages_only_where_they_are_cuda_bound(report):
    got = pairs(report, "unfamiliar/engines.py")
    assert {(1, "py-import-cuda-kernel-package"), (3, "py-import-vllm"), (5, "py-requirement-cuda-package"),
            (9, "py-import-vllm"), (10, "py-import-cuda-kernel-package")} <= got
    assert not any(line == 2 for line, _ in got)           # vLLM itself builds for ROCm, XPU and TPU


def test_a_file_placed_for_another_stack_is_its_port(report):
    assert hits(report, "unfamiliar/backends/rocm/ops.py") == {(5, "py-torch-cuda-portable", True)}


def test_triton_warp_counts_in_tables_and_heuristics(report):
    got = pairs(report, "tuning/heuristics.py")
    assert {(6, "py-triton-config"), (7, "py-triton-config"),      # a heuristic named for num_warps returns them
            (21, "py-triton-config"),                                # "num_warps": lambda args: 4
            (28, "py-triton-config"),                                # a count derived from 32-wide warps
            (33, "py-triton-jit-generated")} <= got                  # a kernel written by code generation
    assert not {line for line, _ in got} & {11, 17, 20, 34}          # block sizes, the heuristic's name, plain code
    assert pairs(report, "tuning/tune_configs.yaml") == {
        (5, "build-triton-warps-table"), (10, "build-triton-warps-table")}


def test_implicit_autocast_nvml_and_jit_builds_against_cuda(report):
    got = pairs(report, "tuning/probes.py")
    assert {(12, "py-autocast-implicit-gpu"),                      # no device: CUDA's autocast state
            (21, "py-nvml-call"), (23, "py-nvml-call"), (25, "py-nvml-call"),   # NVML through a helper's module
            (29, "py-cuda-library-file"), (33, "py-cuda-library-file"),       # Jetson's release file, libcudart
            (37, "py-load-inline-cuda")} <= got
    lines = {line for line, _ in got}
    assert not lines & {16, 41, 45}     # autocast of a device; a host-only JIT build; a signature probe


def test_packages_and_installers_only_nvidia_has(report):
    got = pairs(report, "tuning/quant.py")
    assert {(2, "py-import-cuda-kernel-package"), (6, "py-import-cuda-kernel-package")} <= got
    assert not {line for line, _ in got} & {1, 10}      # bitsandbytes builds for CUDA, ROCm, XPU and the CPU
    assert {line for line, _, _ in hits(report, "tuning/requirements-gpu.txt")} == {2, 3, 4}
    assert (3, "build-cuda-packages") in pairs(report, "tuning/install-toolkit.sh")
    assert (5, "build-ci-nvidia-value") in pairs(report, "tuning/.github/workflows/test.yml")


def test_images_and_cuda_tags_in_build_matrices_and_scripts(report):
    got = pairs(report, "tuning/build_matrix.yaml")
    assert {(1, "build-cuda-image-reference"), (3, "build-cuda-image-reference"),
            (7, "build-cuda-image-reference")} <= got                # the base image, a cu126 name and tag
    assert not {line for line, _ in got} & {4, 8, 9, 10}             # empty overrides, the CPU row
    got = pairs(report, "tuning/build_wheels.sh")
    assert got == {(6, "build-cuda-wheel-tag-argument"), (7, "build-cuda-wheel-tag-argument")}


def test_patched_cuda_apis_nccl_by_any_name_and_names_compared(report):
    got = pairs(report, "tuning/devices_probe.py")
    assert {(5, "py-nccl-backend"), (8, "py-torch-cuda-name-string"), (14, "py-nccl-backend"),
            (15, "py-nccl-backend")} <= got
    assert not any(line == 19 for line, _ in got)       # a configured path picked by its name


def test_hopper_warpgroup_mma(report):
    got = pairs(report, "tuning/wgmma_helpers.cuh")
    assert {(6, "cpp-tensor-core"), (7, "cpp-tensor-core"), (8, "cpp-tensor-core"), (10, "cpp-tensor-core"),
            (11, "cpp-tensor-core")} <= got
    assert not any(line == 12 for line, _ in got)


def test_cuda_test_markers_legacy_headers_and_masks_by_convention(report):
    got = pairs(report, "tuning/gpu_markers.py")
    assert got == {(4, "py-cuda-test-marker")}                       # not @RunIf(min_gpus=1)
    got = pairs(report, "tuning/reduce.cu")
    assert {(1, "cpp-cuda-header"), (2, "cpp-warp-full-mask"), (6, "cpp-warp-full-mask"), (7, "cpp-warp-full-mask"),
            (14, "cpp-warp-size-arith")} <= got
    assert not any(line == 13 for line, _ in got)


def test_nvtx_transformer_engines_extension_grouped_gemm_and_a_split_import(report):
    got = pairs(report, "tuning/profiling.py")
    assert {(1, "py-import-nvtx"), (12, "py-import-nvtx"), (7, "py-import-transformer-engine"),
            (24, "py-import-transformer-engine"), (8, "py-import-cuda-kernel-package"),
            (28, "py-import-cuda-kernel-package"),
            (2, "py-import-nvml"), (17, "py-import-nvml")} <= got
    assert not {line for line, _ in got} & {3, 4, 18}   # the names of `from pynvml import (` over lines: one edit


def test_one_warp_blocks_and_gdrcopy(report):
    got = pairs(report, "tuning/launch.cu")
    assert {(4, "cpp-warp-size-arith"), (6, "cpp-warp-size-arith")} <= got
    assert not {line for line, _ in got} & {5, 7}       # a grid of 128-wide tiles; a matrix rounded up to 32 rows
    assert {line for line, _, _ in hits(report, "tuning/Dockerfile.rdma")} == {2}


def test_sm_number_lists_nccl_wrappers_and_a_cuda_availability_helper(report):
    got = pairs(report, "tuning/wrappers.py")
    assert {(3, "py-cuda-arch-list"),                                # SM numbers, not "8.0" strings
            (10, "py-cuda-availability-helper"),
            (18, "py-nccl-call"), (21, "py-nccl-call")} <= got      # libnccl through a ctypes wrapper
    assert not {line for line, _ in got} & {4, 8}       # three delays are no capability list; an NPU test


def test_the_projects_own_package_and_a_file_named_for_cuda_versions():
    own = scan(Path(__file__).parent / "fixtures" / "scan_ownpkg", jobs=1)   # scanned at its root, as a repository
    # flashinfer's own pyproject: its package's name is no dependency on FlashInfer; tensorrt is
    assert pairs(own, "pyproject.toml") == {(4, "deps-nvidia-only-package")}
    assert not hits(own, ".github/workflows/images.yml")    # ci/cuda-versions.json is a file's name


def test_optix_tiny_cuda_nn_and_runtime_calls_newer_than_hipify(report):
    got = pairs(report, "tuning/raytrace/trace.cu")
    assert {(1, "cpp-optix"), (7, "cpp-optix"), (11, "cpp-optix"), (13, "cpp-optix"),     # header, types, calls
            (2, "cpp-tiny-cuda-nn"), (21, "cpp-tiny-cuda-nn"),                            # its header, its buffers
            (23, "cpp-cuda-api-unknown"), (24, "cpp-cuda-api-unknown"),                   # cudaLibrary_t, its loader
            (25, "cpp-cuda-api-unknown")} <= got                                          # a lazily loaded driver call
    # the fallback gives way where a known name is reported (cudaStream_t, cudaMalloc); not tcnn's vector math,
    # an OptiX argument of the statement already reported, or names that only start like them
    assert (20, "cpp-cuda-api-unknown") not in got and (27, "cpp-cuda-api-unknown") not in got
    # NVCC's diagnostic pragma (5): labellers differ on it, so it is left out
    assert not {line for line, _ in got} & {5, 14, 18, 28}


def test_nvidia_only_libraries_in_cmake_conda_packages_and_an_int8_kernel_package(report):
    assert pairs(report, "tuning/raytrace/CMakeLists.txt") >= {
        (3, "build-cmake-nvidia-only-library"), (4, "build-cmake-nvidia-only-library"),
        (5, "build-cmake-nvidia-only-library"), (8, "build-cmake-nvidia-only-library")}
    assert not any(line == 6 for line, _ in pairs(report, "tuning/raytrace/CMakeLists.txt"))  # a source named dlss
    # cuda-* and CUDA library packages of a conda list, a build string naming CUDA; not numpy, libcurl, a CPU build
    assert {line for line, _ in pairs(report, "tuning/raytrace/environment.yml")} == {6, 7, 8, 9, 11}
    assert pairs(report, "tuning/raytrace/int8.py") == {(2, "py-import-cuda-kernel-package"),
                                                       (6, "py-import-cuda-kernel-package")}


def test_a_compute_capability_beside_a_cuda_axis_in_a_matrix(report):
    got = pairs(report, "tuning/.github/workflows/arch.yml")
    assert {(9, "build-ci-cuda-arch-beside"), (12, "build-ci-cuda-arch-beside"),
            (30, "build-ci-cuda-arch-beside")} <= got
    # a CPU architecture axis with no CUDA key beside it; the env line that passes the matrix value on
    assert not {line for line, _ in got} & {15, 21}


def test_an_extension_built_by_the_projects_own_builder_or_a_chosen_builder(report):
    # a JIT builder of the project's own given .cu sources: the name it is bound to is the extension
    assert pairs(report, "tuning/plugin/bias.py") == {(13, "py-import-project-extension"),
                                                      (23, "py-import-project-extension")}    # not 28-29: no .cu
    # `extension = CUDAExtension` where CUDA is found, then extension("warpproj._C", ...): its import and calls
    assert pairs(report, "tuning/plugin/deform.py") == {(2, "py-import-project-extension"),
                                                        (8, "py-import-project-extension")}


def test_a_library_is_no_user_of_itself():
    own = scan(Path(__file__).parent / "fixtures" / "scan_ownlib", jobs=1)   # include/tiny-cuda-nn/ at its root
    rules = {f.rule for f in own.findings}
    assert "cpp-tiny-cuda-nn" not in rules and "build-cmake-nvidia-only-library" not in rules
    assert ("include/tiny-cuda-nn/gpu_memory.h", "cpp-cuda-runtime-api") in {(f.path, f.rule) for f in own.findings}
