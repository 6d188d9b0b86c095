"""Exercise vadd_bounds (lesson 01): c = a + b, launched with the thread count rounded up to blocks.

Every array has a guard zone of PAD floats behind it, so a kernel without the bounds check reads
and writes memory that belongs to the test (never another tensor, never unmapped memory), and
the guard behind c shows how many threads wrote past its end.
"""
import torch

TITLE = "add the bounds check"
LESSON = "01_vector_add"
ORDER = 2  # its place in the lesson
NUDGE = ('How many threads does the launch start for n = 1000, and '
         'what do the threads past the last element do?')
HINT = ("The grid has ceil(n / 256) * 256 threads, up to 255 more than there are elements. "
        "Wrap the body in `if (i < n) { ... }` so the extra threads do nothing.")
SIZES = [1, 127, 256, 257, 1000, 1_000_003]  # 256: a whole block, the only size the bug is invisible at
PAD = 256      # floats of guard zone behind every array (a block is 256 threads)
GUARD = -12345.0


def _padded(size, g, device):
    return torch.rand(size + PAD, generator=g).to(device)[:size]  # a view: the storage goes on for PAD


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"a": _padded(size, g, device), "b": _padded(size, g, device)}


def reference(inp):
    return inp["a"] + inp["b"]


def run(k, inp):
    a, b = inp["a"], inp["b"]
    n = a.numel()
    buf = torch.empty(n + PAD, device=a.device)
    buf[n:] = GUARD
    c = buf[:n]  # NaN-filled by the checker; the guard zone follows it
    grid = (n + 255) // 256
    k.vadd_bounds(c, a, b, n, grid=grid, block=256)
    if c.is_cuda:
        torch.cuda.synchronize()
    past = int((buf[n:] != GUARD).sum())
    if past:
        raise AssertionError(f"{past} threads wrote past the end of c (n = {n}, but {grid * 256} threads "
                             f"were launched): threads with i >= n must not touch memory")
    return c
