"""Exercise vadd_grid_stride (lesson 01): c = a + b with a fixed grid of 8 x 128 threads."""
import torch

TITLE = "grid-stride loop"
LESSON = "01_vector_add"
ORDER = 3  # its place in the lesson
NUDGE = ('The grid is smaller than n. How can each thread handle more than one '
         'element, and how far apart should its elements be?')
HINT = ("Turn the `if` into a loop: for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; "
        "i += gridDim.x * blockDim.x) { ... }. Each thread then handles i, i + 1024, i + 2048, ...")
SIZES = [1, 1000, 1024, 1025, 100_000, 1_000_003]
GRID, BLOCK = 8, 128


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.rand(size, generator=g).to(device), "b": torch.rand(size, generator=g).to(device)}


def reference(inp):
    return inp["a"] + inp["b"]


def run(k, inp):
    a, b = inp["a"], inp["b"]
    c = torch.empty_like(a)
    k.vadd_grid_stride(c, a, b, a.numel(), grid=GRID, block=BLOCK)  # 1024 threads for any n
    return c
