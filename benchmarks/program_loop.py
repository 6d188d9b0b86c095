"""Edit a CUDA program → its output: jitlab.run_program vs plain `nvcc prog.cu -o prog && ./prog`, same run.

Each round edits one constant the kernel prints (so both sides must compile anew), then times the
two ways from the edit to the program's output, checking that each printed the new value. jitlab's
time includes parsing and hashing the file, its build (``engine="auto"``: the kernel through NVRTC into
the CUBIN the cached executable loads, jitlab/jit/engines/nvrtc_program.py; ``--engine nvcc``: the whole
program through nvcc, -lineinfo, this GPU's arch only) and the run in a child process; each round says
which engine built it and what it compiled. Plain nvcc builds for its default arch. Target: jitlab
≤ 0.8 s per edit (auto). Run on a GPU machine:

    PYTHONPATH=. python benchmarks/program_loop.py [--rounds 5] [--engine auto|nvcc]
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

#: Seconds from an edit to the program's output that jitlab (engine auto) should stay within.
TARGET = 0.8

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


def with_jitlab(path: Path, engine: str):
    """jitlab.run_program, timed from the edit to the output; also its run (the build says what built it)."""
    t0 = time.perf_counter()
    run = jitlab.run_program(path, engine=engine, echo=False)
    assert run.ok and not run.build.cached, run
    return time.perf_counter() - t0, run


def compiled(run) -> str:
    """What the round's build compiled: the units it did not find cached (all of it, for nvcc's one command)."""
    units = run.build.manifest.units
    return ", ".join(u["name"] for u in units if not u["cached"]) if units else "the whole program"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--engine", choices=("auto", "nvcc"), default="auto", help="jitlab's engine (default: auto)")
    args = ap.parse_args()
    if not toolchain.gpu_available():
        raise SystemExit("program_loop: needs a CUDA GPU (the program runs)")
    with tempfile.TemporaryDirectory(prefix="jitlab-program-loop-") as tmp:
        folder = Path(tmp)
        os.environ.setdefault("JITLAB_CACHE_DIR", str(folder / "cache"))
        path = folder / "prog.cu"
        path.write_text(PROGRAM.format(edit=-1))
        warm = jitlab.run_program(path, engine=args.engine, echo=False)  # imports, CUDA probing, the host side
        print(f"warm-up: built by {warm.build.engine} in {warm.build.seconds:.2f} s"
              + "".join(f"; {n}" for n in warm.build.notes), flush=True)
        plain(folder, path)
        ours, theirs, engines = [], [], set()
        seed = time.time_ns() % 100000  # never a value an earlier run left in the cache
        for r in range(args.rounds):
            value = seed + r
            path.write_text(PROGRAM.format(edit=value))
            t_plain, out_plain = plain(folder, path)
            t_ours, run = with_jitlab(path, args.engine)
            want = f"value {value}\n"
            assert out_plain == want and run.stdout == want, (out_plain, run.stdout)
            theirs.append(t_plain)
            ours.append(t_ours)
            engines.add(run.build.engine)
            print(f"round {r + 1}: jitlab {t_ours:.2f} s ({run.build.engine}, build {run.build.seconds:.2f} s, "
                  f"run {run.seconds:.2f} s; compiled {compiled(run)}), nvcc && ./prog {t_plain:.2f} s", flush=True)
    a, b = statistics.median(ours), statistics.median(theirs)
    print(f"median edit → output: jitlab ({'/'.join(sorted(engines))}) {a:.2f} s, nvcc prog.cu -o prog && ./prog "
          f"{b:.2f} s; ratio {a / b:.2f}x ({'within' if a <= TARGET else 'over'} the {TARGET} s target)")


if __name__ == "__main__":
    main()
