"""Reference for scan.cu: the inclusive prefix sum of a 1-D float32 tensor, torch.cumsum(x, 0).

run is version 1 (Kogge-Stone); VARIANTS holds versions 2 to 4. Each run function allocates what its
kernels need: versions 1 and 2 the block sums of every level, version 3 the tile sums and prefixes,
version 4 the status words and the tile counter (torch.zeros: 8 bytes per 8192-float tile and one
int, 0.03% of the traffic, not counted in bytes_moved).
"""
import torch

# 0 and the float4 tails (n % 4 = 1, 2, 3); one tile and one more (1024 for versions 1-2, 8192 for 3-4);
# 100_003 = 13 tiles of 8192 (the look-back window of 32 tiles is not full yet); 1_048_577 = 1024^2 + 1
# needs three levels in versions 1-2; 4_194_307 is 513 tiles of 8192, so look-backs walk past 32 tiles.
SIZES = [0, 1, 2, 3, 5, 31, 1023, 1024, 1025, 8191, 8192, 8193, 100_003, 1_048_577, 4_194_307]
BENCH_SIZES = [1 << 26]
SEEDS = [0, 1]  # seed 1 passes x[1:] of a longer tensor: 4 bytes past a 16-byte boundary (scalar path)

# Exact comparison. The inputs are multiples of 1/4 in [-2, 2], so every partial sum a scan forms (the
# sum of a contiguous range) is a multiple of 1/4 far below 2^22 in magnitude (a random walk of 2^26
# steps of that size stays within ~1e5), and fp32 adds them exactly, in any order: every correct kernel
# and torch agree to the bit. With randn inputs the order of the additions shows, the error grows like
# sqrt(n) ulps of the running sum, and a tolerance wide enough for that would also pass a kernel that
# drops a small element.
TOLERANCE = {"rtol": 0.0, "atol": 0.0}

TILE = 8192  # floats per tile in versions 3 and 4 (SCAN_TILE in scan.cu)


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    offset = 1 if seed == 1 else 0
    x = torch.randint(-8, 9, (size + offset,), generator=g).float() / 4
    return {"x": x.to(device)[offset:]}  # slice after the move: the copy would be aligned again


def reference(inp):
    return torch.cumsum(inp["x"], 0)


def _two_level(k, kernel, x, tile, block):
    """Scan each tile with `kernel`, scan the tile sums the same way (recursively), add them back."""
    n = x.numel()
    out = torch.empty_like(x)
    if n == 0:
        return out
    tiles = -(-n // tile)
    sums = torch.empty(tiles, device=x.device)
    kernel(out, sums, x, n, grid=tiles, block=block)
    if tiles > 1:  # 2^26 -> 65536 sums -> 64 -> 1: three levels
        offsets = _two_level(k, kernel, sums, tile, block)  # offsets[b] = sums[0] + ... + sums[b]
        k.scan_add_kernel(out, offsets, n, tile, grid=tiles - 1, block=256)
    return out


def run(k, inp):
    """Version 1: Kogge-Stone, 1024 threads per 1024-element tile."""
    return _two_level(k, k.scan_kernel1, inp["x"], 1024, 1024)


def run2(k, inp):
    """Version 2: Brent-Kung, 512 threads per 1024-element tile."""
    return _two_level(k, k.scan_kernel2, inp["x"], 1024, 512)


def run3(k, inp):
    """Version 3: reduce, scan the tile sums in one block, rescan each tile with its offset."""
    x = inp["x"]
    n = x.numel()
    out = torch.empty_like(x)
    if n == 0:
        return out
    tiles = -(-n // TILE)
    sums = torch.empty(tiles, device=x.device)
    prefix = torch.empty(tiles, device=x.device)
    k.scan_reduce_kernel3(sums, x, n, grid=tiles, block=256)
    k.scan_spine_kernel3(prefix, sums, tiles, grid=1, block=1024)
    k.scan_kernel3(out, x, prefix, n, grid=tiles, block=256)
    return out


def run4(k, inp):
    """Version 4: one pass with decoupled look-back; status and counter start at zero every launch."""
    x = inp["x"]
    n = x.numel()
    out = torch.empty_like(x)
    if n == 0:
        return out
    tiles = -(-n // TILE)
    status = torch.zeros(tiles, dtype=torch.int64, device=x.device)
    counter = torch.zeros(1, dtype=torch.int32, device=x.device)
    k.scan_kernel4(out, status, counter, x, n, grid=tiles, block=256)
    return out


VARIANTS = {"scan_kernel2": run2, "scan_kernel3": run3, "scan_kernel4": run4}


def bytes_moved(inp):
    """An ideal scan reads x once and writes out once: 8 bytes per element."""
    return 2 * inp["x"].numel() * inp["x"].element_size()


def flops(inp):
    """One addition per element (what a sequential scan does; the parallel ones do 2x to 10x that)."""
    return inp["x"].numel()
