"""PyTorch's own JIT-extension tests as jitlab's contract: each test checks, in our words and with our snippets,
one behaviour that PyTorch's test/test_cpp_extensions_jit.py checks of torch's load/load_inline on Linux, here
through jitlab.load(name=, sources=) and jitlab.load_inline. docs/torch-compat.md maps them one to one.

The torch-header builds are few: the tests that read one module share it (built once into the run's shared
cache by ``once``). CUDA behaviours run on a GPU (``gpu``); where nvcc alone shows one, a compile-only test
for sm_75 runs here too."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import jitlab
from conftest import run_file
from jitlab.jit import torch_compat

# One module, many behaviours: the functions= dict gives each its docstring (torch puts it on line 3 of __doc__).
# The kit's module is KIT_SOURCES: KIT, then WARN_THEN and STABLE (below), one build for the tests of all three.
KIT = r"""
#include <sstream>

torch::Tensor cubic(torch::Tensor x, torch::Tensor y) { return x * x * x - y; }

torch::Tensor empty_scalar() { return torch::empty({}); }

void backward_holding_gil(torch::Tensor loss) { loss.backward(); }

void backward_without_gil(torch::Tensor loss) {
    pybind11::gil_scoped_release released;
    loss.backward();
}

void compare_ints(int64_t a, int64_t b) {
    TORCH_CHECK_EQ(a, b) << "the two must match";
}
"""
KIT_DOCS = {"cubic": "x cubed, minus y", "empty_scalar": "an empty 0-d tensor of the default dtype",
            "backward_holding_gil": "backward() with the GIL held", "backward_without_gil": "backward() with it released",
"compare_ints": "TORCH_CHECK_EQ(a, b)", "warn_then": "TORCH_WARN, then fail as `how` says",
            "neg_by_shim": "aten::neg through the stable dispatcher shim", "stable_view": "a view by the stable from_blob"}

# One function that warns, then fails in the way its second argument names.
WARN_THEN = r"""
torch::Tensor warn_then(torch::Tensor x, int64_t how) {
    std::ostringstream text;
    text << "warned about " << x.scalar_type();
    TORCH_WARN(text.str());
    if (how == 1) throw torch::TypeError(text.str().c_str());
    if (how == 2) throw pybind11::key_error(text.str());
    return x.sin();
}
"""

# The net's module: a C++ frontend module, and a C++ autograd Function for the functorch test (one build for both).
NET = r"""
#include <torch/extension.h>

// A C++ frontend module bound with bind_module: a torch.nn.Module in Python.
struct Affine : torch::nn::Cloneable<Affine> {
    Affine(int64_t in, int64_t out) : in_(in), out_(out) { reset(); }
    void reset() override {
        lin = register_module("lin", torch::nn::Linear(in_, out_));
        register_buffer("scale", torch::full({out_}, 2.0));
    }
    torch::Tensor forward(torch::Tensor x) { return lin->forward(x); }
    void add_parameter(const std::string& name, torch::Tensor t) { register_parameter(name, t); }
    void add_buffer(const std::string& name, torch::Tensor t) { register_buffer(name, t); }
    void add_linear(const std::string& name) { register_module(name, torch::nn::Linear(lin->options)); }
    int64_t in_, out_;
    torch::nn::Linear lin{nullptr};
};

// A C++ autograd Function, declared by torch/torch.h (torch/extension.h includes it through torch/all.h).
struct Passthrough : torch::autograd::Function<Passthrough> {
    static torch::Tensor forward(torch::autograd::AutogradContext*, torch::Tensor x) { return x; }
    static torch::autograd::tensor_list backward(torch::autograd::AutogradContext*, torch::autograd::tensor_list g) {
        return g;
    }
};

torch::Tensor passthrough(torch::Tensor x) { return Passthrough::apply(x); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    torch::python::bind_module<Affine>(m, "Affine")
        .def(py::init<int64_t, int64_t>())
        .def("add_parameter", &Affine::add_parameter)
        .def("add_buffer", &Affine::add_buffer)
        .def("add_linear", &Affine::add_linear);
    m.def("passthrough", &passthrough);
}
"""

# The oplib's library is OPLIB and COMPOUND_OP: the library test reads echo, the gradcheck test mul_add.
OPLIB = r"""
#include <torch/script.h>

torch::Tensor echo(torch::Tensor x) { return x; }
static auto registered = torch::RegisterOperators("jitlab_contract_reg::echo", &echo);
"""

COMPOUND_OP = r"""
#include <torch/library.h>

