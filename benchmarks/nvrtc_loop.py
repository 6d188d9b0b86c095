"""Kernel-only edit loop: jitlab's NVRTC engine vs CuPy, torch.cuda._compile_kernel and jitlab's nvcc
engine, measured in the same run on one GPU.

For each tool, a kernel-only ``scale`` kernel is edited (a new constant each time), compiled, loaded,
launched and its result checked, in the same process; the edit time is the median of ``--edits``
edits, taken in turns with the other tools' (so the machine's drift falls on all alike), and the paired
difference per round against CuPy and torch is printed too. jitlab also gets a revert (the first version again: a cache hit) and a new process loading
the cached build (time after ``import torch``, median of 3 after one that writes Python's bytecode
cache). Then each tool's per-launch overhead (best of 5 x
2000 launches of a 1024-element kernel).

    python benchmarks/nvrtc_loop.py [--edits 10] [--json out.json]
    python benchmarks/nvrtc_loop.py --compile-only [--arch sm_90]   # no GPU: jitlab's two engines only

``--compile-only`` (no GPU) prints each engine's compile-only edit, then an NVRTC hit in this process and in
a new one (``import jitlab`` and the build apart, after ``import torch``): what a hit costs before a module load.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KERNEL = """__global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = {C}f * x[i];
}
"""
N = 1024


def source(c: int) -> str:
    return KERNEL.replace("{C}", f"{c}.0")


def _timed(step) -> float:
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def compile_only(work: Path, edits: int, arch: str) -> int:
    """Per-edit compile-only time of jitlab's NVRTC and nvcc engines (no GPU needed), same run."""
    import jitlab

    print(f"compile-only for {arch}, {edits} edits of a kernel-only snippet (median of edits 2..{edits})")
    for engine in ("nvrtc", "nvcc"):
        path = work / f"scale_{engine}.cu"
        times = []
        for k in range(edits):
            path.write_text(source(2 + k))
            t0 = time.perf_counter()
            b = jitlab.build(path, compile_only=True, arch=arch, engine=engine)
            times.append(time.perf_counter() - t0)
            assert not b.cached and b.engine == engine
        print(f"  jitlab {engine:<6} first {times[0]:.3f} s   edit {statistics.median(times[1:]):.3f} s")
    path = work / "scale_nvrtc.cu"
    t0 = time.perf_counter()
    assert jitlab.build(path, compile_only=True, arch=arch, engine="nvrtc").cached
    print(f"  jitlab nvrtc  hit in this process {time.perf_counter() - t0:.4f} s")
    imports, builds = newproc_compile_only(path, arch)
    print(f"  jitlab nvrtc  hit in a new process (median of {len(builds)}): import jitlab {statistics.median(imports):.4f} s"
          f" + build {statistics.median(builds):.4f} s = {statistics.median(a + b for a, b in zip(imports, builds)):.4f} s")
    return 0


def newproc_compile_only(path: Path, arch: str, runs: int = 7) -> tuple[list[float], list[float]]:
    """A compile-only cache hit in new processes, after ``import torch``: (import jitlab s, build s) of each
    run but the first (which may write Python's bytecode cache)."""
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); import torch; t0 = time.perf_counter(); "
            f"import jitlab; t1 = time.perf_counter(); "
            f"b = jitlab.build({str(path)!r}, compile_only=True, arch={arch!r}, engine='nvrtc'); "
            f"assert b.cached, 'not cached'; print(t1 - t0, time.perf_counter() - t1)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    imports, builds = [], []
    for _ in range(runs + 1):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        a, b = map(float, out.stdout.split()[-2:])
        imports.append(a)
        builds.append(b)
    return imports[1:], builds[1:]


