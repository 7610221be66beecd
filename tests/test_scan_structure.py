"""Build files read by their structure: CI workflows as YAML, CMake commands and Makefile variables, and the
portability macros a project defines for itself (tests/fixtures/scan_kinds)."""


import pytest

from gapbench.errors import GapbenchError
from gapbench.scan import scan
from gapbench.scan.rules import load_rules
from scan_kinds import KINDS, hits, kinds_report


@pytest.fixture(scope="module")
def report():
    return kinds_report()


def test_workflow_matrix_axes_and_conditions(report):
    got = hits(report, "workflows/matrix.yml")
    lines = {line for line, _, ported in got if not ported}
    # a matrix list, an include row (not the ROCm row, 16), an exclude entry, each item of a block list
    assert {(13, "build-ci-cuda-axis", False), (15, "build-ci-cuda-axis", False), (19, "build-ci-cuda-axis", False),
            (21, "build-ci-cuda-axis", False), (22, "build-ci-cuda-axis", False)} <= got
    assert (26, "build-ci-cuda-step", False) in got                 # if: matrix.cuda != ''
    assert (33, "build-env-cuda-visible-devices", True) in got      # inside the step run only for ROCm
    # not: names and ids (9, 24, 25), the ROCm row (16), a step for no CUDA (36), a switch turning CUDA off (38),
    # a cache key (42)
    assert not lines & {9, 16, 24, 25, 36, 38, 42}


def test_structural_rules_are_checked():
    bad = KINDS.parent / "scan_structure_bad_rule.toml"
    bad.write_text('[[rule]]\nid = "x"\nkind = "build"\nstructure = "json-key"\npattern = "a"\nmessage = "m"\n'
                   'fix = "f"\nreference = "r"\nverdict = { rocm = "auto", npu = "auto", xpu = "auto" }\n')
    try:
        with pytest.raises(GapbenchError, match="structure must be one of"):
            load_rules([bad])
    finally:
        bad.unlink()


def test_cmake_commands(report):
    got = hits(report, "cmake/CMakeLists.txt")
    lines = {line for line, _, _ in got}
    assert (5, "build-cmake-cuda-backend", False) in got            # if(${BACKEND} STREQUAL "cuda")
    assert (21, "build-cuda-arch-numbers", False) in got            # DISPATCH_COMPUTE=90
    assert {3, 6, 12, 14, 17, 20} <= lines
    # not: an option's doc string (2), the cache doc string (4), a switch turned off (7, 9) or only tested (11),
    # a message (13), the later lines of a command already flagged at its first (18)
    assert not lines & {2, 4, 7, 9, 11, 13, 18}
    (first,) = [f for f in report.findings if f.path == "cmake/CMakeLists.txt" and f.line == 17][:1]
    assert first.last_line == 19                                    # the set_target_properties(...) it stands for


def test_makefile_variables(report):
    got = {(line, rule) for line, rule, _ in hits(report, "make/Makefile")}
    assert (3, "build-make-cuda-variable") in got                   # SM_ARCH := 80
    assert {1, 2, 6, 10} <= {line for line, _ in got}
    assert not {line for line, _ in got} & {4, 5, 7}                # CXXFLAGS, a flag list's first line, $(info)


def test_build_script_variables_and_options(report):
    got = {(line, rule) for line, rule, _ in hits(report, "scripts/build_cuda.sh")}
    assert {(3, "build-cuda-variable"), (4, "build-cuda-arch-numbers"), (6, "build-cuda-variable"),
            (8, "build-cuda-backend-option"), (9, "build-cuda-packages")} <= got
    assert not any(line == 7 for line, _ in got)                    # a switch that skips the CUDA build


def test_project_portability_macros(report):
    got = hits(report, "macros/kernels.cu")
    # GPULIB_ALT is 1 only under a HIP condition (gpulib_compat.h): `#if GPULIB_ALT` is a port branch
    assert (5, "cpp-cuda-runtime-api", True) in got and (7, "cpp-cuda-runtime-api", False) in got
    # GPULIB_NV is defined only on the CUDA side: its #else is the port
    assert (10, "cpp-cuda-runtime-api", False) in got and (12, "cpp-cuda-runtime-api", True) in got


