"""Reference for square_matrix.cu (seed 004): elementwise x * x over a 2-D matrix, and version 1."""
import torch

# The matrix is size x (size + 3), so rows and columns differ; 2, 15 and 127 leave 2 floats after
# the last float4 (the element count is always even here).
SIZES = [1, 2, 15, 16, 17, 127, 128, 129, 1000]
BENCH_SIZES = [16383]  # 16383 x 16386 = 2^28 + 16382 floats


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(size, size + 3, generator=g).to(device)}


def reference(inp):
    return inp["x"] * inp["x"]


def run(m, inp):
    return m.square_matrix(inp["x"])


def run1(m, inp):
    return m.square_matrix1(inp["x"])  # allocates its output with empty_like, launches on the current stream


def run2(m, inp):
    return m.square_matrix2(inp["x"])  # one 4096-float tile per block; empty_like output, current stream


VARIANTS = {"square_matrix_kernel1": run1, "square_matrix_kernel2": run2}


def bytes_moved(inp):
    """Read x, write x * x: 8 bytes per element."""
    return 2 * inp["x"].numel() * inp["x"].element_size()
