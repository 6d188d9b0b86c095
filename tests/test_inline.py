"""jitlab.load_inline as a drop-in for torch's, and torch's load() keywords on jitlab.load (C++ on the CPU,
CUDA compile-only)."""

from __future__ import annotations

import inspect
from pathlib import Path
import pydoc

import pytest
import torch
from torch.utils import cpp_extension

import jitlab
from jitlab.jit import binding, torch_compat

SQUARE = """
torch::Tensor square(torch::Tensor x) {
    return x * x;
}

torch::Tensor plus_one(torch::Tensor x) { return x + 1; }
"""

BROKEN = """
torch::Tensor square(torch::Tensor x) {
    auto y = x * x;
    return y + not_a_name;
}
"""

DECL = "torch::Tensor square(torch::Tensor x);"
CUDA_SQUARE = """
__global__ void square_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i];
}

torch::Tensor square(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    square_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


def test_signature_is_torchs():
    """load_inline's parameters, their order and their defaults are those of the installed torch's load_inline."""
    ours = inspect.signature(jitlab.load_inline).parameters
    theirs = inspect.signature(cpp_extension.load_inline).parameters
    assert [(p.name, p.default, p.kind) for p in ours.values()] == [(p.name, p.default, p.kind) for p in theirs.values()]


def test_load_takes_every_torch_load_keyword():
    """Every parameter of torch's load() is a keyword jitlab.load accepts."""
    params = inspect.signature(jitlab.load).parameters
    for name in inspect.signature(cpp_extension.load).parameters:
        assert name in params or name in torch_compat.LOAD_KEYWORDS, name


def test_prelude_and_bindings_as_torch_writes_them(cache):
    """The written files hold torch's implicit headers, the sources in order and the functions= module."""
    snip = torch_compat.materialize("pre", [DECL, "int two() { return 2; }"], CUDA_SQUARE, {"square": 'say "hi"'})
    cpp, cu = (f.read_text() for f in snip.files)
    assert cpp.splitlines()[:3] == ["#include <torch/extension.h>", DECL, "int two() { return 2; }"]
    assert 'm.def("square", torch::wrap_pybind_function(square), "say \\"hi\\"");' in cpp
    assert cu.startswith("#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n" + CUDA_SQUARE)


def test_no_implicit_headers_and_unwrapped_bindings(cache):
    """no_implicit_headers adds no include; with_pytorch_error_handling=False binds the function itself."""
    snip = torch_compat.materialize("bare", DECL, None, ["square"], with_pytorch_error_handling=False,
                                    no_implicit_headers=True)
    text = snip.files[0].read_text()
    assert text.startswith(DECL) and "#include" not in text
    assert 'm.def("square", square, "square");' in text


def test_callers_source_lists_are_not_changed(cache):
    """The caller's lists come back as they were (torch inserts its headers into them)."""
    cpp, cuda = [DECL], [CUDA_SQUARE]
    torch_compat.materialize("keep", cpp, cuda, ["square"])
    assert cpp == [DECL] and cuda == [CUDA_SQUARE]


@pytest.mark.slow
def test_functions_list_binds_only_those(use_shared_cache):
    """A C++ load_inline with functions=[...] runs on CPU tensors and exports only the named functions."""
    m = jitlab.load_inline(name="sq_list", cpp_sources=[SQUARE], functions=["square"])
    x = torch.arange(5.0)
    assert torch.equal(m.square(x), x * x)
    assert m.functions == ["square"] and not hasattr(m, "plus_one")


def test_functions_dict_gives_docstrings(cache):
    """functions={name: docstring} binds those names with their docstrings, shown by help()."""
    m = jitlab.load_inline(name="sq_doc", cpp_sources=SQUARE, functions={"square": "Square each element.",
                                                                        "plus_one": "Add one."})
    assert torch.equal(m.plus_one(torch.zeros(2)), torch.ones(2))
    assert "Square each element." in pydoc.render_doc(m.square)


def test_same_name_new_source_is_the_new_module(cache):
    """Loading again under the same name with an edited source gives the edited function in this process."""
    a = jitlab.load_inline(name="same", cpp_sources=SQUARE, functions=["square"])
    b = jitlab.load_inline(name="same", cpp_sources=SQUARE.replace("x * x", "x * x * x"), functions=["square"])
    x = torch.full((3,), 2.0)
    assert a.square(x).tolist() == [4.0] * 3 and b.square(x).tolist() == [8.0] * 3
    assert jitlab.load_inline(name="same", cpp_sources=SQUARE, functions=["square"]).build.cached


