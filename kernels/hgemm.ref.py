"""Reference for hgemm.cu: C = A @ B with fp16 tensors (fp32 accumulation, fp16 out), as torch.matmul.

Sizes and shapes as in sgemm.ref.py (one int; SHAPES maps the awkward ones to (M, N, K), any other
n is n x n x n). The copy paths of versions 2 and 3: 16-byte copies (K % 8 == N % 8 == 0) with full
and partial tiles, and element copies (K or N not a multiple of 8); version 3 takes its unchecked
path only for whole tiles (512 and 4096 here).

Inputs are scaled by K ** -0.25 each, so C ~ N(0, 1). Both sides accumulate the same fp16 products
in fp32, in different orders, then round to fp16 (a half ulp is 2 ** -11 relative, 4.9e-4): two
correct results differ by at most an ulp, ~1e-3 relative near 1 (plus noise ~1e-5 from the sums),
so rtol = atol = 2e-3. A missing k tile is off by ~0.2 at K = 1000.

The bfloat16 version 3 (hgemm_bf16_kernel3, sm_80 and newer) is in VARIANTS on a GPU that has it, with
its own inputs and tolerance (VARIANT_INPUTS, VARIANT_TOLERANCE), so `jitlab run` checks and times it
beside cuBLAS in bf16. Lesson 06 checks it by hand; benchmarks/hgemm_sweep.py times both dtypes.
"""
import torch

SHAPES = {
    1: (1, 1, 1),
    7: (7, 3, 5),
    31: (31, 33, 17),
    33: (33, 31, 65),
    64: (64, 128, 36),     # K % 8 = 4: element copies
    127: (127, 129, 65),
    129: (129, 127, 300),  # K % 8 = 4, N odd
    136: (136, 264, 40),   # 16-byte copies with partial 128 x 128 tiles and a partial k tile
}
SIZES = [1, 7, 31, 33, 64, 127, 129, 136, 512, 1000]
BENCH_SIZES = [4096]
TOLERANCE = {"rtol": 2e-3, "atol": 2e-3}
TOLERANCE_BF16 = {"rtol": 1.6e-2, "atol": 1.6e-2}  # bf16 keeps 8 bits: an ulp is 2 ** -7 = 7.8e-3 relative


def shape_of(size):
    """(M, N, K) for a size."""
    return SHAPES.get(size, (size, size, size))


def inputs(size, seed, device, dtype=torch.float16):
    m, n, k = shape_of(size)
    g = torch.Generator().manual_seed(seed)
    scale = k ** -0.25
    return {"a": (torch.randn(m, k, generator=g) * scale).to(device=device, dtype=dtype),
            "b": (torch.randn(k, n, generator=g) * scale).to(device=device, dtype=dtype)}


def inputs_bf16(size, seed, device):
    return inputs(size, seed, device, torch.bfloat16)


def reference(inp):
    return torch.matmul(inp["a"], inp["b"])  # cuBLAS on the tensor cores, in the inputs' dtype


def cdiv(a, b):
    return (a + b - 1) // b


def _launch(kernel, inp, tile, block):
    a, b = inp["a"], inp["b"]
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    kernel(c, a, b, m, n, k, grid=(cdiv(n, tile), cdiv(m, tile)), block=block)
    return c


def run1(k, inp):
    """Version 1: one 32 x 32 tile of C per block of 4 warps."""
    return _launch(k.hgemm_kernel1, inp, 32, 128)


def run2(k, inp):
    """Version 2: one 128 x 128 tile of C per block of 8 warps."""
    return _launch(k.hgemm_kernel2, inp, 128, 256)


# Version 3's tile (HGEMM3_* in hgemm.cu): BM x BN blocks of 8 warps; the k depth and the stages by
# the arch's shared memory per block, as the table in hgemm.cu picks them.
V3_BM, V3_BN, V3_THREADS = 256, 128, 256
V3_BK64 = {(8, 0), (9, 0), (10, 0)}  # 163 KB or more a block: 3 stages of 64 (159 KB)


def v3_tile_for(cap: tuple[int, int]) -> tuple[int, int]:
    """(BK, stages) of version 3 for a compute capability: (64, 3), (32, 3) with ~99 KB, (32, 2) on sm_75."""
    return (64, 3) if cap in V3_BK64 else (32, 3) if cap >= (8, 0) else (32, 2)


def v3_tile(device) -> tuple[int, int]:
    """(BK, stages) of version 3 on a device."""
    return v3_tile_for(torch.cuda.get_device_capability(device))


def v3_smem_bytes(bk: int, stages: int, bm: int = V3_BM, bn: int = V3_BN) -> int:
    """Version 3's dynamic shared memory for a tile: stages x (A tile + B tile), rows padded by 8 elements."""
    return stages * (bm * (bk + 8) + bk * (bn + 8)) * 2


def v3_shared_mem(device) -> int:
    """Version 3's dynamic shared memory in bytes on a device."""
    return v3_smem_bytes(*v3_tile(device))


def _launch3(kernel, inp):
    a, b = inp["a"], inp["b"]
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, device=a.device, dtype=a.dtype)
    kernel(c, a, b, m, n, k, grid=(cdiv(n, V3_BN), cdiv(m, V3_BM)), block=V3_THREADS,
           shared_mem=v3_shared_mem(a.device))
    return c


def run3(k, inp):
    """Version 3: one 256 x 128 tile of C per block of 8 warps, up to 159 KB of dynamic shared memory."""
    return _launch3(k.hgemm_kernel3, inp)


def run_bf16(k, inp):
    """Version 3 for bfloat16 tensors (sm_80 and newer)."""
    return _launch3(k.hgemm_bf16_kernel3, inp)


def run2_bf16(k, inp):
    """Version 2 for bfloat16 tensors (sm_80 and newer)."""
    return _launch(k.hgemm_bf16_kernel2, inp, 128, 256)


run = run3  # the version to use; every version is in VARIANTS under its kernel's name
VARIANTS = {"hgemm_kernel1": run1, "hgemm_kernel2": run2, "hgemm_kernel3": run3}
if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 0):  # bf16 WMMA: sm_80 and newer
    VARIANTS["hgemm_bf16_kernel3"] = run_bf16
    VARIANT_INPUTS = {"hgemm_bf16_kernel3": inputs_bf16}
    VARIANT_TOLERANCE = {"hgemm_bf16_kernel3": TOLERANCE_BF16}


def flops(inp):
    """2 M N K: a multiply and an add per (i, j, k)."""
    (m, k), n = inp["a"].shape, inp["b"].shape[1]
    return 2 * m * n * k


def bytes_moved(inp):
    """The compulsory traffic: A and B read once, C written once (2 bytes an element)."""
    (m, k), n = inp["a"].shape, inp["b"].shape[1]
    return (m * k + k * n + m * n) * inp["a"].element_size()
