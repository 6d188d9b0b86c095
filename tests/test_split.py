"""The splitter: a torch-style .cu becomes a device unit (no torch) and a host unit (launches rewritten).

Text only: nothing here compiles (tests/test_objects.py compiles the units)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jitlab.jit import binding, builder, codegen, split
from jitlab.jit.flags import Options
from jitlab.jit.parse import parse_file

FEATURES = Path(__file__).parent / "fixtures" / "split" / "features.cu"
KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def _split(path: Path) -> split.Split:
    f = parse_file(path)
    return split.split(f, split.header_texts(f, [str(path.parent)]))


def _user_part(text: str, path: Path) -> list[str]:
    """The unit's lines after its ``#line 1 "<path>"`` directive: line i is the user's line i."""
    return text.split(f'#line 1 "{path.resolve()}"\n', 1)[1].splitlines()


@pytest.fixture(scope="module")
def features() -> split.Split:
    return _split(FEATURES)


def test_features_file_splits(features):
    """The file with every listed construct splits, with no reason to fall back."""
    assert features.reason is None
    assert set(features.kernels) == {"affine_kernel", "square_kernel", "reverse_kernel", "times_kernel"}
    assert features.templates == {"times_kernel"}


def test_device_unit_has_no_torch(features):
    """The device unit includes no torch header and keeps no host function."""
    text = re.sub(r"//[^\n]*", "", "\n".join(_user_part(features.device, FEATURES)))
    assert "torch/" not in text and "c10/" not in text
    assert "torch::Tensor" not in text and "AT_DISPATCH" not in text and "cudaMemcpyToSymbol" not in text
    assert "__global__ void __launch_bounds__(SCALE_BLOCK) affine_kernel" in text
    assert "struct Affine" in text and "#define SCALE_BLOCK 128" in text


def test_a_device_unit_keeps_the_standard_headers_torch_gave_it(features):
    """Blanking a torch include adds the standard headers it gave the kernels (FLT_MAX, INT_MAX, numeric_limits)
    before the #line directive; a file that includes no torch header gets none."""
    assert features.device.split("#line")[0] == split.DEVICE_PRELUDE + split.TORCH_DEVICE_PRELUDE
    plain = split.split(parse_file(FEATURES, "__global__ void k(float* x) { x[0] = 1; }\n"))
    assert plain.device.split("#line")[0] == split.DEVICE_PRELUDE


def test_using_a_torch_namespace_is_host_only(tmp_path):
    """``using namespace at;`` (or ``torch::indexing``) names what only the host unit has: the device unit
    drops it, lines kept; ``using namespace nvcuda;`` stays in both."""
    text = ("#include <torch/extension.h>\nusing namespace at;\nusing namespace torch::indexing;\n"
            "using namespace nvcuda;\n__global__ void k(float* x) { x[0] = 1; }\n"
            "Tensor f(Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); return x; }\n")
    (tmp_path / "u.cu").write_text(text)
    s = _split(tmp_path / "u.cu")
    device, host = _user_part(s.device, tmp_path / "u.cu"), _user_part(s.host, tmp_path / "u.cu")
    assert s.reason is None and [ln.strip() for ln in device[1:4]] == ["", "", "using namespace nvcuda;"]
    assert host[1:4] == text.splitlines()[1:4]


def test_every_line_keeps_its_number(features):
    """Both units are the user's file line for line: kept lines are unchanged at the same number."""
    source = FEATURES.read_text().splitlines()
    device, host = _user_part(features.device, FEATURES), _user_part(features.host, FEATURES)
    for unit in (device, host):  # trailing blank lines are dropped, never others
        assert not "".join(unit[len(source):]).strip()
        unit += [""] * (len(source) - len(unit))
    k = next(i for i, s in enumerate(source) if "y[i] = apply(t, x[i])" in s)
    assert device[k] == source[k] and host[k].strip() == ""
    h = next(i for i, s in enumerate(source) if "const float bias[4]" in s)
    assert host[h] == source[h] and device[h].strip() == ""


def test_launches_become_launcher_calls(features):
    """Every <<<...>>> launch is rewritten; grid, block, shared memory, stream and arguments stay as written."""
    host = "\n".join(_user_part(features.host, FEATURES))
    assert "<<<" not in host and features.launches == 5
    assert "::jitlab_rt::launch(affine_kernel, ceil_div(n, SCALE_BLOCK), SCALE_BLOCK, 0, stream_of(x))(" in host
    assert "::jitlab_rt::launch(reverse_kernel, 1, n, n * sizeof(float), stream_of(x))(" in host
    assert "::jitlab_rt::launch(times_kernel<float, 4>, ceil_div(n, 128), 128)(" in host
    assert "::jitlab_rt::launch(times_kernel<scalar_t, 3>, ceil_div(n, 128), 128, 0, stream_of(x))(" in host


def test_kernels_become_declarations_in_the_host_unit(features):
    """A kernel's body becomes `;` in the host unit, and `static` goes (it must link to the stub)."""
    host = "\n".join(_user_part(features.host, FEATURES))
    assert re.search(r"__global__ void square_kernel\(float\* y, int n\) ;", host)
    assert "static __global__" not in host
    assert "static __global__" not in "\n".join(_user_part(features.device, FEATURES))
    assert "atomicAdd" not in host and "__syncthreads" not in host


