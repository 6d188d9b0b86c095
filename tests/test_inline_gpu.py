"""jitlab.load_inline on the GPU: lecture-style calls (cpp_sources=[decl], cuda_sources=[src], functions=[...])
with torch's own arguments give torch's results, and an edit under the same name gives the new kernel."""

from __future__ import annotations

import pytest
import torch

import jitlab
from test_inline import CUDA_SQUARE as SQUARE_SRC  # the CPU tests' square kernel
from test_inline import DECL as SQUARE_DECL

pytestmark = pytest.mark.gpu

GRAY_DECL = "torch::Tensor rgb_to_gray(torch::Tensor image);"
GRAY_SRC = r"""
// One thread per pixel of a (3, H, W) float image: the luma weights of ITU-R BT.601.
__global__ void rgb_to_gray_kernel(const float* r, const float* g, const float* b, float* out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 0.2989f * r[i] + 0.5870f * g[i] + 0.1140f * b[i];
}

torch::Tensor rgb_to_gray(torch::Tensor image) {
    TORCH_CHECK(image.is_cuda() && image.is_contiguous() && image.size(0) == 3, "a contiguous (3, H, W) CUDA image");
    int h = image.size(1), w = image.size(2), n = h * w;
    auto out = torch::empty({h, w}, image.options());
    const float* p = image.data_ptr<float>();
    rgb_to_gray_kernel<<<(n + 255) / 256, 256>>>(p, p + n, p + 2 * n, out.data_ptr<float>(), n);
    cudaError_t err = cudaGetLastError();
    TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
    return out;
}
"""


def lecture_call(name, decl, src):
    """The arguments lecture notebooks give torch's load_inline."""
    return dict(name=name, cpp_sources=[decl], cuda_sources=[src], functions=[decl.split("(")[0].split()[-1]],
                extra_cuda_cflags=["-O2"], with_cuda=True, verbose=False, build_directory=None)


def test_grayscale_matches_torch(cache):
    """The grayscale lecture kernel through load_inline gives torch's weighted sum on an awkward image size."""
    m = jitlab.load_inline(**lecture_call("gray", GRAY_DECL, GRAY_SRC))
    image = torch.rand(3, 127, 129, device="cuda")
    expected = 0.2989 * image[0] + 0.5870 * image[1] + 0.1140 * image[2]
    torch.testing.assert_close(m.rgb_to_gray(image), expected)


def test_square_edit_under_same_name_runs_the_new_kernel(cache):
    """Editing the kernel and calling load_inline again under the same name runs the edited kernel, recompiling only
    the device unit."""
    x = torch.randn(1000, device="cuda")
    first = jitlab.load_inline(**lecture_call("square", SQUARE_DECL, SQUARE_SRC))
    torch.testing.assert_close(first.square(x), x * x)
    edited = jitlab.load_inline(**lecture_call("square", SQUARE_DECL, SQUARE_SRC.replace("x[i] * x[i]",
                                                                                         "x[i] * x[i] + 1.0f")))
    torch.testing.assert_close(edited.square(x), x * x + 1)
    cached = {u["name"]: u["cached"] for u in edited.build.manifest.units}
    assert cached == {"square.device.cu": False, "square.host.cpp": True}  # the declaring C++ source is no unit


def test_failed_cuda_build_then_fixed_source_loads(cache):
    """A CUDA source that fails to compile names its line; the fixed source under the same name loads and runs."""
    with pytest.raises(jitlab.CompileError, match=r"load_inline 'fixme' cuda_sources\[0\], line 4"):
        jitlab.load_inline(**lecture_call("fixme", SQUARE_DECL, SQUARE_SRC.replace("x[i] * x[i]", "x[i] * q")))
    m = jitlab.load_inline(**lecture_call("fixme", SQUARE_DECL, SQUARE_SRC))
    x = torch.arange(4.0, device="cuda")
    torch.testing.assert_close(m.square(x), x * x)


def test_torch_error_handling_reaches_python(cache):
    """A TORCH_CHECK failing in a bound CUDA host function is a Python RuntimeError with its message."""
    m = jitlab.load_inline(**lecture_call("gray_check", GRAY_DECL, GRAY_SRC))
    with pytest.raises(RuntimeError, match=r"a contiguous \(3, H, W\) CUDA image"):
        m.rgb_to_gray(torch.rand(4, 8, 8, device="cuda"))
