"""Exercise scan_kogge_stone (lesson 08): each block of 256 elements scanned on its own, Kogge-Stone."""
import torch

TITLE = "Kogge-Stone steps without a race"
LESSON = "08_scan_histogram"
ORDER = 1  # its place in the lesson
NUDGE = ("At each step a thread reads a neighbour's value that another thread may be overwriting in "
         'the same step. How can reads and writes of one step go to different places?')
HINT = ("Use __shared__ float buf[2][KS_BLOCK] and int cur = 0; in each step: float v = buf[cur][t]; "
        "if (t >= d) v += buf[cur][t - d]; buf[cur ^ 1][t] = v; cur ^= 1; __syncthreads(); "
        "and write out[i] = buf[cur][t] at the end.")
SIZES = [1, 2, 255, 256, 257, 1000, 100_003]
# Multiples of 1/4 in [-2, 2]: every partial sum is exact in fp32, in any order, so the check is exact.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}
BLOCK = 256


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": (torch.randint(-8, 9, (size,), generator=g).float() / 4).to(device)}


def reference(inp):
    x = inp["x"]
    n = x.numel()
    blocks = -(-n // BLOCK)
    padded = torch.zeros(blocks * BLOCK, device=x.device)
    padded[:n] = x
    return padded.view(blocks, BLOCK).cumsum(1).reshape(-1)[:n]


def run(k, inp):
    x = inp["x"]
    n = x.numel()
    out = torch.empty_like(x)
    k.scan_kogge_stone(out, x, n, grid=-(-n // BLOCK), block=BLOCK)
    return out
