"""Reference and tuning space for sgemm_tiles.cu: C = A @ B in fp32 with TF32 off.

Sizes are square n x n x n; 127 and 129 put every dimension off any tile. ``TUNE`` is the space
`jitlab tune` sweeps: 324 tile shapes, 300 of them with 32 to 1024 threads a block, before the
device prunes what it cannot hold; each is checked at SIZES' awkward sizes by `jitlab check -D ...`.
"""
import torch

SIZES = [1, 127, 129, 256]
BENCH_SIZES = [4096]
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
DEFAULTS = {"BM": 64, "BN": 64, "BK": 8, "TM": 4, "TN": 4}  # the file's own #defines


def inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    scale = size ** -0.25  # C ~ N(0, 1) at every K: one tolerance fits all sizes
    return {"a": (torch.randn(size, size, generator=g) * scale).to(device),
            "b": (torch.randn(size, size, generator=g) * scale).to(device)}


def reference(inp):
    torch.backends.cuda.matmul.allow_tf32 = False  # cuBLAS fp32 (FFMA), not the TF32 tensor cores
    return torch.matmul(inp["a"], inp["b"])


def run_tuned(m, inp, config):
    """One launch for a configuration: a BM x BN tile per block, (BM / TM) * (BN / TN) threads."""
    a, b = inp["a"], inp["b"]
    (rows, k), cols = a.shape, b.shape[1]
    c = torch.empty(rows, cols, device=a.device)
    grid = ((cols + config["BN"] - 1) // config["BN"], (rows + config["BM"] - 1) // config["BM"])
    m.sgemm_tiles(c, a, b, rows, cols, k, grid=grid, block=(config["BM"] // config["TM"]) * (config["BN"] // config["TN"]))
    return c


def run(m, inp):
    return run_tuned(m, inp, DEFAULTS)


def flops(inp):
    return 2 * inp["a"].shape[0] * inp["a"].shape[1] * inp["b"].shape[1]


def bytes_moved(inp):
    return 4 * (inp["a"].numel() + inp["b"].numel() + inp["a"].shape[0] * inp["b"].shape[1])


TUNE = {
    "defines": {"BM": [32, 64, 128], "BN": [32, 64, 128], "BK": [4, 8, 16, 32], "TM": [2, 4, 8], "TN": [2, 4, 8]},
    "constraints": ["32 <= (BM // TM) * (BN // TN) <= 1024"],
    "threads": "(BM // TM) * (BN // TN)",
    "sizes": [512, 2048, 4096],
    "run": run_tuned,
}
