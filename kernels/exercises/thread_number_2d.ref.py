"""Exercise thread_number_2d (lesson 02): seed 000's global thread number in a 2-D grid."""
import torch

TITLE = "number the threads of a 2-D grid (seed 000's formulas)"
LESSON = "02_2d_indexing"
ORDER = 2  # its place in the lesson
NUDGE = ('Count the blocks before this one row by row: how many blocks does one row '
         'of the grid hold? Then the same for threads in a block.')
HINT = ("Row by row, the blocks before this one are blockIdx.y rows of gridDim.x blocks plus blockIdx.x: "
        "block = blockIdx.y * gridDim.x + blockIdx.x. Likewise thread = threadIdx.y * blockDim.x + threadIdx.x. "
        "Seed 000 wrote the row length where the position in the row belongs.")
SIZES = [1, 2, 3, 7]  # the grid is (size + 1) x size blocks of 8 x 4 threads
BLOCK = (8, 4)


def inputs(size, seed, device):
    return {"grid": (size + 1, size), "device": device}


def reference(inp):
    (gx, gy), (bx, by) = inp["grid"], BLOCK
    rows = torch.arange(gy * by).view(-1, 1)
    cols = torch.arange(gx * bx).view(1, -1)
    block = (rows // by) * gx + cols // bx
    thread = (rows % by) * bx + cols % bx
    return (block * (bx * by) + thread).to(torch.int32)


def run(k, inp):
    (gx, gy), (bx, by) = inp["grid"], BLOCK
    number = torch.empty(gy * by, gx * bx, dtype=torch.int32, device=inp["device"])  # the max int where unwritten
    k.thread_number_2d(number, gx * bx, grid=(gx, gy), block=(bx, by))
    return number
