"""AT_DISPATCH kernel templates, compile-only with the real nvcc and host compiler: the file is split, the
host unit takes the smallest precompiled header set, each dtype's instantiation is compiled, and an edit
recompiles only its unit. (On a CPU torch the snippet launches on the default stream: torch's CUDA
headers cannot compile there; tests/test_dispatch_gpu.py runs the stream-and-guard version.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

import jitlab
from conftest import worker_dir
from jitlab.jit.builder import prepare
from jitlab.jit.flags import Options

ARCH = "sm_90"
DISPATCH = """\
#include <torch/extension.h>

template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * static_cast<scalar_t>(2);
}

torch::Tensor scale(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  const int block = 256;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "scale", [&] {
    scale_kernel<scalar_t><<<(n + block - 1) / block, block>>>(xc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
  });
  TORCH_CHECK(cudaGetLastError() == cudaSuccess, "launch failed");
  return y;
}
"""
# An attribute besides the m.def: the block is the snippet's own pybind11 code, compiled as written in a module unit.
MODULE = '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("scale", &scale); m.attr("kind") = "dispatch"; }\n'

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="needs nvcc")


def _build(path: Path) -> jitlab.Build:
    return jitlab.build(path, compile_only=True, arch=ARCH)


def _units(b: jitlab.Build) -> dict[str, dict]:
    return {u["name"]: u for u in b.manifest.units}


@pytest.fixture
def dispatch(tmp_path_factory, use_shared_cache) -> Path:
    """The AT_DISPATCH snippet, at this worker's own path (:func:`conftest.worker_dir`): one cold build per worker."""
    path = worker_dir(tmp_path_factory, "dispatch") / "dispatch_scale.cu"
    path.write_text(DISPATCH)
    return path


@pytest.mark.slow
def test_dispatch_splits_with_every_dtype(dispatch):
    """The AT_DISPATCH snippet is split (no one-unit note), its host unit is on the host set, and the
    kernel is instantiated for float, double, c10::Half and c10::BFloat16."""
    b = _build(dispatch)
    assert not any("one translation unit" in n for n in b.notes)
    units = _units(b)
    assert set(units) == {"dispatch_scale.device.cu", "dispatch_scale.host.cpp"}
    assert units["dispatch_scale.host.cpp"]["headers"] == "host"
    nm = subprocess.run(["nm", "-C", "--defined-only", str(b.artifact)], capture_output=True, text=True).stdout
    for t in ("float", "double", "c10::Half", "c10::BFloat16"):
        assert re.search(rf" T void scale_kernel<{re.escape(t)}>\({re.escape(t)} const\*", nm), t


@pytest.mark.slow
def test_half_instantiations_use_the_light_headers(dispatch):
    """The device unit compiles its c10::Half/BFloat16 instantiations on jitlab's light copies of
    torch's scalar headers (searched before torch's), which include no <ostream>."""
    b = _build(dispatch)
    nvcc = next(line for line in b.log.splitlines() if "dispatch_scale.device.cu -o" in line)
    light = Path(re.search(r"-I(\S*light-scalars-\w+)", nvcc).group(1))
    assert nvcc.index(f"-I{light}") < nvcc.index("-isystem=")
    for name in ("Half", "BFloat16"):
        assert "#include <ostream>" not in (light / "torch" / "headeronly" / "util" / f"{name}.h").read_text()


@pytest.mark.slow
def test_kernel_edit_recompiles_only_the_device_unit(dispatch):
    """A kernel-body edit recompiles the device unit (all four instantiations) and takes the host
    unit from the object cache; a host edit does the reverse."""
    _build(dispatch)
    dispatch.write_text(DISPATCH.replace("static_cast<scalar_t>(2)", "static_cast<scalar_t>(3)"))
    units = _units(_build(dispatch))
    assert not units["dispatch_scale.device.cu"]["cached"]
    assert units["dispatch_scale.host.cpp"]["cached"]
    dispatch.write_text(DISPATCH.replace("static_cast<scalar_t>(2)", "static_cast<scalar_t>(3)")
                        .replace("const int block = 256;", "const int block = 128;"))
    units = _units(_build(dispatch))
    assert not units["dispatch_scale.host.cpp"]["cached"]
    assert units["dispatch_scale.device.cu"]["cached"]


@pytest.mark.slow
def test_own_module_in_a_unit_of_its_own(write, use_shared_cache):
    """With its own PYBIND11_MODULE (and torch's CUDA headers included), the host functions compile on
    the host set and the module on torch's pybind casters; a host edit recompiles the host unit only."""
    cuda = DISPATCH.replace("#include <torch/extension.h>\n",
                            "#include <torch/extension.h>\n#include <ATen/cuda/CUDAContext.h>\n")
    plan, _, _ = prepare(write("own_cuda.cu", cuda + MODULE), Options(arch=[ARCH]))
    assert [(u.name, u.headers, u.module) for u in plan.units if u.compiler == "cxx"] == [
        ("own_cuda.host.cpp", "host", False), ("own_cuda.module.cpp", "casters", True)]
    path = write("own.cu", DISPATCH + MODULE)
    assert {n: u["headers"] for n, u in _units(_build(path)).items()} == {
        "own.device.cu": "", "own.host.cpp": "host", "own.module.cpp": "casters"}
    path.write_text((DISPATCH + MODULE).replace("const int block = 256;", "const int block = 128;"))
    assert [n for n, u in _units(_build(path)).items() if not u["cached"]] == ["own.host.cpp"]
