"""Code generation: which plan a snippet gets, the shims, declarations and renamed bindings."""

from pathlib import Path

import pytest

from jitlab.errors import SnippetError
from jitlab.jit import codegen
from jitlab.jit.parse import parse_file
from jitlab.jit.plan import KernelPlan, TorchPlan

KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def plan_of(*paths, mode="auto"):
    files = [parse_file(p) for p in paths]
    return codegen.plan(files, "t", mode)


def test_kernel_only_plan_has_no_torch_header():
    """saxpy.cu builds kernel-only: shims, no torch include anywhere in the sources."""
    p = plan_of(KERNELS / "saxpy.cu")
    assert p.kind == "kernel" and p.cuda
    text = "\n".join(p.cuda_sources + p.cpp_sources)
    assert "#include <torch" not in text and "torch::" not in text
    assert 'extern "C" int jitlab_launch_saxpy(' in text
    assert "saxpy<<<dim3(jitlab_gx, jitlab_gy, jitlab_gz), dim3(jitlab_bx, jitlab_by, jitlab_bz), jitlab_smem, (cudaStream_t)jitlab_stream>>>" in text


def test_user_code_follows_a_line_directive():
    """The user's text is copied after #line 1 "<path>", so errors point at their file."""
    p = plan_of(KERNELS / "saxpy.cu")
    joined = "".join(p.cuda_sources)
    assert f'#line 1 "{KERNELS / "saxpy.cu"}"\n' + (KERNELS / "saxpy.cu").read_text() in joined


def test_torch_style_plan_declares_host_functions():
    """square_matrix.cu: its host function is bound by a C-ABI entry at the end of its host unit, which calls it
    by its qualified name with the argument it takes."""
    p = plan_of(KERNELS / "square_matrix.cu")
    assert p.kind == "torch" and [fn.name for fn in p.exported][0] == "square_matrix" and not p.binds_itself
    assert p.entries and "bind.cpp" not in [u.name for u in p.units]
    host = next(u for u in p.units if u.name == "square_matrix.host.cpp")
    assert host.entries and 'extern "C"' in host.text and "jitlab_entry_square_matrix(void** args, void* result)" in host.text
    assert "new (result) at::Tensor(::square_matrix(*static_cast<at::Tensor*>(args[0])));" in host.text


def test_snippet_with_own_pybind_module_is_not_rebound():
    """custom_operation.cu binds itself: no binding unit (it would define the module twice)."""
    p = plan_of(KERNELS / "custom_operation.cu")
    assert p.kind == "torch" and p.binds_itself and "bind.cpp" not in [u.name for u in p.units]


def test_each_kind_of_plan_has_only_its_own_fields():
    """A kernel-only plan has its two sources and no units; a torch-style plan its units and no load_inline encoding."""
    kernel, torch_style = plan_of(KERNELS / "saxpy.cu"), plan_of(KERNELS / "square_matrix.cu")
    assert isinstance(kernel, KernelPlan) and not hasattr(kernel, "units") and not hasattr(kernel, "functions")
    assert isinstance(torch_style, TorchPlan)
    assert not any(hasattr(torch_style, f) for f in ("cpp_sources", "cuda_sources", "functions"))


def test_hard_coded_module_name_is_renamed_in_the_copy_only():
    """vector_add_binding.cpp says PYBIND11_MODULE(example_kernels, m): a copy compiled as written uses
    TORCH_EXTENSION_NAME; bound through entries, the block is blanked in the copy and its names kept."""
    binding = KERNELS / "vector_add" / "vector_add_binding.cpp"
    renamed = codegen.rename_module(parse_file(binding))
    assert "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m)" in renamed and "example_kernels" not in renamed
    p = plan_of(binding, KERNELS / "vector_add" / "vector_add.cu")
    cpp = "".join(u.text for u in p.units if u.compiler == "cxx")
    assert "PYBIND11_MODULE" not in cpp and p.bound["vector_add_binding"].name == "vector_add"
    assert "PYBIND11_MODULE(example_kernels, m)" in binding.read_text()  # the user's file is untouched