def test_portability_macros_are_learnt_from_definitions():
    from gapbench.scan.branches import NEGATIVE, POSITIVE, port_macros

    text = (KINDS / "macros" / "gpulib_compat.h").read_text()
    macros = port_macros(text)
    assert macros.polarity("GPULIB_ALT", False) == POSITIVE     # `#if GPULIB_ALT`
    assert macros.polarity("GPULIB_NV", True) == NEGATIVE       # `#ifdef GPULIB_NV`
    # a value that is no switch, and a macro also defined outside the port's conditionals, are not switches
    other = port_macros("#ifdef USE_ROCM\n#define WARP 64\n#define RENAMED hipFoo\n#else\n#define WARP 32\n#endif\n"
                        "#define GPULIB_ALT 1\n")
    assert not other.names
    assert not macros.merged(other).polarity("GPULIB_ALT", False)


def test_explicit_instantiations_and_assembly(report):
    got = {(line, rule) for line, rule, _ in hits(report, "macros/kernels.cu")}
    lines = {line for line, _ in got}
    assert (17, "cpp-global-kernel") in got                         # the definition
    # an instantiation of a kernel, directly or through a macro of the file, restates the definition (19, 22, 23)
    assert not lines & {19, 21, 22, 23}
    assert (26, "cpp-inline-ptx") in got and (26, "cpp-tensor-core") in got and 27 not in lines   # one asm block
    assert 32 in lines and 33 not in lines                          # an instantiation's parameters: one edit


def test_python_build_script_reads(report):
    got = {(line, rule) for line, rule, _ in hits(report, "pyrules/build_ext.py")}
    # a constant imported by name is used wherever it is read, a test of it too (13, 14)
    assert {(9, "build-nvcc"), (13, "py-cuda-extension"), (14, "py-cuda-extension"),
            (16, "py-cuda-env-name"), (18, "py-load-cuda"), (19, "py-autocast-gpu")} <= got
    assert not any(line == 17 for line, _ in got)       # a project's own switch naming CUDA


def test_names_from_a_cuda_module_are_its_import(report):
    got = {(line, rule) for line, rule, _ in hits(report, "pyrules/graphs.py")}
    # the multi-line import is one finding at its module's line; the names it brings are not each a finding
    assert (2, "py-torch-cuda-other") in got and not {line for line, _ in got} & {3, 4, 10, 11}
    assert {(6, "py-torch-cuda-graphs"), (15, "py-torch-cuda-graphs")} <= got    # a name that says CUDA is


def test_python_port_sides(report):
    got = hits(report, "pyrules/ports.py")
    # a ternary choosing by a port test is already ported on its line; its CUDA side alone on a line is not
    assert {(4, "py-cuda-device-string", True), (5, "py-torch-version-cuda", True),
            (9, "py-cuda-library-file", False)} <= got
    # functions named for another stack are port branches, with their decorators; one named for NVIDIA is not
    assert {(14, "py-torch-cuda-portable", True), (18, "py-torch-cuda-other", True),
            (22, "py-torch-cuda-portable", False)} <= got


def test_kernel_packages_and_multi_backend_ones(report):
    got = {(line, rule) for line, rule, _ in hits(report, "pyrules/kernels_pkg.py")}
    assert {(2, "py-import-cuda-kernel-package"), (10, "py-import-cuda-kernel-package")} <= got
    # a fallback binding; a multi-backend package (bitsandbytes), imported and called
    assert not any(line in (4, 6, 14) for line, _ in got)


def test_a_projects_own_package_is_no_dependency(tmp_path):
    (tmp_path / "causal_conv1d").mkdir()
    (tmp_path / "causal_conv1d" / "ops.py").write_text("def f(x):\n    return x\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_ops.py").write_text("from causal_conv1d.ops import f\n\nf(1)\n")
    assert not [f for f in scan(tmp_path, jobs=1).findings if f.path == "tests/test_ops.py"]


def test_cuda_version_and_capability_gates(report):
    got = {(line, rule) for line, rule, _ in hits(report, "pyrules/gates.py")}
    # a version bound from a CUDA-named call, compared; two CUDA versions compared; a CUDA version's part
    assert {(14, "py-cuda-version-gate"), (17, "py-cuda-version-gate"), (19, "py-cuda-version-gate")} <= got
    assert {(32, "py-capability-gate"), (36, "py-capability-call")} <= got
    # not: Python's own version (21), a value compared with another that names no capability (34)
    assert not {line for line, _ in got} & {21, 34}
    cpp = {(line, rule) for line, rule, _ in hits(report, "macros/kernels.cu")}
    assert (36, "cpp-capability-gate") in cpp


