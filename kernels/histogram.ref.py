"""Reference for histogram.cu: a 256-bin histogram of uint8 data, torch.bincount(x, minlength=256).

The kernels write int64 counts, bincount's own dtype, so the output is compared as is (integers
compare exactly). run is version 1 (global atomics); VARIANTS holds versions 2 and 3.
"""
import torch

from jitlab.judge.refs import sm_layout

# 0 (an all-zero histogram, never launched), 1, the uint4 tails around 16, a bin count and one more,
# a prime, and 2^20 + 13 so that each block of a full wave gets a share.
SIZES = [0, 1, 3, 15, 16, 17, 255, 257, 4097, 100_003, 1_048_589]
BENCH_SIZES = [1 << 26]
# Seed 0: uniform random bytes. Seed 1: the same, as x[3:] of a longer tensor (not 16-byte aligned:
# the uint4 loads must start after a scalar head). Seed 2: every byte 200, the contention case (all
# increments on one bin) and a check that bytes above 127 are read unsigned.
SEEDS = [0, 1, 2]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    offset = 3 if seed == 1 else 0
    if seed == 2:
        x = torch.full((size,), 200, dtype=torch.uint8)
    else:
        x = torch.randint(0, 256, (size + offset,), generator=g, dtype=torch.uint8)
    return {"x": x.to(device)[offset:]}  # slice after the move: the copy would be aligned again


def reference(inp):
    return torch.bincount(inp["x"], minlength=256)  # int64


def _grid(x, bytes_per_thread):
    """One resident wave of 256-thread blocks (8 per SM on an H100), fewer for small n; at least 1."""
    sms, threads = sm_layout(x.device)
    wave = sms * (threads // 256)
    return max(1, min(wave, -(-x.numel() // (256 * bytes_per_thread))))


def _launch(kernel, x, bytes_per_thread):
    hist = torch.zeros(256, dtype=torch.int64, device=x.device)  # the kernels add into it
    if x.numel():
        kernel(hist, x, x.numel(), grid=_grid(x, bytes_per_thread), block=256)
    return hist


def run(k, inp):
    """Version 1: one global atomicAdd per byte."""
    return _launch(k.histogram_kernel1, inp["x"], 1)


def run2(k, inp):
    """Version 2: a shared-memory histogram per block, one global atomic per bin per block."""
    return _launch(k.histogram_kernel2, inp["x"], 1)


def run3(k, inp):
    """Version 3: uint4 loads, a sub-histogram per warp, runs of equal bytes in one atomic."""
    return _launch(k.histogram_kernel3, inp["x"], 32)


VARIANTS = {"histogram_kernel2": run2, "histogram_kernel3": run3}


def bytes_moved(inp):
    """Read x once (1 byte per element) and write 256 int64 counts."""
    return inp["x"].numel() + 256 * 8


def flops(inp):
    """One increment per byte (integer ops, counted as one op each for the roofline)."""
    return inp["x"].numel()
