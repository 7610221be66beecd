"""Compiled CUDA extensions and the build scripts around them, as a scan of unseen code meets them
(tests/fixtures/scan_extensions): extensions built through a helper that wraps the builder, chosen by a condition or
named by their CUDA sources; functions imported from an extension and called bare; an extension known by its name
alone (`import marlin_cuda`, `try_import("awq_ext")`, `importlib.import_module(f"..._C")`); a package function bound
to a name; the CUDA version variables of a Dockerfile, a CI matrix's cuDNN axis and a CI script asking PyTorch's CUDA
build. Each line says what is found, and what a mention that is no use (a test for None, an enum value, the
extension's CPU entry point, a sibling package of the extension) is not."""

from functools import lru_cache
from pathlib import Path

from gapbench.scan import scan

FIXTURE = Path(__file__).parent / "fixtures" / "scan_extensions"


@lru_cache(maxsize=1)
def report():
    return scan(FIXTURE, jobs=1)


def lines(path: str, rule: str | None = None) -> set[int]:
    return {f.line for f in report().findings if f.path == path and (rule is None or f.rule == rule)}


EXT = "py-import-project-extension"


def test_an_extension_built_through_a_wrapping_helper_is_known_by_module_and_name():
    # make_cuda_ext(name="voxel_layer", module="proj.ops.voxel", ...) builds proj.ops.voxel.voxel_layer
    assert lines("proj/ops/pool/pool.py", EXT) == {1, 5}
    # `from .voxel_layer import dynamic_voxelize`: each call of the bare name runs the extension; `is None` does not
    assert lines("proj/ops/voxel/voxelize.py", EXT) == {1, 7, 8}


def test_a_builder_chosen_by_a_condition_and_a_cpp_builder_given_cuda_sources_build_cuda_extensions():
    # extension_type = CUDAExtension if device == "cuda" else CppExtension; extension_type("proj.backend", ...)
    # line 7 calls the extension's CPU entry point, and proj.backends is another module: neither is a finding
    assert lines("proj/conv.py", EXT) == {1, 8}
    # CppExtension("proj.ngram_cuda", sources=[..., "src/ngram_kernel.cu"])
    assert lines("proj/ngram.py", EXT) == {1, 5}


def test_an_extension_known_by_its_name_alone():
    # try_import("awq_ext") and `import marlin_cuda`, then their calls; importlib.import_module(f"bindings._{cc}_C")
    # and a call through it, not the read of one of its enum values (line 17)
    assert lines("proj/quant.py", EXT) == {5, 6, 10, 11, 16, 18}


def test_a_package_function_bound_to_a_name_is_used_where_that_name_is_called():
    assert lines("proj/attention.py", "py-import-xformers") == {1, 3, 7}


def test_build_files_cuda_versions_apt_sources_and_scripts_asking_the_cuda_build():
    # ARG CUDA=..., ARG CUDNN=..., a variable named for an NVIDIA-only package (ARG FLASH_ATTN_VERSION=...)
    assert lines("docker/Dockerfile", "build-cuda-variable") == {2, 3, 7}
    assert lines("docker/Dockerfile", "build-nvidia-registry") == {5}      # sources.list.d/cuda.list
    assert lines(".circleci/config.yml", "build-ci-cuda-axis") == {6}      # cudnn: 8
    # an assertion on torch.cuda decides what runs; a line that only prints the CUDA version is a message
    assert lines("check_env.sh") == {2}


def test_warp_sized_reductions_and_nvcc_front_end_flags():
    # a reduction that stops at 32 threads (`s > 32; s >>= 1`), the last warp's branch (`threadIdx.x < 32`), a loop
    # striding by one warp from the thread index: each assumes 32 lanes
    assert lines("kernels/reduce.cu", "cpp-warp-size-arith") == {5, 9, 12}
    assert lines("kernels/build.sh", "build-nvcc-flags") == {2}      # -Xcudafe, nvcc's front-end pass-through


