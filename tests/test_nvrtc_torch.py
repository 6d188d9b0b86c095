"""The torch-style NVRTC engine on a CPU: the slot unit swapping a kernel's address for its handle (a C++
stand-in with a fake CUDA runtime), NVRTC compile-only of every torch-style snippet, the nvcc fallback's
one-line reason, a kernel-body edit that reuses the host objects and the module, and an operator snippet
whose edit keeps its library registered."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import torch

import jitlab
import jitlab.config
from jitlab.errors import JitlabError, SnippetError
from jitlab.jit import builder, oplib, slotted, toolchain
from jitlab.jit.engines import nvrtc_torch, objects, slots
from jitlab.jit.flags import Options
from jitlab.jit.symbols import undefined_symbols

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = Path(__file__).parent / "fixtures" / "slots"
FEATURES = Path(__file__).parent / "fixtures" / "split" / "features.cu"
TORCH_STYLE = ["kernels/square_matrix.cu", "kernels/custom_operation.cu", "kernels/exercises/vadd_checks.cu",
               "kernels/exercises/solutions/vadd_checks.cu", "kernels/vector_add", "tests/fixtures/split/features.cu",
               "tests/fixtures/split/extern_c.cu", "tests/fixtures/split/torch_gives.cu"]
ARCH = "sm_90"


def _gxx(*args) -> None:
    subprocess.run([toolchain.cxx_path() or "g++", "-std=c++17", "-fPIC",
                    f"-isystem{toolchain.cuda_home() / 'include'}", *map(str, args)], check=True)


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """A module of a split-like host object and its generated slot unit, linked with --wrap against a fake
    libcudart that records what each call got; returns (module, fake runtime, slots)."""
    d = tmp_path_factory.mktemp("slots")
    _gxx("-shared", STAND_IN / "fake_cudart.cpp", "-o", d / "libfakecudart.so")
    _gxx("-c", STAND_IN / "host.cpp", "-o", d / "host.o")
    found, wrapped = slots.find(undefined_symbols(d / "host.o"), {"square_kernel", "times_kernel"}, {"c_bias"})
    (d / "slots.cpp").write_text(slots.unit_text(found, wrapped))
    _gxx("-c", d / "slots.cpp", "-o", d / "slots.o")
    _gxx("-shared", d / "host.o", d / "slots.o", "-o", d / "module.so", *slots.link_flags(wrapped),
         f"-L{d}", "-lfakecudart", f"-Wl,-rpath,{d}")
    fake = ctypes.CDLL(str(d / "libfakecudart.so"))
    for f in ("fake_last_kernel", "fake_last_copy_dst", "fake_last_symbol", "fake_global"):
        getattr(fake, f).restype = ctypes.c_void_p
    return d / "module.so", fake, found


def _launch(module: Path, which: str) -> tuple[int, str]:
    lib = ctypes.CDLL(str(module))
    message = ctypes.create_string_buffer(512)
    rc = getattr(lib, f"launch_{which}")(message, ctypes.c_size_t(512))
    return rc, message.value.decode()


def test_slots_are_the_kernels_variables_and_calls_the_host_names(stand_in):
    """The host object's undefined kernel, instantiation and __constant__ symbols become slots (name
    expressions as NVRTC takes them), and the runtime calls on their addresses are wrapped."""
    _, _, found = stand_in
    assert {(s.expression, s.kernel) for s in found} == {
        ("square_kernel", True), ("times_kernel<float, 4>", True), ("&c_bias", False)}
    assert slots.find(["cudaLaunchKernel", "cudaMemcpyToSymbol", "memcpy"], set(), set())[1] == [
        "cudaLaunchKernel", "cudaMemcpyToSymbol"]


def test_an_empty_slot_is_an_error_naming_the_kernel(stand_in):
    """A launch before any CUBIN filled the slots throws (pybind11: RuntimeError) naming the kernel."""
    module, fake, _ = stand_in
    with slotted._lock:
        slotted._filled.pop(str(module), None)
    ctypes.CDLL(str(module)).jitlab_slots_set(0, None, ctypes.c_size_t(0))
    rc, message = _launch(module, "times")
    assert rc == -1 and "times_kernel<float, 4>" in message and "jitlab.load" in message


def test_filled_slots_send_each_launch_to_its_kernel(stand_in):
    """After slotted.fill (cudaLibraryLoadData + cudaLibraryGetKernel per lowered name), each launch reaches
    the runtime with its own kernel's handle, and cudaMemcpyToSymbol goes to the variable's device pointer."""
    module, fake, found = stand_in
    slotted.fill(module, b"fake cubin\0", {s.expression: s.symbol for s in found})
    assert _launch(module, "square") == (0, "")
    assert ctypes.string_at(fake.fake_last_kernel()).decode() == "_Z13square_kernelPfi"
    assert _launch(module, "times") == (0, "")
    assert ctypes.string_at(fake.fake_last_kernel()).decode() == "_Z12times_kernelIfLi4EEvPKT_PS0_i"
    assert ctypes.CDLL(str(module)).copy_bias() == 0
    assert fake.fake_last_copy_dst() == fake.fake_global(len("c_bias") % 4)
    assert fake.fake_last_symbol() is None  # the runtime's own symbol lookup never saw the stand-in


def test_a_cubin_the_runtime_refuses_is_an_error_with_its_reason(stand_in):
    """A CUBIN the runtime cannot load leaves the slots as they were and raises with the runtime's reason."""
    module, fake, found = stand_in
    with pytest.raises(JitlabError, match="cudaLibraryLoadData: fake error"):
        slotted.fill(module, b"not a cubin\0", {s.expression: s.symbol for s in found})


