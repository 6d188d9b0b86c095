"""Operator snippets on the GPU: one op with CPU and CUDA kernels through torch.ops, built by the torch-style
NVRTC engine: a kernel-body edit refills the registered library's slots, a host edit reloads it; fake
kernels, opcheck and torch.compile across an edit; edits while another thread calls the op."""

from __future__ import annotations

import os
import subprocess
import sys
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

TORCH_LIBRARY(NS, m) {
  m.def("axpb(Tensor x, float a) -> Tensor");
}

TORCH_LIBRARY_IMPL(NS, CPU, m) {
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
  axpb_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), A, y.data_ptr<float>(), n);
  return y;
}

TORCH_LIBRARY_IMPL(NS, CUDA, m) {
  m.impl("axpb", &axpb_cuda);
}
"""


def snippet(folder: Path, b: str, ns: str = "jlt_gpu", a: str = "a") -> Path:
    """The two-file op (schema and CPU kernel in axpb.cpp, the CUDA kernel in axpb.cu) in namespace ``ns``:
    the kernel adds ``b`` (its body), the host passes ``a`` as the factor (host code)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "axpb.cpp").write_text(CPP.replace("NS", ns))
    (folder / "axpb.cu").write_text(CU.replace("NS", ns).replace("B;", f"{b};").replace(", A,", f", {a},"))
    return folder


def compiled(m) -> list[str]:
    """The units the module's build compiled (not cache hits)."""
    return [u["name"] for u in m.build.manifest.units if not u["cached"]]


def test_cpu_and_cuda_kernels_and_a_reload(cache, tmp_path):
    """Each device runs its own kernel; a kernel-body edit is one NVRTC compile into the registered library:
    the same .so, and the operator objects taken before (m.axpb, torch.ops) run the new kernel."""
    folder = snippet(tmp_path / "axpb", "1")
    m = jitlab.load(folder)
    assert m.build.engine == "nvrtc-torch"
    assert "ops: jlt_gpu::axpb(Tensor x, float a) -> Tensor [CPU, CUDA]" in repr(m)
    x = torch.randn(1000, 3).contiguous()
    torch.testing.assert_close(torch.ops.jlt_gpu.axpb(x, 2.0), x * 2 + 1)
    torch.testing.assert_close(m.axpb(x.cuda(), 2.0).cpu(), x * 2 + 1)
    old, old_op = m.axpb(x.cuda(), 2.0), m.axpb

    snippet(folder, "5")
    m2 = jitlab.load(folder)
    assert m2.build.engine == "nvrtc-torch" and compiled(m2) == ["axpb.device.cu"]
    assert m2.build.manifest.library == m.build.manifest.library  # no host compile, no link, no re-registration
    torch.testing.assert_close(torch.ops.jlt_gpu.axpb(x.cuda(), 2.0).cpu(), x * 2 + 5)
    torch.testing.assert_close(old_op(x.cuda(), 2.0).cpu(), x * 2 + 5)
    torch.testing.assert_close(torch.ops.jlt_gpu.axpb(x, 2.0), x * 2 + 1)  # the CPU kernel is unchanged
    torch.testing.assert_close(old.cpu(), x * 2 + 1)  # the old version's output outlives it
    assert m.axpb is m2.axpb is torch.ops.jlt_gpu.axpb

    snippet(folder, "1")  # back to the first version: a cache hit, its CUBIN in the same slots
    assert jitlab.load(folder).build.cached
    torch.testing.assert_close(old_op(x.cuda(), 2.0).cpu(), x * 2 + 1)


def test_kept_overload_runs_the_new_cuda_kernel(cache, tmp_path):
    """A kept OpOverload (``.default``) reaches the new CUDA kernel after a kernel-body edit."""
    folder = snippet(tmp_path / "axpb2", "0", ns="jlt_gpu_kept")
    jitlab.load(folder)
    overload = torch.ops.jlt_gpu_kept.axpb.default
    snippet(folder, "2", ns="jlt_gpu_kept")
    jitlab.load(folder)
    x = torch.arange(8.0, device="cuda")
    assert overload(x, 3.0).tolist() == (x * 3 + 2).tolist()


