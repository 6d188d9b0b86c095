"""Reference for add2_cpu.cpp (kernel-only C++): c = a + b on CPU tensors."""
import torch

SIZES = [1, 127, 128, 129, 1_000_003]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.rand(size, generator=g), "b": torch.rand(size, generator=g)}


def reference(inp):
    return inp["a"] + inp["b"]


def run(m, inp):
    c = torch.empty_like(inp["a"])
    m.add2_cpu(c, inp["a"], inp["b"], c.numel())
    return c


def bytes_moved(inp):
    return 3 * 4 * inp["a"].numel()  # read a and b, write c