def test_a_projects_cuda_extension_and_its_calls(report):
    got = {(line, rule) for line, rule, _ in hits(report, "extpkg/rasterizer/__init__.py")}
    # CUDAExtension(name="rasterizer._C") in extpkg/setup.py: its import and calls here
    assert {(2, "py-import-project-extension"), (7, "py-import-project-extension")} == got    # not torch's _C (3)
    jit = {(line, rule) for line, rule, _ in hits(report, "extpkg/jit.py")}
    # a JIT load() of .cu sources: the module it stands for, imported, and called through another name
    assert {(4, "py-import-project-extension"), (12, "py-import-project-extension")} <= jit
    assert not any(line == 9 for line, _ in jit)        # `ext_c = fused_ext` only names it again


def test_warp_counts_derived_from_32(report):
    got = {line for line, rule, _ in hits(report, "warp.cu") if rule == "cpp-warp-size-arith"}
    start = next(i for i, s in enumerate((KINDS / "warp.cu").read_text().split("\n"), 1) if "DEMO_WARPS" in s)
    # warps from threads / 32, threads from warps * 32, a thread count asserted against 32, cub's warp width
    assert {start, start + 1, start + 2, start + 3} <= got
    assert start + 4 not in got         # 32 tiles are no warp


def test_requirements_named_in_code_and_what_is_not_one(report):
    got = {(line, rule) for line, rule, _ in hits(report, "pyrules/requirements_in_code.py")}
    assert (4, "py-requirement-cuda-package") in got                # cuda-* and CUDA kernel packages
    assert (8, "py-cuda-device-string") in got
    assert 7 not in {line for line, _ in got}                       # a type annotation naming devices
    own = {(line, rule) for line, rule, _ in hits(report, "mamba_ssm/names.py")}
    assert own == {(2, "py-requirement-cuda-package")}              # not the project's own name (its folder)
    sh = {(line, rule) for line, rule, _ in hits(report, "scripts/build_cuda.sh")}
    assert {(10, "build-cuda-kernel-source"), (11, "build-cuda-kernel-source")} <= sh
    assert not any(line == 12 for line, _ in sh)


def test_torch_private_cuda_bindings(report):
    got = {(line, rule) for line, rule, _ in hits(report, "pyrules/graphs.py")}
    assert (19, "py-torch-c-cuda") in got and not any(line == 20 for line, _ in got)


def test_a_call_running_over_lines_is_one_edit(report):
    got = [(f.line, f.last_line, f.rule) for f in report.findings if f.path == "macros/kernels.cu" and f.line > 40]
    assert (41, 42, "cpp-cuda-runtime-api") in got and (43, 45, "cpp-cublas") in got
    assert not any(line in (42, 44, 45) for line, _, _ in got)
    assert any(line == 49 for line, _, _ in got)        # a signature's parameters stay each a place to edit


def test_shell_lines_that_only_print(report):
    lines = {line for line, _, _ in hits(report, "scripts/build_cuda.sh")}
    assert 14 in lines and not lines & {13, 15}     # a line writing a file is one; a message or a print is none


def test_names_of_jobs_and_empty_make_variables_are_no_lock_in(report):
    assert not any(line == 43 for line, _, _ in hits(report, "workflows/matrix.yml"))    # a job named for CUDA
    assert not {line for line, _, _ in hits(report, "make/Makefile")} & {11, 12}          # set to nothing; a name


def test_a_port_header_ports_what_it_aliases_where_it_is_included(report):
    # vendor/hip_shim.h is included only from the HIP side of shared.cuh: a port header, all its lines ported
    assert {ported for _, _, ported in hits(report, "hipalias/vendor/hip_shim.h")} == {True}
    assert {ported for _, _, ported in hits(report, "hipalias/vendor/nv_side.h")} == {False}     # the CUDA side
    shared = hits(report, "hipalias/shared.cuh")
    assert (8, "cpp-cuda-runtime-api", True) in shared              # cudaStream_t, cudaStreamSynchronize aliased
    assert (9, "cpp-cuda-runtime-api", False) in shared             # cudaMemcpy: the header does not alias it
    assert (11, "cpp-cuda-arch-macro", True) in shared              # a condition that also tests the port
    assert (14, "cpp-cuda-arch-macro", False) in shared             # __CUDA_ARCH__ alone (defined to a number)
    # reduce.cu includes reduce.h (no CUDA in it), which includes shared.cuh: the aliases reach it
    reduce = hits(report, "hipalias/reduce.cu")
    assert (4, "cpp-warp-full-mask", True) in reduce                # the aliased shuffle drops its mask
    assert (4, "cpp-warp-size-32", False) in reduce                 # a literal width it passes on
    assert (7, "cpp-cuda-runtime-api", True) in reduce and (7, "cpp-half-types-no-hip", True) in reduce
    assert (8, "cpp-cuda-runtime-api", False) in reduce             # cudaDeviceSynchronize: not aliased
    # an `#include <vendor/hip_shim.h>` is found through the include folders (the one tree file ending so)
    assert hits(report, "hipalias/ops/stream.cu") == {(5, "cpp-cuda-runtime-api", True)}