def test_an_element_of_a_compute_capability_compared_with_a_number_is_a_gate():
    assert lines("proj/gates.py", "py-capability-gate") == {6}     # capability[0] >= 9


def test_triton_configs_passed_on_by_a_pruner_are_not_configs_made_and_cuda_graph_timing_is():
    # `yield triton.Config(config.kwargs, num_warps=config.num_warps)`: the config comes from elsewhere (line 16)
    assert lines("proj/tune.py", "py-triton-config") == {16}
    assert lines("proj/tune.py", "py-triton-autotune-cuda-graph") == {19}     # the keyword's own line


def test_an_extension_bound_by_load_in_one_module_and_imported_from_it_in_another():
    # backend.py: `_backend = load(name="_ffmlp", sources=[... "ffmlp.cu"])`; ffmlp.py: `from .backend import _backend`
    assert lines("proj/ffmlp/ffmlp.py", EXT) == {1, 5}


def test_a_library_extension_loaded_by_importlib_and_a_helper_imported_by_name():
    # importlib.import_module("fused_layer_norm_cuda") and its call; the helper's import is no edit, its call is
    assert lines("proj/norm.py", EXT) == {5, 10}
    assert lines("proj/norm.py", "py-cuda-availability-helper") == {9}


def test_cuda_libraries_loaded_by_file_name_and_more_warp_width_assumptions():
    # dlopen("libcuda.so.1"), LoadLibraryA("nvcuda.dll"); the project's own library (line 9) is not CUDA's
    assert lines("kernels/driver.cpp", "cpp-cuda-library-file") == {6, 8}
    # kWarpSize = std::min(kNThreads, 32); lane_id < (32 - K); a shuffle loop from 32 >> 1
    assert lines("kernels/warp_reduce.cuh", "cpp-warp-size-arith") == {3, 4, 5}


def test_a_jit_build_through_a_wrapping_helper_bound_to_a_name():
    # softmax_cuda = _load_helper("softmax_cuda", ...), then softmax_cuda.forward
    assert lines("proj/loader.py", EXT) == {12, 13}


def test_libcudacxx_names_and_the_port_branch_that_maps_cuda_std_to_std():
    # `namespace cuda { namespace std = ::std; }` on the ROCm side ports cuda::std (line 11), not cuda::atomic_ref
    found = {(f.line, f.ported) for f in report().findings if f.path == "kernels/atomics.cuh" and f.rule == "cpp-libcudacxx"}
    assert found == {(11, True), (12, False)}      # one finding per line, however many names it holds


def test_a_header_of_the_projects_own_device_macros_holding_inline_ptx_is_read_as_cuda():
    assert lines("kernels/packet.hpp", "cpp-inline-ptx") == {7}


def test_autocast_marking_decorators_are_one_edit_at_their_import_and_cublas_backend_switches_are_found():
    # `from torch.cuda.amp import custom_bwd, custom_fwd` is the edit; `@custom_fwd` / `@custom_bwd` are not again
    assert lines("proj/autocast_fn.py") == {2}
    assert lines("docker/Dockerfile.cublas", "build-cuda-feature-switch") == {2, 3}     # LLAMA_CUBLAS=1, -D...=ON


def test_calls_of_an_operator_library_registered_for_cuda_only():
    # kernels/ops_ext.cc: TORCH_LIBRARY_FRAGMENT(myops) with m.impl(..., torch::kCUDA, ...) only; bothops has a CPU
    # implementation too (kernels/both_ext.cpp): its calls run anywhere
    assert lines("proj/myops.py", EXT) == {5}


def test_a_source_written_for_hip_is_the_port_not_lock_in():
    # <hip/hip_runtime.h> and <hip/hip_fp16.h>, no CUDA header: its kernel, __half2 and launch are HIP's own code
    found = [f for f in report().findings if f.path == "kernels/hip_native.cu"]
    assert found and all(f.ported for f in found)


