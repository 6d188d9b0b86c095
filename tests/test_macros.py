"""Kernels a macro generates: jitlab does not see them, and its messages say so with the fix."""

from __future__ import annotations

import pytest

import jitlab
from jitlab.jit import macros
from jitlab.jit.parse import parse_file

MADE = """
    #define MAKE(name, v) __global__ void name(float* y) { \\
        y[threadIdx.x] = v; }
    MAKE(k1, 1.0f)
    MAKE(k2, 2.0f)
"""


def test_a_snippet_of_macro_kernels_names_the_macro_and_the_fix(cache, write):
    """Only macro-made kernels: the "no kernel found" error names `MAKE` and its line, and a written kernel as the fix."""
    p = write("made.cu", MADE)
    with pytest.raises(jitlab.SnippetError, match=r"no __global__ kernel.*the macro MAKE \(made.cu:1\) defines "
                                                  r"kernels, which jitlab does not see.*__device__ function"):
        jitlab.build(p, compile_only=True, arch=["sm_75"])


def test_macros_without_kernels_are_not_named(write):
    """A `#define` that declares no `__global__` function (or a kernel written out) is not reported."""
    f = parse_file(write("plain.cu", """
        #define SCALE(x) ((x) * 2.0f)
        #define GLOBAL_SIZE 256
        __global__ void k(float* y) { y[0] = SCALE(1.0f); }
    """))
    assert macros.kernel_macros([f]) == [] and macros.hint([f]) == ""


def test_a_macro_beside_written_kernels_is_named(write):
    """With a written kernel too, the macro is still found (the loader's "no kernel `k1`" message names it)."""
    f = parse_file(write("mixed.cu", "__global__ void k0(float* y) { y[0] = 0; }\n" + MADE.lstrip("\n")))
    assert [fn.name for fn in f.functions] == ["k0"]
    assert macros.kernel_macros([f]) == ["MAKE (mixed.cu:2)"]


def test_a_kernel_macro_from_an_included_header_is_named(cache, write):
    """The macro may live in a header of the snippet's folder: the error names it there."""
    write("make_kernels.h", "#pragma once\n" + MADE.lstrip("\n").split("MAKE(k1")[0])
    p = write("uses_header.cu", '#include "make_kernels.h"\nMAKE(k1, 1.0f)\n')
    with pytest.raises(jitlab.SnippetError, match=r"the macro MAKE \(make_kernels.h:2\) defines kernels"):
        jitlab.build(p, compile_only=True, arch=["sm_75"])