def test_half_instantiations_are_name_expressions_other_torch_types_are_refused():
    """c10::Half is declared for NVRTC (jitlab_c10.h); c10::complex is a reason to build with nvcc."""
    half = slots.Slot("_Z1kIN3c104HalfEEvPT_", "k<c10::Half>", "k<c10::Half>", True)
    assert slots.unsupported_types([half]) is None
    assert "#include <jitlab_c10.h>" in nvrtc_torch.device_source("", [half.expression])
    cplx = slots.Slot("x", "k<c10::complex<float> >", "k<c10::complex<float> >", True)
    assert "c10::complex" in slots.unsupported_types([cplx])


def test_host_headers_are_blanked_for_nvrtc_lines_kept():
    """<vector>/<unistd.h> (host code's, left in the device unit) are blanked for NVRTC; device headers stay."""
    text = "#include <vector>\n#include <cuda_fp16.h>\n#include <unistd.h>\n__global__ void k() {}\n"
    out = nvrtc_torch.device_source(text, ["k"])
    body = out.split("#include <cstddef>\n", 1)[1]
    assert body.count("\n") == text.count("\n") and "<vector>" not in body and "<cuda_fp16.h>" in body


def test_nvcc_flags_map_to_nvrtc_options_or_refuse():
    """Defines, fast math and ptxas flags carry over; -G and -rdc are nvcc's."""
    options, refused = nvrtc_torch.nvrtc_flags(["-DA=1", "-UB", "--use_fast_math", "-Xptxas=-O3", "-std=c++20",
                                                "--compiler-options", "-fPIC", "-G", "-rdc=true"])
    assert options["define_macro"] == [("A", "1")] and options["undefine_macro"] == ["B"]
    assert options["use_fast_math"] and "-O3" in options["ptxas_options"] and options["std"] == "c++20"
    assert refused == ["-G", "-rdc=true"]


DYNAMIC = """#include <torch/extension.h>
__global__ void child(float* y) { y[threadIdx.x] = 1.f; }
__global__ void parent(float* y) { child<<<1, 32>>>(y); }
torch::Tensor go(torch::Tensor y) { parent<<<1, 1>>>(y.data_ptr<float>()); return y; }
"""


# An operator snippet in one file: a CUDA and a CPU kernel of one op.
OP = """#include <torch/extension.h>

__global__ void axpb_kernel(const float* x, float a, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + 1.0f;
}

torch::Tensor axpb_cuda(const torch::Tensor& x, double a) {
  auto y = torch::empty_like(x);
  int n = x.numel();
  axpb_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), a, y.data_ptr<float>(), n);
  return y;
}

torch::Tensor axpb_cpu(const torch::Tensor& x, double a) { return x * a + 1; }

TORCH_LIBRARY(jlt_nvrtc_op, m) { m.def("axpb(Tensor x, float a) -> Tensor"); }
TORCH_LIBRARY_IMPL(jlt_nvrtc_op, CUDA, m) { m.impl("axpb", &axpb_cuda); }
TORCH_LIBRARY_IMPL(jlt_nvrtc_op, CPU, m) { m.impl("axpb", &axpb_cpu); }
"""


