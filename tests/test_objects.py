"""Split torch-style builds, compile-only with the real nvcc and host compiler: each edit recompiles
only its unit, template kernels are instantiated, host units resolve against device units, and errors
from either unit point at the user's file and line. (A minute once per session for the precompiled
torch header, then seconds per test.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

import jitlab
from conftest import run_dir, worker_dir
from jitlab import CompileError
from jitlab.jit import header_sets, plan
from jitlab.jit.engines import pch
from jitlab.jit.flags import Options, object_flags

FEATURES = Path(__file__).parent / "fixtures" / "split" / "features.cu"
ARCH = "sm_75"

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                 reason="needs nvcc")]


@pytest.fixture
def features(tmp_path_factory, use_shared_cache) -> Path:
    """features.cu as shipped, for a test to edit: one path per worker in the run's folder, built in the session's
    shared cache, so the build before a test's edit is the one the worker's previous test made (a copy at a new
    path would compile its host and device units again: their #line directives name the file)."""
    dst = worker_dir(tmp_path_factory, "features_edits") / "features.cu"
    shutil.copy(FEATURES, dst)
    return dst


@pytest.fixture(scope="module")
def pristine_cu(tmp_path_factory) -> Path:
    """features.cu as shipped, at one path for all workers: ``pristine`` builds it, and the binding test builds it
    as its first folder (one build for the run: the first builds, the others wait on its lock and find it in the
    shared cache)."""
    path = run_dir(tmp_path_factory, "features_pristine") / "features.cu"
    if not path.is_file():
        tmp = path.with_name(f".features.{os.getpid()}.cu")
        shutil.copy(FEATURES, tmp)
        os.replace(tmp, path)  # whole or absent, never half-written, for a worker that reads it meanwhile
    return path


@pytest.fixture(scope="module")
def pristine(pristine_cu, shared_cache) -> jitlab.Build:
    """features.cu as shipped, built once for the tests that only read a build."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITLAB_CACHE_DIR", str(shared_cache))
        return _build(pristine_cu)


def _build(path: Path) -> jitlab.Build:
    return jitlab.build(path, compile_only=True, arch=ARCH)


def _compiled(b: jitlab.Build) -> set[str]:
    """The units this build ran a compiler for (the rest came from the object cache)."""
    return {u["name"] for u in b.manifest.units if not u["cached"]}


def _break(path: Path, marker: str, old: str, new: str) -> int:
    """Replace ``old`` by ``new`` on the first line holding ``marker``; returns that line's 0-based index."""
    lines = path.read_text().splitlines()
    k = next(i for i, s in enumerate(lines) if marker in s)
    lines[k] = lines[k].replace(old, new)
    path.write_text("\n".join(lines) + "\n")
    return k


def _nm(path: Path, *flags: str) -> str:
    return subprocess.run(["nm", "-C", *flags, str(path)], capture_output=True, text=True, check=True).stdout


def test_compile_only_builds_the_split_units(pristine):
    """Compile-only goes through the split: a device unit for nvcc, a host unit (ending with the functions'
    C-ABI entries) for c++."""
    b = pristine
    assert [(u["name"], u["compiler"]) for u in b.manifest.units] == [
        ("features.device.cu", "nvcc"), ("features.host.cpp", "cxx")]
    assert b.manifest.notes == []
    assert {"affine_kernel", "square_kernel", "reverse_kernel"} <= set(b.resources)


def test_nvcc_never_sees_torch(pristine):
    """The device unit's nvcc command names no torch include folder."""
    b = pristine
    nvcc_lines = [line for line in b.log.splitlines() if "nvcc" in line.split(" ")[0]]
    assert nvcc_lines and not any("torch/include" in line for line in nvcc_lines)


def test_host_units_resolve_against_device_units(pristine):
    """Kernels, template instantiations and device variables the host unit names are all defined."""
    b = pristine
    undefined = _nm(b.artifact, "-u")
    for name in ("affine_kernel", "square_kernel", "reverse_kernel", "times_kernel", "c_bias", "d_calls"):
        assert name not in undefined, name
    defined = _nm(b.artifact, "--defined-only")
    for inst in ("times_kernel<float, 4>(float const*, float*, int)",
                 "times_kernel<float, 3>(float const*, float*, int)",  # AT_DISPATCH_FLOATING_TYPES
                 "times_kernel<double, 3>(double const*, double*, int)"):
        assert re.search(rf" T void {re.escape(inst)}", defined), inst


def test_kernel_edit_recompiles_only_the_device_unit(features):
    """A kernel-body edit runs nvcc once and no host compiler; reverting compiles nothing."""
    original = features.read_text()
    _build(features)
    features.write_text(original.replace("y[i] = y[i] * y[i];", "y[i] = y[i] * y[i] + 0.0f;"))
    assert _compiled(_build(features)) == {"features.device.cu"}
    features.write_text(original)
    assert _build(features).cached


def test_host_edit_recompiles_only_the_host_unit(features):
    """A host-function edit runs the host compiler once, on the host unit; nvcc does not run."""
    _build(features)
    features.write_text(features.read_text().replace('"x must be a float32 CUDA tensor"', '"x: float32, CUDA"'))
    assert _compiled(_build(features)) == {"features.host.cpp"}


def test_new_function_recompiles_host_and_binding(features):
    """A new host function at the end adds its entry to the host unit: the host unit recompiles, the device
    unit not."""
    _build(features)
    features.write_text(features.read_text() + "\ntorch::Tensor twice(torch::Tensor x) { return x * 2; }\n")
    b = _build(features)
    assert _compiled(b) == {"features.host.cpp"} and "twice" in {fn.name for fn in b.plan.exported}


def test_device_error_points_at_the_users_line(features):
    """A kernel error is reported at the user's file and line, from nvcc."""
    k = _break(features, "y[i] = y[i] * y[i];", "y[i] * y[i]", "y[i] * undefined_thing")
    with pytest.raises(CompileError) as e:
        _build(features)
    d = e.value.diagnostics[0]
    assert (Path(d.path).name, d.line) == ("features.cu", k + 1) and "undefined_thing" in d.message
    assert "device.cu, nvcc" in e.value.summary


def test_host_error_points_at_the_users_line(features):
    """A host-function error is reported at the user's file and line, from the host compiler. The
    undeclared name is none of torch's, so it is reported from the small set at once: no torch/extension.h
    retry (that would make the full set, a minute on 2 cores, to print the same error)."""
    k = _break(features, "auto y = torch::empty_like(x);", "torch::empty_like(x)", "torch::empty_like(missing_tensor)")
    with pytest.raises(CompileError) as e:
        _build(features)
    d = e.value.diagnostics[0]
    assert (Path(d.path).name, d.line) == ("features.cu", k + 1) and "missing_tensor" in d.message
    assert "host.cpp, c++" in e.value.summary
    assert "torch-host-" in e.value.log and "torch-full-" not in e.value.log


def test_precompiled_header_is_made_once(pristine, features, shared_pch):
    """Every host unit of the session uses one precompiled header per set (valid: GCC would warn otherwise):
    after the pristine build made the sets, another folder's build compiles its host unit on them."""
    sets = lambda: set(Path(shared_pch).glob("torch-host-*/jitlab_torch.h.gch")) | set(
        Path(shared_pch).glob("torch-casters-*/jitlab_torch.h.gch"))  # `full` is another test's to make
    before = sets()
    features.write_text(features.read_text().replace('"launch failed"', '"a launch failed"'))
    b = _build(features)
    assert "features.host.cpp" in _compiled(b)
    assert sets() == before and before
    assert "-include" in b.log and "not used because" not in b.log


def test_units_use_the_smallest_header_set(pristine):
    """Host functions compile on torch/types.h (the casters set is for a binding unit): the umbrella include
    is blanked, so no unit parses torch/extension.h."""
    b = pristine
    assert {u["name"]: u["headers"] for u in b.manifest.units} == {"features.device.cu": "", "features.host.cpp": "host"}
    assert header_sets.pch_text("host", cuda=True, cuda_torch=False) == "#include <torch/types.h>\n#include <math.h>\n"
    assert header_sets.after_set("host", cuda=True, cuda_torch=False) == ("cuda_runtime.h",)  # the runtime follows
    assert "#include <ATen/cuda/CUDAContext.h>" in header_sets.pch_text("host", cuda=True, cuda_torch=True)
    assert "torch/csrc/utils/pybind.h" in header_sets.pch_text("bind", cuda=True, cuda_torch=True)
    casters = header_sets.pch_text("casters", cuda=True, cuda_torch=True)
    assert "torch/csrc/utils/pybind.h" in casters and "torch/types.h" not in casters
    assert header_sets.pch_text("full", cuda=False, cuda_torch=False) == "#include <torch/extension.h>\n"
    host = next(Path(line.split(" -c ")[1].split()[0]) for line in b.log.splitlines() if "features.host.cpp -o" in line)
    assert "#include <torch/extension.h>" in FEATURES.read_text() and "torch/extension.h" not in host.read_text()
    runtime = " -include cuda_runtime.h" if torch.version.cuda is None else ""
    assert re.search(r"-include \S*torch-host-\w+/jitlab_torch.h -Winvalid-pch" + runtime, b.log) or \
        re.search(r"-include-pch \S*clang-torch-host-\w+/jitlab_torch.h.pch" + runtime, b.log)  # GCC's set or clang's


TWICE = """#include <torch/extension.h>
__global__ void twice_kernel(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2 * x[i];
}
inline torch::Tensor like(const torch::Tensor& x) { return torch::empty_like(x); }
torch::Tensor twice(torch::Tensor x) {
    auto y = like(x);
    twice_kernel<<<(x.numel() + 255) / 256, 256>>>(y.data_ptr<float>(), x.data_ptr<float>(), x.numel());
    return y;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("twice", &twice); m.attr("kind") = "twice"; }  // not plain m.defs: a module unit
"""


def test_a_module_unit_naming_aten_functions_builds_on_bind(tmp_path, use_shared_cache):
    """A module unit keeps the file's inline functions. One calling torch::empty_like (an ATen function,
    which the casters set lacks) starts on `bind`; one calling it unqualified, after `using namespace
    at`, is compiled on the casters, then again on `bind`, never on torch/extension.h, and its next
    build starts on `bind`."""
    hints = use_shared_cache / "objects" / "hints"
    src = tmp_path / "twice.cu"
    src.write_text(TWICE)
    units = {u["name"]: u for u in _build(src).manifest.units}
    assert (units["twice.module.cpp"]["headers"], units["twice.host.cpp"]["headers"]) == ("bind", "host")
    assert not (hints / "twice.twice.module.cpp.headers").exists()
    hidden = TWICE.replace("return torch::empty_like(x);", "using namespace at; return empty_like(x);")
    src = tmp_path / "hidden.cu"
    src.write_text(hidden.replace("twice", "hidden"))
    b = _build(src)
    assert {u["name"]: u["headers"] for u in b.manifest.units}["hidden.module.cpp"] == "bind"
    hint = hints / "hidden.hidden.module.cpp.headers"
    assert hint.read_text() == "failed on the casters headers, built on bind\n" and "torch-full-" not in b.log
    src.write_text(hidden.replace("twice", "hidden").replace("int n)", "int count)").replace("i < n", "i < count"))
    b = _build(src)
    assert "hidden.module.cpp" in _compiled(b) and "torch-casters-" not in b.log  # straight to bind


def test_names_outside_the_small_set_build_on_full(tmp_path, use_shared_cache):
    """Host code using torch::nn (not in torch/types.h) compiles on torch/extension.h, says so, and
    its next edit goes straight there (one compile of the host unit, not two)."""
    src = tmp_path / "nn_user.cu"
    body = FEATURES.read_text().replace("return y;", "return torch::nn::functional::relu(y);", 1)
    assert body != FEATURES.read_text()
    src.write_text(body)
    b = _build(src)
    host = next(u for u in b.manifest.units if u["name"] == "nn_user.host.cpp")
    assert host["headers"] == "full" and not host["cached"]
    assert any("nn_user.host.cpp compiled with all of torch/extension.h" in n for n in b.manifest.notes)
    src.write_text(body.replace('"launch failed"', '"a launch failed"'))
    b = _build(src)
    assert _compiled(b) == {"nn_user.host.cpp"}
    assert [u["headers"] for u in b.manifest.units if u["name"] == "nn_user.host.cpp"] == ["full"]
    host_log = next(o for o in b.log.split("\n/") if "nn_user.host.cpp -o" in o)
    assert "torch-full-" in host_log and "torch-host-" not in b.log


# GCC 12's and clang's wordings, as they print them (GCC quotes ‘…’ in a UTF-8 locale).
MISSING = [
    ("‘missing_tensor’ was not declared in this scope", ("", "missing_tensor", False), False),
    ("‘n’ was not declared in this scope", ("", "n", False), False),
    ("‘class at::Tensor’ has no member named ‘numell’; did you mean ‘numel’?", ("at::Tensor", "numell", False), False),
    ("‘empy_like’ is not a member of ‘torch’; did you mean ‘empty_like’?", ("torch", "empy_like", False), False),
    ("variable ‘std::ifstream f’ has initializer but incomplete type", ("std", "ifstream", False), True),
    ("‘tourch’ has not been declared", ("", "tourch", True), False),
    ("‘torch::nn’ has not been declared", ("torch", "nn", True), True),
    ("‘nn’ has not been declared", ("", "nn", True), True),
    ("‘load’ is not a member of ‘torch::jit’", ("torch::jit", "load", False), True),
    ("‘py’ has not been declared", ("", "py", True), True),
    ("‘THPVariable_Wrap’ was not declared in this scope", ("", "THPVariable_Wrap", False), True),
    ("no member named 'nn' in namespace 'torch'", ("torch", "nn", False), True),
    ("use of undeclared identifier 'missing_tensor'", ("", "missing_tensor", False), False),
]


@pytest.mark.parametrize("message, missing, retried", MISSING, ids=[f"{m[1][1]}-{'retried' if m[2] else 'reported'}" for m in MISSING])
def test_only_names_torch_declares_are_retried_on_full(message, missing, retried, pristine):
    """A name the full set declares and the small one lacks (or one inside torch's namespaces) is worth
    a compile on torch/extension.h; a name torch does not declare at all is the user's typo. The name
    sets are the real ones, read from the preprocessed headers (once per run)."""
    log = f"/tmp/k/features.cu:12:5: error: {message}\n   12 |   auto y = ...;\n      |            ^~~~\n"
    assert pch.missing_names(log) == [missing]
    flags = object_flags(pristine.plan, [ARCH], Options(compile_only=True))
    assert (pch.larger_set(log, flags, cuda=True, small="host") == "full") is retried


def test_missing_names_read_only_errors():
    """Notes and warnings name nothing missing; an error whose missing name has no quotes is tried on full."""
    assert pch.missing_names("a.cpp:3:1: note: ‘foo’ was not declared in this scope\n") == []
    assert pch.missing_names("a.cpp:3:1: error: cannot convert ‘int’ to ‘at::Tensor’\n") == []
    assert pch.missing_names("a.cpp:3:1: error: name was not declared here\n") is None
    # a template the set lacks: GCC quotes the token after it, not its name
    assert pch.missing_names("a.cpp:3:40: error: expected template-name before ‘<’ token\n") is None


def test_errors_on_the_small_set_are_not_retried(features, shared_pch):
    """A host error no header could fix (a type error) is reported from the small set at once."""
    k = _break(features, "const int n = x.numel();", "x.numel()", "x")
    with pytest.raises(CompileError) as e:
        _build(features)
    d = e.value.diagnostics[0]
    assert (Path(d.path).name, d.line) == ("features.cu", k + 1) and "cannot convert" in d.message
    assert "torch-host-" in e.value.log and "torch-full-" not in e.value.log


def test_the_longest_unit_starts_first(monkeypatch):
    """On 2 cores (2 workers) the binding unit, the costliest, starts before the host and device units,
    so that a short unit never delays it (a cold vector_add on 2 cores: 4.2 s -> 3.6 s)."""
    from jitlab.jit.engines import objects

    started: list[str] = []

    def fake(unit, *args, **kwargs):
        started.append(unit.name)
        return plan.Object(unit=unit, path=Path(unit.name), cached=False, seconds=0.0, log="")

    monkeypatch.setattr(objects, "_compile", fake)
    monkeypatch.setattr(objects, "_compile_host", fake)
    monkeypatch.setattr(objects.os, "cpu_count", lambda: 2)
    units = [plan.Unit("v.device.cu", "nvcc", ""), plan.Unit("v.host.cpp", "cxx", "", torch=True, headers="host"),
             plan.Unit("plain.cpp", "cxx", ""), plan.Unit("bind.cpp", "cxx", "", torch=True, headers="bind")]
    objs = objects.compile_all(units, None, "v", {})
    assert set(started[:2]) == {"bind.cpp", "v.host.cpp"}  # two workers: the two costliest first
    assert [o.unit.name for o in objs] == [u.name for u in units]  # results in the units' order
