"""The torch-style NVRTC engine on a GPU: a kernel-body edit is a new result in the same process, through
the same module object, with no host compile or link; __constant__ memory set from host code; a template
on float/double/half; torch's streams; the nvcc fallback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

import jitlab

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def nvrtc_by_default(monkeypatch):
    """These tests run auto as it will be once they pass: the torch-style NVRTC engine its default."""
    from jitlab.jit import builder

    monkeypatch.setattr(builder, "TORCH_NVRTC_BY_DEFAULT", True)

ROOT = Path(__file__).resolve().parents[1]
FEATURES = Path(__file__).parent / "fixtures" / "split" / "features.cu"

TEMPLATE = """#include <torch/extension.h>
template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* x, scalar_t* y, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * 2;
}
torch::Tensor scale(torch::Tensor x) {
    auto y = torch::empty_like(x);
    const int64_t n = x.numel();
    AT_DISPATCH_FLOATING_TYPES_AND_HALF(x.scalar_type(), "scale", ([&] {
        scale_kernel<scalar_t><<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
    }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}
"""


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


def _copy(src: Path, dst: Path) -> Path:
    shutil.copy(src, dst)
    return dst


def test_square_matrix_edit_runs_the_new_kernel_in_the_same_module(fresh):
    """seed 004's form: edit the kernel body, load again: the same module object (and a function taken
    from it before) runs the new kernel; nothing on the host side was compiled or linked."""
    p = _copy(ROOT / "kernels" / "square_matrix.cu", fresh / "square_matrix.cu")
    m = jitlab.load(p)
    assert m.build.engine == "nvrtc-torch"
    old_fn = m.square_matrix1
    x = torch.arange(1, 1025, device="cuda", dtype=torch.float32).reshape(32, 32)
    torch.testing.assert_close(m.square_matrix(x), x * x)
    p.write_text(p.read_text().replace("result[idx] = matrix[idx] * matrix[idx];",
                                       "result[idx] = matrix[idx] * matrix[idx] + 1.0f;"))
    m2 = jitlab.load(p)
    assert m2 is m and not m2.build.cached
    units = {u["name"]: u for u in m2.build.manifest.units}
    assert units.pop("square_matrix.device.cu")["cached"] is False
    assert units and all(u["cached"] for u in units.values())  # no host unit compiled
    torch.testing.assert_close(m.square_matrix(x), x * x + 1)
    torch.testing.assert_close(old_fn(x), x * x)  # the other kernels are unchanged and still run
    p.write_text(p.read_text().replace("y4[i] = square_float4(x4[i]);  // fewer",
                                       "y4[i] = square_float4(square_float4(x4[i]));  // fewer"))
    jitlab.load(p)  # 4 aligned floats: one float4, which that loop squares twice now
    torch.testing.assert_close(old_fn(torch.full((4,), 2.0, device="cuda")), torch.full((4,), 16.0, device="cuda"))


def test_constant_memory_set_from_host(fresh):
    """cudaMemcpyToSymbol on a __constant__ array and cudaMemcpyFromSymbol on a __device__ counter reach the
    loaded CUBIN's globals (features.cu: affine_squared adds c_bias[i % 4]; calls() reads d_calls)."""
    m = jitlab.load(_copy(FEATURES, fresh / "features.cu"))
    assert m.build.engine == "nvrtc-torch"
    x = torch.zeros(8, device="cuda")
    y = m.affine_squared(x, 1.0, 0.0)
    torch.testing.assert_close(y, torch.tensor([0, 1, 2, 3] * 2, device="cuda", dtype=torch.float32) ** 2)
    torch.cuda.synchronize()
    assert m.calls() >= 1


def test_features_match_the_nvcc_build(fresh):
    """Every function of features.cu gives the nvcc split's result (templates, dynamic shared memory)."""
    p = _copy(FEATURES, fresh / "features.cu")
    fast, slow = jitlab.load(p), jitlab.load(p, engine="nvcc")
    assert (fast.build.engine, slow.build.engine) == ("nvrtc-torch", "nvcc")
    x = torch.randn(100, device="cuda")
    for f in ("reversed", "times4", "times3"):
        torch.testing.assert_close(getattr(fast, f)(x), getattr(slow, f)(x))
    torch.testing.assert_close(fast.times3(x.double()), slow.times3(x.double()))


def test_template_on_float_double_half_and_its_edit(fresh):
    """AT_DISPATCH on float, double and half (c10::Half as NVRTC's jitlab_c10.h declares it): right results,
    then a body edit changes all three through the same module."""
    p = fresh / "scale.cu"
    p.write_text(TEMPLATE)
    m = jitlab.load(p)
    assert m.build.engine == "nvrtc-torch"
    for dtype in (torch.float32, torch.float64, torch.float16):
        x = torch.linspace(-3, 3, 1000, device="cuda", dtype=dtype)
        torch.testing.assert_close(m.scale(x), x * 2)
    p.write_text(TEMPLATE.replace("y[i] = x[i] * 2;", "y[i] = x[i] * 3;"))
    assert jitlab.load(p) is m
    for dtype in (torch.float32, torch.float64, torch.float16):
        x = torch.linspace(-3, 3, 1000, device="cuda", dtype=dtype)
        torch.testing.assert_close(m.scale(x), x * 3)


def test_two_streams(fresh):
    """Launches on torch's current stream: two streams each get their own ordered result."""
    p = fresh / "scale.cu"
    p.write_text(TEMPLATE)
    m = jitlab.load(p)
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    xa = torch.randn(1 << 20, device="cuda")
    xb = torch.randn(1 << 20, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(a):
        ya = m.scale(m.scale(xa))
    with torch.cuda.stream(b):
        yb = m.scale(xb)
    torch.cuda.synchronize()
    torch.testing.assert_close(ya, xa * 4)
    torch.testing.assert_close(yb, xb * 2)


def test_launch_error_is_reported_as_triple_chevrons_do(fresh):
    """A launch the runtime refuses (4096 threads a block) raises what the same file built by nvcc raises
    after its <<<...>>> (CUDA 13's runtime says "invalid argument" for both), and the next launch runs."""
    p = fresh / "bad.cu"
    p.write_text(TEMPLATE.replace("(n + 255) / 256, 256", "1, 4096"))
    errors = {}
    for engine in ("auto", "nvcc"):
        m = jitlab.load(p, engine=engine)
        assert m.build.engine == ("nvrtc-torch" if engine == "auto" else "nvcc")
        with pytest.raises(RuntimeError) as e:
            m.scale(torch.ones(8, device="cuda"))
        errors[engine] = str(e.value).splitlines()[0]
    assert errors["auto"] == errors["nvcc"] and errors["auto"].startswith("CUDA error: ")
    torch.testing.assert_close(torch.ones(8, device="cuda") * 2, torch.full((8,), 2.0, device="cuda"))


def test_nvcc_only_flag_falls_back_to_nvcc_and_runs(fresh):
    """An nvcc-only flag (-G): the nvcc split builds it, the build notes say why in one line, and it runs."""
    p = _copy(FEATURES, fresh / "features.cu")
    m = jitlab.load(p, cuda_cflags=["-G"])
    assert m.build.engine == "nvcc"
    assert any("nvcc-only flag -G" in n for n in m.build.notes)
    x = torch.randn(64, device="cuda")
    torch.testing.assert_close(m.times4(x), x * 4)


def test_an_extern_c_kernel_runs_through_its_slot(fresh):
    """A kernel with C linkage, launched from torch-style host code: NVRTC builds it and the result is right."""
    m = jitlab.load(_copy(FEATURES.parent / "extern_c.cu", fresh / "extern_c.cu"))
    assert m.build.engine == "nvrtc-torch"
    x = torch.randn(1000, device="cuda")
    torch.testing.assert_close(m.shift(x, 1.5), x + 1.5)
