"""Dispatch edit loop (GPU): an AT_DISPATCH kernel template, jitlab vs plain ``load_inline``, same run.

The snippet is the way extension authors write one: ``template <typename scalar_t> __global__`` kernel,
launched in ``AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, ...)`` on torch's current stream
behind ``at::cuda::OptionalCUDAGuard``, then ``C10_CUDA_KERNEL_LAUNCH_CHECK()``. Two forms: bindings
generated from the signature (``functions=``) and the snippet's own ``PYBIND11_MODULE``.

Steps (each = write the file, build, load, call once on the GPU; every result is checked on float,
double, half and bfloat16 after its time is taken, and a wrong one stops the run):

* pch        jitlab only: the first build on a fresh folder of precompiled torch headers
* cold       a new snippet with the headers made (fresh object cache)
* edit       a kernel-body edit (a constant), mean of two
* host edit  a host-function edit (the block size)

``--no-plain`` leaves ``load_inline`` out (its steps take ~50 s each; the figures of a run with it
are in docs/benchmarks.md).

Targets (issue "Every way people write CUDA for PyTorch runs unchanged", H100): edit <= 2 s, host edit <= 5 s.

    PYTHONPATH=. python benchmarks/dispatch_loop.py [--form functions|module|both] [--no-plain]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SNIPPET = """\
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

template <typename scalar_t>
__global__ void scale_kernel(const scalar_t* __restrict__ x, scalar_t* __restrict__ y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * static_cast<scalar_t>({C});
}

torch::Tensor scale(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
  const at::cuda::OptionalCUDAGuard guard(device_of(x));
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  const int block = {B};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, xc.scalar_type(), "scale", [&] {
    scale_kernel<scalar_t><<<(n + block - 1) / block, block, 0, at::cuda::getCurrentCUDAStream()>>>(
        xc.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(), n);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""
MODULE = '\nPYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def("scale", &scale, "x * C");\n}\n'
DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
X: dict = {}  # dtype -> input, made in main() (on the GPU)
_names = itertools.count()


def source(form: str, c: int, b: int = 256) -> str:
    return SNIPPET.replace("{C}", str(c)).replace("{B}", str(b)) + (MODULE if form == "module" else "")


def check(m, c: int, who: str) -> None:
    """Every dtype must give x * c: a time is only printed for a right kernel."""
    for dt, x in X.items():
        if not torch.equal(m.scale(x), x * c):
            raise AssertionError(f"{who}: wrong result for {dt} after the edit to {c}")


class Jitlab:
    """jitlab.load on one file, rewritten for each step."""

    def __init__(self, form: str, work: Path):
        self.form, self.path = form, work / f"dispatch_{form}.cu"

    def step(self, c: int, b: int = 256) -> float:
        import jitlab

        self.path.write_text(source(self.form, c, b))
        t0 = time.perf_counter()
        m = jitlab.load(self.path)
        m.scale(X[torch.float32])
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        check(m, c, "jitlab")
        self.units = {u["name"].split(".")[-2]: u["cached"] for u in m.build.manifest.units}
        self.sets = {u["name"]: u["headers"] for u in m.build.manifest.units if u["headers"]}
        self.notes = m.build.notes
        return dt


class Plain:
    """torch.utils.cpp_extension.load_inline: a new module name per step, so each step loads the new
    code (a fixed name would return the module already imported)."""

    def __init__(self, form: str, work: Path):
        self.form, self.work = form, work

    def step(self, c: int, b: int = 256) -> float:
        from torch.utils.cpp_extension import load_inline

        name = f"plain_dispatch_{self.form}_{os.getpid()}_{next(_names)}"
        folder = self.work / name
        folder.mkdir()
        functions = None if self.form == "module" else ["scale"]
        cpp = "" if self.form == "module" else "torch::Tensor scale(torch::Tensor x);"
        t0 = time.perf_counter()
        m = load_inline(name=name, cpp_sources=cpp, cuda_sources=source(self.form, c, b), functions=functions,
                        build_directory=str(folder))
        m.scale(X[torch.float32])
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        check(m, c, "load_inline")
        return dt


def measure(form: str, work: Path, plain_too: bool = True) -> tuple[dict, dict, list[str]]:
    """Each step both ways, interleaved so that drifting machine load hits both alike."""
    os.environ["JITLAB_PCH_DIR"] = str(work / "pch")
    os.environ["JITLAB_CACHE_DIR"] = str(work / f"cache-pch-{form}")
    j, p, notes = {}, {}, []
    jit, plain = Jitlab(form, work), Plain(form, work)
    maybe = plain.step if plain_too else (lambda *a: None)
    j["pch"] = jit.step(1)
    os.environ["JITLAB_CACHE_DIR"] = str(work / f"cache-{form}")  # fresh objects, the headers kept
    j["cold"], p["cold"] = jit.step(4), maybe(4)
    je, pe = [], []
    for c in (2, 3):
        pe.append(maybe(c))
        je.append(jit.step(c))
        notes.append(f"edit to {c}: units compiled {sorted(k for k, v in jit.units.items() if not v)}")
    j["edit"], p["edit"] = sum(je) / 2, (sum(pe) / 2 if plain_too else None)
    p["host edit"], j["host edit"] = maybe(3, 128), jit.step(3, 128)
    notes.append(f"host edit: units compiled {sorted(k for k, v in jit.units.items() if not v)}; "
                 f"header sets {jit.sets}; build notes {jit.notes}")
    return j, {k: v for k, v in p.items() if v is not None}, notes


def table(rows: list[tuple[str, dict, dict]]) -> str:
    lines = [f"{'form':<22}{'step':<11}{'jitlab (s)':>12}{'load_inline (s)':>17}{'ratio':>9}"]
    for name, j, p in rows:
        for step, t in j.items():
            if step in p:
                lines.append(f"{name:<22}{step:<11}{t:>12.3f}{p[step]:>17.3f}{p[step] / t:>8.1f}x")
            else:
                lines.append(f"{name:<22}{step:<11}{t:>12.3f}{'-':>17}{'':>9}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--form", choices=("functions", "module", "both"), default="both")
    ap.add_argument("--no-plain", action="store_true", help="leave plain load_inline out (jitlab's steps only)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("dispatch_loop.py needs a CUDA GPU (and a CUDA build of torch)")
    X.update({dt: torch.randn(1 << 20, device="cuda").to(dt) for dt in DTYPES})
    forms = ("functions", "module") if args.form == "both" else (args.form,)
    rows = []
    with tempfile.TemporaryDirectory(prefix="jitlab-dispatch-") as tmp:
        for form in forms:
            work = Path(tmp) / form
            work.mkdir()
            j, p, notes = measure(form, work, plain_too=not args.no_plain)
            rows.append((f"dispatch ({form})", j, p))
            for n in notes:
                print(f"{form}: {n}")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, ratio = load_inline / jitlab")
    print(table(rows))


if __name__ == "__main__":
    main()