def test_a_port_branch_alias_stays_in_its_file(report):
    # compat.cuh aliases __shfl_down_sync under #ifdef USE_ROCM: its own later use is ported
    assert (6, "cpp-warp-full-mask", True) in hits(report, "hipalias/compat.cuh")
    # a file including it is not compiled through a port header: its uses and conditions stay CUDA's
    user = hits(report, "hipalias/user.cu")
    assert (3, "cpp-warp-full-mask", False) in user and (5, "cpp-cuda-arch-macro", False) in user


def test_port_headers_are_learnt_from_the_sides_of_includes():
    from gapbench.scan.branches import PortHeaders, header_facts
    from gapbench.scan.match_text import mask_c_code

    def facts(text):
        return header_facts(*mask_c_code(text))

    shim = facts("#define cudaEvent_t hipEvent_t\n#define CUDART_X 1\n#define cudaFoo(a) hipFoo(a, 0)\n"
                 "#define cudaBar cudaBaz\nusing cudaError_t = hipError_t;\n")
    assert {n for n, _ in shim.aliases} == {"cudaEvent_t", "cudaFoo", "cudaError_t"}
    both = {"a/shim.h": shim,
            "a/x.cuh": facts('#ifdef USE_ROCM\n#include "shim.h"\n#endif\n'),
            "b/y.cu": facts('#include "x.cuh"\n'),
            "b/z.cu": facts('#include "other.h"\n')}
    graph = PortHeaders(both, set(both) | {"a/other.h"})
    graph.settle()
    assert graph.port == {"a/shim.h"}
    assert graph.imported("b/y.cu") == {"cudaEvent_t", "cudaFoo", "cudaError_t"}    # found through the tree
    assert graph.imported("b/z.cu") is None
    also = dict(both, **{"c/w.cu": facts('#include "../a/shim.h"\n')})              # included outside a branch
    graph = PortHeaders(also, set(also))
    graph.settle()
    assert not graph.port
    # another stack's port header (MUSA's): a port file, but its shims are no HIP twins
    other = {"v/mt.h": facts("#include <musa_runtime.h>\n#define cudaStream_t musaStream_t\n"
                             "#define __shfl_sync(m, v, l, w) __shfl_sync_mt(v, l, w)\n"),
             "v/common.cuh": facts('#if defined(MYLIB_USE_MUSA)\n#include "mt.h"\n#endif\n'),
             "v/k.cu": facts('#include "common.cuh"\n')}
    graph = PortHeaders(other, set(other))
    graph.settle()
    assert graph.port == {"v/mt.h"} and graph.imported("v/k.cu") is None


def test_a_cmake_projects_own_cuda_named_variables(report):
    got = {(line, rule) for line, rule, _ in hits(report, "cmake/device_flags.cmake")}
    lines = {line for line, _ in got}
    # not: a comment after a command (1), switches tested for their truth (2) and the compile definitions a
    # project makes (3), a variable the file assigns itself and its uses (5, 7)
    assert not lines & {1, 2, 3, 5, 6, 7}
    assert {8, 9} <= lines                      # an architecture list; a setting CMake's CUDA support reads
    assert (10, "build-nvcc-flags") in got      # nvcc's -Werror <kind>
    assert (11, "build-cmake-cuda") in got      # flags for the CUDA language only


def test_a_dockerfile_read_with_its_arg_defaults(report):
    got = {(line, rule) for line, rule, _ in hits(report, "docker/gpu.Dockerfile")}   # `*.Dockerfile`: any case
    lines = {line for line, _ in got}
    assert (4, "build-docker-nvidia-base") in got       # FROM ${BUILD_IMAGE}, an ARG naming an NVIDIA image
    assert 10 not in lines                              # FROM ${RUN_IMAGE}: ubuntu
    assert {1, 5, 7} <= lines                           # CUDA-named ARGs, the CUDA architectures passed to CMake
    assert 6 not in lines                               # a read of ${CUDA_ARCHS}: its ARG is the line to edit
    assert (9, "build-cuda-feature-switch") in got      # -DMYLIB_CUDA=ON turns the CUDA backend on


