"""hgemm version 3 and cuBLAS under the GPU's power cap: 4096^3 products back to back, fp16 and bf16.

A large matrix product brings an H100 to its power cap within ~0.1 s; the GPU then lowers its clocks.
Short timings (`jitlab run`: each side alone to a stable median) see full clocks; long ones see
capped clocks. This script launches each kernel 4000 times in a row and prints the median launch
time at the start and at the end, with nvidia-smi's clock, power and power-cap flag along the way.

    python benchmarks/hgemm_power.py            # on a GPU with bf16 WMMA (sm_80 and newer)
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SIZE, LAUNCHES = 4096, 4000
SMI = ["nvidia-smi", "--query-gpu=clocks.sm,power.draw,clocks_event_reasons.sw_power_cap", "--format=csv,noheader",
       "-lms", "100"]


def back_to_back(fn, launches: int) -> tuple[list[float], list[str]]:
    """Per-launch times (µs, CUDA events) of ``launches`` calls in a row, and nvidia-smi's samples meanwhile."""
    import torch

    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(launches)]
    smi = subprocess.Popen(SMI, stdout=subprocess.PIPE, text=True)
    torch.cuda.synchronize()
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    smi.terminate()
    return [s.elapsed_time(e) * 1000 for s, e in events], smi.communicate()[0].split("\n")


def main() -> int:
    import torch

    import jitlab
    from jitlab.judge import refs

    ref = refs.load(ROOT / "kernels" / "hgemm.ref.py")
    module = jitlab.load(ROOT / "kernels" / "hgemm.cu")
    print(f"GPU: {torch.cuda.get_device_name()}, {LAUNCHES} launches each at {SIZE}^3")
    for dtype, inputs, run in [("bf16", ref.inputs_bf16, ref.run_bf16), ("fp16", ref.inputs, ref.run3)]:
        inp = inputs(SIZE, 0, "cuda")
        medians = {}
        for who, fn in [("version 3", lambda: run(module, inp)), ("cuBLAS", lambda: ref.reference(inp))]:
            times, smi = back_to_back(fn, LAUNCHES if who == "version 3" else 2 * LAUNCHES)
            medians[who] = statistics.median(times[:20]), statistics.median(times[-200:])
            print(f"{who:9s} {dtype}: first 20 {medians[who][0]:6.1f} us, last 200 {medians[who][1]:6.1f} us; "
                  f"nvidia-smi (MHz, W, power cap): {' | '.join(s.strip() for s in smi[1::3] if s.strip())}")
            time.sleep(2)  # let the clocks recover before the next kernel
        (o0, o1), (c0, c1) = medians["version 3"], medians["cuBLAS"]
        print(f"  {dtype}: x cuBLAS at the start {c0 / o0:.3f}, at the end {c1 / o1:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
