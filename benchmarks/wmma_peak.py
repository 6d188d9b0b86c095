"""WMMA's ceiling on this GPU, fp16 and bf16: fragments in registers, nothing but mma_sync in the loop.

    python benchmarks/wmma_peak.py

Prints TFLOP/s for each dtype beside cuBLAS (torch.matmul, 4096^3) in the same run: the gap between
a WMMA kernel and cuBLAS that no shared-memory pipeline can close (on Hopper cuBLAS uses wgmma).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jitlab

ITERS = 4096  # mma_sync rounds per warp: ~1 ms per launch on an H100
WARPS = 8  # per block


def median_ms(fn, reps: int = 15) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def main() -> int:
    k = jitlab.load(Path(__file__).with_name("wmma_peak.cu"))
    props = torch.cuda.get_device_properties(0)
    blocks = props.multi_processor_count * 4
    print(f"GPU: {props.name}, {props.multi_processor_count} SMs; {blocks} blocks of {WARPS} warps, {ITERS} rounds")
    for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        if dtype == torch.bfloat16 and torch.cuda.get_device_capability() < (8, 0):
            continue
        a = torch.randn(2 * 256, device="cuda").to(dtype)
        b = torch.randn(4 * 256, device="cuda").to(dtype)
        out = torch.empty(blocks * WARPS * 8 * 256, device="cuda")
        kernel = getattr(k, f"wmma_peak_{name}")
        ms = median_ms(functools.partial(kernel, out, a, b, ITERS, grid=blocks, block=WARPS * 32))
        wmma = blocks * WARPS * ITERS * 8 * 2 * 16 ** 3 / ms / 1e9
        x = torch.randn(4096, 4096, device="cuda").to(dtype)
        y = torch.randn(4096, 4096, device="cuda").to(dtype)
        cublas = 2 * 4096 ** 3 / median_ms(functools.partial(torch.matmul, x, y)) / 1e9
        print(f"{name}: WMMA in registers {wmma:6.0f} TFLOP/s · cuBLAS 4096^3 {cublas:6.0f} TFLOP/s · "
              f"ratio {wmma / cublas:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
