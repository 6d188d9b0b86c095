"""The first torch-style build in a fresh cache, with and without torch's headers started at load time.

A learner's notebook loads jitlab (``%load_ext jitlab``, the lessons' first cell), which starts making the
precompiled torch header sets in the background (:mod:`jitlab.jit.prepare`); the first torch-style cell
comes some seconds later. This runs, each in a new process with an empty cache and header folder:

- ``cold``: the first build of ``kernels/square_matrix.cu`` at once, nothing made ahead (it makes the sets);
- ``prepared``: :func:`jitlab.jit.prepare.start`, then ``--after`` seconds of a learner reading, then the build;
- ``made``: the build with the sets already made (what remains of a first build: its units).

Each prints the build's wall time (what the cell waits). Without a GPU the build is compile-only (sm_90).

    taskset -c 0,1 python benchmarks/first_build.py [--after 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIRST = "kernels/square_matrix.cu"

STEP = """
import sys, time
sys.path.insert(0, {root!r})
import torch, jitlab
from jitlab.jit import prepare
if {prepare}:
    prepare.start()
    time.sleep({after})
gpu = torch.cuda.is_available()
t0 = time.perf_counter()
b = jitlab.build({first!r}, compile_only=not gpu, arch=None if gpu else ["sm_90"])
print(f"{{time.perf_counter() - t0:.2f}}", [(u["name"], u["seconds"]) for u in b.manifest.units])
"""


def step(name: str, work: Path, pch: Path, prepare: bool, after: float) -> None:
    env = {**os.environ, "JITLAB_CACHE_DIR": tempfile.mkdtemp(prefix="cache-", dir=work), "JITLAB_PCH_DIR": str(pch),
           "JITLAB_PROGRESS_AFTER": "off", "JITLAB_PREPARE_HEADERS": "1"}
    code = STEP.format(root=str(ROOT), prepare=prepare, after=after, first=str(ROOT / FIRST))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    seconds, _, units = out.stdout.strip().splitlines()[-1].partition(" ")
    print(f"{name:<10}{'':>2}{float(seconds):>8.2f} s   units {units}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--after", type=float, default=20.0, help="seconds between load_ext and the first build")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jitlab-first-"))
    print(f"{FIRST}, {len(os.sched_getaffinity(0))} cores; build wall time (s), fresh cache each")
    try:
        step("cold", work, work / "pch-cold", False, 0)
        step(f"prepared (build {args.after:g} s after start)", work, work / "pch-prepared", True, args.after)
        step("made", work, work / "pch-prepared", False, 0)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # ~2 GB of precompiled headers
    return 0


if __name__ == "__main__":
    sys.exit(main())
