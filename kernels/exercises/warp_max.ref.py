"""Exercise warp_max (lesson 03): the max of every 256-element block of x, by warp shuffles."""
import torch

TITLE = "warp shuffle reduction (max)"
LESSON = "03_reduction"
ORDER = 3  # its place in the lesson
NUDGE = ("A shuffle reads another lane's value. How many halving steps reduce 32 lanes to one, "
         'and what value should a lane past the end hold so it never wins a max?')
HINT = ("In warp_reduce_max: for (int k = 16; k > 0; k /= 2) v = fmaxf(v, __shfl_down_sync(0xffffffff, v, k)); "
        "and a lane past the end must hold -INFINITY (the identity of max), not 0.")
# Size 1 and 31 have a single, partial warp; x < 0 there, so a 0 for the missing lanes shows.
SIZES = [1, 31, 32, 33, 256, 1000, 100_003]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, generator=g)
    if size < 32:
        x = -x.abs() - 1  # all negative: the padding value matters
    return {"x": x.to(device)}


def reference(inp):
    x = inp["x"]
    n = x.numel()
    blocks = (n + 255) // 256
    padded = torch.full((blocks * 256,), float("-inf"), device=x.device)
    padded[:n] = x
    return padded.view(blocks, 256).amax(dim=1)


def run(k, inp):
    x = inp["x"]
    n = x.numel()
    blocks = (n + 255) // 256
    out = torch.empty(blocks, device=x.device)
    k.warp_max(out, x, n, grid=blocks, block=256)
    return out
