"""Exercise launch_grid (lesson 04): a host launcher that sizes the grid, called with raw pointers."""
import torch

TITLE = "the launcher's grid: round up"
LESSON = "04_torch_bindings"
ORDER = 1  # its place in the lesson
NUDGE = 'What is n / block for n = 1000 and block = 256, and how many elements do that many blocks cover?'
HINT = ("n / block rounds down, so the last partial block is missing (and n < 256 gives a grid of 0 blocks, "
        "which CUDA refuses: 'invalid configuration argument'). Use grid = (n + block - 1) / block.")
SIZES = [1, 255, 256, 257, 1000, 1_000_003]
ALPHA = 2.5


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(size, generator=g).to(device)}


def reference(inp):
    return ALPHA * inp["x"]


def run(k, inp):
    x = inp["x"]
    y = torch.empty_like(x)
    k.launch_scale(y, x, ALPHA, x.numel())  # a host function: jitlab checks the CUDA error it leaves
    return y
