"""CUDA without a GPU: compile-only builds with the real nvcc, arch handling, nvcc errors, resource usage.

Nothing here runs CUDA code; everything compiles it. torch is a CPU build on the CI machine.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.jit import toolchain
from jitlab.jit.resources import parse_resource_usage

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"
PLANTED = ROOT / "tests" / "fixtures" / "planted" / "hello_threads.cu"

pytestmark = pytest.mark.skipif(toolchain.nvcc_path() is None, reason="needs nvcc")


@pytest.mark.slow
def test_saxpy_compile_only_two_archs_then_cache_hit(cache):
    """With nvcc, saxpy.cu compiles to an object for sm_75 and sm_90 with per-arch registers; again is a cache hit."""
    b = jitlab.build(KERNELS / "saxpy.cu", compile_only=True, arch=["sm_75", "sm_90"], engine="nvcc")
    assert b.compile_only and not b.cached
    assert b.artifact.name == "cuda.o" and b.artifact.is_file() and b.artifact.stat().st_size > 0
    assert set(b.resources["saxpy"]) == {"sm_75", "sm_90"}
    assert all(r["registers"] > 0 for r in b.resources["saxpy"].values())
    again = jitlab.build(KERNELS / "saxpy.cu", compile_only=True, arch=["sm_75", "sm_90"], engine="nvcc")
    assert again.cached and again.name == b.name and again.resources == b.resources


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the GPU-less path")
def test_load_cu_for_cuda_without_gpu_names_compile_only(cache):
    """Loading a .cu with device="cuda" and no GPU is a ToolchainError that names the compile_only fix
    (device="auto", the default, runs a kernel-only one on the CPU emulator instead)."""
    with pytest.raises(jitlab.ToolchainError, match="compile_only"):
        jitlab.load(KERNELS / "saxpy.cu", device="cuda")
    assert not cache.exists() or not any(p.is_dir() for p in cache.iterdir())  # nothing was built


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the GPU-less path")
def test_compile_only_without_arch_is_an_error(cache):
    """compile_only with no arch and no GPU to pick one raises ToolchainError naming --arch."""
    with pytest.raises(jitlab.ToolchainError, match="arch"):
        jitlab.build(KERNELS / "saxpy.cu", compile_only=True)


def test_a_file_the_parser_cannot_read_is_nvccs_error_at_its_line(cache):
    """Lesson 00's planted mistake (no `;` after printf), compile-only with nvcc: nvcc's error at the `}` it
    expected the `;` before, not the parser's "no __global__ kernel found"."""
    with pytest.raises(jitlab.CompileError) as e:
        jitlab.build(PLANTED, compile_only=True, arch="sm_75", engine="nvcc")
    d = e.value.diagnostics[0]
    assert (Path(d.path), d.line) == (PLANTED, 8) and 'expected a ";"' in d.message, str(e.value)
    assert "nvcc" in e.value.summary and "no __global__" not in str(e.value)


def test_nvcc_error_points_at_the_users_line(cache, write):
    """An nvcc error names the user's .cu file and line, quotes the line and puts a caret under the identifier."""
    p = write("bad.cu", """
        __global__ void k(float* y, int n) {
            int i = threadIdx.x;
            if (i < n) y[i] = undefined_xx;
        }
    """)
    with pytest.raises(jitlab.CompileError) as ei:
        jitlab.build(p, compile_only=True, arch="sm_80")
    err = ei.value
    lines = str(err).splitlines()
    assert "bad.cu:3:" in str(err) and "undefined_xx" in str(err)
    src = "    3 |     if (i < n) y[i] = undefined_xx;"
    assert src in lines
    caret = lines[lines.index(src) + 1]
    assert caret.rstrip().endswith("^") and caret.index("^") == src.index("undefined_xx")
    d = err.diagnostics[0]
    assert d.path == str(p.resolve()) and d.line == 3 and d.severity == "error"
    assert "undefined_xx" in err.log


