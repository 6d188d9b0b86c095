"""Edit-loop benchmark: jitlab vs plain ``load_inline`` (the seeds' way), measured in the same run.

For each snippet it measures, with a fresh cache:

* cold     first build and load in a fresh process' state
* edit     change a constant in the kernel body, reload in the same process, run, check the new result
           (mean of two successive edits)
* revert   go back to the previous source, reload in the same process
* newproc  a new Python process loading the cached build (time after ``import torch``)

and prints a table with the ratio plain / jitlab. On a GPU machine it runs a kernel-only CUDA
snippet and seed 004's torch-style ``square_matrix``, plus the per-call launch overhead; on a
machine without a GPU (``--cpp``) it runs a kernel-only and a torch-style C++ snippet, and
(``--compile-only``) seed 004 compile-only for sm_90 (jitlab only: plain ``load_inline`` cannot
compile without linking against a CUDA torch).

    python benchmarks/edit_loop.py                  # GPU
    python benchmarks/edit_loop.py --cpp            # CPU only
    python benchmarks/edit_loop.py --compile-only   # CPU only, torch-style CUDA compile-only
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# ---- the snippets, with a {C} placeholder that each edit changes -------------------------------
KERNEL_CU = """
__global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = {C}f * x[i];
}
"""
# The same kernel the seeds' way: a torch-style host function and pybind bindings.
PLAIN_KERNEL_CU = """
__global__ void scale_kernel(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = {C}f * x[i];
}
torch::Tensor scale(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), x.data_ptr<float>(), n);
    return y;
}
void scale_out(torch::Tensor y, torch::Tensor x) {  // no allocation: the fair launch-overhead baseline
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), x.data_ptr<float>(), n);
}
"""
SQUARE_CU = (ROOT / "kernels" / "square_matrix.cu").read_text().replace(
    "result[idx] = matrix[idx] * matrix[idx];", "result[idx] = {C}f * matrix[idx] * matrix[idx];").replace(
    "dim3 threads_per_block(16, 16);", "dim3 threads_per_block(16, {H});")  # {H}: a host-only edit
# Two kernels on torch's current stream through ATen/cuda/CUDAContext.h, and __constant__ memory.
STREAM_CU = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
__global__ void scale_kernel(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = {C}f * x[i];
}
__global__ void square_kernel(float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] * y[i] / ({C}f * {C}f) * {C}f;
}
torch::Tensor scale(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    auto stream = at::cuda::getCurrentCUDAStream();
    scale_kernel<<<(n + 255) / 256, 256, 0, stream>>>(y.data_ptr<float>(), x.data_ptr<float>(), n);
    square_kernel<<<(n + 255) / 256, 256, 0, stream>>>(y.data_ptr<float>(), n);
    return y / x;
}
"""
CONSTANT_CU = """
#include <torch/extension.h>
__constant__ float c_scale[1];
__global__ void scale_kernel(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = c_scale[0] * x[i] * {C}f;
}
torch::Tensor scale(torch::Tensor x) {
    const float one = 1.0f;
    cudaMemcpyToSymbol(c_scale, &one, sizeof(float));
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), x.data_ptr<float>(), n);
    return y;
}
"""
KERNEL_CPP = """
void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = {C}f * x[i]; }
"""
PLAIN_CPP = """
torch::Tensor scale(torch::Tensor x) { auto y = torch::empty_like(x); auto* o = y.data_ptr<float>();
  auto* i = x.data_ptr<float>(); for (int64_t k = 0; k < x.numel(); ++k) o[k] = {C}f * i[k]; return y; }
"""
TORCH_CPP = """
#include <torch/extension.h>
torch::Tensor scale(torch::Tensor x) { auto y = torch::empty_like(x); auto* o = y.data_ptr<float>();
  auto* i = x.data_ptr<float>(); for (int64_t k = 0; k < x.numel(); ++k) o[k] = {C}f * i[k]; return y; }
"""


def src(template: str, c: int, h: int = 16) -> str:
    return template.replace("{C}", f"{c}.0").replace("{H}", str(h))


