"""Reference for two_norm/ (seed 000): ||a - b||_2 of two n x m matrices, one block, device printf.

The seed's kernel holds a - b in 64*64 floats of shared memory, so n * m <= 4096.
"""
import io
import contextlib

import torch

SIZES = [1, 14, 448, 4096]  # n * m; the seed's test used n, m = 32, 14


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    m = 14 if size % 14 == 0 else 1
    n = size // m
    return {"a": torch.randn(n, m, generator=g).to(device), "b": torch.randn(n, m, generator=g).to(device)}


def reference(inp):
    return torch.norm(inp["a"] - inp["b"]).reshape(1)


def run(mod, inp):
    a, b = inp["a"], inp["b"]
    c = torch.zeros(1, device=a.device)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # the kernel prints every element; keep it out of the table
        mod.two_norm(b, a, c, a.shape[0], a.shape[1])
    assert "after add rows to first col" in out.getvalue(), "device printf did not reach Python"
    return c
