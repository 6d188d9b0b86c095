"""load_inline benchmark: the same lecture-style call through ``jitlab.load_inline`` and torch's, in one run.

The call is the one lecture notebooks make: ``load_inline(name=..., cpp_sources=[decl], cuda_sources=[src],
functions=["square"], extra_cuda_cflags=["-O2"])``. Each engine runs in its own fresh process and cache
(``import torch`` not timed) through three steps:

* cold     first build and load of the name, then a call checked against torch
* edit     the kernel body edited (a constant), the same name loaded again, the new result checked
* fixed    a new name whose first source fails to compile, then the fixed source under that name:
           jitlab loads it; torch's JIT keeps the failure (pytorch #119206: the name is poisoned until restart)

jitlab's precompiled torch headers are made once per toolchain (``build_cache/pch``, or ``$JITLAB_PCH_DIR``),
before the cold step, and reported on their own line. Targets for jitlab: cold <= 8 s, edit <= 2 s, the fixed
source loads.

    PYTHONPATH=. python benchmarks/inline_loop.py          # GPU: the CUDA call
    PYTHONPATH=. python benchmarks/inline_loop.py --cpp    # no GPU: the same steps with a C++ function
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

DECL = "torch::Tensor square(torch::Tensor x);"
CUDA_SRC = """
__global__ void square_kernel(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * x[i] + {C}.0f;
}

torch::Tensor square(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    square_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
CPP_SRC = """
torch::Tensor square(torch::Tensor x) {
    return x * x + {C};
}
"""
BROKEN = "not_declared_anywhere"  # replaces the constant: an undeclared name, a compile error
TARGETS = {"cold": 8.0, "edit": 2.0}
STEP_TIMEOUT = 600  # seconds; torch waiting on a poisoned name would wait for ever


def call(name: str, c: str, cpp: bool) -> dict:
    """The lecture-style keyword arguments, with the kernel's constant set to ``c``."""
    if cpp:
        return dict(name=name, cpp_sources=[CPP_SRC.replace("{C}", c)], functions=["square"], extra_cflags=["-O2"])
    return dict(name=name, cpp_sources=[DECL], cuda_sources=[CUDA_SRC.replace("{C}", c)], functions=["square"],
                extra_cuda_cflags=["-O2"])


def timed(load_inline, kwargs: dict, c: int, device: str) -> dict:
    """One load, timed, its result checked: ``{"s": seconds, "ok": bool}`` or ``{"s", "error"}``."""
    import torch

    t0 = time.perf_counter()
    signal.alarm(STEP_TIMEOUT)
    try:
        m = load_inline(**kwargs)
    except BaseException as e:  # noqa: BLE001 - a timeout or any build failure is a result here
        return {"s": time.perf_counter() - t0, "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0][:90]}"}
    finally:
        signal.alarm(0)
    s = time.perf_counter() - t0
    x = torch.randn(1 << 16, device=device)
    return {"s": s, "ok": bool(torch.allclose(m.square(x), x * x + c))}


class StepTimeout(Exception):
    """A step ran past STEP_TIMEOUT seconds."""


def _on_alarm(*_):
    raise StepTimeout(f"no result after {STEP_TIMEOUT} s")


def child(engine: str, cpp: bool) -> dict:
    """The three steps for one engine in this process; returns each step's result."""
    import torch

    signal.signal(signal.SIGALRM, _on_alarm)
    device = "cpu" if cpp else "cuda"
    out = {}
    if engine == "jitlab":
        import jitlab

        load_inline = jitlab.load_inline
        t0 = time.perf_counter()  # the precompiled headers, once per toolchain: a throwaway name makes them
        load_inline(**call("warm_headers", "7", cpp))
        out["headers"] = {"s": time.perf_counter() - t0, "ok": True}
    else:
        from torch.utils.cpp_extension import load_inline
    tag = f"sq{os.getpid()}"
    out["cold"] = timed(load_inline, call(tag, "1", cpp), 1, device)
    out["edit"] = timed(load_inline, call(tag, "2", cpp), 2, device)
    out["failed"] = timed(load_inline, call(tag + "_bad", BROKEN, cpp), 0, device)
    out["fixed"] = timed(load_inline, call(tag + "_bad", "3", cpp), 3, device)
    out["device"] = torch.cuda.get_device_name() if not cpp else "cpu"
    return out


def run_child(engine: str, cpp: bool, work: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               JITLAB_CACHE_DIR=str(work / "jitlab_cache"), TORCH_EXTENSIONS_DIR=str(work / "torch_extensions"))
    env.setdefault("JITLAB_PCH_DIR", str(ROOT / "build_cache" / "pch"))
    cmd = [sys.executable, __file__, "--child", engine, *(["--cpp"] if cpp else [])]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=5 * STEP_TIMEOUT)
    last = proc.stdout.strip().splitlines()[-1] if proc.stdout.strip() else ""
    if proc.returncode != 0 or not last.startswith("{"):
        sys.exit(f"{engine} run failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(last)


def cell(r: dict | None, expect_error: bool = False) -> str:
    if r is None:
        return "-"
    if "error" in r:
        return f"{r['s']:.1f} s, error" if expect_error else f"failed: {r['error']}"
    return f"{r['s']:.1f} s" + ("" if r["ok"] else " WRONG RESULT")


def table(j: dict, t: dict) -> str:
    rows = [("precompiled headers (once per toolchain)", "headers"), ("cold build + load", "cold"),
            ("kernel edit, same name", "edit"), ("failed first build (to the error)", "failed"),
            ("fixed source, same name", "fixed")]
    lines = [f"{'step':42} {'jitlab':>14} {'torch':>14} {'torch/jitlab':>12}  target (jitlab)"]
    for label, key in rows:
        a, b = j.get(key), t.get(key)
        ratio = f"{b['s'] / a['s']:.1f}x" if a and b and a.get("ok") and b.get("ok") else ""
        target = TARGETS.get(key)
        met = "" if target is None else f"<= {target:g} s: {'met' if a and a.get('ok') and a['s'] <= target else 'MISSED'}"
        if key == "fixed":
            met = f"loads: {'met' if a and a.get('ok') else 'MISSED'}"
        lines.append(f"{label:42} {cell(a, key == 'failed'):>14} {cell(b, key == 'failed'):>14} {ratio:>12}  {met}")
    if "error" in t.get("fixed", {}):
        lines.append(f"torch, fixed source: {t['fixed']['error']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpp", action="store_true", help="C++ on the CPU (no GPU needed)")
    ap.add_argument("--child", choices=["jitlab", "torch"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.cpp)))
        return
    if not args.cpp:
        import torch

        if not torch.cuda.is_available():
            sys.exit("no CUDA GPU found: run with --cpp for the C++ version of these steps")
    with tempfile.TemporaryDirectory(prefix="inline_loop-") as work:
        j = run_child("jitlab", args.cpp, Path(work))
        t = run_child("torch", args.cpp, Path(work))
    print(f"load_inline, {'C++ on the CPU' if args.cpp else 'CUDA'} ({j['device']}), jitlab vs torch, fresh caches\n")
    print(table(j, t))


if __name__ == "__main__":
    main()