torch::Tensor mul_add(torch::Tensor x, torch::Tensor y) { return x * y + y; }
TORCH_LIBRARY(jitlab_contract_lib, m) { m.def("mul_add", &mul_add); }
"""

STABLE = r"""
#include <torch/csrc/inductor/aoti_runtime/utils.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/inductor/aoti_torch/utils.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/stableivalue_conversions.h>

// aten::neg through the stable dispatcher shim, on a handle made from an at::Tensor.
at::Tensor neg_by_shim(at::Tensor x) {
    StableIValue stack[1];
    torch::aot_inductor::RAIIAtenTensorHandle in(torch::aot_inductor::new_tensor_handle(std::move(x)));
    stack[0] = torch::stable::detail::from(in.release());
    aoti_torch_call_dispatcher("aten::neg", "", stack);
    torch::aot_inductor::RAIIAtenTensorHandle out(torch::stable::detail::to<AtenTensorHandle>(stack[0]));
    return *reinterpret_cast<at::Tensor*>(out.release());
}

// A (2, 2) view of static data at offset 1 with strides (2, 1), made by the stable from_blob.
at::Tensor stable_view() {
    static float data[] = {0, 1, 2, 3, 4, 5};
    torch::stable::Tensor t = torch::stable::from_blob(data, {2, 2}, {2, 1},
        torch::stable::Device(torch::headeronly::DeviceType::CPU, 0), torch::headeronly::ScalarType::Float, 1);
    return *reinterpret_cast<at::Tensor*>(t.get());
}
"""
KIT_SOURCES = [KIT, WARN_THEN, STABLE]

SIGMOID_CU = r"""
#include <torch/extension.h>

__global__ void twice_sigmoid_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f / (1.0f + __expf(-x[i]));
}

void twice_sigmoid_cuda(const float* x, float* y, int n) {
    twice_sigmoid_kernel<<<(n + 127) / 128, 128>>>(x, y, n);
}
"""
SIGMOID_CPP = r"""
#include <torch/extension.h>

void twice_sigmoid_cuda(const float* x, float* y, int n);

torch::Tensor twice_sigmoid(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous(), "a contiguous CUDA tensor");
    auto y = torch::empty_like(x);
    twice_sigmoid_cuda(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice_sigmoid", &twice_sigmoid); }
"""

HALF_CU = r"""
// Comparing two halves on the device must not be ambiguous once torch's headers are in.
template <typename T>
__global__ void ordered_kernel(const T* in, float* out) {
    out[0] = (in[0] < in[1] || in[0] >= in[1]) ? 123.0f : 0.0f;
}

torch::Tensor ordered(torch::Tensor in) {
    auto out = torch::zeros({1}, in.options().dtype(torch::kFloat));
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(in.scalar_type(), "ordered", [&] {
        ordered_kernel<scalar_t><<<1, 1>>>(in.data_ptr<scalar_t>(), out.data_ptr<float>());
    });
    return out;
}
"""
HALF_DECL = "torch::Tensor ordered(torch::Tensor in);"

ADD_ONE_CU = r"""
__global__ void add_one_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] + 1.0f;
}