@pytest.mark.slow
def test_failed_build_leaves_the_name_usable(cache):
    """A first build that fails raises CompileError; the fixed source under the same name then loads and runs."""
    with pytest.raises(jitlab.CompileError):
        jitlab.load_inline(name="poison", cpp_sources=BROKEN, functions=["square"])
    m = jitlab.load_inline(name="poison", cpp_sources=SQUARE, functions=["square"])
    assert m.square(torch.tensor([3.0])).item() == 9.0


@pytest.mark.slow
def test_error_names_the_line_inside_the_string(cache):
    """A compile error names load_inline's name, the source list's index and the line in that string, with a caret."""
    with pytest.raises(jitlab.CompileError) as info:
        jitlab.load_inline(name="where", cpp_sources=[DECL, BROKEN.replace("x * x", "x  *  x")], functions=["square"])
    text = str(info.value)
    assert "load_inline 'where' cpp_sources[1], line 4" in text
    assert "    4 |     return y + not_a_name;" in text and "^" in text.splitlines()[text.splitlines().index(
        "    4 |     return y + not_a_name;") + 1]
    d = info.value.diagnostics[0]
    assert (d.path, d.line) == ("load_inline 'where' cpp_sources[1]", 4)


@pytest.mark.slow
def test_a_source_the_parser_cannot_read_is_compiled_as_its_build_would(cache):
    """A torch source in which the parser finds nothing (`int main() { return 0 }`) is compiled as its unit on its
    torch header set, as the build would: GCC's error at the string's line, and the unit's entry in the object cache
    (not a syntax pass over all of torch's headers)."""
    with pytest.raises(jitlab.CompileError) as info:
        jitlab.load_inline(name="unread", cpp_sources="int main() { return 0 }")
    d = info.value.diagnostics[0]
    assert (d.path, d.line) == ("load_inline 'unread' cpp_sources[0]", 1) and "expected" in d.message
    assert list((cache / "objects").glob("unread.cpp-*"))


@pytest.mark.slow
def test_error_in_a_notebook_cell_names_the_cells_line(ip, capsys):
    """In IPython, an error in a source string written in the calling cell also names the cell's line."""
    cell = '''import jitlab
src = """
torch::Tensor square(torch::Tensor x) {
    return x * missing;
}
"""
try:
    jitlab.load_inline(name="cellerr", cpp_sources=[src], functions=["square"])
except jitlab.CompileError as e:
    print("CAUGHT", e)
'''
    ip.run_cell(cell)
    out = capsys.readouterr().out
    assert "CAUGHT" in out
    assert ", line 4 (load_inline 'cellerr' cpp_sources[0], line 3)" in out
    assert "Cell In[" in out


def test_unknown_function_name_says_to_declare_it(cache, monkeypatch, tmp_path):
    """functions= naming what cpp_sources never mention is an error at the generated binding's line, saying what
    to do, before any compiler runs (no header set is made for it, no object written)."""
    monkeypatch.setenv("JITLAB_PCH_DIR", str(tmp_path / "pch"))
    with pytest.raises(jitlab.CompileError, match="must be declared in cpp_sources") as e:
        jitlab.load_inline(name="undeclared", cpp_sources=SQUARE, functions=["square", "cube"])
    assert "functions= names 'cube', which cpp_sources do not declare" in e.value.summary
    assert "bindings made for functions=, line 3: error: 'cube' was not declared" in str(e.value)
    assert 'm.def("cube", torch::wrap_pybind_function(cube), "cube");' in str(e.value)
    assert not (tmp_path / "pch").exists() and not (cache / "objects").exists()


def test_what_counts_as_undeclared_before_compiling():
    """Only a name that no cpp_sources word can be is reported early: a template's instantiation, a namespaced
    name, a name in a comment are the compiler's to judge, and a quoted #include may declare anything."""
    src = ["namespace ns { template <typename T> T twice(T x) { return x + x; } }  // see also: cube"]
    assert binding.undeclared(["ns::twice<float>", "twice", "cube", "square"], src) == ["square"]
    assert binding.undeclared({"square": "doc"}, ['#include "square.h"\n']) == []
    assert binding.undeclared(None, src) == []


