"""Parameter types as people write them: namespaced fixed-width and size types, every spelling of the
built-in integers, and tensors whose memory does not hold their values (conjugate and negative views)."""

from __future__ import annotations

import re

import pytest
import torch

import jitlab
from jitlab.jit import toolchain

SPELLINGS = """
    #include <cstddef>
    #include <cstdint>
    double sum(std::int64_t a, std::size_t b, std::uint8_t c, std::int32_t d, unsigned long e, long long f,
               unsigned long long g, long int h, unsigned i, long unsigned int j, int long k, short unsigned l,
               signed long long int m, ::size_t n, std::ptrdiff_t o) {
        return (double)a + b + c + d + e + f + g + h + i + j + k + l + m + n + o;
    }
    std::int64_t first(const std::int64_t* x, const std::uint8_t* y, std::size_t n) { return n ? x[0] + y[0] : -1; }
    void fill(unsigned long* y, std::size_t n, unsigned long v) { for (std::size_t i = 0; i < n; ++i) y[i] = v; }
"""


@pytest.fixture
def spelled(cache, write):
    return jitlab.load(write("spelled.cpp", SPELLINGS))


def test_every_integer_spelling_builds_and_passes_its_value(spelled):
    """`std::int64_t`, `std::size_t`, `unsigned long`, `long unsigned int` … are all callable with their values."""
    args = [-(2**40), 2**63, 255, -(2**31), 2**64 - 1, -5, 7, -8, 2**32 - 1, 10, -11, 65535, 13, 14, -15]
    assert spelled.sum(*args) == float(sum(args))


def test_namespaced_pointers_and_returns(spelled):
    """`const std::int64_t*` takes int64 tensors, `unsigned long*` uint64 ones, and `std::int64_t` returns."""
    assert spelled.first(torch.tensor([40]), torch.tensor([2], dtype=torch.uint8), 1) == 42
    y = torch.zeros(3, dtype=torch.uint64)
    spelled.fill(y, 3, 2**64 - 1)
    assert y.view(torch.int64).tolist() == [-1, -1, -1]
    with pytest.raises(jitlab.ArgumentError, match="int64"):
        spelled.first(torch.tensor([1], dtype=torch.int32), torch.tensor([2], dtype=torch.uint8), 1)


@pytest.mark.parametrize("i, value, bounds", [(1, -1, "(std::size_t) must be in [0, 18446744073709551615], got -1"),
                                              (2, 256, "(std::uint8_t) must be in [0, 255], got 256"),
                                              (3, 2**31, "(std::int32_t) must be in [-2147483648, 2147483647]"),
                                              (8, -1, "(unsigned) must be in [0, 4294967295], got -1")])
def test_range_checks_follow_the_spelled_type(spelled, i, value, bounds):
    """A negative value for `std::size_t` or `unsigned`, 256 for `std::uint8_t`, 2**31 for `std::int32_t` are refused."""
    args = [0] * 15
    args[i] = value
    with pytest.raises(jitlab.ArgumentError, match=re.escape(bounds)):
        spelled.sum(*args)


@pytest.mark.skipif(toolchain.nvcc_path() is None, reason="needs nvcc")
def test_cuda_kernel_with_namespaced_types_compiles(cache, write):
    """A CUDA kernel taking `std::size_t`, `std::int64_t*` and `unsigned long` compiles for sm_75."""
    p = write("k.cu", """
        #include <cstdint>
        #include <cstddef>
        __global__ void k(std::int64_t* y, const std::uint8_t* x, std::size_t n, unsigned long s, long long int t) {
            std::size_t i = blockIdx.x * blockDim.x + threadIdx.x;
            if (i < n) y[i] = x[i] * (std::int64_t)s + t;
        }
    """)
    b = jitlab.build(p, compile_only=True, arch=["sm_75"])
    assert b.compile_only and "k" in b.resources


@pytest.fixture
def raw(cache, write):
    return jitlab.load(write("raw.cpp", """
        #include <cstring>
        void copy_bytes(void* y, const void* x, int n) { std::memcpy(y, x, n); }
        void copy_floats(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = x[i]; }
    """))


def test_conjugate_view_to_void_pointer_is_refused(raw):
    """A conjugate view given to `const void*` is refused, naming `.resolve_conj()`; the resolved tensor is copied."""
    z = torch.tensor([1 + 2j, 3 - 4j], dtype=torch.complex64).conj()
    y = torch.empty_like(z)
    with pytest.raises(jitlab.ArgumentError, match=r"argument 2 `x`.*conj bit is set.*\.resolve_conj\(\)"):
        raw.copy_bytes(y, z, 16)
    raw.copy_bytes(y, z.resolve_conj(), 16)
    assert y.tolist() == [1 - 2j, 3 + 4j]


def test_negative_view_to_a_pointer_is_refused(raw):
    """A negative view (the one-element imaginary part of a conjugate) is refused, naming `.resolve_neg()`."""
    im = torch.tensor([1 + 2j], dtype=torch.complex64).conj().imag
    assert im.is_neg() and im.is_contiguous()
    y = torch.empty(1)
    with pytest.raises(jitlab.ArgumentError, match=r"neg bit is set.*\.resolve_neg\(\)"):
        raw.copy_floats(y, im, 1)
    with pytest.raises(jitlab.ArgumentError, match=r"neg bit is set.*\.resolve_neg\(\)"):
        raw.copy_bytes(y, torch.tensor([1 + 2j, 5j]).conj().imag, 4)
    raw.copy_floats(y, im.resolve_neg(), 1)
    assert y.tolist() == [-2.0]


def test_a_sparse_tensor_for_a_pointer_is_refused_naming_to_dense(raw):
    """A sparse tensor given to `const float*` is refused as sparse, naming `.to_dense()`; the dense one is copied."""
    x = torch.tensor([0.0, 2.0, 0.0, 4.0])
    y = torch.empty(4)
    with pytest.raises(jitlab.ArgumentError, match=r"argument 2 `x`.*takes a dense tensor, got a sparse_coo one.*"
                                                   r"\.to_dense\(\)"):
        raw.copy_floats(y, x.to_sparse(), 4)
    raw.copy_floats(y, x.to_sparse().to_dense(), 4)
    assert y.tolist() == x.tolist()