torch::Tensor add_one(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    add_one_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ADD_ONE_DECL = "torch::Tensor add_one(torch::Tensor x);"


@pytest.fixture(scope="module")
def once(shared_cache):
    """once(key, make) → make()'s module, built the first time into the run's shared cache."""
    made = {}

    def get(key, make):
        if key not in made:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("JITLAB_CACHE_DIR", str(shared_cache))
                made[key] = make()
        return made[key]

    return get


@pytest.fixture
def kit(once):
    """KIT_SOURCES as load_inline's contract_kit, with KIT_DOCS and torch's default with_pytorch_error_handling=True:
    the functions=, dtype, GIL and TORCH_CHECK tests read KIT, the warnings test WARN_THEN, the stable-ABI test
    STABLE."""
    return once("kit", lambda: jitlab.load_inline(name="contract_kit", cpp_sources=KIT_SOURCES, functions=KIT_DOCS))


@pytest.fixture(scope="module")
def affine_cpp(shared_cache) -> Path:
    """NET as affine.cpp, at one path for every worker (one build key): the net fixture loads it, and so does the
    functorch test's process."""
    return run_file(shared_cache / "contract_sources", "affine.cpp", NET)


@pytest.fixture
def net(once, affine_cpp):
    """The Affine class of NET's module, contract_affine: the frontend-module tests share it."""
    return once("net", lambda: jitlab.load(name="contract_affine", sources=str(affine_cpp))).Affine


@pytest.fixture
def oplib(once):
    """OPLIB and COMPOUND_OP as load_inline's contract_oplib, is_python_module=False: the library's path."""
    return once("oplib", lambda: jitlab.load_inline(name="contract_oplib", cpp_sources=[OPLIB, COMPOUND_OP],
                                                    functions="echo", is_python_module=False))


def line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


# ----------------------------------------------------------------------------------------------------------------
# load(name=, sources=)


@pytest.mark.slow
def test_load_links_several_sources_and_finds_headers_on_odd_include_paths(use_shared_cache, tmp_path, monkeypatch):
    """load() links two .cpp files into one module and finds a header through relative include paths with spaces and a quote."""
    monkeypatch.chdir(tmp_path)
    spaced, quoted = tmp_path / "inc dir / with spaces", tmp_path / "it's here"
    spaced.mkdir(parents=True)
    quoted.mkdir()
    (spaced / "offset.h").write_text("#define OFFSET 7\n")
    (quoted / "counter.h").write_text(
        "#include <torch/extension.h>\n"
        "struct Counter {\n"
        "  explicit Counter(int start) : n_(start) {}\n"
        "  int next() { return ++n_ + OFFSET; }\n"
        "  int n_;\n"
        "};\n")
    (tmp_path / "main.cpp").write_text(
        '#include <torch/extension.h>\n#include "offset.h"\n#include "counter.h"\n'
        "torch::Tensor halve(torch::Tensor x);\n"
        "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
        '  m.def("halve", &halve);\n'
        '  py::class_<Counter>(m, "Counter").def(py::init<int>()).def("next", &Counter::next);\n'
        "}\n")
    (tmp_path / "other.cpp").write_text("#include <torch/extension.h>\n"
                                        "torch::Tensor halve(torch::Tensor x) { return x / 2; }\n")
    m = jitlab.load(name="contract_two_files", sources=["main.cpp", "other.cpp"],
                    extra_include_paths=["inc dir / with spaces", "it's here"], verbose=False)
    assert m.halve(torch.full((3,), 5.0)).tolist() == [2.5, 2.5, 2.5]
    counter = m.Counter(1)
    assert (counter.next(), counter.next()) == (9, 10)


@pytest.mark.slow
def test_load_reads_a_source_that_is_not_utf8(use_shared_cache, tmp_path):
    """load() builds a source file saved in GBK, whose comment is not valid UTF-8."""
    src = tmp_path / "gbk.cpp"
    src.write_bytes(("#include <torch/extension.h>\n// 字符: a comment in GBK\n"
                     "int forty_two() { return 42; }\n"
                     'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("forty_two", &forty_two); }\n').encode("gbk"))
    with pytest.raises(UnicodeDecodeError):
        src.read_text(encoding="utf-8")
    assert jitlab.load(name="contract_gbk", sources=str(src)).forty_two() == 42


@pytest.mark.slow
def test_frontend_module_matches_a_python_linear(net):
    """A C++ frontend module bound with bind_module computes what torch.nn.Linear does, gradients included."""
    cpp = net(4, 3)
    cpp.to(torch.float64)
    py = torch.nn.Linear(4, 3).to(torch.float64)
    params = dict(cpp.named_parameters())
    with torch.no_grad():
        py.weight.copy_(params["lin.weight"])
        py.bias.copy_(params["lin.bias"])
    x = torch.randn(5, 4, dtype=torch.float64)
    torch.testing.assert_close(cpp.forward(x), py(x))
    cpp.forward(x).sum().backward()
    py(x).sum().backward()
    torch.testing.assert_close(params["lin.weight"].grad, py.weight.grad)
    torch.testing.assert_close(params["lin.bias"].grad, py.bias.grad)


@pytest.mark.slow
def test_frontend_module_works_inside_python_modules(net):
    """A C++ frontend module nests in torch.nn.Sequential: dtype moves, clone(), parameters, train/eval and backward."""
    inner = net(3, 2)
    seq = torch.nn.Sequential(inner, torch.nn.Tanh())
    assert str(inner) == "Affine" and isinstance(inner, torch.nn.Module)
    seq.to(torch.float64)
    assert inner.parameters()[0].dtype == torch.float64
    seq.to(torch.float32)
    assert len(list(seq.parameters())) == 2 and len(list(seq.buffers())) == 1
    twin = inner.clone()
    assert len(twin.parameters()) == len(inner.parameters())
    assert twin.parameters()[0].data_ptr() != inner.parameters()[0].data_ptr()
    inner.eval()
    assert not inner.training
    seq(torch.randn(4, 3)).sum().backward()
    assert all(p.grad is not None for p in inner.parameters())
    inner.zero_grad()
    assert all(p.grad is None for p in inner.parameters())


@pytest.mark.slow
def test_frontend_module_shows_what_cpp_registers_later(net):
    """Parameters, buffers and submodules registered from C++ after construction show in _parameters, _buffers, _modules."""
    m = net(2, 2)
    assert (len(m._parameters), len(m._buffers), len(m._modules)) == (0, 1, 1)
    m.add_parameter("extra", torch.ones(2))
    m.add_buffer("steps", torch.zeros(1))
    m.add_linear("lin2")
    assert (len(m._parameters), len(m._buffers), len(m._modules)) == (1, 2, 2)
    assert "extra" in dict(m.named_parameters()) and "steps" in dict(m.named_buffers())


# ----------------------------------------------------------------------------------------------------------------
# load_inline: functions=, sources, names


@pytest.mark.slow
def test_functions_dict_docstring_is_where_torch_puts_it(kit):
    """functions={name: docstring} binds each name, its docstring on __doc__'s third line as torch's binding puts it."""
    for name, doc in KIT_DOCS.items():
        assert getattr(kit, name).__doc__.split("\n")[2] == doc
    x, y = torch.randn(3), torch.randn(3)
    torch.testing.assert_close(kit.cubic(x, y), x ** 3 - y)


@pytest.mark.slow
def test_functions_as_one_name_string(use_shared_cache):
    """functions="name" (a string, not a list) binds that one function, with its name as the docstring."""
    m = jitlab.load_inline(name="contract_one_name", cpp_sources=KIT, functions="cubic", verbose=True)
    assert m.cubic.__doc__.split("\n")[2] == "cubic"
    assert m.cubic(torch.full((2,), 2.0), torch.ones(2)).tolist() == [7.0, 7.0]
    assert not hasattr(m, "empty_scalar")


@pytest.mark.slow
def test_sources_with_their_own_module_need_no_functions(use_shared_cache):
    """Several cpp_sources, the last with its own PYBIND11_MODULE, build without functions= and bind what it binds."""
    body = "torch::Tensor sin_plus(torch::Tensor x, torch::Tensor y) { return x.sin() + y; }"
    module = ("#include <torch/extension.h>\ntorch::Tensor sin_plus(torch::Tensor x, torch::Tensor y);\n"
              'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("sin_plus", &sin_plus, "sin(x) + y"); }')
    m = jitlab.load_inline(name="contract_own_module", cpp_sources=[body, module])
    x, y = torch.randn(4), torch.randn(4)
    torch.testing.assert_close(m.sin_plus(x, y), x.sin() + y)


def test_functions_of_a_wrong_type_is_a_value_error(cache):
    """functions= that is neither a name, a list nor a dict raises ValueError before anything is compiled."""
    with pytest.raises(ValueError):
        jitlab.load_inline(name="contract_bad_functions", cpp_sources="", functions=5)
    assert not any(cache.rglob("*.so"))


@pytest.mark.slow
def test_same_name_new_source_is_the_new_module(use_shared_cache):
    """Loading again under one name with another source gives the new function; going back gives the old one."""
    def build(value):
        return jitlab.load_inline(name="contract_reloaded", cpp_sources=f"int answer() {{ return {value}; }}",
                                  functions="answer")

    assert build(123).answer() == 123
    assert build(456).answer() == 456
    assert build(456).answer() == 456
    assert build(123).answer() == 123


@pytest.mark.slow
def test_flag_entries_are_read_like_a_shell(cache, tmp_path, monkeypatch):
    """Each flag entry is trimmed and split as a shell would ("-O0 -Wall" is two flags), empty entries and padded
    include paths included."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "scale.h").write_text("#define SHIFT 1\n")
    m = jitlab.load_inline(name="contract_lenient", cpp_sources='#include "scale.h"\n'
                           "torch::Tensor scaled(torch::Tensor x) { return x * FACTOR + SHIFT; }",
                           functions="scaled", extra_cflags=["-DFACTOR=3\n\n", "  -O0 -Wall ", ""], extra_ldflags=[""],
                           extra_include_paths=["     inc\n"])
    assert m.scaled(torch.ones(2)).tolist() == [4.0, 4.0]


def test_shell_words_in_flags_are_refused_and_never_run(cache, tmp_path):
    """A flag carrying a shell command (as in a PCH build's flags) is refused with the character named; the command
    never runs."""
    proof = tmp_path / "ran"
    with pytest.raises((RuntimeError, jitlab.JitlabError), match=";"):
        jitlab.load_inline(name="contract_injection", cpp_sources="void nothing() {}", functions=["nothing"],
                           extra_cflags=[f'; echo ran > "{proof}"'], use_pch=True, verbose=True)
    assert not proof.exists()


@pytest.mark.slow
def test_verbose_shows_the_compiler_commands(cache, capfd):
    """verbose=True shows the compiler commands a build runs."""
    jitlab.load_inline(name="contract_verbose", cpp_sources="int seven() { return 7; }", functions="seven",
                       extra_cflags=["-DMARKED_FOR_VERBOSE=1"], verbose=True)
    out, err = capfd.readouterr()
    assert re.search(r"\S*(g\+\+|c\+\+|clang\+\+)\S*\s.*-DMARKED_FOR_VERBOSE=1", out + err)


@pytest.mark.slow
def test_use_pch_builds_and_leaves_torchs_install_alone(use_shared_cache):
    """use_pch=True builds and runs; jitlab's precompiled headers live in its cache, never in torch's install."""
    torch_gch = Path(torch.__file__).parent / "include" / "torch" / "extension.h.gch"
    before = torch_gch.stat().st_mtime if torch_gch.exists() else None
    m = jitlab.load_inline(name="contract_pch", cpp_sources=KIT, functions="cubic", use_pch=True)
    assert m.cubic(torch.ones(1), torch.ones(1)).item() == 0.0
    assert (torch_gch.stat().st_mtime if torch_gch.exists() else None) == before


# ----------------------------------------------------------------------------------------------------------------
# Libraries (is_python_module=False) and operators


@pytest.mark.slow
def test_library_load_returns_its_path_and_registers_operators(oplib):
    """is_python_module=False returns the built library's path, and its static registrations are in torch.ops."""
    assert isinstance(oplib, str) and oplib.endswith(".so") and Path(oplib).is_file()
    x = torch.randn(3, 3)
    assert torch.equal(torch.ops.jitlab_contract_reg.echo(x), x)


@pytest.mark.slow
def test_compound_operator_differentiates_through_aten(oplib):
    """A TORCH_LIBRARY operator made of ATen calls (the oplib's COMPOUND_OP) gets ATen's gradients (gradcheck, fast
    and slow mode)."""
    a = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    for fast in (True, False):
        assert torch.autograd.gradcheck(torch.ops.jitlab_contract_lib.mul_add, (a, b), fast_mode=fast)


# ----------------------------------------------------------------------------------------------------------------
# What runs inside: dtypes, autograd, errors and warnings


@pytest.mark.slow
def test_default_dtype_reaches_aten(kit):
    """torch.set_default_dtype in Python changes what torch::empty in the extension makes."""
    start = torch.get_default_dtype()
    try:
        assert kit.empty_scalar().dtype == start
        for dtype in (torch.float64, torch.float16, torch.float32):
            torch.set_default_dtype(dtype)
            assert kit.empty_scalar().dtype == dtype
    finally:
        torch.set_default_dtype(start)


class _Copy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        return g


@pytest.mark.slow
def test_backward_from_cpp_needs_the_gil_released(kit):
    """backward() called from C++ through a Python autograd Function fails while the GIL is held and works once released."""
    with pytest.raises(RuntimeError, match="autograd engine was called while holding the GIL"):
        kit.backward_holding_gil(_Copy.apply(torch.rand(5, requires_grad=True)).sum())
    x = torch.rand(5, requires_grad=True)
    kit.backward_without_gil(_Copy.apply(x).sum())
    assert torch.equal(x.grad, torch.ones(5))


@pytest.mark.slow
def test_cpp_autograd_function_is_refused_by_functorch(use_shared_cache, affine_cpp):
    """A C++ torch::autograd::Function (NET's passthrough) under torch.func.vmap or grad raises functorch's error (in
    a process of its own: functorch's state left by other tests in a worker can change which error comes first)."""
    script = (f"import jitlab, torch\nnet = jitlab.load(name='contract_affine', sources={str(affine_cpp)!r})\n"
              "x = torch.randn(3, requires_grad=True)\n"
              "for transform in (torch.func.vmap, torch.func.grad):\n"
              "    try:\n        transform(lambda t: net.passthrough(t).sum())(x)\n        print('no error')\n"
              "    except RuntimeError as e:\n        print('RuntimeError:', str(e).splitlines()[0])\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900,
                         env={**os.environ, "JITLAB_CACHE_DIR": str(use_shared_cache)})
    errors = [ln for ln in out.stdout.splitlines() if ln.startswith(("RuntimeError:", "no error"))]
    assert len(errors) == 2, out.stdout + out.stderr
    for line in errors:
        assert re.search(r"^RuntimeError: .*cannot use C\+\+ torch::autograd::Function with functorch", line), line


@pytest.mark.slow
def test_check_failure_names_the_written_source_line(kit, shared_cache):
    """Under TORCH_SHOW_CPP_STACKTRACES=1 a failing TORCH_CHECK_EQ names its function and its line in the written
    source (torch's numbering: the implicit include, then the string), in a process of its own as the flag is read once."""
    script = (f"import jitlab\nm = jitlab.load_inline(name='contract_kit', cpp_sources={KIT_SOURCES!r}, "
              f"functions={KIT_DOCS!r})\n"
              "try:\n    m.compare_ints(1, 2)\nexcept RuntimeError as e:\n    print(e)\n")
    env = {**os.environ, "TORCH_SHOW_CPP_STACKTRACES": "1", "JITLAB_CACHE_DIR": str(shared_cache)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=900)
    text = out.stdout + out.stderr
    assert "Check failed: a == b" in text, text
    where = re.search(r"Exception raised from compare_ints at (\S+\.cpp):(\d+)", text)
    assert where, text
    path, line = Path(where.group(1)), int(where.group(2))
    assert "TORCH_CHECK_EQ(a, b)" in path.read_text().splitlines()[line - 1]
    assert line == line_of(KIT, "TORCH_CHECK_EQ(a, b)") + len(torch_compat.CPP_PRELUDE)


@pytest.mark.slow
def test_pytorch_error_handling_decides_whether_warnings_reach_python(use_shared_cache, kit):
    """with_pytorch_error_handling=True (the kit's: torch's default) turns TORCH_WARN into Python warnings (even when
    the call then fails); without it no warning arrives; C++ errors become TypeError/KeyError either way."""
    x = torch.rand(2, dtype=torch.float64)
    unhandled = jitlab.load_inline(name="contract_warn", cpp_sources=WARN_THEN, functions=["warn_then"],
                                   with_pytorch_error_handling=False)
    for handled, m in ((False, unhandled), (True, kit)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.testing.assert_close(m.warn_then(x, 0), x.sin())
            with pytest.raises(TypeError, match="warned about Double"):
                m.warn_then(x, 1)
            with pytest.raises(KeyError, match="warned about Double"):
                m.warn_then(x, 2)
        assert len([w for w in seen if "warned about Double" in str(w.message)]) == (3 if handled else 0), handled
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="warned about Double"):
            m.warn_then(x, 0)


@pytest.mark.slow
def test_compile_error_is_a_runtime_error_naming_the_first_error(cache):
    """A source that does not compile raises RuntimeError whose first line names the compiler's first error, the
    compiler's lines kept as lines."""
    with pytest.raises(RuntimeError) as info:
        jitlab.load_inline(name="contract_no_semicolon", cpp_sources="int main() { return 0 }")
    text = str(info.value)
    assert re.search(r"expected [‘']?;[’']? before", text.splitlines()[0]), text  # gcc quotes by locale
    assert "\\n" not in repr(text.splitlines()[0]) and len(text.splitlines()) > 1


@pytest.mark.slow
def test_stable_abi_headers_build_and_run(kit):
    """An inline source using torch's stable ABI (the dispatcher shim, stable from_blob: the kit's STABLE) builds and
    gives ATen's results."""
    m = kit
    x = torch.randn(2, 3)
    assert torch.equal(m.neg_by_shim(x), -x)
    assert m.stable_view().tolist() == [[1.0, 2.0], [3.0, 4.0]]


# ----------------------------------------------------------------------------------------------------------------
# CUDA: compile-only here, run on a GPU


@pytest.mark.slow
def test_cpp_and_cu_of_one_stem_compile_apart(cache, tmp_path):
    """A .cpp and a .cu with the same stem build as two units (each its own object), for sm_75 without a GPU."""
    (tmp_path / "twin.cpp").write_text(SIGMOID_CPP)
    (tmp_path / "twin.cu").write_text(SIGMOID_CU)
    b = jitlab.build([tmp_path / "twin.cpp", tmp_path / "twin.cu"], mode="torch", compile_only=True, arch="sm_75",
                     cuda_cflags=["-O2"])
    assert b.compile_only and "twice_sigmoid_kernel" in b.resources


@pytest.mark.gpu
def test_cpp_and_cu_of_one_stem_run(cache, tmp_path):
    """load() of a .cpp and a .cu sharing a stem, with extra_cuda_cflags and keep_intermediates=False, runs the kernel."""
    (tmp_path / "twin.cpp").write_text(SIGMOID_CPP)
    (tmp_path / "twin.cu").write_text(SIGMOID_CU)
    m = jitlab.load(name="contract_twin", sources=[str(tmp_path / "twin.cpp"), str(tmp_path / "twin.cu")],
                    extra_cuda_cflags=["-O2"], keep_intermediates=False)
    torch.testing.assert_close(m.twice_sigmoid(torch.zeros(1000, device="cuda")), torch.ones(1000, device="cuda"))


@pytest.mark.slow
@pytest.mark.parametrize("arch_list, archs", [("7.5+PTX", ["sm_75", "compute_75"]),
                                              ("Turing 8.0+PTX", ["sm_75", "compute_75", "sm_80", "compute_80"]),
                                              ("7.5;8.6", ["sm_75", "sm_86"])])
def test_torch_cuda_arch_list_chooses_the_archs(use_shared_cache, monkeypatch, arch_list, archs):
    """TORCH_CUDA_ARCH_LIST (versions or torch's names, Turing being 7.5+PTX; ';' or ' ' separated) chooses what nvcc builds."""
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", arch_list)
    b = torch_compat.build_inline("contract_archs", [ADD_ONE_DECL], [ADD_ONE_CU], ["add_one"], compile_only=True)
    assert b.archs == archs


@pytest.mark.gpu
def test_torch_cuda_arch_list_shapes_the_binary(cache, monkeypatch):
    """Under TORCH_CUDA_ARCH_LIST="7.5+PTX" the built library holds sm_75 code and compute_75 PTX, and runs on this GPU."""
    cuobjdump = shutil.which("cuobjdump")
    assert cuobjdump, "cuobjdump (CUDA toolkit) is needed to read the binary"
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "7.5+PTX")
    m = jitlab.load_inline(name="contract_ptx", cpp_sources=ADD_ONE_DECL, cuda_sources=ADD_ONE_CU, functions="add_one")
    x = torch.randn(100, device="cuda")
    torch.testing.assert_close(m.add_one(x), x + 1)
    binaries = [p for p in m.build.folder.rglob("*") if p.suffix in (".so", ".o", ".cubin", ".fatbin")]
    listing = " ".join(subprocess.run([cuobjdump, flag, str(p)], capture_output=True, text=True).stdout
                       for p in binaries for flag in ("--list-elf", "--list-ptx"))
    assert sorted(set(re.findall(r"sm_\d+", listing))) == ["sm_75"], listing


@pytest.mark.slow
def test_users_gencode_replaces_the_default_archs(use_shared_cache, monkeypatch):
    """An -gencode of the user's in extra_cuda_cflags is the only arch built: no default arch is added to it."""
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    b = torch_compat.build_inline("contract_archs", [ADD_ONE_DECL], [ADD_ONE_CU], ["add_one"], compile_only=True,
                                  extra_cuda_cflags=["-gencode=arch=compute_86,code=sm_86"])
    assert b.archs == ["sm_86"]


@pytest.mark.gpu
def test_non_arch_cuda_flags_keep_this_gpus_arch(cache, monkeypatch):
    """extra_cuda_cflags without an arch flag (-O2, --use_fast_math) still build for this GPU's arch (with no
    TORCH_CUDA_ARCH_LIST: the lent H100's image sets one, 9.0a, which chose sm_90a there, as it would in torch)."""
    from jitlab.jit import toolchain

    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    m = jitlab.load_inline(name="contract_fast_math", cpp_sources=ADD_ONE_DECL, cuda_sources=ADD_ONE_CU,
                           functions="add_one", extra_cuda_cflags=["-O2", "--use_fast_math"])
    assert m.build.archs == [toolchain.current_arch()]  # sm_90 on an H100
    assert m.add_one(torch.zeros(3, device="cuda")).tolist() == [1.0, 1.0, 1.0]


@pytest.mark.gpu
def test_cpp_only_source_links_cudnn(cache, tmp_path):
    """A .cpp-only load(with_cuda=True, extra_ldflags=["-lcudnn"]) sees CUDA's headers and links cuDNN."""
    src = tmp_path / "cudnn_version.cpp"
    src.write_text("#include <torch/extension.h>\n#include <cudnn.h>\n"
                   "int64_t linked_cudnn() { return cudnnGetVersion(); }\n"
                   'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("linked_cudnn", &linked_cudnn); }\n')
    m = jitlab.load(name="contract_cudnn", sources=[str(src)], extra_ldflags=["-lcudnn"], with_cuda=True)
    assert m.linked_cudnn() // 100 == torch.backends.cudnn.version() // 100


@pytest.mark.gpu
def test_cuda_sources_with_a_declaration_run(cache):
    """cuda_sources with the kernel and cpp_sources with only its declaration bind the function, named in __doc__."""
    m = jitlab.load_inline(name="contract_cuda_inline", cpp_sources=ADD_ONE_DECL, cuda_sources=ADD_ONE_CU,
                           functions=["add_one"], verbose=True)
    assert m.add_one.__doc__.split("\n")[2] == "add_one"
    x = torch.randn(4, 4, device="cuda")
    torch.testing.assert_close(m.add_one(x), x + 1)


@pytest.mark.gpu
def test_cuda_operator_library_runs_through_torch_ops(cache):
    """A TORCH_LIBRARY operator declared in cpp_sources and defined in cuda_sources runs through torch.ops."""
    cpp = "torch::Tensor add_one(torch::Tensor x);\nTORCH_LIBRARY(jitlab_contract_cuda, m) { m.def(\"add_one\", add_one); }"
    jitlab.load_inline(name="contract_cuda_ops", cpp_sources=cpp, cuda_sources=ADD_ONE_CU, is_python_module=False)
    x = torch.randn(64, device="cuda")
    torch.testing.assert_close(torch.ops.jitlab_contract_cuda.add_one(x), x + 1)


@pytest.mark.slow
def test_half_comparison_in_a_kernel_compiles(cache):
    """A templated kernel comparing halves, dispatched with AT_DISPATCH_FLOATING_TYPES_AND_HALF, compiles for sm_75."""
    b = torch_compat.build_inline("contract_half", [HALF_DECL], [HALF_CU], ["ordered"], compile_only=True,
                                  arch=["sm_75"])
    assert b.compile_only and any("ordered_kernel" in k for k in b.resources)


@pytest.mark.gpu
def test_half_comparison_in_a_kernel_runs(cache):
    """The half-comparing kernel runs on half input and writes its marker."""
    m = jitlab.load_inline(name="contract_half_run", cpp_sources=HALF_DECL, cuda_sources=HALF_CU, functions=["ordered"])
    assert m.ordered(torch.randn(3, device="cuda", dtype=torch.half)).item() == 123.0


@pytest.mark.gpu
def test_frontend_module_moves_to_the_gpu(net):
    """A C++ frontend module moves to CUDA and back with its parameters' values, new ones included."""
    m = net(5, 2)
    before = [p.clone() for p in m.parameters()]
    m.to(torch.device("cuda", 0))
    assert all(p.device == torch.device("cuda", 0) for p in m.parameters())
    for old, new in zip(before, m.parameters()):
        torch.testing.assert_close(new.cpu(), old)
    m.cpu()
    m.add_parameter("late", torch.eye(2))
    m.cuda()
    assert all(p.is_cuda for p in m.parameters())


@pytest.mark.gpu
def test_cpp_source_including_cuda_allocator_header_builds(cache, tmp_path):
    """A .cpp including torch's CUDAPluggableAllocator.h builds under load(with_cuda=True) (apex's allocator extension)."""
    src = tmp_path / "allocator.cpp"
    src.write_text("#include <torch/csrc/cuda/CUDAPluggableAllocator.h>\n#include <torch/extension.h>\n"
                   "int zero() { return 0; }\n"
                   'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("zero", &zero); }\n')
    assert jitlab.load(name="contract_allocator", sources=str(src), with_cuda=True).zero() == 0


@pytest.mark.gpu
def test_a_library_handed_over_holds_its_kernels(cache, monkeypatch, tmp_path):
    """build_directory's <name>.so and is_python_module=False's path are libraries with the kernels' SASS
    inside (as torch's), not a host module whose kernels jitlab loads from a CUBIN."""
    cuobjdump = shutil.which("cuobjdump")
    assert cuobjdump, "cuobjdump (CUDA toolkit) is needed to read the binary"
    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    m = jitlab.load_inline(name="contract_handed", cpp_sources=ADD_ONE_DECL, cuda_sources=ADD_ONE_CU,
                           functions="add_one", build_directory=str(tmp_path))
    x = torch.randn(100, device="cuda")
    torch.testing.assert_close(m.add_one(x), x + 1)
    path = jitlab.load_inline(name="contract_handed_lib", cpp_sources=ADD_ONE_DECL, cuda_sources=ADD_ONE_CU,
                              functions="add_one", is_python_module=False)
    for library in (tmp_path / "contract_handed.so", Path(path)):
        assert library.suffix == ".so", library
        listing = subprocess.run([cuobjdump, "--list-elf", str(library)], capture_output=True, text=True).stdout
        assert arch in listing, f"{library}: {listing}"
