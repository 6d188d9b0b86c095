"""CPU emulator benchmark: how long 2^20 GPU threads take on this CPU, and how long a build takes.

What it measures (median of ``--repeat`` runs, each result checked before its time is kept):

* launches of 2^20 threads (4096 blocks x 256): a vector add (no barrier), the lessons'
  shared-memory tree sum (9 ``__syncthreads`` and an ``atomicAdd`` per block) and a warp-shuffle sum
  (5 ``__shfl_down_sync`` per thread, an ``atomicAdd`` per warp); the target is 1 s with barriers
* the naive matmul at n = 512 (a thread an element, 512 multiply-adds reading two tensors, no barrier)
* a 16x16-tiled matmul at n = 128, 256, 512 (n/16 tiles, 2 ``__syncthreads`` each, per thread); the
  target is 0.3 s at 512 (2^18 threads x 64 barrier phases = 16.8 M fiber switches; 2 x 512^3 = 268 M
  shared-memory loads)
* the same tree sum under ``emulator_run.checking()`` (what ``jitlab.check`` runs: the race detector on
  every shared-memory and output access)
* builds in a fresh cache: the runtime object (once per toolchain), then one exercise's starting code
  (``vadd_bounds``, the target is 2 s) and its edit (a changed constant: a new build, runtime cached)

Napkin math: 2^20 threads x 10 barrier phases = 10.5 M fiber switches there and back; at ~20-40 ns a
round trip (two saved register sets, a cold stack line) that is 0.2-0.4 s of the tree sum on one core.

    python benchmarks/emulator.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KERNELS = r"""
__global__ void vadd(float* c, const float* a, const float* b, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i];
}
__global__ void tree_sum(float* out, const float* x, int n) {
    __shared__ float s[256];
    int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
    s[t] = i < n ? x[i] : 0.0f;
    __syncthreads();
    for (int k = blockDim.x / 2; k > 0; k /= 2) {
        if (t < k) s[t] += s[t + k];
        __syncthreads();
    }
    if (t == 0) atomicAdd(out, s[0]);
}
__global__ void shuffle_sum(float* out, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    for (int o = 16; o > 0; o /= 2) v += __shfl_down_sync(0xffffffff, v, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(out, v);
}
__global__ void matmul_naive(float* c, const float* a, const float* b, int n) {
    int row = blockIdx.y * blockDim.y + threadIdx.y, col = blockIdx.x * blockDim.x + threadIdx.x;
    float acc = 0.0f;
    for (int k = 0; k < n; ++k) acc += a[row * n + k] * b[k * n + col];
    c[row * n + col] = acc;
}
#define TILE 16
__global__ void matmul_tiled(float* c, const float* a, const float* b, int n) {
    __shared__ float as[TILE][TILE], bs[TILE][TILE];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += TILE) {
        as[ty][tx] = a[row * n + k0 + tx];
        bs[ty][tx] = b[(k0 + ty) * n + col];
        __syncthreads();
        for (int k = 0; k < TILE; ++k) acc += as[ty][k] * bs[k][tx];
        __syncthreads();
    }
    c[row * n + col] = acc;
}
"""


def median_seconds(fn, check, repeat: int) -> float:
    """The median wall time of ``fn()`` over ``repeat`` runs; ``check()`` must hold after each."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        assert check(), "wrong result: no time is reported for a wrong kernel"
    return statistics.median(times)


def launches(repeat: int) -> list[tuple[str, float]]:
    import torch

    import jitlab
    from jitlab.jit import emulator_run

    folder = Path(tempfile.mkdtemp())
    (folder / "bench.cu").write_text(KERNELS)
    k = jitlab.load(folder / "bench.cu", device="cpu")
    n = 1 << 20
    a, b, c = torch.ones(n), torch.ones(n), torch.zeros(n)
    out = torch.zeros(1)
    grid = dict(grid=n // 256, block=256)

    def summed(kernel):
        def run():
            out.zero_()
            kernel(out, a, n, **grid)
        return run

    def checked():
        with emulator_run.checking():
            summed(k.tree_sum)()

    rows = [("vadd, 2^20 threads (no barrier)", median_seconds(lambda: k.vadd(c, a, b, n, **grid),
                                                                lambda: bool((c == 2).all()), repeat)),
            ("tree sum, 2^20 threads, 9 __syncthreads", median_seconds(summed(k.tree_sum), lambda: out.item() == n,
                                                                         repeat)),
            ("shuffle sum, 2^20 threads, 5 __shfl_down_sync", median_seconds(summed(k.shuffle_sum),
                                                                             lambda: out.item() == n, repeat)),
            ("tree sum under checking() (race detector)", median_seconds(checked, lambda: out.item() == n,
                                                                                    repeat))]
    m = 512
    x, y, z = torch.randn(m, m), torch.randn(m, m), torch.zeros(m, m)
    want = x @ y
    rows.append((f"naive matmul {m}x{m} (a thread an element, no barrier)",
                 median_seconds(lambda: k.matmul_naive(z, x, y, m, grid=(m // 16, m // 16), block=(16, 16)),
                                lambda: bool(torch.allclose(z, want, rtol=1e-3, atol=1e-3)), repeat)))
    for m in (128, 256, 512):
        x, y, z = torch.randn(m, m), torch.randn(m, m), torch.zeros(m, m)
        want = x @ y
        rows.append((f"tiled matmul {m}x{m} (16x16 tiles, {2 * m // 16} __syncthreads)",
                     median_seconds(lambda: k.matmul_tiled(z, x, y, m, grid=(m // 16, m // 16), block=(16, 16)),
                                    lambda: bool(torch.allclose(z, want, rtol=1e-3, atol=1e-3)), repeat)))
    return rows


def builds() -> list[tuple[str, float]]:
    os.environ["JITLAB_CACHE_DIR"] = tempfile.mkdtemp()  # a fresh cache: nothing built yet
    import jitlab
    from jitlab.jit.engines import emulator

    t0 = time.perf_counter()
    emulator.runtime_object()
    runtime = time.perf_counter() - t0
    src = (ROOT / "kernels" / "exercises" / "vadd_bounds.cu").read_text()
    folder = Path(tempfile.mkdtemp())
    path = folder / "vadd_bounds.cu"
    path.write_text(src)
    t0 = time.perf_counter()
    jitlab.build(path, device="cpu")
    first = time.perf_counter() - t0
    path.write_text(src + "\n// an edit\n")
    t0 = time.perf_counter()
    jitlab.build(path, device="cpu")
    edit = time.perf_counter() - t0
    return [("build: the runtime object (once per toolchain)", runtime),
            ("build: exercise vadd_bounds (runtime cached)", first),
            ("build: the same after an edit", edit)]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rows = builds() + launches(args.repeat)
    load = os.getloadavg()[0]
    cores = len(os.sched_getaffinity(0))
    print(f"CPU emulator on {cores} cores (1-min load {load:.1f}), median of {args.repeat}:")
    for what, seconds in rows:
        print(f"  {what:<58} {seconds:7.3f} s")


if __name__ == "__main__":
    main()
