"""Split torch-style builds on the GPU: the features snippet, a stream-context snippet and a fallback
give torch's results (the seeds and kernels/ are covered by tests/test_gpu.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import jitlab

FEATURES = Path(__file__).parent / "fixtures" / "split" / "features.cu"

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def m():
    return jitlab.load(FEATURES)


def test_features_split_and_load(m):
    """The features snippet builds split (a device unit, and a host unit ending with its functions' entries) and loads."""
    assert [u["name"] for u in m.build.manifest.units] == ["features.device.cu", "features.host.cpp"]
    assert "one translation unit" not in repr(m)


def test_two_kernels_constant_memory_and_stream(m):
    """Two launches from one host function, __constant__ memory set by cudaMemcpyToSymbol, torch's stream."""
    x = torch.randn(1000, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = m.affine_squared(x, 2.0, 0.5)
    s.synchronize()
    bias = torch.arange(1000, device="cuda").remainder(4).float()
    torch.testing.assert_close(y, (2 * x + 0.5 + bias) ** 2)
    assert m.calls() >= 1  # a __device__ variable read back with cudaMemcpyFromSymbol


def test_dynamic_shared_memory(m):
    """The third launch argument sizes extern __shared__ memory."""
    x = torch.randn(200, device="cuda")
    torch.testing.assert_close(m.reversed(x), x.flip(0))


def test_templates_explicit_and_dispatched(m):
    """Explicit template arguments, and AT_DISPATCH choosing float or double at run time."""
    x = torch.randn(777, device="cuda")
    torch.testing.assert_close(m.times4(x), 4 * x)
    torch.testing.assert_close(m.times3(x), 3 * x)
    xd = x.double()
    torch.testing.assert_close(m.times3(xd), 3 * xd)


def test_current_cuda_stream_header(write):
    """A snippet on at::cuda::getCurrentCUDAStream() (ATen/cuda/CUDAContext.h) splits and runs."""
    path = write("ctx.cu", """
        #include <torch/extension.h>
        #include <ATen/cuda/CUDAContext.h>
        __global__ void add1(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] += 1; }
        __global__ void mul2(float* y, int n) { int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) y[i] *= 2; }
        torch::Tensor f(torch::Tensor x) {
            auto y = x.clone();
            int n = y.numel();
            auto stream = at::cuda::getCurrentCUDAStream();
            add1<<<(n + 255) / 256, 256, 0, stream>>>(y.data_ptr<float>(), n);
            mul2<<<(n + 255) / 256, 256, 0, stream>>>(y.data_ptr<float>(), n);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            return y;
        }
        """)
    k = jitlab.load(path)
    assert k.build.manifest.notes == []
    x = torch.randn(5000, device="cuda")
    torch.testing.assert_close(k.f(x), (x + 1) * 2)


def test_fallback_runs_and_says_why(write):
    """A kernel taking a torch accessor builds as one unit, runs, and says why in repr(module)."""
    path = write("acc.cu", """
        #include <torch/extension.h>
        __global__ void neg(torch::PackedTensorAccessor32<float, 1> x) { int i = threadIdx.x; if (i < x.size(0)) x[i] = -x[i]; }
        torch::Tensor f(torch::Tensor x) {
            auto y = x.clone();
            neg<<<1, 256>>>(y.packed_accessor32<float, 1>());
            return y;
        }
        """)
    k = jitlab.load(path)
    assert "acc.cu built as one translation unit: line 2: kernel `neg` uses torch" in repr(k)
    x = torch.randn(100, device="cuda")
    torch.testing.assert_close(k.f(x), -x)
