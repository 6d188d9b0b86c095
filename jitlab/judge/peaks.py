"""The GPU's measured limits: device-to-device copy bandwidth and a large matmul's FLOP/s.

Measured once per GPU (and torch version) and cached in the build cache as ``peaks.json``, so every
"% of peak" in jitlab compares with what this GPU actually reaches, not a datasheet.
"""

from __future__ import annotations

import json

import torch

from jitlab import config
from jitlab.jit import cache
from jitlab.judge.timing import time_cuda

COPY_BYTES = 1 << 30   # 1 GiB each way: far past L2
MATMUL_N = 8192        # bf16 8192^3: large enough to saturate the tensor cores
MATMUL_FP32_N = 4096   # fp32 4096^3 without TF32: ~2.5 ms on an H100, saturates the CUDA cores
FIELDS = ("copy_gbps", "matmul_bf16_tflops", "matmul_fp32_tflops")


def _key() -> str:
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return f"{p.name}|{p.major}.{p.minor}|{p.multi_processor_count}|torch {torch.__version__}"


def _copy_gbps() -> float:
    src = torch.empty(COPY_BYTES // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    t = time_cuda(lambda: dst.copy_(src), flush_l2=True, rep_s=0.3)
    return 2 * COPY_BYTES / (t.median * 1e-3) / 1e9


def _matmul_tflops(dtype: torch.dtype, n: int) -> float:
    a = torch.randn(n, n, device="cuda", dtype=dtype)
    b = torch.randn(n, n, device="cuda", dtype=dtype)
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 on the CUDA cores, the roof an SGEMM kernel is under
    try:
        t = time_cuda(lambda: a @ b, flush_l2=False, rep_s=0.3)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return 2 * n**3 / (t.median * 1e-3) / 1e12


def measure() -> dict:
    """Measure copy bandwidth (GB/s, bytes read + written) and bf16 and fp32 (no TF32) matmul TFLOP/s now."""
    return {"copy_gbps": round(_copy_gbps(), 1),
            "matmul_bf16_tflops": round(_matmul_tflops(torch.bfloat16, MATMUL_N), 1),
            "matmul_fp32_tflops": round(_matmul_tflops(torch.float32, MATMUL_FP32_N), 1),
            "device": torch.cuda.get_device_name()}


def peaks(remeasure: bool = False) -> dict:
    """This GPU's peaks, from ``peaks.json`` in the cache or measured now (a few seconds, once)."""
    path = config.cache_dir() / "peaks.json"
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    key = _key()
    if remeasure or any(f not in table.get(key, {}) for f in FIELDS):  # an older cache lacks newer fields
        table[key] = measure()
        path.parent.mkdir(parents=True, exist_ok=True)
        cache.write_json(path, table)
    return table[key]