def test_ci_values_naming_nvidia_and_inputs_passed_on(report):
    got = {(line, rule) for line, rule, _ in hits(report, "workflows/gpu_values.yml")}
    lines = {line for line, _ in got}
    # an input's CUDA wheel tag, an NVIDIA runner label, an image tagged for a CUDA release, a GPU type and a
    # runner given to an action
    assert {(8, "build-ci-nvidia-value"), (11, "build-ci-nvidia-value"), (13, "build-ci-nvidia-value"),
            (18, "build-ci-nvidia-value"), (19, "build-ci-nvidia-value")} <= got
    assert 5 in lines                                   # the input's declaration
    assert 17 not in lines                              # the input passed on to a local action
    assert (21, "build-shell-cuda-branch") in got       # a shell test choosing the NVIDIA branch
    assert 22 in lines                                  # --cuda_ver=12


def test_device_intrinsics_and_ptx_spelt_any_way(report):
    got = {(line, rule) for line, rule, _ in hits(report, "intrinsics.cu")}
    assert (3, "cpp-cuda-runtime-api-no-hip") in got        # __dp4a: AMD has its own dot-product builtins
    assert (6, "cpp-half-types") in got                      # __double2half
    assert (11, "cpp-inline-ptx") in got                     # an instruction with dotted modifiers and %N operands
    assert (17, "cpp-inline-ptx") in got                     # movmatrix
    assert (25, "cpp-cub") in got                            # DeviceReduce:: after `using namespace cub;`
    assert (28, "cpp-cuda-header") in got and (29, "cpp-cuda-arch-macro") in got     # math_constants.h, CCCL_VERSION
    assert (33, "cpp-cuda-runtime-api-no-hip") in got       # __cvta_generic_to_shared


def test_python_uses_and_gates_read_closely(report):
    got = hits(report, "pyrules/vendor_gates.py")
    lines = {line for line, _, _ in got}
    assert {4, 12} <= lines and not lines & {6, 13, 14}     # not: `X = None` fallbacks, `except X.Error:`
    # `not is_rocm() and torch.cuda.is_available()`: the operand testing for the port's absence is CUDA's side
    assert (18, "py-torch-cuda-is-available", False) in got
    assert (24, "py-cuda-device-string", False) in got      # 'cuda:{}'.format(index)
    assert (28, "py-cuda-link-flag", False) in got          # a CUDA library linked from a build script
    assert (31, "build-env-nccl", False) in got              # PyTorch's TORCH_NCCL_* settings
    assert (35, "py-nccl-backend", False) in got             # torch.distributed.is_nccl_available()
    pins = {line for line, _, _ in hits(report, "pyrules/requirements-kernels.txt")}
    assert pins == {1}      # a CUDA-only kernel package pinned; unpinned, the name may be the project's own


def test_a_job_on_another_stacks_runners_is_ported(report):
    assert hits(report, "workflows/amd_runner.yml") == {(8, "build-cuda-arch", True)}


def test_a_cmake_cuda_toolkit_version_gate(report):
    got = hits(report, "cmake/device_flags.cmake")
    assert (12, "build-cmake-cuda", False) in got
    assert not {line for line, _, _ in got} & {15, 16}     # a #[[...]] comment block: outside every command
    # a CUDA setting tested for being set is no edit; the line passing it on (-ccbin) is
    assert 17 not in {line for line, _, _ in got} and 18 in {line for line, _, _ in got}


def test_values_and_tables_chosen_per_stack_are_ported(report):
    got = hits(report, "pyrules/vendor_tables.py")
    # num_warps taken from a list chosen by `if IS_AMD else`: ported; fixed lists stay tuned for 32-wide warps
    assert {(5, "py-triton-config", False), (6, "py-triton-config", True), (7, "py-triton-config", False)} <= got
    assert (11, "py-cuda-device-string", True) in got      # a table keyed by stack ('cuda', 'hip', 'xpu')
    assert (15, "py-cuda-device-string", False) in got


def test_inline_ptx_in_a_triton_kernel(report):
    got = {(line, rule) for line, rule, _ in hits(report, "pyrules/triton_asm.py")}
    assert (8, "py-triton-inline-ptx") in got and 12 not in {line for line, _ in got}