def test_device_variables_become_extern_in_the_host_unit(features):
    """`__constant__`/`__device__` variables are extern declarations in the host unit, without `static`."""
    host = _user_part(features.host, FEATURES)
    assert any(re.fullmatch(r"extern __constant__ float c_bias\[4\];\s*(//.*)?", line) for line in host)
    assert any(re.fullmatch(r"extern\s+__device__ int d_calls;", line) for line in host)


def test_host_device_functions_are_inline_in_the_host_unit(features):
    """A `__host__ __device__` function is in both units, marked inline in the host one (one definition wins)."""
    assert "__host__ __device__ inline int ceil_div" in features.device
    assert "__host__ __device__ inline int ceil_div" in features.host


def test_seed_files_split():
    """Seed 004 (an #include mid-file) and seed 003 (its own PYBIND11_MODULE) split."""
    for name in ("square_matrix.cu", "custom_operation.cu"):
        s = _split(KERNELS / name)
        assert s.reason is None, (name, s.reason)
        assert "PYBIND11_MODULE(" not in "\n".join(_user_part(s.device, KERNELS / name))


@pytest.mark.parametrize("snippet, reason", [
    ("#include <torch/extension.h>\n"
     "__global__ void k(torch::PackedTensorAccessor32<float, 1> x) {}\n"
     "void f(torch::Tensor x) {}\n", "kernel `k` uses torch (torch::)"),
    ("#include <torch/extension.h>\n#define LAUNCH(k) k<<<1, 1>>>()\n__global__ void g() {}\n"
     "void f(torch::Tensor x) { LAUNCH(g); }\n", "a kernel launch inside a macro"),
    ("#include <torch/extension.h>\nnamespace { __global__ void g() {} }\nvoid f(torch::Tensor x) {}\n",
     "device code in an anonymous namespace"),
    ("#include <torch/extension.h>\n#include <thrust/sort.h>\n"
     "void f(torch::Tensor x) { thrust::sort(x.data_ptr<float>(), x.data_ptr<float>() + 4); }\n",
     "host code calls thrust/cub"),
    ("#include <torch/extension.h>\n"
     "void f(torch::Tensor x) { auto l = [] __device__ (float v) { return v; }; }\n", "a __device__ lambda"),
])
def test_what_cannot_split_says_why(write, snippet, reason):
    """Code the split cannot keep right is refused with a one-line reason naming the line."""
    s = _split(write("bad.cu", snippet))
    assert s.reason is not None and reason in s.reason and "line " in s.reason


def test_header_with_device_code_stays_one_unit(write):
    """A local header that defines kernels cannot go into a host unit: the file stays one unit."""
    write("kern.cuh", "__global__ void k(float* y) { y[0] = 1; }\n")
    s = _split(write("use.cu", '#include <torch/extension.h>\n#include "kern.cuh"\n'
                               "void f(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); }\n"))
    assert s.reason and "kern.cuh holds device code" in s.reason


def test_fallback_is_in_the_plan_with_its_reason(write):
    """The plan builds an unsplittable file as one nvcc unit with torch, and notes why in one line."""
    path = write("acc.cu", "#include <torch/extension.h>\n"
                           "__global__ void k(torch::PackedTensorAccessor32<float, 1> x) {}\n"
                           "torch::Tensor f(torch::Tensor x) { return x; }\n")
    plan, _, _ = builder.prepare(path, Options(arch=["sm_90"], compile_only=True))
    assert [u.name for u in plan.units] == ["acc.cu"]
    assert plan.units[0].compiler == "nvcc" and plan.units[0].torch and plan.units[0].entries
    assert plan.notes == ["acc.cu built as one translation unit: line 2: kernel `k` uses torch (torch::), "
                          "so nvcc must see torch's headers"]


def test_plan_units_of_multi_file_seeds():
    """Seeds 000 and 001 (kernel .cu without torch, binding .cpp): one nvcc unit and one host unit each."""
    for folder, expect in (("two_norm", {"two_norm_kernel.cu": "nvcc", "two_norm_bind.cpp": "cxx"}),
                           ("add2_seed", {"add2.cu": "nvcc", "add2.cpp": "cxx"})):
        plan, _, _ = builder.prepare(KERNELS / folder, Options(arch=["sm_90"], compile_only=True))
        units = {u.name: u.compiler for u in plan.units}
        assert {k: v for k, v in units.items() if k in expect} == expect
        assert not any(u.torch for u in plan.units if u.compiler == "nvcc")


def test_a_torch_style_key_holds_its_units_and_no_load_inline_encoding():
    """A torch-style plan's key part is its units (what its objects compile), never a load_inline encoding;
    a kernel-only plan's is its two sources; a program's none (its engine keys its files)."""
    opts = Options(arch=["sm_90"], compile_only=True)
    _, _, parts = builder.prepare(KERNELS / "square_matrix.cu", opts)
    assert "units" in parts and not {"cpp", "cuda", "functions"} & set(parts)
    _, _, parts = builder.prepare(KERNELS / "saxpy.cu", opts)
    assert {"cpp", "cuda"} <= set(parts) and not {"units", "functions"} & set(parts)


def test_binding_unit_binds_what_load_inline_would():
    """Where entries cannot bind them, the binding unit defines every exported function as functions= would
    (with its parameters' names, so keywords work)."""
    plan, _, _ = builder.prepare(KERNELS / "square_matrix.cu", Options(arch=["sm_90"], compile_only=True))
    text = binding.binding_unit(plan.exported)
    for fn in plan.exported:
        def_ = f'm.def("{fn.name}", torch::wrap_pybind_function({fn.name}), "{fn.name}", pybind11::arg("matrix"));'
        assert def_ in text
    assert codegen.GENERATED in text
