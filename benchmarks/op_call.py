"""Operator call overhead: a jitlab ``TORCH_LIBRARY`` op called through ``torch.ops``, against the same op
with torch's own call object, in one run.

jitlab's operator objects count each call in flight, so an edit loaded while another thread calls the op
waits for that call (:mod:`jitlab.jit.oplib`). This measures what the counting costs a call: the op's
kernel returns its input (nothing to compute), so the figure is the call path alone, on the CPU.

    PYTHONPATH=. python benchmarks/op_call.py [--calls 200000]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import timeit
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import jitlab  # noqa: E402

SOURCE = """\
#include <torch/extension.h>

torch::Tensor same_cpu(const torch::Tensor& x) { return x; }

TORCH_LIBRARY(jlt_call_bench, m) { m.def("same(Tensor x) -> Tensor"); }

TORCH_LIBRARY_IMPL(jlt_call_bench, CPU, m) { m.impl("same", &same_cpu); }
"""


def per_call_ns(fn, calls: int) -> float:
    """The best of five runs of ``calls`` calls, in ns a call."""
    return min(timeit.repeat(fn, number=calls, repeat=5)) / calls * 1e9


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=200_000, help="calls per timed run (default 200000)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="jitlab-opcall-") as tmp:
        path = Path(tmp) / "same.cpp"
        path.write_text(SOURCE)
        jitlab.load(path)
        x = torch.ones(4)
        packet = torch.ops.jlt_call_bench.same
        objects = (packet, packet.default)
        counted = [vars(o)["_op"] for o in objects]
        jit = [per_call_ns(lambda o=o: o(x), args.calls) for o in objects]
        for o, c in zip(objects, counted):
            vars(o)["_op"] = c.op  # torch's own call object, uncounted
        raw = [per_call_ns(lambda o=o: o(x), args.calls) for o in objects]
        for o, c in zip(objects, counted):
            vars(o)["_op"] = c
    print(f"torch {torch.__version__}, {args.calls} calls a run, best of 5")
    print(f"{'object':<28} {'jitlab (ns)':>12} {'torch (ns)':>11} {'added':>8}")
    for name, j, r in zip(("torch.ops.ns.op", "torch.ops.ns.op.default"), jit, raw):
        print(f"{name:<28} {j:>12.0f} {r:>11.0f} {j - r:>+7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
