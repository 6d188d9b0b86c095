"""Exercise matmul_regtile (lesson 06): the outer-product accumulation of a register-tiled matmul."""
import torch

TITLE = "register tiling: accumulate the outer product"
LESSON = "06_matmul"
ORDER = 4  # its place in the lesson
NUDGE = ("a[] and b[] hold a column of A's tile and a row of B's. What does each "
         'of the TM x TN accumulators need from them on every step?')
HINT = ("After loading a[] and b[]: for (int i = 0; i < TM; ++i) for (int j = 0; j < TN; ++j) "
        "acc[i][j] += a[i] * b[j];")
# size -> (M, N, K); any other size n is n x n x n. Partial 64 x 64 tiles and a partial k tile.
SHAPES = {5: (5, 7, 3), 70: (70, 100, 37)}
SIZES = [1, 5, 64, 70, 128]
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
    k.matmul_regtile(c, a, b, m, n, kk, grid=((n + 63) // 64, (m + 63) // 64), block=256)
    return c
