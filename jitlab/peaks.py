"""The GPU's measured limits: device-to-device copy bandwidth and a large matmul's FLOP/s.

Measured once per GPU (and torch version) and cached in the build cache as ``peaks.json``, so every
"% of peak" in jitlab compares with what this GPU actually reaches, not a datasheet.
"""

from __future__ import annotations

import json

import torch

from . import config
from .timing import time_cuda

COPY_BYTES = 1 << 30   # 1 GiB each way: far past L2
MATMUL_N = 8192        # bf16 8192^3: large enough to saturate the tensor cores


def _key() -> str:
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"{p.name}|{p.major}.{p.minor}|{p.multi_processor_count}|torch {torch.__version__}"


def _copy_gbps() -> float:
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    t = time_cuda(lambda: dst.copy_(src), flush_l2=True, rep_s=0.3)
    return 2 * COPY_BYTES / (t.median * 1e-3) / 1e9


def _matmul_tflops() -> float:
    a = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(MATMUL_N, MATMUL_N, device="cuda", dtype=torch.bfloat16)
    t = time_cuda(lambda: a @ b, flush_l2=False, rep_s=0.3)
    return 2 * MATMUL_N**3 / (t.median * 1e-3) / 1e12


def measure() -> dict:
    """Measure copy bandwidth (GB/s, bytes read + written) and bf16 matmul TFLOP/s now."""
    return {"copy_gbps": round(_copy_gbps(), 1), "matmul_bf16_tflops": round(_matmul_tflops(), 1),
            "device": torch.cuda.get_device_name()}


def peaks(remeasure: bool = False) -> dict:
    """This GPU's peaks, from ``peaks.json`` in the cache or measured now (a few seconds, once)."""
    path = config.cache_dir() / "peaks.json"
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    key = _key()
    if remeasure or key not in table:
        table[key] = measure()
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table, indent=1))
        tmp.replace(path)
    return table[key]