@pytest.mark.slow
def test_a_function_declared_in_an_included_header_is_bound(cache, tmp_path):
    """A name cpp_sources only include a header for is left to the compiler, which finds it there."""
    (tmp_path / "cube.h").write_text("torch::Tensor cube(torch::Tensor x) { return x * x * x; }\n")
    m = jitlab.load_inline(name="cube_h", cpp_sources='#include "cube.h"\n', functions=["cube"],
                           extra_include_paths=[str(tmp_path)])
    assert m.cube(torch.full((2,), 2.0)).tolist() == [8.0, 8.0]


def test_ignored_arguments_say_so_once(use_shared_cache, capsys, monkeypatch, tmp_path):
    """keep_intermediates/use_pch are accepted and noted in one line each, once per process; build_directory
    gets the library as <name>.so, where torch's would be. (The module of test_functions_list_binds_only_those:
    one build for both, in the run's shared cache.)"""
    monkeypatch.setattr(torch_compat, "_noted", set())
    for _ in range(2):
        m = jitlab.load_inline(name="sq_list", cpp_sources=[SQUARE], functions=["square"],
                               build_directory=str(tmp_path / "ext"), keep_intermediates=False, use_pch=True,
                               verbose=False)
    assert m.square(torch.ones(1)).item() == 1.0
    assert (tmp_path / "ext" / "sq_list.so").is_file() and list((tmp_path / "ext").iterdir()) == [tmp_path / "ext" / "sq_list.so"]
    err = capsys.readouterr().err
    for arg in ("keep_intermediates", "use_pch"):
        assert err.count(f"load_inline({arg}=...) is accepted and means nothing here") == 1
    assert "build_directory" not in err


def test_sycl_sources_are_refused_naming_torch(cache):
    """sycl_sources is refused with the function that builds SYCL."""
    with pytest.raises(jitlab.ArgumentError, match="torch.utils.cpp_extension.load_inline"):
        jitlab.load_inline(name="sy", cpp_sources="", sycl_sources=["x"])


@pytest.mark.slow
def test_not_a_python_module_loads_torch_library_operators(cache):
    """is_python_module=False loads the operators into torch.ops and returns the library's path, as torch's; a
    new source under the same name replaces them in the same process."""
    src = """
torch::Tensor twice(torch::Tensor x) { return x * FACTOR; }
TORCH_LIBRARY(jitlab_inline_test, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(jitlab_inline_test, CPU, m) { m.impl("twice", &twice); }
"""
    path = jitlab.load_inline(name="oplib", cpp_sources="#define FACTOR 2\n" + src, is_python_module=False)
    assert isinstance(path, str) and path.endswith(".so") and Path(path).is_file()
    assert torch.ops.jitlab_inline_test.twice(torch.ones(2)).tolist() == [2.0, 2.0]
    jitlab.load_inline(name="oplib", cpp_sources="#define FACTOR 3\n" + src, is_python_module=False)
    assert torch.ops.jitlab_inline_test.twice(torch.ones(2)).tolist() == [3.0, 3.0]


@pytest.mark.slow
def test_load_with_torchs_keywords(cache, tmp_path):
    """jitlab.load(name=, sources=, extra_cflags=, extra_include_paths=) builds and runs as torch's load would."""
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "factor.h").write_text("#define OFFSET 10\n")
    src = tmp_path / "ext.cpp"
    src.write_text('#include <torch/extension.h>\n#include "factor.h"\n'
                   "torch::Tensor scale(torch::Tensor x) { return x * FACTOR + OFFSET; }\n"
                   "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def(\"scale\", &scale); }\n")
    m = jitlab.load(name="ext", sources=[str(src)], extra_cflags=["-DFACTOR=3"], extra_include_paths=[str(inc)],
                    verbose=False)
    assert m.scale(torch.ones(2)).tolist() == [13.0, 13.0]


def test_load_reads_torchs_positional_form(tmp_path):
    """load("ext", ["a.cpp"]) is torch's (name, sources); load("a.cpp", "b.cpp") stays jitlab's files."""
    a = tmp_path / "a.cpp"
    a.write_text("")
    assert torch_compat.torch_load_args("ext", ([str(a)],), None, None) == ([str(a)], "ext")
    assert torch_compat.torch_load_args(str(a), ("b.cpp",), None, None) == ([str(a), "b.cpp"], None)