# ---- one step each way -------------------------------------------------------------------------
class Jitlab:
    """jitlab.load on a file that is rewritten for each edit."""

    label = "jitlab"

    def __init__(self, template: str, suffix: str, kind: str, device: str, work: Path):
        self.template, self.kind, self.device = template, kind, device
        self.path = work / f"bench_{kind}{suffix}"
        self.cache = work / "cache"
        os.environ["JITLAB_CACHE_DIR"] = str(self.cache)

    def step(self, c: int, h: int = 16) -> float:
        import jitlab

        self.path.write_text(src(self.template, c, h))
        t0 = time.perf_counter()
        m = self.module = jitlab.load(self.path)
        y = self.call(m)
        if self.device == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        check(y, c, self.kind)
        return dt

    def call(self, m):
        if self.kind == "square":
            return m.square_matrix(X[self.device])
        x = X[self.device].flatten()
        y = torch.empty_like(x)
        if self.kind in ("torchcpp", "torchcu"):
            return m.scale(x)
        if self.device == "cuda":
            m.scale(y, x, x.numel(), grid=(x.numel() + 255) // 256, block=256)
        else:
            m.scale(y, x, x.numel())
        return y

    def newproc(self) -> float:
        code = (f"import sys, time, os; sys.path.insert(0, {str(ROOT)!r}); import torch; t0 = time.perf_counter(); "
                f"import jitlab; m = jitlab.load({str(self.path)!r}); assert m.build.cached, 'not cached'; "
                f"print(time.perf_counter() - t0)")
        return _subprocess_time(code, {"JITLAB_CACHE_DIR": str(self.cache)})


class CompileOnly(Jitlab):
    """jitlab.build(compile_only=True) for sm_90: what a machine without a GPU (CI, this laptop) does."""

    def step(self, c: int, h: int = 16) -> float:
        import jitlab

        self.path.write_text(src(self.template, c, h))
        t0 = time.perf_counter()
        jitlab.build(self.path, compile_only=True, arch="sm_90")
        return time.perf_counter() - t0


def measure_compile_only(jit, work: Path) -> dict:
    """The torch-style steps compile-only: the precompiled headers and a cold build, a new snippet,
    a kernel-body edit (mean of two), a host-function edit, revert."""
    os.environ["JITLAB_PCH_DIR"] = str(work / "pch")
    j = {"pch+cold": jit.step(1)}
    jit.cache = work / "cache-co"
    os.environ["JITLAB_CACHE_DIR"] = str(jit.cache)
    j["cold"] = jit.step(4)
    j["edit"] = (jit.step(2) + jit.step(3)) / 2
    j["host edit"] = jit.step(3, 8)
    j["revert"] = jit.step(4)
    return j


class Plain:
    """torch.utils.cpp_extension.load_inline called the seeds' way: fixed name, same build dir."""

    label = "load_inline"

    def __init__(self, template: str, kind: str, device: str, work: Path):
        self.template, self.kind, self.device = template, kind, device
        self.dir = work / f"plain_{kind}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.name = f"plain_{kind}_{os.getpid()}"

    def kwargs(self, c: int, h: int = 16) -> dict:
        fn = "square_matrix" if self.kind == "square" else "scale"
        decl = "torch::Tensor square_matrix(torch::Tensor matrix);" if self.kind == "square" else "torch::Tensor scale(torch::Tensor x);"
        fns = [fn]
        if self.device == "cuda" and self.kind == "kernel":
            decl += "\nvoid scale_out(torch::Tensor y, torch::Tensor x);"
            fns.append("scale_out")
        if self.device == "cuda":
            return dict(name=self.name, cpp_sources=decl, cuda_sources=src(self.template, c, h), functions=fns,
                        build_directory=str(self.dir), extra_cuda_cflags=["-O2"])
        return dict(name=self.name, cpp_sources=src(self.template, c), functions=[fn], build_directory=str(self.dir))

    def step(self, c: int, h: int = 16) -> float:
        from torch.utils.cpp_extension import load_inline

        t0 = time.perf_counter()
        m = self.module = load_inline(**self.kwargs(c, h))
        y = getattr(m, "square_matrix" if self.kind == "square" else "scale")(X[self.device] if self.kind == "square" else X[self.device].flatten())
        if self.device == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        check(y, c, self.kind, stale_ok=True)
        return dt

    def newproc(self) -> float:
        kw = self.kwargs(1)
        code = (f"import time, torch; t0 = time.perf_counter(); from torch.utils.cpp_extension import load_inline; "
                f"m = load_inline(**{kw!r}); print(time.perf_counter() - t0)")
        return _subprocess_time(code, {})


STALE: list[str] = []


def check(y, c: int, kind: str, stale_ok: bool = False) -> None:
    x = X[y.device.type if y.device.type == "cuda" else "cpu"]
    want = c * x * x if kind == "square" else c * x.flatten()
    if not torch.allclose(y.reshape(want.shape), want):
        if stale_ok:
            STALE.append(f"{kind}: load_inline returned a result for another version of the source (stale module)")
            return
        raise AssertionError(f"{kind}: wrong result after edit to {c}")


def _subprocess_time(code: str, env: dict) -> float:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, **env})
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return float(out.stdout.strip().splitlines()[-1])


