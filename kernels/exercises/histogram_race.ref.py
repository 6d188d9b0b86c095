"""Exercise histogram_race (lesson 08): a 256-bin histogram of bytes, one global increment per byte."""
import torch

TITLE = "the histogram race: atomicAdd"
LESSON = "08_scan_histogram"
ORDER = 4  # its place in the lesson
NUDGE = ('Two threads that see the same value both read the old count, add one and write it '
         'back. What does CUDA offer to make that read-add-write one step?')
HINT = "Replace hist[x[i]] += 1 by atomicAdd(&hist[x[i]], 1): one indivisible load-add-store."
SIZES = [1, 100, 4096, 100_003]
# Seed 0: every byte 200. The lanes of a warp then always collide: 32 plain increments of one bin
# count 1, on every run. Seed 1: random bytes (collisions are rarer there, but happen).
SEEDS = [0, 1]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    if seed == 0:
        x = torch.full((size,), 200, dtype=torch.uint8)
    else:
        x = torch.randint(0, 256, (size,), generator=g, dtype=torch.uint8)
    return {"x": x.to(device)}


def reference(inp):
    return torch.bincount(inp["x"], minlength=256)


def run(k, inp):
    x = inp["x"]
    n = x.numel()
    hist = torch.zeros(256, dtype=torch.int32, device=x.device)  # the kernel adds into it
    k.histogram_race(hist, x, n, grid=-(-n // 256), block=256)
    return hist.long()  # bincount counts in int64