@pytest.mark.parametrize("source, cflags, reason", [
    (DYNAMIC, [], "dynamic parallelism"),
    (FEATURES.read_text(), ["-rdc=true"], "relocatable device code (-rdc=true)"),
    (FEATURES.read_text(), ["-G"], "nvcc-only flag -G"),
    (FEATURES.read_text().replace("__constant__ float c_bias", "__managed__ float c_bias"), [], "__managed__"),
    (OP, ["-G"], "nvcc-only flag -G"),
])
def test_what_nvrtc_cannot_build_goes_to_nvcc_with_one_line(tmp_path, monkeypatch, source, cflags, reason):
    """auto (with the engine as its default) takes the nvcc split and says why in one line; engine='nvrtc'
    refuses with the reason and the fix."""
    monkeypatch.setattr(builder, "TORCH_NVRTC_BY_DEFAULT", True)
    p = tmp_path / "snippet.cu"
    p.write_text(source)
    opts = Options(arch=[ARCH], cuda_cflags=cflags)
    plan, _, _ = builder.prepare(p, opts)
    engine, why = builder.choose_engine(plan, opts)
    assert engine is objects and reason in why and "\n" not in why
    with pytest.raises(SnippetError, match="engine='auto' or 'nvcc'"):
        builder.choose_engine(plan, Options(arch=[ARCH], cuda_cflags=cflags, engine="nvrtc"))


def test_auto_takes_nvrtc_for_a_split_snippet_and_nvcc_for_compile_only(monkeypatch):
    """A split torch-style snippet for a GPU is NVRTC's (auto's default since the GPU suite passed with it;
    engine='nvcc' keeps the nvcc split); a compile-only check stays nvcc's unless asked; a PTX arch
    (TORCH_CUDA_ARCH_LIST's +PTX) goes to nvcc's fatbinary, saying so."""
    plan, _, _ = builder.prepare(ROOT / "kernels" / "square_matrix.cu", Options(arch=[ARCH]))
    assert builder.TORCH_NVRTC_BY_DEFAULT
    assert builder.choose_engine(plan, Options(arch=[ARCH]))[0] is nvrtc_torch
    assert builder.choose_engine(plan, Options(arch=[ARCH], engine="nvcc"))[0] is objects
    engine, why = builder.choose_engine(plan, Options(arch=[ARCH]), [ARCH, "compute_75"])
    assert engine is objects and "PTX for compute_75" in why
    monkeypatch.setattr(builder, "TORCH_NVRTC_BY_DEFAULT", False)
    assert builder.choose_engine(plan, Options(arch=[ARCH]))[0] is objects
    assert builder.choose_engine(plan, Options(arch=[ARCH], engine="nvrtc"))[0] is nvrtc_torch
    monkeypatch.setattr(builder, "TORCH_NVRTC_BY_DEFAULT", True)
    assert builder.choose_engine(plan, Options(arch=[ARCH], compile_only=True))[0] is objects
    assert builder.choose_engine(plan, Options(arch=[ARCH], compile_only=True, engine="nvrtc"))[0] is nvrtc_torch


# ---- with the compilers (precompiled torch headers: slow the first time) -----------------------------

def _cubin_symbols(cubin: Path) -> str:
    tool = toolchain.find_cuda_tool("cuobjdump")
    if tool is None:
        return cubin.read_bytes().decode("latin-1")  # the symbol table's strings are in the ELF as they are
    return subprocess.run([tool, "-symbols", str(cubin)], capture_output=True, text=True, check=True).stdout


@pytest.mark.slow
@pytest.mark.parametrize("snippet", TORCH_STYLE)
def test_every_torch_style_snippet_compiles_with_nvrtc(snippet, use_shared_cache):
    """Each torch-style snippet's device unit compiles with NVRTC, and its CUBIN holds every kernel,
    instantiation and variable the host unit names (the slot table's lowered names)."""
    b = jitlab.build(ROOT / snippet, compile_only=True, arch=ARCH, engine="nvrtc")
    assert b.engine == "nvrtc-torch" and b.manifest.slots
    symbols = _cubin_symbols(b.artifact)
    for name, expression, _ in b.manifest.slots:
        assert b.manifest.kernels[expression] in symbols, name


