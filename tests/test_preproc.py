"""Functions inside ``#if``/``#ifdef``/``#else``: the parser records the branch, the plan keeps only those
the build's defines compile (no shim, binding or NVRTC name for the others), and calling one left out says
which branch and which define."""

from __future__ import annotations

import textwrap

import pytest
import torch

import jitlab
from jitlab.errors import SnippetError
from jitlab.jit.parse import parse_file
from jitlab.jit.preproc import decide

VARIANTS = textwrap.dedent("""\
    // scale: y = a * x, two variants of one kernel chosen by a define
    #ifdef TWO_PER_THREAD
    __global__ void scale(float* y, const float* x, float a, int n) {
        int i = 2 * (blockIdx.x * blockDim.x + threadIdx.x);
        if (i < n) y[i] = a * x[i];
        if (i + 1 < n) y[i + 1] = a * x[i + 1];
    }
    #else
    __global__ void scale(float* y, const float* x, float a, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i];
    }
    #endif

    #if 0  // the first try, kept for reference
    __global__ void scale_old(float* y, const float* x, float a, int n) { y[0] = a * x[0] * n; }
    #endif
    """)


def test_the_parser_records_each_functions_branch(tmp_path):
    """#if/#elif/#else chains, #ifdef/#ifndef, line continuations and namespaces: each function's guard."""
    src = textwrap.dedent("""\
        #if defined(A) && \\
            B > 2
        __global__ void k1(int* x) {}
        #elif C
        __global__ void k2(int* x) {}
        #else
        __global__ void k3(int* x) {}
        #endif
        #ifndef D
        namespace ns {
        #if 0
        __global__ void k4(int* x) {}
        #endif
        }
        #endif
        __global__ void k5(int* x) {}
        """)
    guards = {fn.qualname: fn.guard for fn in parse_file(tmp_path / "g.cu", src).functions}
    assert guards == {"k1": "defined(A) && B > 2", "k2": "!(defined(A) && B > 2) && (C)",
                      "k3": "!(defined(A) && B > 2) && (!(C))", "ns::k4": "!defined(D) && (0)", "k5": ""}


@pytest.mark.parametrize(("guard", "defines", "text", "expected"), [
    ("defined(FAST)", {}, "", False),
    ("defined(FAST)", {"FAST": 1}, "", True),
    ("!(defined(A) && B > 2) && (C)", {"A": None, "B": 3}, "", False),
    ("!X == 0", {"X": 0}, "", False),  # C: (!X) == 0
    ("VERSION == 2", {"VERSION": "1+1"}, "", True),
    ("0", {}, "", False),
    ("__CUDA_ARCH__ >= 800", {}, "", None),  # only the compiler knows
    ("defined(FAST)", {}, '#include "config.h"\n', None),  # the header may define it
    ("defined(FAST)", {}, "#define FAST 1\n", None),  # the file defines it, perhaps under another #if
    ("X ? 1 : 0", {"X": 1}, "", None),
    ("A", {"A": '__import__("os").system("true")'}, "", None),  # integers and operators only
])
def test_a_guard_is_decided_only_when_it_is_certain(guard, defines, text, expected):
    """C's precedence and values; None wherever a header, the file or the compiler may decide instead."""
    assert decide(guard, defines, text) is expected


@pytest.mark.slow
def test_variants_under_ifdef_build_on_both_engines_and_run_the_chosen_one(tmp_path, cache):
    """Two variants of one kernel under #ifdef/#else and an old one under #if 0: nvcc and NVRTC build for
    either define, the CPU runtime runs the chosen variant, and the old one says why it is not there."""
    path = tmp_path / "scale.cu"
    path.write_text(VARIANTS)
    for defines in ({}, {"TWO_PER_THREAD": 1}):
        for engine in ("nvcc", "nvrtc"):
            b = jitlab.build(path, compile_only=True, arch="sm_75", engine=engine, defines=defines)
            assert [f.name for f in b.plan.exported] == ["scale"]
            assert [n for n, _ in b.plan.skipped] == ["scale_old"]  # the other variant of scale is no news
    x = torch.arange(10.0)
    for defines, grid in (({}, 10), ({"TWO_PER_THREAD": 1}, 5)):
        m = jitlab.load(path, device="cpu", defines=defines)
        y = torch.zeros(10)
        m.scale(y, x, 3.0, 10, grid=grid, block=1)  # each variant covers all 10 only with its own grid
        torch.testing.assert_close(y, 3 * x)
    with pytest.raises(AttributeError, match=r"scale_old.*`#if 0` around it \(scale.cu:16\).*the source itself"):
        m.scale_old


@pytest.mark.slow
def test_a_host_function_under_if_0_is_not_bound_in_a_torch_style_cpp_snippet(tmp_path, cache):
    """A torch-style C++ file keeps broken old code under #if 0: it builds, runs, and names the branch."""
    path = tmp_path / "twice.cpp"
    path.write_text(textwrap.dedent("""\
        #include <torch/extension.h>
        torch::Tensor twice(torch::Tensor x) { return x * 2; }
        #if 0
        torch::Tensor twice_old(torch::Tensor x) { return x + x + undeclared_name; }
        #endif
        """))
    m = jitlab.load(path)
    torch.testing.assert_close(m.twice(torch.ones(3)), torch.full((3,), 2.0))
    with pytest.raises(AttributeError, match="twice_old.*left out by the preprocessor"):
        m.twice_old


def test_every_function_left_out_names_the_define(tmp_path):
    """A file whose only kernel is under #ifdef, built without the define: the error names the define to pass."""
    path = tmp_path / "only.cu"
    path.write_text("#ifdef USE_IT\n__global__ void k(float* y) { y[0] = 1; }\n#endif\n")
    with pytest.raises(SnippetError, match=r"every function .* k \(.*`#ifdef USE_IT`.*defines=\{'USE_IT': 1\}"):
        jitlab.build(path, compile_only=True, arch="sm_75")


@pytest.mark.gpu
@pytest.mark.parametrize("engine", ["nvrtc", "nvcc"])
def test_the_chosen_variant_runs_on_the_gpu(tmp_path, cache, engine):
    """Each #ifdef variant, NVRTC and nvcc, launched on the GPU: right only with its own grid."""
    path = tmp_path / "scale.cu"
    path.write_text(VARIANTS)
    x = torch.arange(1000.0, device="cuda")
    for defines, grid in (({}, 4), ({"TWO_PER_THREAD": 1}, 2)):
        m = jitlab.load(path, defines=defines, engine=engine)
        y = torch.zeros_like(x)
        m.scale(y, x, 3.0, 1000, grid=grid, block=256)
        torch.cuda.synchronize()
        torch.testing.assert_close(y, 3 * x)