class NoPlain:
    """``--no-plain``: torch's ``load_inline`` left out (its steps take ~30 s each on the H100)."""

    module = None

    def step(self, c: int, h: int = 16) -> float:
        return float("nan")

    def newproc(self) -> float:
        return float("nan")


def measure(jit, plain) -> tuple[dict, dict]:
    """Each step for both ways, interleaved so that drifting machine load hits both alike.

    cold, edit (mean of two successive edits), revert to the first version, new process.
    """
    j, p = {}, {}
    j["cold"], p["cold"] = jit.step(1), plain.step(1)
    pe, je = [], []
    for c in (2, 3):
        pe.append(plain.step(c))
        je.append(jit.step(c))
    j["edit"], p["edit"] = sum(je) / 2, sum(pe) / 2
    j["revert"], p["revert"] = jit.step(1), plain.step(1)
    j["newproc"], p["newproc"] = jit.newproc(), plain.newproc()
    return j, p


def measure_torch_style(jit, plain, work: Path) -> tuple[dict, dict]:
    """The torch-style rows: making the precompiled header (jitlab only, once per toolchain), a cold
    build with it made, a kernel-body edit, a host-function edit, revert, and a new process."""
    os.environ["JITLAB_PCH_DIR"] = str(work / "pch")
    j, p = {}, {}
    j["pch+cold"] = jit.step(1)          # the precompiled header does not exist yet
    jit.cache = work / "cache-2"         # a fresh object cache, the precompiled header kept
    os.environ["JITLAB_CACHE_DIR"] = str(jit.cache)
    j["cold"], p["cold"] = jit.step(4), plain.step(4)
    je, pe = [], []
    for c in (2, 3):
        pe.append(plain.step(c))
        je.append(jit.step(c))
    j["edit"], p["edit"] = sum(je) / 2, sum(pe) / 2
    if "{H}" in jit.template:
        p["host edit"], j["host edit"] = plain.step(3, 8), jit.step(3, 8)
    j["revert"], p["revert"] = jit.step(4), plain.step(4)
    j["newproc"], p["newproc"] = jit.newproc(), plain.newproc()
    return j, p


def launch_overhead(jit_module, pybind_module) -> dict:
    """Per-call CPU time of a tiny launch: jitlab kernel-only vs a pybind load_inline function vs a torch op."""
    x = torch.randn(1024, device="cuda")
    y = torch.empty_like(x)

    def jit():
        jit_module.scale(y, x, 1024, grid=4, block=256)

    def pybind():
        pybind_module.scale_out(y, x)

    def torch_op():
        torch.mul(x, 3.0, out=y)

    res = {}
    for name, fn in [("jitlab kernel-only", jit), ("pybind load_inline", pybind), ("torch op", torch_op)]:
        for _ in range(200):
            fn()
        torch.cuda.synchronize()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            torch.cuda.synchronize()
            best = min(best, (time.perf_counter() - t0) / 2000 * 1e6)
        res[name] = best
    return res


