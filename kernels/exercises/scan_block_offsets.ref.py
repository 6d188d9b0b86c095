"""Exercise scan_block_offsets (lesson 08): block scans, a scan of the block sums, and the add back."""
import torch

TITLE = "a multi-block scan: which offset each block adds"
LESSON = "08_scan_histogram"
ORDER = 3  # its place in the lesson
NUDGE = ("Each block scanned its own part only. Which blocks' totals come "
         'before block b, and where is their sum stored?')
HINT = ("Block b adds the total of blocks 0 .. b - 1, which is offsets[b - 1]; block 0 adds nothing: "
        "if (i < n && blockIdx.x > 0) out[i] += offsets[blockIdx.x - 1];")
SIZES = [1, 255, 256, 257, 1000, 100_003]
# Multiples of 1/4 in [-2, 2]: every partial sum is exact in fp32, in any order, so the check is exact.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}
BLOCK = 256


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-8, 9, (size,), generator=g).float() / 4
    x[0] = 1.0  # not 0: at n = 1 a wrong offset shows too
    return {"x": x.to(device)}


def reference(inp):
    return torch.cumsum(inp["x"], 0)


def run(k, inp):
    x = inp["x"]
    n = x.numel()
    blocks = -(-n // BLOCK)
    out = torch.empty_like(x)
    block_sums = torch.empty(blocks, device=x.device)
    k.scan_block(out, block_sums, x, n, grid=blocks, block=BLOCK)
    offsets = torch.cumsum(block_sums, 0)  # a few hundred numbers: torch scans them
    k.scan_add_offsets(out, offsets, n, grid=blocks, block=BLOCK)
    return out