@pytest.mark.slow
def test_what_torch_includes_for_kernels_reaches_the_nvcc_device_unit(use_shared_cache):
    """A kernel using FLT_MAX, INT_MAX and std::numeric_limits with only <torch/extension.h> included builds with
    the nvcc split too (its device unit has no torch: the standard headers torch's bring stand in)."""
    b = jitlab.build(STAND_IN.parent / "split" / "torch_gives.cu", compile_only=True, arch=ARCH, engine="nvcc")
    assert b.engine == "nvcc" and [fn.name for fn in b.plan.exported] == ["clamp"]


@pytest.mark.slow
def test_the_module_defines_the_kernel_symbols_inside_and_exports_the_setter(use_shared_cache):
    """The .so resolves every kernel and variable symbol inside itself (hidden), exports the slot setters and
    its functions' C-ABI entries, and reaches the runtime's launch only through the wrapper."""
    b = jitlab.build(FEATURES, compile_only=True, arch=ARCH, engine="nvrtc")
    so = jitlab.config.cache_dir() / b.manifest.library
    dynamic = subprocess.run(["nm", "-D", str(so)], capture_output=True, text=True, check=True).stdout
    assert " T jitlab_slots_load" in dynamic and b.plan.exported
    assert all(f" T jitlab_entry_{fn.name}\n" in dynamic for fn in b.plan.exported)
    undefined = {ln.split()[-1].split("@")[0] for ln in dynamic.splitlines() if " U " in ln}
    assert not any(s.startswith(("_Z12times_kernel", "_Z13square_kernel")) or s in ("c_bias", "d_calls")
                   for s in undefined)
    local = subprocess.run(["nm", str(so)], capture_output=True, text=True, check=True).stdout
    assert " t _Z13square_kernelPfi" in local and " t __wrap_cudaLaunchKernel" in local


@pytest.mark.slow
def test_an_extern_c_kernel_is_a_slot_defined_inside_the_module(use_shared_cache):
    """A kernel with C linkage (its symbol is its plain name) gets a slot, and the module leaves no symbol of
    it for the dynamic loader to find (an undefined one fails the import)."""
    b = jitlab.build(STAND_IN.parent / "split" / "extern_c.cu", compile_only=True, arch=ARCH, engine="nvrtc")
    assert [(name, expression) for name, expression, _ in b.manifest.slots] == [("shift_kernel", "shift_kernel")]
    dynamic = subprocess.run(["nm", "-D", str(jitlab.config.cache_dir() / b.manifest.library)],
                             capture_output=True, text=True, check=True).stdout
    assert "shift_kernel" not in dynamic, dynamic


@pytest.mark.slow
def test_kernel_body_edit_is_a_new_cubin_only(tmp_path, use_shared_cache):
    """Editing a kernel's body (same lines): the host objects and the module are cache hits, the CUBIN is new."""
    p = tmp_path / "features.cu"
    shutil.copy(FEATURES, p)
    first = jitlab.build(p, compile_only=True, arch=ARCH, engine="nvrtc")
    # A constant no earlier run used: the CUBIN is written by this build, after it started.
    p.write_text(p.read_text().replace("y[i] = y[i] * y[i];", f"y[i] = y[i] * y[i] + {time.time_ns() % 10**9}.f;"))
    second = jitlab.build(p, compile_only=True, arch=ARCH, engine="nvrtc")
    assert second.name != first.name and not second.cached
    units = {u["name"]: u for u in second.manifest.units}
    device = units.pop("features.device.cu")  # the device unit's row, as the nvcc split lists it
    assert (device["compiler"], device["cached"], device["headers"]) == ("nvrtc", False, "") and device["seconds"] > 0
    assert units and all(u["cached"] and u["compiler"] == "cxx" for u in units.values())
    assert (second.manifest.library, second.manifest.module) == (first.manifest.library, first.manifest.module)
    assert second.manifest.sha256 != first.manifest.sha256
    assert second.manifest.kernels == first.manifest.kernels
    # The entry recorded what it read (the CUBIN and module it made are object-cache entries, never moving):
    # the same source again is a hit, not a rebuild on every new process.
    third = jitlab.build(p, compile_only=True, arch=ARCH, engine="nvrtc")
    assert third.cached and third.name == second.name


