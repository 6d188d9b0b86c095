"""Operator edit loop (GPU): a TORCH_LIBRARY op's kernel-body edit until ``torch.ops`` runs the new code.

The op is PyTorch's extension-cpp layout: ``scale.cpp`` (schema and CPU kernel) and ``scale.cu`` (the
CUDA kernel and its TORCH_LIBRARY_IMPL). Each edit changes a constant in the CUDA kernel's body.

* jitlab   ``jitlab.load(folder)`` again in the same process, then the op on CUDA: with the torch-style NVRTC
           engine (``nvrtc-torch``, auto's, named in the last line) the edit is one NVRTC compile and the
           registered library's slots refilled; with the nvcc split (``engine="nvcc"``, its own row) an nvcc
           compile, a link and the old build unloaded
* plain    ``torch.utils.cpp_extension.load(..., is_python_module=False)``: a second load of the same
           namespace in one process cannot work (TORCH_LIBRARY refuses a namespace twice), so each
           version runs in a new process, the way a user of it restarts: the time is measured there
           after ``import torch`` (ninja rebuilds only the ``.cu``), and the process's wall time beside it

Every result is checked before its time is printed. Target: jitlab's edit at most 0.4 s on the H100 with
NVRTC (2.5 s with the nvcc split).

    PYTHONPATH=. python benchmarks/op_loop.py
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jitlab  # noqa: E402

CPP = """\
#include <torch/extension.h>

torch::Tensor scale_cpu(const torch::Tensor& x, double a) { return x * a; }

TORCH_LIBRARY(jlt_bench, m) { m.def("scale(Tensor x, float a) -> Tensor"); }

TORCH_LIBRARY_IMPL(jlt_bench, CPU, m) { m.impl("scale", &scale_cpu); }
"""

CU = """\
#include <torch/extension.h>

__global__ void scale_kernel(const float* x, float a, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + {C}.0f;
}

torch::Tensor scale_cuda(const torch::Tensor& x, double a) {
  auto y = torch::empty_like(x);
  int n = x.numel();
  scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), a, y.data_ptr<float>(), n);
  return y;
}

TORCH_LIBRARY_IMPL(jlt_bench, CUDA, m) { m.impl("scale", &scale_cuda); }
"""

PLAIN_RUN = """\
import sys, time, torch
t0 = time.perf_counter()
from torch.utils.cpp_extension import load
load(name="jlt_bench_plain", sources=sys.argv[1:3], build_directory=sys.argv[3], is_python_module=False)
y = torch.ops.jlt_bench.scale(torch.ones(1 << 20, device="cuda"), 2.0)
torch.cuda.synchronize()
print(time.perf_counter() - t0, y[0].item())
"""


def write(folder: Path, c: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scale.cpp").write_text(CPP)
    (folder / "scale.cu").write_text(CU.replace("{C}", str(c)))


def jitlab_step(folder: Path, c: int, engine: str = "auto") -> tuple[float, str]:
    """Edit, load, run on CUDA: the seconds until the new result is there (checked), and the engine that built it."""
    write(folder, c)
    t0 = time.perf_counter()
    m = jitlab.load(folder, engine=engine)
    y = torch.ops.jlt_bench.scale(torch.ones(1 << 20, device="cuda"), 2.0)
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    assert y[0].item() == 2.0 + c, f"jitlab ran an old version: {y[0].item()} for C={c}"
    return seconds, m.build.engine


def plain_step(folder: Path, build: Path, c: int) -> tuple[float, float]:
    """Edit, then a new process that loads and runs it: (seconds after import torch, process wall seconds)."""
    write(folder, c)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", PLAIN_RUN, str(folder / "scale.cpp"), str(folder / "scale.cu"),
                          str(build)], capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    inner, value = map(float, out.stdout.split()[-2:])
    assert value == 2.0 + c, f"plain load ran an old version: {value} for C={c}"
    return inner, wall


def main() -> None:
    if not torch.cuda.is_available():
        sys.exit("op_loop.py needs a CUDA GPU (it runs the op on CUDA)")
    work = Path(tempfile.mkdtemp(prefix="jitlab-oploop-"))
    os.environ.setdefault("JITLAB_CACHE_DIR", str(work / "cache"))
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; work folder {work}")
    cold, engine = jitlab_step(work / "jit", 0)
    steps = [jitlab_step(work / "jit", c) for c in (1, 2, 3, 4)]
    edits, engines = [s for s, _ in steps], {e for _, e in steps} | {engine}
    nvcc_edits = [jitlab_step(work / "jit", c, engine="nvcc")[0] for c in (5, 6, 7)][1:]  # the first: the switch
    (work / "plain-build").mkdir()
    plain_cold = plain_step(work / "plain", work / "plain-build", 0)
    plain_edits = [plain_step(work / "plain", work / "plain-build", c) for c in (1, 2)]
    jit_edit = statistics.median(edits)
    plain_inner = statistics.median(e[0] for e in plain_edits)
    plain_wall = statistics.median(e[1] for e in plain_edits)
    print(f"{'step':<34}{'jitlab (s)':>12}{'plain load (s)':>16}{'ratio':>8}")
    print(f"{'cold (precompiled headers exist)':<34}{cold:>12.2f}{plain_cold[0]:>16.2f}{plain_cold[0] / cold:>8.1f}")
    print(f"{'kernel-body edit → torch.ops':<34}{jit_edit:>12.2f}{plain_inner:>16.2f}{plain_inner / jit_edit:>8.1f}")
    print(f"{'  plain in a new process (wall)':<34}{jit_edit:>12.2f}{plain_wall:>16.2f}{plain_wall / jit_edit:>8.1f}")
    nvcc_edit = statistics.median(nvcc_edits)
    print(f"{'  jitlab, engine=nvcc':<34}{nvcc_edit:>12.2f}{plain_inner:>16.2f}{plain_inner / nvcc_edit:>8.1f}")
    target = 0.4 if engines == {"nvrtc-torch"} else 2.5
    print(f"jitlab engine: {', '.join(sorted(engines))}; edits: {', '.join(f'{e:.2f}' for e in edits)} s; "
          f"target ≤ {target} s: {'met' if jit_edit <= target else 'NOT met'}")


if __name__ == "__main__":
    main()
