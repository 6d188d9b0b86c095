"""Exercise softmax_xor (lesson 07): warp all-reduce with __shfl_xor_sync, so every lane has max and sum."""
import torch

TITLE = "warp all-reduce: __shfl_xor_sync"
LESSON = "07_softmax_layernorm"
ORDER = 3  # its place in the lesson
NUDGE = ('After the reduction, which lanes hold the result, and which lanes read it '
         'afterwards? A different shuffle gives it to all of them.')
HINT = ("Replace __shfl_down_sync by __shfl_xor_sync in warp_max and warp_sum: lanes i and i ^ k swap, "
        "so after the 5 steps every lane holds the whole warp's result, not just lane 0.")
# (rows, cols); a size is rows * cols. With one column only lane 0 holds data, and the down-shuffle is
# right by luck; every wider row needs the result in every lane.
SHAPES = {r * c: (r, c) for r, c in [(3, 1), (4, 31), (4, 33), (8, 100), (5, 1000)]}
SIZES = list(SHAPES)
TOLERANCE = {"rtol": 1e-5, "atol": 1e-8}


def inputs(size, seed, device):
    rows, cols = SHAPES.get(size, (1, size))
    g = torch.Generator().manual_seed(seed)
    return {"x": (torch.randn(rows, cols, generator=g) * 3.0).to(device)}


def reference(inp):
    return torch.softmax(inp["x"], dim=-1)


def run(k, inp):
    x = inp["x"]
    rows, cols = x.shape
    y = torch.empty_like(x)
    k.softmax_xor(y, x, rows, cols, grid=-(-rows // 4), block=128)
    return y
