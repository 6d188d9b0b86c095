"""Snippet parsing with tree-sitter-cuda: kernels, host functions, qualifiers, includes, bindings."""

from pathlib import Path

import pytest

from jitlab.errors import SnippetError
from jitlab.jit.parse import parse_file

KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def funcs(write, text, name="s.cu"):
    return {f.name: f for f in parse_file(write(name, text)).functions}


def test_kernel_params_const_restrict_and_launch_bounds(write):
    """Pointer depth, pointee const and __restrict__ are read per parameter."""
    f = funcs(write, """
        __global__ void __launch_bounds__(256) k(float* __restrict__ y, const float *x, float const* z, float a, int n) {}
    """)["k"]
    assert f.kind == "global"
    assert [(p.name, p.base, p.pointer, p.const) for p in f.params] == [
        ("y", "float", 1, False), ("x", "float", 1, True), ("z", "float", 1, True), ("a", "float", 0, False), ("n", "int", 0, False)]


def test_device_helpers_are_not_exported(write):
    """__device__ functions are called from kernels, not from Python."""
    assert set(funcs(write, "__device__ float sq(float x) { return x * x; }\n__global__ void k(float* y) {}")) == {"k"}


def test_host_launcher_templates_namespaces_and_extern_c(write):
    """Host launchers, namespaced kernels and extern "C" functions are found; templates are marked."""
    fs = funcs(write, """
        template <typename T> __global__ void tk(T* x) {}
        namespace ops { __global__ void nk(int* p) {} }
        extern "C" void launch(float* c, int n) {}
        static void helper(int n) {}
    """)
    assert fs["tk"].template
    assert fs["nk"].qualname == "ops::nk"
    assert fs["launch"].kind == "host" and [p.base for p in fs["launch"].params] == ["float", "int"]
    assert fs["helper"].static


def test_functions_inside_preprocessor_conditionals(write):
    """Kernels under #ifdef are still seen (the compiler decides which survive)."""
    assert "k" in funcs(write, "#ifndef NOPE\n__global__ void k(float* y) {}\n#endif\n")


def test_torch_usage_pybind_and_printf(write):
    """torch types mark a file torch-style; the PYBIND11_MODULE name and printf calls are recorded."""
    f = parse_file(write("t.cu", """
        torch::Tensor f(torch::Tensor x) { printf("hi"); return x; }
        PYBIND11_MODULE(example_kernels, m) { m.def("f", &f); }
    """))
    assert f.uses_torch and f.has_printf
    assert f.pybind_module[0] == "example_kernels"
    assert [fn.name for fn in f.functions] == ["f"]


def test_kernel_only_file_does_not_use_torch(write):
    """A file with only kernels and C types needs no torch header."""
    f = parse_file(write("k.cu", '#include "add2.h"\n#include <cstdio>\n__global__ void k(float* y) {}\n'))
    assert not f.uses_torch
    assert f.local_includes == ["add2.h"]


def test_every_shipped_seed_parses():
    """Each kernel in kernels/ parses and defines something callable."""
    for p in sorted(KERNELS.rglob("*")):
        if p.suffix in (".cu", ".cpp"):
            f = parse_file(p)
            assert f.functions or f.pybind_module, p


def test_square_matrix_seed_signature():
    """Seed 004 (includes in the middle of the file) exposes square_matrix(torch::Tensor)."""
    f = parse_file(KERNELS / "square_matrix.cu")
    host = [fn for fn in f.functions if fn.kind == "host"]
    assert host[0].signature() == "torch::Tensor square_matrix(torch::Tensor matrix)"


def test_missing_file_is_a_clear_error(tmp_path):
    """A wrong path names the file."""
    with pytest.raises(SnippetError, match="no such file"):
        parse_file(tmp_path / "nope.cu")


def test_unsupported_extension(write):
    """A .py passed by mistake gets an error naming the extensions jitlab builds."""
    with pytest.raises(SnippetError, match=r"\.cu, \.cpp"):
        parse_file(write("k.py", "print(1)"))


def test_parse_error_location(write):
    """tree-sitter's first syntax error is located for the 'nothing to call' message."""
    f = parse_file(write("bad.cu", "this is not CUDA at all\n"))
    assert f.parse_error is not None and f.functions == []


def test_a_source_that_is_not_utf8_parses_and_keeps_its_bytes(tmp_path):
    """A comment saved in GBK (not UTF-8) is no error: the functions are found and the text gives back the
    file's very bytes, which the compiler then gets as torch's build would give them."""
    raw = "// 注释 in GBK\nint forty_two() { return 42; }\n".encode("gbk")
    src = tmp_path / "gbk.cpp"
    src.write_bytes(raw)
    f = parse_file(src)
    assert [fn.name for fn in f.functions] == ["forty_two"]
    assert f.text.encode("utf-8", "surrogateescape") == raw
