"""Reference for vector_add/ (seed 002's kernel + binding with dim/dtype checks): c = a + b, and versions 1 and 2."""
import torch

SIZES = [1, 2, 3, 5, 255, 256, 257, 1_000_003]  # 2, 3, 5 and 1_000_003 end in a partial float4
BENCH_SIZES = [1 << 28]


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(size, generator=g).to(device), "b": torch.randn(size, generator=g).to(device)}


def reference(inp):
    return inp["a"] + inp["b"]


def run(m, inp):
    return m.vector_add(inp["a"], inp["b"])


def run1(m, inp):
    return m.vector_add1(inp["a"], inp["b"])  # same checks as vector_add; empty_like output, current stream


def run2(m, inp):
    return m.vector_add2(inp["a"], inp["b"])  # same checks; one 4096-float tile per block, empty_like output


VARIANTS = {"vector_add_kernel1": run1, "vector_add_kernel2": run2}


def bytes_moved(inp):
    """Read a and b, write c: 12 bytes per element."""
    return 3 * inp["a"].numel() * inp["a"].element_size()
