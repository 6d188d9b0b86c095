"""Reference for vector_add/ (seed 002's kernel + binding with dim/dtype checks): c = a + b."""
import torch

SIZES = [1, 255, 256, 257, 1_000_003]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(size, generator=g).to(device), "b": torch.randn(size, generator=g).to(device)}


def reference(inp):
    return inp["a"] + inp["b"]


def run(m, inp):
    return m.vector_add(inp["a"], inp["b"])