def test_a_host_edit_reloads_the_library_with_its_kernels(cache, tmp_path):
    """A host-code edit links a new library, which replaces the old one's registration and gets the CUBIN
    (a cache hit) in its slots; kernel edits then refill it, and reverting the host edit brings back the first."""
    folder = snippet(tmp_path / "host", "1", ns="jlt_gpu_host")
    m = jitlab.load(folder)
    op, x = torch.ops.jlt_gpu_host.axpb, torch.arange(8.0, device="cuda")
    snippet(folder, "1", ns="jlt_gpu_host", a="(float)(a + 1)")
    m2 = jitlab.load(folder)
    assert m2.build.engine == "nvrtc-torch" and m2.build.manifest.library != m.build.manifest.library
    assert compiled(m2) == ["axpb.host.cpp"]  # the device unit's CUBIN is the first one's
    assert op(x, 2.0).tolist() == (x * 3 + 1).tolist()
    snippet(folder, "4", ns="jlt_gpu_host", a="(float)(a + 1)")
    assert jitlab.load(folder).build.manifest.library == m2.build.manifest.library
    assert op(x, 2.0).tolist() == (x * 3 + 4).tolist()
    snippet(folder, "1", ns="jlt_gpu_host")
    assert jitlab.load(folder).build.cached
    assert op(x, 2.0).tolist() == (x * 2 + 1).tolist()
    assert torch.ops.jlt_gpu_host.axpb(x.cpu(), 2.0).tolist() == (x.cpu() * 2 + 1).tolist()


def test_fake_kernel_opcheck_and_torch_compile_across_a_kernel_edit(cache, tmp_path):
    """register_fake and opcheck pass on the NVRTC-built op; a function torch.compile compiled before a kernel
    edit runs the new kernel after it (the registration, Python's included, is kept)."""
    folder = snippet(tmp_path / "fake", "1", ns="jlt_gpu_fake")
    jitlab.load(folder)
    torch.library.register_fake("jlt_gpu_fake::axpb", lambda x, a: torch.empty_like(x))
    x = torch.randn(4096, device="cuda")
    torch.library.opcheck(torch.ops.jlt_gpu_fake.axpb.default, (x, 2.0))
    f = torch.compile(lambda t: torch.ops.jlt_gpu_fake.axpb(t, 2.0) * 3, fullgraph=True)
    torch.testing.assert_close(f(x), (x * 2 + 1) * 3)
    snippet(folder, "7", ns="jlt_gpu_fake")
    assert jitlab.load(folder).build.engine == "nvrtc-torch"
    torch.testing.assert_close(f(x), (x * 2 + 7) * 3)
    torch.library.opcheck(torch.ops.jlt_gpu_fake.axpb.default, (x, 2.0))


# Two kernels a call launches in turn, both edited together: a call that ran one version's first kernel and
# the other's second would add two different constants.
TWO_KERNELS = """\
#include <torch/extension.h>

__global__ void first_kernel(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + C;
}

__global__ void second_kernel(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] + C;
}

torch::Tensor twice_c(const torch::Tensor& x) {
  auto y = torch::empty_like(x);
  int n = x.numel();
  first_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  second_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), n);
  return y;
}

TORCH_LIBRARY(jlt_gpu_busy, m) { m.def("twice_c(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(jlt_gpu_busy, CUDA, m) { m.impl("twice_c", &twice_c); }
"""

EDITS_UNDER_LOAD = """\
import sys, threading, time
from pathlib import Path
import torch, jitlab

text, path = sys.argv[1], Path(sys.argv[2])
path.write_text(text.replace("C;", "0.0f;"))
assert jitlab.load(path).build.engine == "nvrtc-torch"
x, stop, errors, calls = torch.zeros(1 << 16, device="cuda"), threading.Event(), [], [0]

def train():  # every call runs one version's two kernels: 2 * C for one C, the same in every element
    while not stop.is_set():
        try:
            y = torch.ops.jlt_gpu_busy.twice_c(x)
            values = set(y.unique().tolist())
            assert len(values) == 1 and values.pop() in (0.0, 2.0, 4.0, 6.0), y.unique().tolist()
        except Exception as e:
            errors.append(repr(e))
        calls[0] += 1

thread = threading.Thread(target=train)
thread.start()
for c in (1, 2, 3, 0, 1):
    path.write_text(text.replace("C;", f"{c}.0f;"))
    jitlab.load(path)
    assert torch.ops.jlt_gpu_busy.twice_c(x)[0].item() == 2.0 * c
    seen = calls[0]
    while calls[0] < seen + 20:  # the loop keeps calling the version just loaded
        time.sleep(0.01)
stop.set()
thread.join()
assert not errors, errors[:3]
print("edits survived", calls[0], "calls")
"""


def test_kernel_edits_while_another_thread_calls_the_op(cache, tmp_path):
    """Kernel edits loaded while a thread calls the op (in a process of its own): every call returns one
    version's result, never a mix of two versions' kernels, and after each load the new one."""
    root = str(Path(__file__).resolve().parent.parent)  # jitlab's, then the caller's (where its packages may be)
    env = {**os.environ, "JITLAB_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    child = subprocess.run([sys.executable, "-c", EDITS_UNDER_LOAD, TWO_KERNELS, str(tmp_path / "busy.cu")],
                           capture_output=True, text=True, env=env, timeout=600)
    assert child.returncode == 0, (child.returncode, child.stderr[-3000:])
    assert "edits survived" in child.stdout
