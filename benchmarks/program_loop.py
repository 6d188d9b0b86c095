"""Edit a CUDA program → its output: jitlab.run_program vs plain `nvcc prog.cu -o prog && ./prog`, same run.

Each round edits one constant the kernel prints (so both sides must compile anew), then times the
two ways from the edit to the program's output, checking that each printed the new value. jitlab's
time includes parsing and hashing the file, the nvcc build into its cache (-lineinfo, this GPU's
arch only) and the run in a child process; plain nvcc builds for its default arch. Target: jitlab
≤ 1.5 s per edit. Run on a GPU machine:

    PYTHONPATH=. python benchmarks/program_loop.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import jitlab
from jitlab.jit import toolchain

PROGRAM = """\
#include <cstdio>
__global__ void show(int value) {{ if (threadIdx.x == 0) printf("value %d\\n", value + {edit}); }}
int main() {{
  show<<<1, 32>>>(0);
  return (int)cudaDeviceSynchronize();
}}
"""


def plain(folder: Path, path: Path) -> tuple[float, str]:
    """`nvcc prog.cu -o prog && ./prog`, timed from the edit to the output."""
    t0 = time.perf_counter()
    subprocess.run([toolchain.nvcc_path(), str(path), "-o", str(folder / "prog")], check=True)
    out = subprocess.run([str(folder / "prog")], capture_output=True, text=True, check=True).stdout
    return time.perf_counter() - t0, out


def with_jitlab(path: Path) -> tuple[float, str]:
    """jitlab.run_program, timed from the edit to the output."""
    t0 = time.perf_counter()
    run = jitlab.run_program(path, echo=False)
    assert run.ok and not run.build.cached, run
    return time.perf_counter() - t0, run.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    if not toolchain.gpu_available():
        raise SystemExit("program_loop: needs a CUDA GPU (the program runs)")
    with tempfile.TemporaryDirectory(prefix="jitlab-program-loop-") as tmp:
        folder = Path(tmp)
        os.environ.setdefault("JITLAB_CACHE_DIR", str(folder / "cache"))
        path = folder / "prog.cu"
        path.write_text(PROGRAM.format(edit=-1))
        jitlab.run_program(path, echo=False)  # warm: imports, CUDA context probing, the disk cache
        plain(folder, path)
        ours, theirs = [], []
        seed = time.time_ns() % 100000  # never a value an earlier run left in the cache
        for r in range(args.rounds):
            value = seed + r
            path.write_text(PROGRAM.format(edit=value))
            t_plain, out_plain = plain(folder, path)
            t_ours, out_ours = with_jitlab(path)
            want = f"value {value}\n"
            assert out_plain == want and out_ours == want, (out_plain, out_ours)
            theirs.append(t_plain)
            ours.append(t_ours)
            print(f"round {r + 1}: jitlab {t_ours:.2f} s, nvcc && ./prog {t_plain:.2f} s", flush=True)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"median edit → output: jitlab {a:.2f} s, nvcc prog.cu -o prog && ./prog {b:.2f} s; ratio {a / b:.2f}x "
          f"({'within' if a <= 1.5 else 'over'} the 1.5 s target)")


if __name__ == "__main__":
    main()
