"""hgemm.cu's WMMA kernels against cuBLAS (torch.matmul) at 4096^3, fp16 and bf16, in one run.

Builds version 2, version 3 and version 3 with other tiles (the HGEMM3_* macros) in parallel
processes, checks every build at each size of hgemm.ref.py and at the timed size, then times each
that passed against torch.matmul on the same inputs: rounds alternate between the two (CUDA events,
L2 flushed, medians), so a clock that drifts during the run shifts both. Prints one table, fastest
first per dtype; with $OUT set, also writes it there as hgemm_sweep.json.

    python benchmarks/hgemm_sweep.py                    # every configuration
    python benchmarks/hgemm_sweep.py v2 v3 "v3 S4"      # some of them (names: CONFIGS)

At 4096^3 a matrix product is 2 * 4096^3 = 137 GFLOP: 0.2 ms at cuBLAS's ~700 TFLOP/s.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SNIPPET = ROOT / "kernels" / "hgemm.cu"
SIZE = 4096
ROUNDS = 5  # alternating timing rounds per configuration (~0.1 s each)

# name -> HGEMM3_* overrides: None is version 2, {} version 3 as shipped (run3/run_bf16 of the ref).
CONFIGS: dict[str, dict | None] = {
    "v2": None,
    "v3": {},
    "v3 128x256": {"HGEMM3_BM": 128, "HGEMM3_BN": 256},
    "v3 BK32": {"HGEMM3_BK": 32},
    "v3 S4": {"HGEMM3_STAGES": 4},
    "v3 G1 (no swizzle)": {"HGEMM3_GROUP": 1},
    "v3 bf16 via API loads": {"HGEMM3_BF16_LDS": 0},
}


def defines_of(cfg: dict | None) -> dict:
    return {} if cfg is None else dict(cfg)


def build(cfg):
    """In a worker process: build (or find in the cache) one configuration; returns seconds."""
    import jitlab

    return jitlab.build(SNIPPET, defines=defines_of(cfg)).seconds


def launcher(ref, cfg: dict | None, bf16: bool):
    """run(module, inputs) for a configuration: the ref's own launch, or one computed from the macros."""
    if cfg is None:
        return ref.run2_bf16 if bf16 else ref.run2
    if not cfg:
        return ref.run_bf16 if bf16 else ref.run3

    def run(k, inp):
        import torch

        a, b = inp["a"], inp["b"]
        (m, kk), n = a.shape, b.shape[1]
        bk, stages = ref.v3_tile(a.device)
        c = {"HGEMM3_BM": ref.V3_BM, "HGEMM3_BN": ref.V3_BN, "HGEMM3_BK": bk, "HGEMM3_STAGES": stages, **cfg}
        bm, bn, bk = c["HGEMM3_BM"], c["HGEMM3_BN"], c["HGEMM3_BK"]
        smem = ref.v3_smem_bytes(bk, c["HGEMM3_STAGES"], bm, bn)
        out = torch.empty(m, n, device=a.device, dtype=a.dtype)
        kernel = k.hgemm_bf16_kernel3 if bf16 else k.hgemm_kernel3
        kernel(out, a, b, m, n, kk, grid=(ref.cdiv(n, bn), ref.cdiv(m, bm)), block=ref.V3_THREADS, shared_mem=smem)
        return out

    return run


def main(names: list[str]) -> int:
    configs = {n: CONFIGS[n] for n in (names or CONFIGS)}
    t0 = time.time()
    # Build before this process touches CUDA (the workers are forked).
    with ProcessPoolExecutor(min(len(configs), os.cpu_count() or 1)) as ex:
        secs = list(ex.map(build, configs.values()))
    print(f"built {len(configs)} configurations in {time.time() - t0:.0f} s (longest {max(secs):.0f} s)")

    import functools

    import torch

    import jitlab
    from jitlab.judge import refs
    from jitlab.judge.timing import ab

    ref = refs.load(ROOT / "kernels" / "hgemm.ref.py")
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    flops = 2 * SIZE ** 3
    rows = []
    for bf16 in (False, True):
        dtype = "bf16" if bf16 else "fp16"
        make = ref.inputs_bf16 if bf16 else ref.inputs
        tol = ref.TOLERANCE_BF16 if bf16 else ref.TOLERANCE
        inp = make(SIZE, 0, "cuda")
        cublas = functools.partial(torch.matmul, inp["a"], inp["b"])
        for name, cfg in configs.items():
            k = jitlab.load(SNIPPET, defines=defines_of(cfg))
            run = functools.partial(launcher(ref, cfg, bf16), k)
            verdict = jitlab.check(run, ref.reference, make, sizes=list(ref.SIZES) + [SIZE],
                                   tolerance_override=tol, name=f"{name} {dtype}")
            if not verdict.passed:
                print(verdict)
                rows.append({"config": name, "dtype": dtype, "passed": False})
                continue
            # Rounds alternate between cuBLAS and the kernel, so drifting clocks hit both alike.
            v = ab(cublas, functools.partial(run, inp), rounds=ROUNDS)
            us, cub_us = v.b.median * 1e3, v.a.median * 1e3
            rows.append({"config": name, "dtype": dtype, "passed": True, "us": us, "tflops": flops / us / 1e6,
                         "cublas_us": cub_us, "x_cublas": v.speedup})
            print(f"{name:<24}{dtype:>6}{us:>9.1f} us {flops / us / 1e6:>6.0f} TFLOP/s, cuBLAS {cub_us:.1f} us: "
                  f"{v.speedup:.3f}x", flush=True)

    print(f"\n{'config':<24}{'dtype':>6}{'us':>9}{'TFLOP/s':>9}{'cuBLAS us':>11}{'x cuBLAS':>10}")
    for dtype in ("fp16", "bf16"):
        mine = [r for r in rows if r["dtype"] == dtype]
        for r in sorted(mine, key=lambda r: r.get("us", float("inf"))):
            if r["passed"]:
                print(f"{r['config']:<24}{dtype:>6}{r['us']:>9.1f}{r['tflops']:>9.0f}{r['cublas_us']:>11.1f}"
                      f"{r['x_cublas']:>10.3f}")
            else:
                print(f"{r['config']:<24}{dtype:>6}   WRONG (not timed)")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "hgemm_sweep.json").write_text(json.dumps(rows, indent=1))
    return 0 if all(r["passed"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
