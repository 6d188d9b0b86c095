"""Operator snippets on the GPU: one op with CPU and CUDA kernels through torch.ops, edited and reloaded in process."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import jitlab

pytestmark = pytest.mark.gpu

CPP = """\
#include <torch/extension.h>

torch::Tensor axpb_cpu(const torch::Tensor& x, double a) {
  return x * a + 1;
}

TORCH_LIBRARY(jlt_gpu, m) {
  m.def("axpb(Tensor x, float a) -> Tensor");
}

TORCH_LIBRARY_IMPL(jlt_gpu, CPU, m) {
  m.impl("axpb", &axpb_cpu);
}
"""

CU = """\
#include <torch/extension.h>

__global__ void axpb_kernel(const float* x, float a, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + B;
}

torch::Tensor axpb_cuda(const torch::Tensor& x, double a) {
  TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat, "x: contiguous float32 CUDA");
  auto y = torch::empty_like(x);
  int n = x.numel();
  axpb_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), a, y.data_ptr<float>(), n);
  return y;
}

TORCH_LIBRARY_IMPL(jlt_gpu, CUDA, m) {
  m.impl("axpb", &axpb_cuda);
}
"""


def snippet(folder: Path, b: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "axpb.cpp").write_text(CPP)
    (folder / "axpb.cu").write_text(CU.replace("B;", f"{b};"))
    return folder


def test_cpu_and_cuda_kernels_and_a_reload(cache, tmp_path):
    """Each device runs its own kernel; a kernel-body edit reloads in process and recompiles only the device unit."""
    folder = snippet(tmp_path / "axpb", "1")
    m = jitlab.load(folder)
    assert "ops: jlt_gpu::axpb(Tensor x, float a) -> Tensor [CPU, CUDA]" in repr(m)
    x = torch.randn(1000, 3).contiguous()
    torch.testing.assert_close(torch.ops.jlt_gpu.axpb(x, 2.0), x * 2 + 1)
    torch.testing.assert_close(m.axpb(x.cuda(), 2.0).cpu(), x * 2 + 1)
    old = m.axpb(x.cuda(), 2.0)

    snippet(folder, "5")
    m2 = jitlab.load(folder)
    compiled = [u["name"] for u in m2.build.manifest.units if not u["cached"]]
    assert compiled == ["axpb.device.cu"]
    torch.testing.assert_close(torch.ops.jlt_gpu.axpb(x.cuda(), 2.0).cpu(), x * 2 + 5)
    torch.testing.assert_close(torch.ops.jlt_gpu.axpb(x, 2.0), x * 2 + 1)  # the CPU kernel is unchanged
    torch.testing.assert_close(old.cpu(), x * 2 + 1)  # the old version's output outlives it
    assert m.axpb is m2.axpb is torch.ops.jlt_gpu.axpb


def test_kept_overload_runs_the_new_cuda_kernel(cache, tmp_path):
    """A kept OpOverload (``.default``) reaches the new CUDA kernel after a reload of another snippet defining the op."""
    folder = snippet(tmp_path / "axpb2", "0")
    jitlab.load(folder)
    overload = torch.ops.jlt_gpu.axpb.default
    snippet(folder, "2")
    jitlab.load(folder)
    x = torch.arange(8.0, device="cuda")
    assert overload(x, 3.0).tolist() == (x * 3 + 2).tolist()
