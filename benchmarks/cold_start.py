"""Cold start on few cores, as a learner meets it on Colab: each step in a new process, empty cache.

Steps (issue 24's table): ``import jitlab``; the first torch-style build (it makes the precompiled
torch headers); each next torch-style file, cold; a kernel-only file (NVRTC); a torch-style
kernel-body edit. Each step prints its wall time (process start to exit: what a notebook cell waits)
and the build's own seconds. Without a GPU every build is compile-only for sm_75 (the T4), so on a
CPU machine this measures the compilers; on a GPU box pass ``--run`` to load as the lessons do.

    taskset -c 0,1 python benchmarks/cold_start.py            # 2 cores, as Colab
    taskset -c 0 python benchmarks/cold_start.py --json out.json

The cache and the precompiled headers go to a fresh temporary folder (never your build_cache/).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIRST = "kernels/square_matrix.cu"
NEXT = ["kernels/vector_add", "kernels/custom_operation.cu", "kernels/add2_seed"]
KERNEL_ONLY = "kernels/saxpy.cu"

STEP = """
import json, sys, time
t0 = time.perf_counter()
import jitlab
t_import = time.perf_counter() - t0
path = sys.argv[1]
if path == "-":
    print(json.dumps({{"build": None, "import": t_import}}))
    raise SystemExit
kw = {{}} if {run} else {{"compile_only": True, "arch": ["sm_75"]}}
b = jitlab.build(path, **kw)
units = {{u["name"]: u["seconds"] for u in b.manifest.units or [] if not u["cached"]}}
if b.manifest.link_seconds is not None and not b.cached:
    units["link"] = b.manifest.link_seconds
print(json.dumps({{"build": b.seconds, "import": t_import, "cached": b.cached, "units": units}}))
"""


def step(label: str, path: str, env: dict, run: bool) -> dict:
    """Run one step in a new Python process; its wall time and what it reported."""
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", STEP.format(run=run), path], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{label} failed:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    row = {"step": label, "wall_s": round(wall, 2), "build_s": None if out["build"] is None else round(out["build"], 2),
           "units": out.get("units") or {}}
    units = ", ".join(f"{name} {s:.2f}" for name, s in row["units"].items())
    print(f"{label:<48} {row['wall_s']:>7.2f} s   build {row['build_s'] if row['build_s'] is not None else '-'}"
          f"{f'   ({units})' if units else ''}", flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--run", action="store_true", help="load the builds (needs a GPU) instead of compile-only for sm_75")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="jitlab-cold-"))
    env = {**os.environ, "JITLAB_CACHE_DIR": str(tmp / "cache"), "JITLAB_PCH_DIR": str(tmp / "pch"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    cores = len(os.sched_getaffinity(0))
    print(f"cores {cores}, {'load' if args.run else 'compile-only sm_75'}, cache {tmp}")
    rows = [step("import jitlab", "-", env, args.run),
            step(f"first torch-style build ({Path(FIRST).name}, makes the headers)", FIRST, env, args.run)]
    rows += [step(f"next torch-style file, cold ({Path(p).name})", p, env, args.run) for p in NEXT]
    rows.append(step(f"kernel-only file, NVRTC ({Path(KERNEL_ONLY).name})", KERNEL_ONLY, env, args.run))
    edit = tmp / "edit" / "square_matrix.cu"
    edit.parent.mkdir()
    text = (ROOT / FIRST).read_text()
    edit.write_text(text)
    step("(the copy, cached headers)", str(edit), env, args.run)
    body = "result[idx] = matrix[idx] * matrix[idx];"
    assert body in text, f"{FIRST} changed: pick another kernel-body line"
    edit.write_text(text.replace(body, "result[idx] = matrix[idx] * matrix[idx] + 0.0f;", 1))
    rows.append(step("torch-style kernel-body edit", str(edit), env, args.run))
    if args.json:
        Path(args.json).write_text(json.dumps({"cores": cores, "rows": rows}, indent=1) + "\n")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
