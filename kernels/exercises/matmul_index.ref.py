"""Exercise matmul_index (lesson 06): the row-major index of B in a naive matrix product."""
import torch

TITLE = "the index math of a matrix product"
LESSON = "06_matmul"
ORDER = 1  # its place in the lesson
NUDGE = ('Write out where element (row k, column col) of a row-major K x N matrix '
         'sits in memory, and compare with how the kernel reads B.')
HINT = ("Row-major: element (k, col) of the K x N matrix B is B[k * N + col] (k rows of N, then col); "
        "B[col * K + k] reads B transposed.")
# size -> (M, N, K); any other size n is n x n x n. N = 1 or K = 1 would hide the bug.
SHAPES = {5: (5, 7, 3), 33: (33, 17, 40), 100: (100, 70, 50)}
SIZES = [1, 5, 16, 33, 100]
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
    k.matmul_index(c, a, b, m, n, kk, grid=((n + 15) // 16, (m + 15) // 16), block=(16, 16))
    return c
