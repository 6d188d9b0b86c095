"""Reference for layernorm.cu: F.layer_norm(x, (cols,), w, b, eps=1e-5) over a rows x cols float32 matrix.

A size is rows * cols, decoded by shape_of() as in softmax.ref.py: the shapes below by name, any other
size as rows of the first of FALLBACK_COLS that divides it. Awkward row lengths (1: the variance is
0 and y = b; 3, 31, 33, 4097: misaligned rows, the scalar path; 40000: longer than version 3 holds)
beside the finish-line shapes. Rows differ in scale: mean 0 / std 1, mean 100 / std 10 (where
E[x^2] - mean^2 would cancel), std 1e-3 (eps matters), and constant rows (variance exactly 0).
"""
import torch
import torch.nn.functional as F

TEST_SHAPES = [(3, 1), (7, 3), (5, 31), (3, 33), (9, 1000), (4, 4096), (3, 4097), (2, 32768), (2, 40000),
               (6, 129)]
BENCH_SHAPES = [(16384, 4096), (4096, 32768)]  # 2^26 and 2^27 floats: 256 MiB and 512 MiB each way
SHAPES = {r * c: (r, c) for r, c in TEST_SHAPES + BENCH_SHAPES}
assert len(SHAPES) == len(TEST_SHAPES) + len(BENCH_SHAPES), "every shape needs its own size"
FALLBACK_COLS = (4096, 1024, 1000, 256, 33, 31, 3, 1)

SIZES = [r * c for r, c in TEST_SHAPES]
BENCH_SIZES = [r * c for r, c in BENCH_SHAPES]
SEEDS = [0, 1]
EPS = 1e-5
# Sums in another order than torch's, and rsqrtf (~2 ulp): a few 1e-6 relative at most.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}


def shape_of(size):
    """(rows, cols) for a size: a shape above, else rows of the first of FALLBACK_COLS dividing it."""
    if size in SHAPES:
        return SHAPES[size]
    cols = next(c for c in FALLBACK_COLS if size % c == 0)
    return size // cols, cols


def make_inputs(rows, cols, seed, device):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    x[1::4] = x[1::4] * 10.0 + 100.0  # |mean| >> std: one-pass E[x^2] - mean^2 cancels here
    x[2::4] = x[2::4] * 1e-3          # variance 1e-6, below eps = 1e-5 (mean 0: an offset here would be
                                      # ill-conditioned, 1 ulp of the mean already ~1e-4 of y)
    x[3::4] = 2.5                     # constant: variance 0, y = b
    w = torch.randn(cols, generator=g)
    b = torch.randn(cols, generator=g)
    return {"x": x.to(device), "w": w.to(device), "b": b.to(device)}


def inputs(size, seed, device):
    return make_inputs(*shape_of(size), seed, device)


def reference(inp):
    x = inp["x"]
    return F.layer_norm(x, (x.shape[-1],), inp["w"], inp["b"], eps=EPS)


def threads_for(cols, per_thread):
    """A block of 32..1024 threads (a power of two) with per_thread columns or fewer each."""
    want = -(-cols // per_thread)
    return min(1024, max(32, 1 << (want - 1).bit_length()))


def _launch(kernel, inp, block):
    x, w, b = inp["x"], inp["w"], inp["b"]
    rows, cols = x.shape
    y = torch.empty_like(x)
    kernel(y, x, w, b, rows, cols, EPS, grid=rows, block=block)
    return y


def run(k, inp):
    """Version 1: mean, variance, write: three passes, a block per row."""
    return _launch(k.layernorm_kernel1, inp, threads_for(inp["x"].shape[1], 16))


def run2(k, inp):
    """Version 2: Welford in one pass, then the write pass, a block per row."""
    return _launch(k.layernorm_kernel2, inp, threads_for(inp["x"].shape[1], 16))


def run3(k, inp):
    """Version 3: the row in registers, 32 floats a thread: 128 threads at 4096 columns, 1024 at 32768."""
    return _launch(k.layernorm_kernel3, inp, threads_for(inp["x"].shape[1], 32))


def run3_16(k, inp):
    """Version 3 with twice the threads per row (16 floats each): 256 threads at 4096 columns."""
    return _launch(k.layernorm_kernel3, inp, threads_for(inp["x"].shape[1], 16))


VARIANTS = {"layernorm_kernel2": run2, "layernorm_kernel3": run3, "layernorm_kernel3/16": run3_16}


def bytes_moved(inp):
    """Read x once, write y once, read w and b once: 8 bytes per element plus 8 per column."""
    x = inp["x"]
    return (2 * x.numel() + inp["w"].numel() + inp["b"].numel()) * x.element_size()


def flops(inp):
    """~8 per element: add to the mean, subtract it, square and add, scale by rstd, times w plus b (2)."""
    return 8 * inp["x"].numel()
