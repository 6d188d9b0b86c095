"""Exercise vadd_index (lesson 01): c = a + b with the 1-D global index written by the learner."""
import torch

TITLE = "write the 1-D global index"
LESSON = "01_vector_add"
ORDER = 1  # its place in the lesson
NUDGE = ('threadIdx.x counts threads within a block only. How many '
         'threads come before the first thread of this block?')
HINT = ("Blocks before this one hold blockIdx.x * blockDim.x threads (blockDim.x = threads per block); "
        "gridDim.x is the number of blocks. i = blockIdx.x * blockDim.x + threadIdx.x.")
# Up to 256 there is one block and any formula with `+ threadIdx.x` works; 1000 needs 4 blocks.
SIZES = [1, 255, 256, 1000, 1_000_003]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.rand(size, generator=g).to(device), "b": torch.rand(size, generator=g).to(device)}


def reference(inp):
    return inp["a"] + inp["b"]


def run(k, inp):
    a, b = inp["a"], inp["b"]
    n = a.numel()
    c = torch.empty_like(a)  # filled with NaN by the checker: elements no thread writes show up
    k.vadd_index(c, a, b, n, grid=(n + 255) // 256, block=256)
    return c
