"""C-ABI entries: a torch-style snippet's functions reach Python through jitlab's binder, without a binding unit."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.jit import cabi, codegen, torch_compat
from jitlab.jit.parse import parse_file
from jitlab.jit.plan import Bound

TYPES = """\
#include <torch/extension.h>
torch::Tensor scale(const torch::Tensor& x, double alpha = 2.0f) {
    TORCH_CHECK(x.dim() == 1, "scale wants a 1-d tensor, got ", x.dim(), " dims");
    return x * alpha;
}
std::vector<torch::Tensor> parts(torch::Tensor a, std::vector<int64_t> shape, std::string tag = "ab") {
    return {a.reshape(shape), a + (int64_t)tag.size()};
}
int64_t count(c10::optional<torch::Tensor> t, at::IntArrayRef dims, unsigned flags = 0x10u) {
    return (t.has_value() ? t->numel() : -1) + (int64_t)dims.size() + flags;
}
void fill_(torch::Tensor& out, float value, bool twice = true) { out.fill_(twice ? 2 * value : value); }
torch::Tensor add(torch::Tensor a, torch::Tensor b) { return a + b; }  // at::add would be found by ADL
"""


def _fns(write, text=TYPES, name="types.cpp"):
    return {fn.name: fn for fn in parse_file(write(name, text)).functions}


def test_types_are_read_as_the_binder_holds_them():
    """References, const and torch's namespaces do not change a type's code; pointers, tuples and non-const
    references to numbers have none."""
    code = {t.cxx: i for i, t in enumerate(cabi.TYPES)}
    assert cabi.canonical("const torch::Tensor &") == "Tensor"
    assert cabi.canonical("c10::optional<at::Tensor>") == "optional<Tensor>"
    assert cabi._CODES[cabi.canonical("std::vector< int64_t >")] == code["std::vector<int64_t>"]
    assert cabi._CODES["long"] == cabi._CODES["int64_t"] == code["int64_t"]
    assert "tuple<Tensor,Tensor>" not in cabi._CODES and "Scalar" not in cabi._CODES


def test_signatures_an_entry_takes_and_those_it_does_not(write):
    """Every function of the types snippet has an entry; a pointer, a non-const int&, a tuple result do not."""
    assert all(cabi.supported(fn) for fn in _fns(write).values())
    others = _fns(write, "#include <torch/extension.h>\nvoid p(float* x) {}\nvoid r(int& n) {}\n"
                         "std::tuple<torch::Tensor, torch::Tensor> t(torch::Tensor x) { return {x, x}; }\n", "no.cpp")
    assert not any(cabi.supported(fn) for fn in others.values())


def test_literal_defaults_become_python_values_of_the_parameters_type(write):
    """`2.0f` for a double is 2.0, `0x10u` 16, `"ab"` a str, `true` True; Python's signature shows them."""
    fns = _fns(write)
    assert cabi.python_defaults(fns["scale"]) == {1: 2.0}
    assert cabi.python_defaults(fns["parts"]) == {2: "ab"}
    assert cabi.python_defaults(fns["count"]) == {2: 16}
    assert cabi.signature(fns["fill_"]) == "(out: torch.Tensor, value: float, twice: bool = True) -> None"
    assert cabi._value("2.0", "int") == 2 and cabi._value("010", "int") == 8 and cabi._value("'a'", "int") == 97
    assert cabi._value("FACTOR", "float") is cabi._NONE


def test_an_entry_calls_the_function_by_its_qualified_name(write):
    """`::add(...)`, so argument-dependent lookup cannot pick at::add for tensor arguments."""
    text = cabi.entries([_fns(write)["add"]])
    assert 'extern "C"' in text and "jitlab_entry_add(void** args, void* result)" in text
    assert "new (result) at::Tensor(::add(*static_cast<at::Tensor*>(args[0]), *static_cast<at::Tensor*>(args[1])));" in text


