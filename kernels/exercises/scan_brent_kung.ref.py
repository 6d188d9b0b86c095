"""Exercise scan_brent_kung (lesson 08): each block of 512 elements scanned on its own, Brent-Kung."""
import torch

TITLE = "Brent-Kung: the down-sweep's index math"
LESSON = "08_scan_histogram"
ORDER = 2  # its place in the lesson
NUDGE = ('The up-sweep builds sums at strides 1, 2, 4 ...; the down-sweep walks back. '
         'Which index does each step read, and which one must it add to?')
HINT = ("In the down-sweep loop, after its __syncthreads(): const int k = (t + 1) * 2 * d - 1; "
        "if (k + d < BK_TILE) s[k + d] += s[k];")
SIZES = [1, 2, 511, 512, 513, 1000, 100_003]
# Multiples of 1/4 in [-2, 2]: every partial sum is exact in fp32, in any order, so the check is exact.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}
TILE = 512


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": (torch.randint(-8, 9, (size,), generator=g).float() / 4).to(device)}


def reference(inp):
    x = inp["x"]
    n = x.numel()
    blocks = -(-n // TILE)
    padded = torch.zeros(blocks * TILE, device=x.device)
    padded[:n] = x
    return padded.view(blocks, TILE).cumsum(1).reshape(-1)[:n]


def run(k, inp):
    x = inp["x"]
    n = x.numel()
    out = torch.empty_like(x)
    k.scan_brent_kung(out, x, n, grid=-(-n // TILE), block=TILE // 2)
    return out