def test_load_refuses_unknown_keyword_with_a_hint():
    """A keyword neither jitlab's load nor torch's takes is refused with the closest one."""
    with pytest.raises(jitlab.ArgumentError, match="did you mean extra_cuda_cflags="):
        jitlab.load(name="x", sources=["x.cu"], extra_cuda_flags=["-O3"])


@pytest.mark.slow
def test_cuda_lecture_call_compiles_split_without_a_gpu(cache):
    """A lecture-style CUDA load_inline compiles for sm_75 through the split units; its C++ source, which only
    declares `square` for functions=, is no unit (the host unit ends with square's entry); a kernel edit
    recompiles only the device unit."""
    args = dict(cpp_sources=[DECL], functions=["square"], extra_cuda_cflags=["-O2"], compile_only=True, arch=["sm_75"])
    b = torch_compat.build_inline("lecture", cuda_sources=[CUDA_SQUARE], **args)
    units = {u["name"]: u for u in b.manifest.units}
    assert b.compile_only and set(units) == {"lecture.device.cu", "lecture.host.cpp"}
    assert "square_kernel" in b.resources and b.plan.entries and [fn.name for fn in b.plan.exported] == ["square"]
    edited = torch_compat.build_inline("lecture", cuda_sources=[CUDA_SQUARE.replace("x[i] * x[i]", "x[i] + x[i]")],
                                       **args)
    cached = {u["name"]: u["cached"] for u in edited.manifest.units}
    assert cached == {"lecture.device.cu": False, "lecture.host.cpp": True}


def test_cuda_error_names_the_line_in_cuda_sources(cache):
    """An nvcc error in a kernel points at the line inside cuda_sources[0]."""
    with pytest.raises(jitlab.CompileError, match=r"load_inline 'cuerr' cuda_sources\[0\], line 4: error"):
        torch_compat.build_inline("cuerr", [DECL], [CUDA_SQUARE.replace("x[i] * x[i]", "x[i] * zz")],
                                  ["square"], compile_only=True, arch=["sm_75"])


@pytest.mark.slow
def test_operators_and_functions_in_one_source(cache):
    """A source registering a TORCH_LIBRARY operator and binding functions= gives both: the module's function
    and torch.ops' operator. The unit needs pybind11 and torch/library.h at once: it is built on `bind` (torch's
    types and casters) with torch/library.h after it, not on all of torch/extension.h."""
    src = """
torch::Tensor twice(torch::Tensor x) { return x * 2; }
TORCH_LIBRARY(jitlab_inline_both, m) { m.def("twice(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(jitlab_inline_both, CPU, m) { m.impl("twice", &twice); }
"""
    m = jitlab.load_inline(name="both_kinds", cpp_sources=src, functions=["twice"])
    assert {u["name"]: u["headers"] for u in m.build.manifest.units}["both_kinds.cpp"] == "bind"
    assert m.twice(torch.ones(2)).tolist() == [2.0, 2.0]
    assert torch.ops.jitlab_inline_both.twice(torch.ones(2)).tolist() == [2.0, 2.0]


@pytest.mark.parametrize("name, says", [("k" * 300, "is 300 characters: use at most 100"),
                                        ("ядро", "must be ASCII"), ("", "non-empty string"), (None, "non-empty string")])
def test_an_extension_name_no_file_or_symbol_can_carry_is_refused_at_the_door(cache, name, says):
    """load_inline, build_inline and torch's load(name=, sources=) refuse a name that would end in `File name too
    long` or an unexplained link error, naming the fix, before anything is written or compiled."""
    with pytest.raises(jitlab.ArgumentError, match=says):
        jitlab.load_inline(name=name, cpp_sources="int seven() { return 7; }", functions="seven")
    with pytest.raises(jitlab.ArgumentError, match=says):
        torch_compat.build_inline(name, ["int seven() { return 7; }"], functions=["seven"])
    if name is not None:  # load(sources=) without a name takes the first source's stem
        with pytest.raises(jitlab.ArgumentError, match=says):
            jitlab.load(name=name, sources=["nothing.cpp"])
    assert not (cache / "inline").exists()
