"""Reference for square_matrix.cu (seed 004): elementwise x * x over a 2-D matrix."""
import torch

SIZES = [1, 15, 16, 17, 1000]  # the matrix is size x (size + 3), so rows and columns differ


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(size, size + 3, generator=g).to(device)}


def reference(inp):
    return inp["x"] * inp["x"]


def run(m, inp):
    return m.square_matrix(inp["x"])
