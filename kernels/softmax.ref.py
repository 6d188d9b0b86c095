"""Reference for softmax.cu: torch.softmax(x, dim=-1) over the rows of a rows x cols float32 matrix.

A size is rows * cols; inputs() decodes it with shape_of(): the shapes below by name, any other size
as rows of the first of FALLBACK_COLS that divides it. Awkward row lengths (1, 3, 31, 33, 1000, 4097:
rows that start misaligned for float4, 40000: longer than version 4 holds in registers) next to the
two finish-line shapes. Every fourth row is scaled by 100 (exp(x) overflows unless the max is
subtracted), every fourth is shifted by 10^4, row 0 has -inf entries (masked positions) and row 4,
where there is one, is all -inf: torch answers NaN there (0 / 0), and so must the kernel.
"""
import torch

TEST_SHAPES = [(3, 1), (7, 3), (5, 31), (3, 33), (9, 1000), (4, 4096), (3, 4097), (2, 32768), (2, 40000),
               (6, 129)]
BENCH_SHAPES = [(16384, 4096), (4096, 32768)]  # 2^26 and 2^27 floats: 256 MiB and 512 MiB each way
SHORT_ROWS = (131072, 256)                      # 2^25 floats in short rows: where version 3 shines
SHAPES = {r * c: (r, c) for r, c in TEST_SHAPES + BENCH_SHAPES + [SHORT_ROWS]}
assert len(SHAPES) == len(TEST_SHAPES) + len(BENCH_SHAPES) + 1, "every shape needs its own size"
FALLBACK_COLS = (4096, 1024, 1000, 256, 33, 31, 3, 1)

SIZES = [r * c for r, c in TEST_SHAPES]
BENCH_SIZES = [r * c for r, c in BENCH_SHAPES]
SEEDS = [0, 1]
# exp is __expf (ex2.approx) in versions 2-4: relative error ~2 ulp + |x - max| x 2^-24, so 1e-5 relative;
# an absolute 1e-8 only for outputs so small that flushing them to 0 (ftz) is what differs.
TOLERANCE = {"rtol": 1e-5, "atol": 1e-8}


def shape_of(size):
    """(rows, cols) for a size: a shape above, else rows of the first of FALLBACK_COLS dividing it."""
    if size in SHAPES:
        return SHAPES[size]
    cols = next(c for c in FALLBACK_COLS if size % c == 0)
    return size // cols, cols


def make_inputs(rows, cols, seed, device):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g)
    x[1::4] *= 100.0  # spread of ~300: exp(x) alone would be inf
    x[2::4] += 1e4    # large magnitude, ordinary spread
    x[0, ::3] = float("-inf")
    if rows > 4:
        x[4] = float("-inf")
    return {"x": x.to(device)}


def inputs(size, seed, device):
    return make_inputs(*shape_of(size), seed, device)


def reference(inp):
    return torch.softmax(inp["x"], dim=-1)


def threads_for(cols, per_thread):
    """A block of 32..1024 threads (a power of two) with per_thread columns or fewer each."""
    want = -(-cols // per_thread)
    return min(1024, max(32, 1 << (want - 1).bit_length()))


def run(k, inp):
    """Version 1: three passes, a block per row."""
    x = inp["x"]
    rows, cols = x.shape
    y = torch.empty_like(x)
    k.softmax_kernel1(y, x, rows, cols, grid=rows, block=threads_for(cols, 16))
    return y


def run2(k, inp):
    """Version 2: online softmax, a block per row."""
    x = inp["x"]
    rows, cols = x.shape
    y = torch.empty_like(x)
    k.softmax_kernel2(y, x, rows, cols, grid=rows, block=threads_for(cols, 16))
    return y


def run3(k, inp):
    """Version 3: a warp per row, 8 rows per block of 256."""
    x = inp["x"]
    rows, cols = x.shape
    y = torch.empty_like(x)
    k.softmax_kernel3(y, x, rows, cols, grid=-(-rows // 8), block=256)
    return y


def run4(k, inp, per_thread=32):
    """Version 4: the row in registers, 32 floats per thread: 128 threads at 4096 columns, 1024 at 32768."""
    x = inp["x"]
    rows, cols = x.shape
    y = torch.empty_like(x)
    k.softmax_kernel4(y, x, rows, cols, grid=rows, block=threads_for(cols, per_thread))
    return y


def run4_16(k, inp):
    """Version 4 with twice the threads per row (16 floats each): 256 threads at 4096 columns."""
    return run4(k, inp, per_thread=16)


VARIANTS = {"softmax_kernel2": run2, "softmax_kernel3": run3, "softmax_kernel4": run4, "softmax_kernel4/16": run4_16}


def bytes_moved(inp):
    """Read x once, write y once: 8 bytes per element."""
    x = inp["x"]
    return 2 * x.numel() * x.element_size()


def flops(inp):
    """~5 per element: max, subtract, exp (counted as one), add to the sum, multiply by 1 / sum."""
    return 5 * inp["x"].numel()