@pytest.mark.slow
def test_functions_called_through_entries_behave_as_pybind11_bindings(use_shared_cache, write):
    """One unit, no binding unit; keywords, defaults, lists, strings, optionals and in-place tensors convert as
    pybind11 would; a refused argument is pybind11's TypeError; a TORCH_CHECK its RuntimeError, without a backtrace."""
    m = jitlab.load(write("types.cpp", TYPES))
    assert [u["name"] for u in m.build.manifest.units] == ["types.cpp"] and m.build.plan.entries
    x = torch.arange(4.0)
    assert m.scale(x).tolist() == [0, 2, 4, 6] and m.scale(x, alpha=3).tolist() == [0, 3, 6, 9]
    a, b = m.parts(x, [2, 2])
    assert a.shape == (2, 2) and b.tolist() == [2, 3, 4, 5] and m.parts(x, (4,), tag="abcd")[1][0] == 4
    assert m.count(None, [1, 2]) == -1 + 2 + 16 and m.count(x, [], flags=0) == 4
    out = torch.zeros(2)
    assert m.fill_(out, 1.5) is None and out.tolist() == [3.0, 3.0]
    assert m.add(x, x).tolist() == [0, 2, 4, 6]
    with pytest.raises(TypeError, match=r"scale\(\): incompatible function arguments.*\n    1\. \(x: torch.Tensor, "
                                        r"alpha: float = 2.0\) -> torch.Tensor\n\nInvoked with: tensor"):
        m.scale(x, "two")
    with pytest.raises(RuntimeError) as e:
        m.scale(torch.zeros(2, 2))
    assert str(e.value) == "scale wants a 1-d tensor, got 2 dims"
    assert str(inspect.signature(m.scale)) == "(x: torch.Tensor, alpha: float = 2.0) -> torch.Tensor"
    assert m.scale.__doc__ == "scale(x: torch.Tensor, alpha: float = 2.0) -> torch.Tensor\n\nscale\n"
    assert "\n  scale(x: torch.Tensor, alpha: float = 2.0) -> torch.Tensor" in repr(m)


@pytest.mark.slow
def test_a_signature_no_entry_takes_is_bound_by_a_binding_unit_shared_between_folders(use_shared_cache, tmp_path):
    """A tuple result keeps the generated pybind11 unit, which includes nothing, so the same snippet in another
    folder compiles only its own unit again."""
    text = "#include <torch/extension.h>\nstd::tuple<torch::Tensor, int64_t> both(torch::Tensor x) { return {x * 2, x.numel()}; }\n"
    first, second = tmp_path / "a" / "tup.cpp", tmp_path / "b" / "tup.cpp"
    first.parent.mkdir()
    first.write_text(text)
    m = jitlab.load(first)
    assert not m.build.plan.entries and m.both(torch.ones(3))[1] == 3
    second.parent.mkdir()
    shutil.copy(first, second)
    units = {u["name"]: u["cached"] for u in jitlab.load(second).build.manifest.units}
    assert units == {"tup.cpp": False, "bind.cpp": True}


DECL = "torch::Tensor twice(torch::Tensor x);\n"
CUDA = """\
__global__ void twice_kernel(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 2 * x[i]; }
torch::Tensor twice(torch::Tensor x) {
    auto y = torch::empty_like(x);
    twice_kernel<<<1, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
"""


def _inline_plan(cpp: str, functions) -> object:
    snippet = torch_compat.materialize("entries", [cpp], [CUDA], functions)
    return codegen.plan([parse_file(p) for p in snippet.files], "entries")


def test_load_inline_functions_go_through_entries_and_a_declaring_source_is_no_unit(cache):
    """load_inline's functions= block is read back: its functions are entries with their docstrings, and a C++
    source that only declares them compiles nothing (the file keeps the block torch writes)."""
    plan = _inline_plan(DECL, {"twice": "Double it."})
    assert plan.entries and plan.bound == {"twice": Bound("twice", "Double it.", torch_errors=True)}
    assert [u.name for u in plan.units] == ["entries.device.cu", "entries.host.cpp"]
    assert "PYBIND11_MODULE" in plan.files[0].text  # the written file keeps torch's block


def test_a_declaration_unlike_its_definition_keeps_the_block_as_torch_compiles_it(cache):
    """A C++ source declaring `twice(torch::Tensor x, int n)` binds a function the .cu does not define: the
    block is compiled as written, so the build fails as torch's does, not bound to the other function."""
    plan = _inline_plan("torch::Tensor twice(torch::Tensor x, int n);\n", ["twice"])
    assert plan.binds_itself and not plan.entries and "entries.cpp" in [u.name for u in plan.units]


@pytest.mark.slow
def test_cpp_load_inline_functions_keep_their_docstrings(use_shared_cache):
    """A C++ load_inline with functions= as a dict: one unit, each function's docstring after its signature."""
    m = jitlab.load_inline("docs", "torch::Tensor half(torch::Tensor x) { return x / 2; }",
                           functions={"half": "Halve it."})
    assert m.half(torch.full((2,), 4.0)).tolist() == [2.0, 2.0]
    assert m.half.__doc__ == "half(x: torch.Tensor) -> torch.Tensor\n\nHalve it.\n"
    assert [u["name"] for u in m.build.manifest.units] == ["docs.cpp"]



