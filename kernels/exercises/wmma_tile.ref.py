"""Exercise wmma_tile (lesson 06): a WMMA fragment's load, mma_sync and store (fp16 in, fp32 out)."""
import torch

TITLE = "tensor cores: a WMMA fragment's mma and store"
LESSON = "06_matmul"
ORDER = 5  # its place in the lesson
NUDGE = ('The fragments a and b are loaded for each K step but nothing multiplies '
         'them, and acc never reaches C. Which two WMMA calls are missing?')
HINT = ("In the loop: wmma::mma_sync(acc, a, b, acc); after it: "
        "wmma::store_matrix_sync(C + tile_row * N + tile_col, acc, N, wmma::mem_row_major);")
# size -> (M, N, K), all multiples of 16 (WMMA straight from global memory has no edge handling);
# any other size n is n x n x n.
SHAPES = {48: (32, 48, 64), 80: (64, 80, 160)}
SIZES = [16, 48, 80, 256]
# fp16 products are exact in fp32; the tensor cores add them in another order than cuBLAS fp32.
TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}


def inputs(size, seed, device):
    m, n, k = SHAPES.get(size, (size, size, size))
    g = torch.Generator().manual_seed(seed)
    scale = k ** -0.25  # C ~ N(0, 1)
    return {"a": (torch.randn(m, k, generator=g) * scale).half().to(device),
            "b": (torch.randn(k, n, generator=g) * scale).half().to(device)}


def reference(inp):
    torch.backends.cuda.matmul.allow_tf32 = False
    return inp["a"].float() @ inp["b"].float()


def run(k, inp):
    a, b = inp["a"], inp["b"]
    (m, kk), n = a.shape, b.shape[1]
    c = torch.empty(m, n, device=a.device)
    k.wmma_tile(c, a, b, m, n, kk, grid=(n // 16, m // 16), block=32)
    return c
