"""Exercise matmul_tail (lesson 06): the partial last tile along K of a tiled matmul."""
import torch

TITLE = "the partial tile at the end of K"
LESSON = "06_matmul"
ORDER = 3  # its place in the lesson
NUDGE = ('When K is not a multiple of TILE, how many trips does the loop '
         'make, and what do the copies load past the end of K?')
HINT = ("Make ceil(K / TILE) trips: tiles = (K + TILE - 1) / TILE; and zero-fill past K in the copies: "
        "(row < M && t + tx < K) for A, (t + ty < K && col < N) for B.")
# size -> (M, N, K); any other size n is n x n x n. K = 40 and 7 are not multiples of 16; 64 is.
SHAPES = {7: (5, 3, 7), 40: (20, 24, 40), 33: (33, 31, 17)}
SIZES = [7, 33, 40, 64]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}  # another order of the same fp32 sums


def inputs(size, seed, device):
    m, n, k = SHAPES.get(size, (size, size, size))
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(m, k, generator=g).to(device), "b": torch.randn(k, n, generator=g).to(device)}


def reference(inp):
    torch.backends.cuda.matmul.allow_tf32 = False
    return inp["a"] @ inp["b"]


def run(k, inp):
    a, b = inp["a"], inp["b"]
    (m, kk), n = a.shape, b.shape[1]
    c = torch.empty(m, n, device=a.device)
    k.matmul_tail(c, a, b, m, n, kk, grid=((n + 15) // 16, (m + 15) // 16), block=(16, 16))
    return c
