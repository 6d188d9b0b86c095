"""Exercise histogram_private (lesson 08): per-block shared-memory bins, one global atomic per bin."""
import torch

TITLE = "a privatized histogram: barrier and atomic flush"
LESSON = "08_scan_histogram"
ORDER = 5  # its place in the lesson
NUDGE = ("Two questions: is every thread done counting into the block's bins when the flush "
         'begins, and what happens when many blocks write the same global bin?')
HINT = ("Add __syncthreads() after the counting loop, and flush with atomicAdd(&hist[b], bins[b]) "
        "instead of hist[b] = bins[b]: all blocks add into the same 256 bins.")
SIZES = [1, 100, 4096, 100_003]  # 100_003 bytes spread over 64 blocks: plain stores keep one block's counts
# Seed 0: every byte 200 (the contended bin); seed 1: random bytes.
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
    k.histogram_private(hist, x, n, grid=max(1, min(64, -(-n // 256))), block=256)
    return hist.long()  # bincount counts in int64
