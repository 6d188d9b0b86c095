"""Reference for add2_seed/ (seed 001's add2.h + add2.cu + add2.cpp): c = a + b."""
import torch

SIZES = [1, 1023, 1024, 1025, 1_000_003]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.rand(size, generator=g).to(device), "b": torch.rand(size, generator=g).to(device)}


def reference(inp):
    return inp["a"] + inp["b"]


def run(m, inp):
    c = torch.empty_like(inp["a"])
    m.torch_launch_add2(c, inp["a"], inp["b"], c.numel())
    return c
