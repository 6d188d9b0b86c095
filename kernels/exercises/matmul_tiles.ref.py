"""Exercise matmul_tiles (lesson 06): the B tile and the two __syncthreads() of a tiled matmul."""
import torch

TITLE = "shared-memory tiles and their barriers"
LESSON = "06_matmul"
ORDER = 2  # its place in the lesson
NUDGE = ('The B tile is never filled as the A tile is. Once both are, can a thread start multiplying before the '
         'others finished their copies, or copy the next tile while others still read this one?')
HINT = ("Bs[ty][tx] = (t + ty < K && col < N) ? B[(t + ty) * N + col] : 0.0f; then __syncthreads() before "
        "the products (the tiles must be complete) and another after them (before the next trip overwrites "
        "the tiles).")
# size -> (M, N, K); any other size n is n x n x n. Several tiles along K, partial ones included.
SHAPES = {5: (5, 7, 3), 33: (33, 17, 40), 100: (100, 70, 50)}
SIZES = [1, 5, 16, 33, 100, 256]
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
    k.matmul_tiles(c, a, b, m, n, kk, grid=((n + 15) // 16, (m + 15) // 16), block=(16, 16))
    return c