@pytest.mark.slow
def test_the_binder_links_a_c_runtime_named_on_its_line(tmp_path, monkeypatch):
    """A compiler without a shared libstdc++ of its own has the process's named on the link line
    (toolchain.runtime_ldflags): the binder links it, never reads it as C++ source."""
    import subprocess

    from jitlab.jit import toolchain
    from jitlab.jit.engines import binder

    runtime = subprocess.run([toolchain.cxx_path(), "-print-file-name=libstdc++.so"], capture_output=True,
                             text=True, check=True).stdout.strip()
    monkeypatch.setenv("JITLAB_PCH_DIR", str(tmp_path / "pch"))
    monkeypatch.setattr(toolchain, "runtime_ldflags", lambda: [str(Path(runtime).resolve())])
    library = binder.library()
    assert library.is_file() and str(Path(runtime).resolve()) in (library.parent / "build.log").read_text()


OWN = """\
#include <torch/extension.h>
torch::Tensor twice_impl(torch::Tensor x) { return x * 2; }
void strict(int64_t n) { if (n < 0) throw std::invalid_argument("n < 0"); TORCH_CHECK_INDEX(n < 10, "n >= 10"); }
void wrapped(int64_t n) { if (n < 0) throw std::invalid_argument("n < 0"); }
PYBIND11_MODULE(my_ops, m) {
    // the module's own names
    m.def("twice",         // Python's name
          &twice_impl,     // the C++ function
          "Double it.");
    m.def("strict", strict);
    m.def("wrapped", torch::wrap_pybind_function(wrapped), "With torch's errors.");
}
"""


def test_a_module_of_plain_defs_is_bound_through_entries(write):
    """A snippet's own PYBIND11_MODULE of m.def lines: its functions are entries under the block's names, with
    its docstrings and error handling, and the file is one unit on the host set (the block is blanked in it)."""
    plan = codegen.plan([parse_file(write("own.cpp", OWN))], "own")
    assert plan.binds_itself and plan.entries
    assert {k: (b.name, b.doc, b.torch_errors) for k, b in plan.bound.items()} == {
        "twice_impl": ("twice", "Double it.", False), "strict": ("strict", "", False),
        "wrapped": ("wrapped", "With torch's errors.", True)}
    [unit] = plan.units
    assert unit.headers == "host" and not unit.module and "PYBIND11_MODULE" not in unit.text
    user = unit.text[unit.text.index('#line 1 "'):unit.text.index('"jitlab-generated.cpp"')]
    lines = user.splitlines()  # the #line directive, then the file's lines: the block's 8 kept, blank
    assert lines[2].startswith("torch::Tensor twice_impl") and lines[5:13] == [""] * 8 and "m.def" not in user


@pytest.mark.parametrize("line", ['m.def("twice", &twice_impl, py::arg("x"));', 'm.attr("answer") = 42;',
                                  'm.def("twice", [](torch::Tensor x) { return x * 2; });'])
def test_a_module_with_more_than_plain_defs_is_compiled_as_written(write, line):
    """py::arg, attributes and lambdas: the block is the snippet's own pybind11 code, compiled as it is."""
    text = OWN.replace('    m.def("strict", strict);\n', f"    {line}\n")
    plan = codegen.plan([parse_file(write("own.cpp", text))], "own")
    assert plan.binds_itself and not plan.entries and not plan.bound and plan.units[0].module


@pytest.mark.slow
def test_a_modules_functions_raise_as_its_bindings_would(use_shared_cache, write):
    """Called through entries, `&f` keeps pybind11's exception mapping (std::invalid_argument is ValueError) and
    torch's c10 errors (IndexError); torch::wrap_pybind_function's gives torch's (RuntimeError)."""
    m = jitlab.load(write("own.cpp", OWN))
    assert m.twice(torch.ones(2)).tolist() == [2.0, 2.0] and m.twice.__doc__.endswith("\n\nDouble it.\n")
    with pytest.raises(ValueError, match="n < 0"):
        m.strict(-1)
    with pytest.raises(IndexError, match="n >= 10"):
        m.strict(10)
    with pytest.raises(RuntimeError, match="n < 0"):
        m.wrapped(-1)
    assert [u["name"] for u in m.build.manifest.units] == ["own.cpp"] and not hasattr(m, "twice_impl")