def test_cuda_unit_without_torch_skips_torch_headers():
    """add2_seed: add2.cu has no torch, so its unit compiles without torch headers (1 s, not 28 s)."""
    d = KERNELS / "add2_seed"
    p = plan_of(d / "add2.cpp", d / "add2.cu")
    assert p.kind == "torch"
    assert "torch/types.h" not in "".join(p.device_sources)


def test_std_types_in_a_signature_need_pybind():
    """Seed 004's C++ hello returns std::string, so it goes through pybind."""
    assert plan_of(KERNELS / "hello_cpp.cpp").kind == "torch"


def test_unmappable_parameter_is_named(write):
    """A kernel-only parameter jitlab cannot pass gets an error naming it."""
    p = write("k.cu", "struct P { int a; };\n__global__ void k(float* y, P params) {}\n")
    with pytest.raises(SnippetError, match=r"parameter `P params`"):
        plan_of(p)


def test_pointer_to_pointer_is_rejected(write):
    """float** has no tensor equivalent."""
    with pytest.raises(SnippetError, match=r"float\*\*"):
        plan_of(write("k.cu", "__global__ void k(float** y) {}\n"))


def test_template_kernels_are_skipped_with_a_reason(write):
    """Template kernels cannot be launched uninstantiated: skipped, with the reason kept."""
    p = plan_of(write("k.cu", "template <int N> __global__ void tk(float* y) {}\n__global__ void k(float* y) {}\n"))
    assert [f.name for f in p.exported] == ["k"]
    assert p.skipped[0][0] == "tk"


def test_nothing_to_call_is_an_error(write):
    """A snippet with no kernel and no host function is rejected with an example."""
    with pytest.raises(SnippetError, match="no __global__ kernel or host function"):
        plan_of(write("e.cu", "// just a comment\n"))


def test_kernel_mode_refuses_torch(write):
    """mode='kernel' on a torch snippet says how to fix it."""
    with pytest.raises(SnippetError, match="drop mode="):
        plan_of(KERNELS / "square_matrix.cu", mode="kernel")


def test_half_scalar_crosses_as_bits():
    """A __half scalar is passed as its 16-bit pattern and reinterpreted in the shim."""
    p = plan_of(KERNELS / "scale_half.cu")
    assert "*reinterpret_cast<const __half*>(&jitlab_arg2)" in "".join(p.cuda_sources)


def test_duplicate_names_across_files(write):
    """Two files defining the same kernel name cannot both be attributes."""
    a = write("a.cu", "__global__ void k(float* y) {}\n")
    b = write("b.cu", "__global__ void k(int* y) {}\n")
    with pytest.raises(SnippetError, match="also defined"):
        plan_of(a, b)


def test_torch_style_helpers_with_raw_pointers_are_not_bound(write):
    """A torch-style file's raw-pointer launcher stays a C++ helper (pybind cannot pass tensors to float*)."""
    p = write("t.cu", """
        void launch(float* y, int n) {}
        void check_err(cudaError_t e) {}
        torch::Tensor op(torch::Tensor x) { return x; }
    """)
    plan = plan_of(p)
    assert [fn.name for fn in plan.exported] == ["op"]
    assert {n for n, _ in plan.skipped} == {"launch", "check_err"}


def test_only_functions_that_print_are_wrapped():
    """printf reachability: seed 000's two_norm prints (through its launcher and kernel), two_norm1 does not."""
    d = KERNELS / "two_norm"
    p = plan_of(d / "two_norm_bind.cpp", d / "two_norm_kernel.cu")
    assert "two_norm" in p.printing and "two_norm1" not in p.printing
    sq = plan_of(KERNELS / "square_matrix.cu")
    assert "square_matrix" in sq.printing and "square_matrix1" not in sq.printing
    assert plan_of(KERNELS / "hello.cu").printing == {"kernel"}
    assert plan_of(KERNELS / "saxpy.cu").printing == set()
