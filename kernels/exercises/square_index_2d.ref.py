"""Exercise square_index_2d (lesson 02): x * x over a 2-D grid of 16 x 16 blocks."""
import torch

TITLE = "the 2-D row and column"
LESSON = "02_2d_indexing"
ORDER = 1  # its place in the lesson
NUDGE = ("A thread's row is the rows of the blocks above its block plus its own row in "
         'the block. Which of blockDim and gridDim counts rows per block?')
HINT = ("A block's first row is blockIdx.y * blockDim.y (blocks above it times rows per block), its first "
        "column blockIdx.x * blockDim.x: row = blockIdx.y * blockDim.y + threadIdx.y, "
        "col = blockIdx.x * blockDim.x + threadIdx.x. gridDim is the number of blocks, not their size.")
# The matrix is size x (size + 3): up to 13 x 16 it is one block, where gridDim = 1 hides the bug.
SIZES = [1, 5, 13, 16, 17, 100, 1000]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(size, size + 3, generator=g).to(device)}


def reference(inp):
    return inp["x"] * inp["x"]


def run(k, inp):
    x = inp["x"]
    height, width = x.shape
    out = torch.empty_like(x)
    k.square_index_2d(out, x, width, height, grid=((width + 15) // 16, (height + 15) // 16), block=(16, 16))
    return out
