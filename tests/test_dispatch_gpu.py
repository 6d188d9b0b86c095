"""AT_DISPATCH kernel templates on the GPU, the way extension authors write them (a device guard, torch's
current stream, C10_CUDA_KERNEL_LAUNCH_CHECK): every dtype matches torch, before and after an edit, and an
edit recompiles only the unit it touched."""

from __future__ import annotations

import pytest
import torch

import jitlab

pytestmark = pytest.mark.gpu

DISPATCH = """\
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * static_cast<scalar_t>(2);
}

torch::Tensor scale(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const at::cuda::OptionalCUDAGuard guard(device_of(x));
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  const int block = 256;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "scale", [&] {
    scale_kernel<scalar_t><<<(n + block - 1) / block, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""
# The same with AT_DISPATCH_FLOATING_TYPES_AND_HALF, c10::cuda::CUDAGuard and its own module.
OWN_MODULE = DISPATCH.replace("AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16,",
                              "AT_DISPATCH_FLOATING_TYPES_AND_HALF(").replace(
    "const at::cuda::OptionalCUDAGuard guard(device_of(x));", "const c10::cuda::CUDAGuard guard(x.device());") + \
    '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def("scale", &scale, "2 x");\n}\n'
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
SIZES = [1, 127, 129, 100_003]


def _units(m) -> dict[str, dict]:
    return {u["name"]: u for u in m.build.manifest.units}


def _check(m, factor: int, dtypes=DTYPES) -> None:
    for dtype in dtypes:
        for n in SIZES:
            x = torch.randn(n, device="cuda").to(dtype)
            torch.testing.assert_close(m.scale(x), x * factor, msg=f"{dtype}, n={n}")


@pytest.fixture(scope="module")
def m(tmp_path_factory):
    path = tmp_path_factory.mktemp("dispatch") / "dispatch_scale.cu"
    path.write_text(DISPATCH)
    return jitlab.load(path)


def test_split_and_every_dtype_matches_torch(m):
    """The snippet builds split, and float, double, half and bfloat16 give torch's x * 2."""
    assert set(_units(m)) == {"dispatch_scale.device.cu", "dispatch_scale.host.cpp"}
    assert not any("one translation unit" in n for n in m.build.notes)
    assert _units(m)["dispatch_scale.host.cpp"]["headers"] == "host"
    _check(m, 2)


def test_non_contiguous_input_and_side_stream(m):
    """A transposed input is made contiguous, and the launch runs on torch's current stream."""
    x = torch.randn(33, 65, device="cuda", dtype=torch.float16).t()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        y = m.scale(x)
    s.synchronize()
    torch.testing.assert_close(y, (x * 2).contiguous())


def test_dtype_outside_the_dispatch_raises(m):
    """An int32 tensor is refused by AT_DISPATCH with torch's message, not run."""
    with pytest.raises(RuntimeError, match="not implemented for 'Int'"):
        m.scale(torch.ones(8, device="cuda", dtype=torch.int32))


def test_kernel_edit_then_host_edit(write, cache):
    """A kernel-body edit recompiles only the device unit and every dtype gets the new kernel; a host
    edit recompiles only the host unit and the results stay right."""
    path = write("dispatch_edit.cu", DISPATCH)
    _check(jitlab.load(path), 2)
    path.write_text(DISPATCH.replace("static_cast<scalar_t>(2)", "static_cast<scalar_t>(3)"))
    m = jitlab.load(path)
    units = _units(m)
    assert not units["dispatch_edit.device.cu"]["cached"] and units["dispatch_edit.host.cpp"]["cached"]
    _check(m, 3)
    path.write_text(path.read_text().replace("const int block = 256;", "const int block = 128;"))
    m = jitlab.load(path)
    units = _units(m)
    assert not units["dispatch_edit.host.cpp"]["cached"] and units["dispatch_edit.device.cu"]["cached"]
    _check(m, 3)


def test_own_module_and_half(write, cache):
    """AT_DISPATCH_FLOATING_TYPES_AND_HALF with c10::cuda::CUDAGuard and its own PYBIND11_MODULE: the block's
    plain `m.def` is bound through the host unit's C-ABI entry (no module unit, its docstring kept), on the host
    set alone; float/double/half are right, bfloat16 is refused by the dispatch, and a host edit recompiles only the host unit and still runs right."""
    path = write("dispatch_own.cu", OWN_MODULE)
    m = jitlab.load(path)
    assert {n: u["headers"] for n, u in _units(m).items()} == {
        "dispatch_own.device.cu": "", "dispatch_own.host.cpp": "host"}
    assert m.scale.__doc__.rstrip().endswith("2 x")
    _check(m, 2, DTYPES[:3])
    with pytest.raises(RuntimeError, match="not implemented for 'BFloat16'"):
        m.scale(torch.ones(8, device="cuda", dtype=torch.bfloat16))
    path.write_text(OWN_MODULE.replace("const int block = 256;", "const int block = 64;"))
    m = jitlab.load(path)
    assert [n for n, u in _units(m).items() if not u["cached"]] == ["dispatch_own.host.cpp"]
    _check(m, 2, DTYPES[:3])