def test_a_string_that_names_the_projects_implementation_is_no_device_and_an_import_call_may_span_lines():
    # impl="cuda" (a parameter's default) and `impl in [...]` pick the project's kernels; x.device.type == "cuda" on
    # line 6 is the device test; importlib.import_module(\n "fused_norm_cuda") loads a compiled extension
    assert lines("proj/impl_ops.py", "py-cuda-device-string") == {6}
    assert lines("proj/impl_ops.py", EXT) == {12}


def test_keops_imports_and_atens_cuda_internals():
    # KeOps' GPU backend is CUDA only: its imports are findings, its version read (line 10) is not a use
    assert lines("proj/keops_op.py", "py-import-pykeops") == {1, 2}
    # ATen's CUDA reduction helpers and their header
    assert lines("kernels/block_sum.cu", "cpp-torch-cuda") == {1, 7}


def test_async_copy_pipeline_stages_and_cuda_libraries_searched_in_paths_and_commands():
    # pipe.producer_acquire() / producer_commit() / consumer_wait() / consumer_release() of cuda::pipeline
    assert lines("kernels/pipeline.cuh", "cpp-cuda-pipeline") == {5, 9, 10, 12}
    # a glob for libnvrtc, `ldconfig -p | grep 'libnvrtc'`, a CUDA pip wheel's folder; not the assert's message (13)
    assert lines("proj/libsearch.py", "py-cuda-library-path") == {9, 11, 18}
    assert lines("proj/libsearch.py", "py-cuda-wheel-tag") == {22}          # base + f"+cu{cuda}"


def test_an_extension_built_through_the_builder_module_under_another_name():
    # import torch.utils.cpp_extension as torch_cpp_ext; torch_cpp_ext.CUDAExtension("proj.fastops", [...])
    assert lines("proj/use_fastops.py", EXT) == {3, 7}


def test_a_config_factory_is_found_where_it_is_called_with_a_warp_count():
    # linear_config(..., n_warps) returns triton.Config(num_warps=n_warps): its calls with a number are the configs
    assert lines("proj/tritoncfg.py", "py-triton-config") == {10, 11}


def test_nvidias_ghcr_images_and_cudnn_packages_in_ci():
    assert lines(".github/workflows/wheel.yml", "build-ci-nvidia-image") == {7}     # ghcr.io/nvidia/jax
    assert lines(".github/workflows/wheel.yml", "build-cuda-packages") == {9}       # cudnn9-cuda-12


def test_tensor_core_calls_found_through_the_nvcuda_namespace_and_kernel_packages_from_their_repositories():
    # `using namespace nvcuda;` then fill_fragment / load_matrix_sync / mma_sync / store_matrix_sync, found by ADL
    assert lines("kernels/wmma_ns.cu", "cpp-tensor-core") == {1, 2, 5, 6, 7, 8, 9, 10, 11, 12}
    # git+https://github.com/Dao-AILab/causal-conv1d.git, .../state-spaces/mamba.git, fast_hadamard_transform==...
    assert lines("reqs/requirements.txt", "deps-cuda-kernel-package") == {2, 3, 4}


def test_an_operator_library_registered_from_python_for_cuda_only():
    # torch.library.impl("fastlib::scale", "cuda") beside an abstract kernel: its calls run CUDA; anylib has a CPU
    # kernel too (line 6 is no finding)
    assert lines("proj/use_pyops.py", EXT) == {5}


def test_compute_capability_lists_and_a_one_warp_block():
    # "7.0;7.5", caps += ";8.0;8.6", caps + "+PTX": capabilities joined for TORCH_CUDA_ARCH_LIST
    assert lines("proj/libsearch.py", "py-cuda-capability-list") == {26, 28, 29}
    assert lines("kernels/wmma_ns.cu", "cpp-warp-size-arith") == {16}     # const dim3 threads(32)


def test_an_operator_library_whose_kernels_are_a_cuda_extensions_functions():
    # torch.library.impl("extlib::matmat", "default", FAST.matmat) after FAST = load(... .cu): calls elsewhere run CUDA
    assert lines("proj/use_extops.py", EXT) == {5}