# ---- operator snippets (TORCH_LIBRARY): the same engine, a library oplib registers ---------------------


def test_auto_takes_nvrtc_for_an_operator_snippet(tmp_path):
    """A split TORCH_LIBRARY snippet for a GPU is the torch-style NVRTC engine's under auto, with no reason to refuse it."""
    (tmp_path / "axpb.cu").write_text(OP)
    plan, _, _ = builder.prepare(tmp_path / "axpb.cu", Options(arch=[ARCH]))
    assert plan.ops and nvrtc_torch.unsuitable(plan, Options(arch=[ARCH]), [ARCH]) is None
    assert builder.choose_engine(plan, Options(arch=[ARCH])) == (nvrtc_torch, "")


@pytest.fixture(scope="module")
def op_builds(shared_cache, tmp_path_factory):
    """The operator snippet built compile-only with NVRTC, then again after a kernel-body edit: (first, edited)."""
    p = tmp_path_factory.mktemp("op") / "axpb.cu"
    p.write_text(OP)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITLAB_CACHE_DIR", str(shared_cache))
        first = jitlab.build(p, compile_only=True, arch=ARCH, engine="nvrtc")
        p.write_text(OP.replace("+ 1.0f;", f"+ {time.time_ns() % 10**9}.f;"))  # a CUBIN this run makes
        return first, jitlab.build(p, compile_only=True, arch=ARCH, engine="nvrtc")


@pytest.mark.slow
def test_an_operator_snippet_is_a_cubin_and_a_library_without_a_module(op_builds, use_shared_cache):
    """The CUBIN holds the kernel the slot names; the library links the registry and the slot setters, and no
    module init (oplib opens it; nothing imports it)."""
    b, _ = op_builds
    assert b.engine == "nvrtc-torch" and [s[:2] for s in b.manifest.slots] == [["axpb_kernel", "axpb_kernel"]]
    assert b.manifest.kernels["axpb_kernel"] in _cubin_symbols(b.artifact)
    assert "jitlab_ops.cpp" in {u["name"] for u in b.manifest.units}
    so = jitlab.config.cache_dir() / b.manifest.library
    dynamic = subprocess.run(["nm", "-D", str(so)], capture_output=True, text=True, check=True).stdout
    assert " T jitlab_ops_register" in dynamic and " T jitlab_slots_load" in dynamic and "PyInit_" not in dynamic


@pytest.mark.slow
def test_an_operator_kernel_edit_keeps_the_registered_library(op_builds, use_shared_cache, monkeypatch):
    """After a kernel-body edit the library is a cache hit and stays registered (nothing unloaded): only its
    slots are filled, before the first registration and again for the edit; a CUBIN the runtime refuses
    leaves the registered version running."""
    first, edited = op_builds
    units = {u["name"]: u["cached"] for u in edited.manifest.units}
    assert units.pop("axpb.device.cu") is False and all(units.values())
    assert edited.manifest.library == first.manifest.library
    library = jitlab.config.cache_dir() / first.manifest.library
    filled = []  # for each fill: whether the operator was registered yet

    def fill():
        filled.append(hasattr(torch.ops.jlt_nvrtc_op, "axpb"))

    registered = oplib.activate(first.name, library, first.plan.files, first.plan.ops, fill=fill)
    packet, x = torch.ops.jlt_nvrtc_op.axpb, torch.arange(3.0)
    monkeypatch.setattr(oplib, "unload", lambda lib: pytest.fail(f"{lib.name} unloaded"))
    assert oplib.activate(edited.name, library, edited.plan.files, edited.plan.ops, fill=fill) is registered
    assert filled == [False, True] and registered.name == edited.name
    assert torch.ops.jlt_nvrtc_op.axpb is packet and packet(x, 2.0).tolist() == [1.0, 3.0, 5.0]
    with pytest.raises(JitlabError, match="could not be loaded: cudaLibraryLoadData"):
        oplib.activate(first.name, library, first.plan.files, first.plan.ops,
                       fill=lambda: slotted.fill(library, b"not a cubin\0", first.manifest.kernels))
    assert oplib.active[edited.name] is registered and packet(x, 2.0).tolist() == [1.0, 3.0, 5.0]