class Jitlab:
    def __init__(self, engine: str, work: Path):
        self.engine, self.path = engine, work / f"scale_{engine}.cu"

    def edit(self, c: int, x, y):
        import jitlab

        self.path.write_text(source(c))
        self.module = jitlab.load(self.path, engine=self.engine)
        self.module.scale(y, x, N, grid=N // 256, block=256)

    def launch(self, x, y):
        self.module.scale(y, x, N, grid=N // 256, block=256)


class CuPy:
    engine = "cupy RawKernel"

    def edit(self, c: int, x, y):
        import cupy

        # A C++ kernel (not extern "C"), as jitlab and torch take it: CuPy names it by expression.
        self.kernel = cupy.RawModule(code=source(c), name_expressions=["scale"]).get_function("scale")
        self.args = (cupy.asarray(y), cupy.asarray(x), cupy.int32(N))
        self.kernel((N // 256,), (256,), self.args)

    def launch(self, x, y):
        self.kernel((N // 256,), (256,), self.args)


class TorchCompileKernel:
    engine = "torch _compile_kernel"

    def edit(self, c: int, x, y):
        self.kernel = torch.cuda._compile_kernel(source(c), "scale")
        self.kernel(grid=(N // 256, 1, 1), block=(256, 1, 1), args=[y, x, N])

    def launch(self, x, y):
        self.kernel(grid=(N // 256, 1, 1), block=(256, 1, 1), args=[y, x, N])


def measure(tools: dict, edits: int, x, y) -> dict:
    """Each tool's row. The first build is each tool's own; then the edits are taken in turns (one edit of
    every tool, then the next constant), so what drifts on the machine during the run (clocks, other load)
    falls on every tool alike, and each round gives a paired difference between two tools."""
    rows, times = {}, {}
    for name, tool in list(tools.items()):
        try:
            rows[name] = {"first": _edit(tool, 1, x, y)}
            times[name] = []
        except Exception as e:  # a tool missing on this machine is a row that says so
            rows[name] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    for k in range(edits):
        for name in times:
            times[name].append(_edit(tools[name], 2 + k, x, y))
    for name, ts in times.items():
        row, tool = rows[name], tools[name]
        row["edit"] = statistics.median(ts)
        row["edits"] = ts
        if isinstance(tool, Jitlab):
            row["revert"] = _edit(tool, 2, x, y)
            row["newproc"] = newproc(tool)
        row["launch_us"] = overhead(tool, x, y)
    return rows


def _edit(tool, c: int, x, y) -> float:
    """Seconds for one edit to the constant ``c``: compiled, loaded, launched, its result on the host."""
    t = _timed(lambda: tool.edit(c, x, y))
    if not torch.allclose(y, c * x):
        raise AssertionError(f"{tool.engine}: wrong result after the edit to {c}")
    return t


def paired(rows: dict, a: str, b: str) -> float | None:
    """The median over the rounds of ``a``'s edit minus ``b``'s (same round, same constant): below 0, ``a``
    was faster."""
    if "edits" not in rows.get(a, {}) or "edits" not in rows.get(b, {}):
        return None
    return statistics.median(p - q for p, q in zip(rows[a]["edits"], rows[b]["edits"]))


def newproc(tool: Jitlab) -> float:
    code = (f"import sys, time; sys.path.insert(0, {str(ROOT)!r}); import torch; t0 = time.perf_counter(); "
            f"import jitlab; m = jitlab.load({str(tool.path)!r}, engine={tool.engine!r}); "
            f"assert m.build.cached, 'not cached'; print(time.perf_counter() - t0)")
    # Python may write its bytecode cache (an installed package has one); the first run writes it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times = []
    for _ in range(4):
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        times.append(float(out.stdout.split()[-1]))
    return statistics.median(times[1:])


def overhead(tool, x, y) -> float:
    for _ in range(200):
        tool.launch(x, y)
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(2000):
            tool.launch(x, y)
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / 2000 * 1e6)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=10)
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--compile-only", action="store_true", help="no GPU: compile-only edits, NVRTC vs nvcc")
    ap.add_argument("--arch", default="sm_90", help="the arch for --compile-only")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="jitlab-nvrtc-"))
    os.environ["JITLAB_CACHE_DIR"] = str(work / "cache")
    if args.compile_only:
        return compile_only(work, args.edits, args.arch)
    os.environ.setdefault("CUPY_CACHE_DIR", str(work / "cupy"))
    print(f"GPU: {torch.cuda.get_device_name()}, torch {torch.__version__}, CUDA {torch.version.cuda}")
    x = torch.randn(N, device="cuda")
    y = torch.empty_like(x)
    tools = {f"jitlab {t.engine}" if isinstance(t, Jitlab) else t.engine: t
             for t in (Jitlab("nvrtc", work), CuPy(), TorchCompileKernel(), Jitlab("nvcc", work))}
    rows = measure(tools, args.edits, x, y)
    print(f"\n{'tool':<24}{'first (s)':>11}{'edit (s)':>10}{'revert (s)':>12}{'newproc (s)':>13}{'launch (µs)':>13}")
    for name, r in rows.items():
        if "error" in r:
            print(f"{name:<24}{r['error']}")
            continue
        cells = [f"{r['first']:>11.3f}", f"{r['edit']:>10.3f}", f"{r.get('revert', float('nan')):>12.4f}",
                 f"{r.get('newproc', float('nan')):>13.3f}", f"{r['launch_us']:>13.2f}"]
        print(f"{name:<24}{''.join(cells)}")
    for other in ("cupy RawKernel", "torch _compile_kernel"):
        d = paired(rows, "jitlab nvrtc", other)
        if d is not None:
            print(f"jitlab nvrtc edit minus {other}'s, same round (median of {args.edits}): {d * 1000:+.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