def table(rows: list[tuple[str, dict, dict]]) -> str:
    lines = [f"{'snippet':<30}{'step':<11}{'jitlab (s)':>12}{'load_inline (s)':>17}{'ratio':>9}"]
    for name, j, p in rows:  # p is empty where plain load_inline was not run (nan under --no-plain)
        for step in j:
            if step not in p or p[step] != p[step]:
                lines.append(f"{name:<30}{step:<11}{j[step]:>12.3f}{'-':>17}{'':>9}")
                continue
            ratio = p[step] / j[step] if j[step] > 0 else float("inf")
            lines.append(f"{name:<30}{step:<11}{j[step]:>12.3f}{p[step]:>17.3f}{ratio:>8.1f}x")
    return "\n".join(lines)


X: dict[str, torch.Tensor] = {}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpp", action="store_true", help="C++ snippets on CPU (no GPU needed)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--compile-only", action="store_true",
                    help="seed 004 compile-only for sm_90, on a machine with nvcc and no GPU (jitlab only)")
    ap.add_argument("--torch-style-only", action="store_true",
                    help="GPU: only the torch-style rows (skip the kernel-only row and the launch overhead)")
    ap.add_argument("--no-plain", action="store_true",
                    help="GPU: jitlab's steps only (no load_inline, no launch overhead): to compare two trees")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jitlab-bench-"))
    X["cpu"] = torch.randn(64, 67)
    rows, results = [], {}
    if args.compile_only:
        print("seed 004 compile-only for sm_90 (no GPU used)")
        rows.append(("seed 004 compile-only", measure_compile_only(CompileOnly(SQUARE_CU, ".cu", "square", "cpu", work),
                                                                   work), {}))
    elif args.cpp or not torch.cuda.is_available():
        print("C++ snippets on CPU (no GPU used)")
        rows.append(("kernel-only C++ scale", *measure(Jitlab(KERNEL_CPP, ".cpp", "kernel", "cpu", work),
                                                        Plain(PLAIN_CPP, "kernel", "cpu", work))))
        rows.append(("torch-style C++ scale", *measure(Jitlab(TORCH_CPP, ".cpp", "torchcpp", "cpu", work),
                                                        Plain(PLAIN_CPP, "torchcpp", "cpu", work))))
    else:
        X["cuda"] = X["cpu"].cuda()
        print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
        if not args.torch_style_only:
            jk = Jitlab(KERNEL_CU, ".cu", "kernel", "cuda", work)
            pk = NoPlain() if args.no_plain else Plain(PLAIN_KERNEL_CU, "kernel", "cuda", work)
            rows.append(("kernel-only CUDA scale", *measure(jk, pk)))
            if not args.no_plain:
                results["launch_overhead_us"] = launch_overhead(jk.module, pk.module)
        ps = NoPlain() if args.no_plain else Plain(SQUARE_CU, "square", "cuda", work)
        rows.append(("seed 004 square_matrix", *measure_torch_style(
            Jitlab(SQUARE_CU, ".cu", "square", "cuda", work), ps, work)))
        for name, template in (("CUDAContext.h stream, 2 kernels", STREAM_CU), ("__constant__ memory", CONSTANT_CU)):
            jit = Jitlab(template, ".cu", "torchcu", "cuda", work)
            # jitlab only: plain load_inline needs a minute per build of these (the "jitlab today").
            rows.append((name, {"cold": jit.step(1), "edit": jit.step(2)}, {}))
    print(table(rows))
    if "launch_overhead_us" in results:
        lo = results["launch_overhead_us"]
        print("\nper-call launch overhead (µs, best of 5 x 2000 calls):")
        for k, v in lo.items():
            print(f"  {k:<22}{v:8.2f}")
        print(f"  jitlab / pybind ratio: {lo['jitlab kernel-only'] / lo['pybind load_inline']:.2f}x")
    for s in dict.fromkeys(STALE):
        print("note:", s)
    results["rows"] = [{"snippet": n, "jitlab": j, "load_inline": p} for n, j, p in rows]
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
