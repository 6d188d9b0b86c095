"""Reference for sgemm.cu: C = A @ B in fp32, row-major, with TF32 off (true fp32, as the kernels).

jitlab's size is one int; SHAPES maps the awkward ones to (M, N, K), and any other size n is the
square n x n x n. The shapes cover both paths of versions 5 and 6: the float4 one (K % 4 == N % 4
== 0) with full and partial tiles, and the scalar one (K or N odd), plus 1 x 1 x 1.

Inputs are scaled by K ** -0.25 each, so C ~ N(0, 1) at every K: one tolerance then fits all
sizes. Two correct fp32 sums in different orders differ by ~sqrt(K) * 6e-8 (1e-5 at K = 4096, the
tail of 16 M outputs a few times that), hence rtol = atol = 1e-4; a dropped or doubled k term
is off by ~K ** -0.5 (0.016 at K = 4096).
"""
import torch

SHAPES = {
    1: (1, 1, 1),
    7: (7, 3, 5),
    31: (31, 33, 17),
    33: (33, 31, 65),
    64: (64, 128, 36),     # float4 path, K % 8 = 4: the last k tile is half zeros
    127: (127, 129, 65),   # scalar path, every dimension off the tiles
    129: (129, 127, 300),
    136: (136, 264, 40),   # float4 path with partial 128 x 128 tiles in M and N
}
SIZES = [1, 7, 31, 33, 64, 127, 129, 136, 512, 1000]
BENCH_SIZES = [4096]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}


def shape_of(size):
    """(M, N, K) for a size."""
    return SHAPES.get(size, (size, size, size))


def inputs(size, seed, device):
    m, n, k = shape_of(size)
    g = torch.Generator().manual_seed(seed)
    scale = k ** -0.25
    return {"a": (torch.randn(m, k, generator=g) * scale).to(device),
            "b": (torch.randn(k, n, generator=g) * scale).to(device)}


def reference(inp):
    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS fp32 (FFMA), not the TF32 tensor cores
    return torch.matmul(inp["a"], inp["b"])


def cdiv(a, b):
    return (a + b - 1) // b


def _launch(kernel, inp, grid, block):
    a, b = inp["a"], inp["b"]
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, device=a.device)
    kernel(c, a, b, m, n, k, grid=grid(m, n), block=block)
    return c


def run1(k, inp):
    """Version 1: 32 x 32 threads, threadIdx.x along M."""
    return _launch(k.sgemm_kernel1, inp, lambda m, n: (cdiv(m, 32), cdiv(n, 32)), (32, 32))


def run2(k, inp):
    """Version 2: 32 x 32 threads, threadIdx.x along N."""
    return _launch(k.sgemm_kernel2, inp, lambda m, n: (cdiv(n, 32), cdiv(m, 32)), (32, 32))


def run3(k, inp):
    """Version 3: one 32 x 32 tile of C per block of 32 x 32 threads."""
    return _launch(k.sgemm_kernel3, inp, lambda m, n: (cdiv(n, 32), cdiv(m, 32)), (32, 32))


def run4(k, inp):
    """Version 4: one 128 x 128 tile of C per block of 256 threads (8 x 8 each)."""
    return _launch(k.sgemm_kernel4, inp, lambda m, n: (cdiv(n, 128), cdiv(m, 128)), 256)


def run5(k, inp):
    """Version 5: as version 4."""
    return _launch(k.sgemm_kernel5, inp, lambda m, n: (cdiv(n, 128), cdiv(m, 128)), 256)


def run6(k, inp):
    """Version 6: as version 4."""
    return _launch(k.sgemm_kernel6, inp, lambda m, n: (cdiv(n, 128), cdiv(m, 128)), 256)


run = run6  # the version to use; every version is in VARIANTS under its kernel's name
VARIANTS = {"sgemm_kernel1": run1, "sgemm_kernel2": run2, "sgemm_kernel3": run3, "sgemm_kernel4": run4,
            "sgemm_kernel5": run5, "sgemm_kernel6": run6}


def flops(inp):
    """2 M N K: a multiply and an add per (i, j, k)."""
    (m, k), n = inp["a"].shape, inp["b"].shape[1]
    return 2 * m * n * k


def bytes_moved(inp):
    """The compulsory traffic: A and B read once, C written once."""
    (m, k), n = inp["a"].shape, inp["b"].shape[1]
    return (m * k + k * n + m * n) * inp["a"].element_size()