def test_arch_is_part_of_the_build_key(cache, write):
    """Building for another arch is another build (another name), and b.archs lists the archs."""
    p = write("k.cu", "__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    a = jitlab.build(p, compile_only=True, arch="sm_75")
    b = jitlab.build(p, compile_only=True, arch=["sm_80", "sm_90"])
    assert a.name != b.name and not b.cached
    assert a.archs == ["sm_75"] and b.archs == ["sm_80", "sm_90"]
    assert set(b.resources["k"]) == {"sm_80", "sm_90"}


@pytest.mark.slow
def test_half_operators_compile_in_kernel_only_units(cache, write):
    """__half * __half compiles in a kernel-only snippet with nvcc: torch's -D__CUDA_NO_HALF_OPERATORS__ is undone
    (NVRTC never defines it: test_nvrtc compiles __hadd and friends)."""
    p = write("h.cu", """
        #include <cuda_fp16.h>
        __global__ void scale_h(__half* y, const __half* x, __half a, int n) {
            int i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = x[i] * a;
        }
    """)
    b = jitlab.build(p, compile_only=True, arch="sm_80", engine="nvcc")
    assert b.plan.kind == "kernel" and b.artifact.is_file()
    assert "-U__CUDA_NO_HALF_OPERATORS__" in b.log
    assert b.resources["scale_h"]["sm_80"]["registers"] > 0
    assert jitlab.build(p, compile_only=True, arch="sm_80").engine == "nvrtc"  # __half operators there too


@pytest.mark.slow
def test_torch_style_compile_only(use_shared_cache):
    """square_matrix.cu (torch headers) compiles for sm_90 without a GPU, as a torch-style build."""
    b = jitlab.build(KERNELS / "square_matrix.cu", compile_only=True, arch="sm_90")
    assert b.plan.kind == "torch" and b.compile_only and b.artifact.is_file()
    assert b.resources["square_matrix_kernel"]["sm_90"]["registers"] > 0


@pytest.mark.parametrize("given, expected", [
    ("sm_90", "sm_90"), ("90", "sm_90"), ("9.0", "sm_90"), ("sm_90a", "sm_90a"),
    ("compute_80", "compute_80"), (" SM_75 ", "sm_75"), ("10.0", "sm_100"),
])
def test_normalize_arch_accepts_the_usual_spellings(given, expected):
    """normalize_arch maps sm_XY, XY, X.Y, sm_XYa and compute_XY to nvcc's names."""
    assert toolchain.normalize_arch(given) == expected


def test_normalize_arch_rejects_non_arch():
    """A string that names no arch is a ToolchainError showing the expected form."""
    with pytest.raises(jitlab.ToolchainError, match="sm_90"):
        toolchain.normalize_arch("banana")


def test_gencode_flags_sass_and_ptx():
    """sm_XY gives SASS for that arch, compute_XY gives PTX."""
    assert toolchain.gencode_flags(["sm_75", "compute_90"]) == [
        "-gencode=arch=compute_75,code=sm_75",
        "-gencode=arch=compute_90,code=compute_90",
    ]
    assert toolchain.gencode_flags(["sm_90a"]) == ["-gencode=arch=compute_90a,code=sm_90a"]


@pytest.mark.slow
def test_parse_resource_usage_from_a_real_nvcc_log(tmp_path):
    """Registers and shared memory per kernel and arch come out of nvcc --resource-usage output."""
    src = tmp_path / "red.cu"
    src.write_text(
        "__global__ void rev(float* out, const float* x) {\n"
        "    __shared__ float s[256];\n"
        "    s[threadIdx.x] = x[threadIdx.x];\n"
        "    __syncthreads();\n"
        "    out[threadIdx.x] = s[255 - threadIdx.x];\n"
        "}\n"
        "__global__ void plain(float* y) { y[threadIdx.x] = 2.0f; }\n"
    )
    proc = subprocess.run(
        [toolchain.nvcc_path(), "-c", str(src), "-o", str(tmp_path / "red.o"), "--resource-usage",
         "-gencode=arch=compute_75,code=sm_75", "-gencode=arch=compute_80,code=sm_80"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    usage = parse_resource_usage(proc.stdout + proc.stderr)
    assert set(usage) == {"rev", "plain"}
    assert set(usage["rev"]) == {"sm_75", "sm_80"}
    for arch in ("sm_75", "sm_80"):
        r = usage["rev"][arch]
        assert r["registers"] > 0 and r["shared"] == 1024 and r["local"] == 0
        assert r["spill_stores"] == 0 and r["spill_loads"] == 0
        assert usage["plain"][arch]["shared"] == 0


def test_runnable_cubin_is_the_one_the_driver_would_choose():
    """A torch-style NVRTC build holds one CUBIN per arch; the loader takes the one that runs on the GPU:
    its own arch, then the arch-specific one of its compute capability (TORCH_CUDA_ARCH_LIST=9.0a on an
    sm_90), then the newest of the same major version; never a newer minor, another major or an `a` of
    another capability."""
    from jitlab.jit.slotted import runnable_cubin

    assert runnable_cubin(["sm_90a"], "sm_90") == "sm_90a"
    assert runnable_cubin(["sm_90", "sm_90a"], "sm_90") == "sm_90"
    assert runnable_cubin(["sm_80", "sm_86"], "sm_89") == "sm_86"
    assert runnable_cubin(["sm_100f"], "sm_103") == "sm_100f"
    assert runnable_cubin(["sm_80"], "sm_90") is None
    assert runnable_cubin(["sm_89"], "sm_86") is None
    assert runnable_cubin(["sm_90a"], "sm_100") is None
    assert runnable_cubin(["compute_90"], "sm_90") is None
