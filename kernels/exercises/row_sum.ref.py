"""Exercise row_sum (lesson 03): the sum of every row, one block of 256 threads per row."""
import torch

TITLE = "one block per row: the shared-memory tree"
LESSON = "03_reduction"
ORDER = 1  # its place in the lesson
NUDGE = ('After the values are in shared memory, how can the block halve the number of partial '
         'sums at each step, and what must every thread wait for between steps?')
HINT = ("After the first __syncthreads(): for (int k = blockDim.x / 2; k > 0; k /= 2) { if (t < k) "
        "s[t] += s[t + k]; __syncthreads(); } -- the barrier inside the loop, outside the if.")
SIZES = [1, 3, 64, 300]  # the matrix is size x (3 size + 1): 4, 10, 193 and 901 columns
# A row sum in a different order than torch's: float rounding differs in the last bits.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(size, 3 * size + 1, generator=g).to(device)}


def reference(inp):
    return inp["x"].double().sum(dim=1).float()


def run(k, inp):
    x = inp["x"]
    rows, cols = x.shape
    out = torch.empty(rows, device=x.device)
    k.row_sum(out, x, rows, cols, grid=rows, block=256)
    return out
