"""The program NVRTC engine on a CPU: a program split into host and device code, its kernels compiled by
NVRTC and its host side linked once (nothing runs here but a stand-in with a fake CUDA runtime), the
executable finding its CUBIN beside itself, nvcc's fallback with a one-line reason, and a kernel-body edit
that leaves the executable's entry a hit."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from jitlab.errors import SnippetError
from jitlab.jit import builder, toolchain
from jitlab.jit.engines import nvrtc_program, objects, program, slots
from jitlab.jit.flags import Options
from jitlab.jit.symbols import undefined_symbols

STAND_IN = Path(__file__).parent / "fixtures" / "slots"
ARCH = "sm_90"

#: A printf kernel, a __constant__ set from main, a template kernel launched on two types, a __device__
#: counter read back: what a program's kernels use, in one file (one host compile, one link).
FEATURES = (Path(__file__).parent / "fixtures" / "programs" / "features.cu").read_text()

DYNAMIC = """\
__global__ void child(float* y) { y[threadIdx.x] = 1.f; }
__global__ void parent(float* y) { child<<<1, 32>>>(y); }
int main() { float* y; cudaMalloc(&y, 128); parent<<<1, 1>>>(y); return (int)cudaDeviceSynchronize(); }
"""


@pytest.fixture
def on_a_gpu(monkeypatch):
    """This machine taken for one with a GPU (the engine's choice asks; nothing here runs a kernel)."""
    monkeypatch.setattr(toolchain, "gpu_available", lambda: True)


def _program(tmp_path: Path, text: str, name: str = "prog.cu") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _build(path: Path, **options):
    return builder.build(path, Options(mode="program", arch=[ARCH], engine="nvrtc", **options))


def test_the_split_keeps_main_on_the_host_and_the_kernels_on_the_device(tmp_path):
    """The host unit has main and the symbol copy, each kernel only declared; the device unit has the kernels'
    bodies and the variables, main blanked; both keep the user's line numbers."""
    plan, _, _ = builder.prepare(_program(tmp_path, FEATURES), Options(mode="program", arch=[ARCH]))
    s = nvrtc_program.split_file(plan)
    assert s.reason is None and set(s.kernels) == {"hello", "fill"} and s.templates == {"fill"}
    assert "int main()" in s.host and "cudaMemcpyToSymbol(scale" in s.host and "printf(\"hello" not in s.host
    assert "printf(\"hello" in s.device and "int main()" not in s.device and "__constant__ float scale[2];" in s.device
    line = lambda text, what: text.split(f'"{tmp_path / "prog.cu"}"\n')[-1].split(what)[0].count("\n")  # noqa: E731
    assert line(s.host, "int main()") == line(FEATURES, "int main()")
    assert line(s.device, "atomicAdd") == line(FEATURES, "atomicAdd")


@pytest.fixture(scope="module")
def features(tmp_path_factory, shared_cache):
    """FEATURES built by the NVRTC engine for sm_90 (a few seconds: the host unit, the slot unit and the link)."""
    d = tmp_path_factory.mktemp("features")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITLAB_CACHE_DIR", str(shared_cache))
        return _build(_program(d, FEATURES))


def test_nvrtc_compiles_the_kernels_into_a_cubin_beside_the_executable(features):
    """The build is NVRTC's: its CUBIN, beside the executable, holds every kernel, instantiation and variable
    main names, each under the symbol the host code names it by."""
    b = features
    assert b.engine == "nvrtc-program" and b.notes == []
    assert {(name, kernel) for name, _, kernel in b.manifest.slots} == {
        ("hello", True), ("fill<float>", True), ("fill<int>", True), ("scale", False), ("launches", False)}
    cubin = (b.folder / nvrtc_program.CUBIN).read_bytes()
    assert b.manifest.cubins == {ARCH: nvrtc_program.CUBIN} and cubin.startswith(b"\x7fELF")
    for lowered in b.manifest.kernels.values():
        assert lowered.encode() in cubin
    assert {"hello", "fill"} <= set(b.resources)


def test_the_slot_unit_names_each_kernel_and_loads_on_first_use(features):
    """The slot unit (an object-cache entry) defines each slot's host symbol, lists the CUBIN's names, and is
    compiled to fill its slots on first use; the executable links it with the runtime calls wrapped."""
    b = features
    units = [(p.read_text(), p) for p in (b.folder.parent / "objects").glob("prog.slots.cpp-*/prog.slots.cpp")]
    text = next(text for text, _ in units if all(f'"{s}"' in text for s in b.manifest.kernels.values()))
    assert text.startswith("#define JITLAB_SLOTS_ON_USE 1")
    symbols = subprocess.run(["nm", str(b.artifact)], capture_output=True, text=True, check=True).stdout
    assert "__wrap_cudaLaunchKernel" in symbols and "__wrap_cudaMemcpyToSymbol" in symbols
    assert "__wrap_cudaMemcpyFromSymbol" in symbols and "jitlab_slots_load" in symbols
    assert os.access(b.artifact, os.X_OK)


def test_the_build_folder_links_to_the_one_executable(features):
    """The build's program is a hard link to the executable's own entry, which the manifest names."""
    b = features
    entry = b.folder.parent / b.manifest.executable
    assert entry.name == program.EXECUTABLE and entry.is_file()
    assert os.stat(entry).st_ino == os.stat(b.artifact).st_ino


def test_a_kernel_body_edit_is_a_new_cubin_and_the_same_executable(tmp_path, use_shared_cache):
    """Editing a kernel's body (same lines): the host object, the slot unit and the executable are hits, only
    NVRTC compiles; the first build's folder keeps its own CUBIN; the same source again is a cache hit."""
    p = _program(tmp_path, FEATURES)
    first = _build(p)
    mark = f"edit {time.time_ns() % 10**9}"  # a constant no earlier run used: NVRTC compiles it now
    p.write_text(FEATURES.replace("tag %d", f"tag %d {mark}"))
    second = _build(p)
    assert second.name != first.name and not second.cached
    units = {u["name"]: u for u in second.manifest.units}
    assert not units.pop("prog.device.cu")["cached"] and all(u["cached"] for u in units.values())
    assert second.manifest.executable == first.manifest.executable
    assert os.stat(second.artifact).st_ino == os.stat(first.artifact).st_ino
    old, new = ((b.folder / nvrtc_program.CUBIN).read_bytes() for b in (first, second))
    assert mark.encode() not in old and mark.encode() in new
    assert _build(p).cached


def test_a_damaged_cubin_is_a_miss(tmp_path, use_shared_cache):
    """A build whose CUBIN was changed after it was made is rebuilt (with a warning), never run with it."""
    p = _program(tmp_path, FEATURES)
    first = _build(p)
    (first.folder / nvrtc_program.CUBIN).write_bytes(b"not a cubin")
    with pytest.warns(UserWarning, match="program.cubin was changed"):
        again = _build(p)
    assert not again.cached and (again.folder / nvrtc_program.CUBIN).read_bytes().startswith(b"\x7fELF")


def test_a_host_edit_links_a_new_executable(tmp_path, use_shared_cache):
    """Editing main compiles the host unit and links a new executable (the CUBIN's entry is a hit)."""
    p = _program(tmp_path, FEATURES)
    first = _build(p)
    p.write_text(FEATURES.replace("launches %d", f"launches {time.time_ns() % 10**9} %d"))
    second = _build(p)
    units = {u["name"]: u for u in second.manifest.units}
    assert units["prog.device.cu"]["cached"] and not units["prog.host.cpp"]["cached"]
    assert second.manifest.executable != first.manifest.executable


@pytest.mark.parametrize("source, options, reason", [
    (DYNAMIC, {}, "dynamic parallelism"),
    (DYNAMIC, {"cuda_cflags": ["-rdc=true"]}, "dynamic parallelism"),
    ("extern __device__ int n;\n__global__ void k() { n = 1; }\nint main() { k<<<1, 1>>>(); }\n", {}, "extern device variable"),
    ("__managed__ int n;\n__global__ void k() { n = 1; }\nint main() { k<<<1, 1>>>(); }\n", {}, "__managed__"),
    (FEATURES, {"debug": True}, "debug=True"),
    (FEATURES, {"cuda_cflags": ["--extended-lambda"]}, "nvcc-only flag --extended-lambda"),
    (FEATURES, {"arch": [ARCH, "sm_80"]}, "one GPU arch"),
])
def test_what_nvrtc_cannot_build_goes_to_nvcc_with_one_line(tmp_path, on_a_gpu, source, options, reason):
    """auto takes the program engine (nvcc) and says why in one line; engine='nvrtc' refuses with the fix."""
    p = _program(tmp_path, source)
    opts = Options(mode="program", **{"arch": [ARCH], **options})
    plan, archs, _ = builder.prepare(p, opts)
    engine, why = builder.choose_engine(plan, opts, archs)
    assert engine is program and reason in why and "\n" not in why
    with pytest.raises(SnippetError, match="engine='auto' or 'nvcc'"):
        builder.choose_engine(plan, Options(mode="program", engine="nvrtc", **{"arch": [ARCH], **options}), archs)


def test_auto_takes_nvrtc_on_a_gpu_and_nvcc_without_one(tmp_path, monkeypatch):
    """A .cu program is NVRTC's where it runs, nvcc's without a GPU (saying so) or under engine='nvcc';
    a .cpp program is the host compiler's, with no note."""
    p = _program(tmp_path, FEATURES)
    opts = Options(mode="program", arch=[ARCH])
    plan, archs, _ = builder.prepare(p, opts)
    monkeypatch.setattr(toolchain, "gpu_available", lambda: True)
    assert builder.choose_engine(plan, opts, archs) == (nvrtc_program, "")
    assert builder.choose_engine(plan, Options(mode="program", arch=[ARCH], engine="nvcc"), archs) == (program, "")
    monkeypatch.setattr(toolchain, "gpu_available", lambda: False)
    engine, why = builder.choose_engine(plan, opts, archs)
    assert engine is program and "no CUDA GPU" in why
    cpp, _, _ = builder.prepare(_program(tmp_path, "int main() { return 0; }\n", "m.cpp"), Options(mode="program"))
    assert builder.choose_engine(cpp, Options(mode="program")) == (program, "")


def test_what_nvrtc_could_not_build_is_remembered(tmp_path, cache, on_a_gpu, monkeypatch):
    """A program whose host code the split cannot keep apart (an explicit instantiation of a kernel) goes to
    nvcc with the host compiler's reason; built again, it goes there without compiling its host unit."""
    p = _program(tmp_path, "template <typename T> __global__ void k(T* y) { y[0] = 1; }\n"
                           "template __global__ void k<float>(float*);\n"
                           "int main() { float* y; cudaMalloc(&y, 4); k<float><<<1, 1>>>(y); return 0; }\n")
    opts = Options(mode="program", arch=[ARCH])
    first = builder.build(p, opts)
    assert first.engine == "nvcc" and "host compiler rejected" in first.notes[0]
    monkeypatch.setattr(objects, "compile_unit", lambda *a: pytest.fail("compiled the host unit again"))
    again = builder.build(p, opts)
    assert again.cached and again.folder == first.folder


# ---- the executable's loader, with a fake CUDA runtime (tests/fixtures/slots) ------------------------

def _gxx(*args) -> None:
    subprocess.run([toolchain.cxx_path() or "g++", "-std=c++17", f"-isystem{toolchain.cuda_home() / 'include'}",
                    *map(str, args)], check=True)


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    """A program of the split-like host object, a main and its generated slot unit, linked with --wrap
    against a fake libcudart; returns the executable's folder."""
    d = tmp_path_factory.mktemp("program")
    _gxx("-shared", "-fPIC", STAND_IN / "fake_cudart.cpp", "-o", d / "libfakecudart.so")
    _gxx("-c", STAND_IN / "host.cpp", "-o", d / "host.o")
    found, wrapped = slots.find(undefined_symbols(d / "host.o"), {"square_kernel", "times_kernel"}, {"c_bias"})
    (d / "slots.cpp").write_text(nvrtc_program.slot_text(found, wrapped))
    _gxx("-c", d / "slots.cpp", "-o", d / "slots.o")
    _gxx(STAND_IN / "program_main.cpp", d / "host.o", d / "slots.o", "-o", d / "program", *slots.link_flags(wrapped),
         f"-L{d}", "-lfakecudart", f"-Wl,-rpath,{d}")
    return d


def test_the_executable_loads_the_cubin_beside_the_path_it_ran_as(stand_in, tmp_path):
    """Run through a hard link, the program fills its slots from the CUBIN beside that link at its first
    launch: each launch reaches its kernel by the host symbol, the symbol copy the variable's pointer."""
    os.link(stand_in / "program", tmp_path / "program")
    (tmp_path / "program.cubin").write_bytes(b"fake cubin\0")
    run = subprocess.run([str(tmp_path / "program")], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0 and run.stderr == "", run.stderr
    assert run.stdout.splitlines() == ["square 0 _Z13square_kernelPfi",
                                       "times 0 _Z12times_kernelIfLi4EEvPKT_PS0_i", "copy 0"]


def test_a_missing_cubin_is_named_and_the_runtime_calls_fail(stand_in, tmp_path):
    """Without its CUBIN the program says where it looked and how to get one executable; its launches reach
    the runtime with no kernel and its symbol copy fails, as a program without device code would."""
    os.link(stand_in / "program", tmp_path / "program")
    run = subprocess.run([str(tmp_path / "program")], capture_output=True, text=True, timeout=30)
    assert run.returncode == 0
    assert f"{tmp_path / 'program.cubin'} is missing" in run.stderr and "engine='nvcc'" in run.stderr
    assert run.stderr.count("jitlab:") == 1
    assert run.stdout.splitlines() == ["square 0 (none)", "times 0 (none)", "copy 13"]
