"""Exercise add_one_3d (lesson 02): src + 1 over a 3-D grid of 8 x 8 x 4 blocks."""
import torch

TITLE = "a 3-D grid"
LESSON = "02_2d_indexing"
ORDER = 3  # its place in the lesson
NUDGE = ('The kernel already finds x and y from the grid; which '
         'coordinate is missing, and which bound does it need?')
HINT = ("z = blockIdx.z * blockDim.z + threadIdx.z, like x and y; check z < depth too; and the flat index of "
        "(z, y, x) is (z * height + y) * width + x.")
SIZES = [1, 2, 5, 9, 40]  # the tensor is size x (size + 1) x (size + 2); depth 1 hides the bug
BLOCK = (8, 8, 4)


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"src": torch.randn(size, size + 1, size + 2, generator=g).to(device)}


def reference(inp):
    return inp["src"] + 1


def run(k, inp):
    src = inp["src"]
    depth, height, width = src.shape
    dst = torch.empty_like(src)
    bx, by, bz = BLOCK
    grid = ((width + bx - 1) // bx, (height + by - 1) // by, (depth + bz - 1) // bz)
    k.add_one_3d(dst, src, depth, height, width, grid=grid, block=BLOCK)
    return dst
