"""``bench()``: time a kernel that is known to be right, beside torch eager and ``torch.compile``.

A wrong kernel is never timed: the kernel is checked at the benchmark size first. Derived figures
(GB/s, FLOP/s, % of this GPU's measured peak) are printed beside every time.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

import torch

from jitlab.judge import checker as check_mod
from jitlab.judge import timing


@dataclass
class BenchResult:
    """One kernel at one size.

    Attributes:
        name: Kernel (and variant) name.
        size: The size given to ``inputs``.
        verdict: The correctness check run first; ``timing`` is ``None`` if it failed.
        timing: The kernel's :class:`jitlab.judge.timing.Timing`.
        torch_timing: The torch reference, eager.
        compiled_timing: ``torch.compile`` of the reference.
        bytes_moved: DRAM bytes an ideal kernel moves (for GB/s), if declared.
        flops: Floating-point operations, if declared.
        peak: The GPU's measured peaks (``copy_gbps``, ``matmul_bf16_tflops``).
    """

    name: str
    size: int
    verdict: check_mod.Verdict
    timing: timing.Timing | None = None
    torch_timing: timing.Timing | None = None
    compiled_timing: timing.Timing | None = None
    bytes_moved: int | None = None
    flops: int | None = None
    peak: dict | None = None

    @staticmethod
    def _gbps(t: timing.Timing | None, nbytes: int | None) -> float | None:
        return nbytes / (t.median * 1e-3) / 1e9 if t and nbytes else None

    @property
    def gbps(self) -> float | None:
        return self._gbps(self.timing, self.bytes_moved)

    @property
    def torch_gbps(self) -> float | None:
        return self._gbps(self.torch_timing, self.bytes_moved)

    @property
    def tflops(self) -> float | None:
        return self.flops / (self.timing.median * 1e-3) / 1e12 if self.timing and self.flops else None

    @property
    def pct_peak(self) -> float | None:
        """GB/s as a percentage of the measured copy bandwidth (memory-bound kernels)."""
        if self.gbps and self.peak and self.peak.get("copy_gbps"):
            return 100 * self.gbps / self.peak["copy_gbps"]
        return None

    @property
    def vs_torch(self) -> float | None:
        """How many times faster than torch eager the kernel is (torch's median over the kernel's; below 1: slower)."""
        return self.torch_timing.median / self.timing.median if self.timing and self.torch_timing else None

    @property
    def vs_compile(self) -> float | None:
        """How many times faster than ``torch.compile`` of the reference the kernel is (below 1: slower)."""
        return self.compiled_timing.median / self.timing.median if self.timing and self.compiled_timing else None

    def to_dict(self) -> dict:
        return {
            "variant": self.name, "size": self.size, "passed": self.verdict.passed,
            "median_ms": self.timing.median if self.timing else None,
            "iqr_ms": self.timing.iqr if self.timing else None,
            "samples_ms": self.timing.samples if self.timing else None,
            "cache": self.timing.cache if self.timing else None,
            "gbps": self.gbps, "torch_gbps": self.torch_gbps, "tflops": self.tflops, "pct_peak": self.pct_peak,
            "torch_ms": self.torch_timing.median if self.torch_timing else None,
            "compile_ms": self.compiled_timing.median if self.compiled_timing else None,
            "vs_torch": self.vs_torch, "vs_compile": self.vs_compile, "peak": self.peak,
        }

    def __str__(self) -> str:
        if not self.verdict.passed:
            return f"{self.name} @ {self.size}: not timed, the kernel is wrong\n{self.verdict}"
        parts = [f"{self.name} @ {self.size}: {self.timing}"]
        if self.gbps:
            parts.append(f"{self.gbps:.0f} GB/s" + (f" ({self.pct_peak:.0f}% of measured peak)" if self.pct_peak else ""))
        if self.tflops:
            parts.append(f"{self.tflops:.1f} TFLOP/s")
        if self.vs_torch:
            parts.append(compared(self.vs_torch, "torch eager"))
        if self.vs_compile:
            parts.append(compared(self.vs_compile, "torch.compile"))
        return ", ".join(parts)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"


def times_faster(ratio: float | None) -> str:
    """A cell under a ``× faster than torch`` header: ``1.64×``, or below 1 ``0.31× (3.23× slower)``.

    Args:
        ratio: The other code's median time over the kernel's (:attr:`BenchResult.vs_torch`).

    Returns:
        The cell; ``""`` when there is no ratio.
    """
    if not ratio:
        return ""
    return f"{ratio:.2f}×" if round(ratio, 2) >= 1 else f"{ratio:.2f}× ({1 / ratio:.2f}× slower)"


def compared(ratio: float, other: str) -> str:
    """The same in words: ``1.64× faster than torch eager``, ``3.23× slower than torch eager``."""
    return f"{ratio:.2f}× faster than {other}" if round(ratio, 2) >= 1 else f"{1 / ratio:.2f}× slower than {other}"


def bench(run, inputs, size: int, *, reference=None, bytes_moved=None, flops=None, device: str = "cuda",
          compile_reference: bool = True, flush_l2: bool = True, tolerance_override: dict | None = None,
          name: str = "kernel", peak: dict | None = None, rep_s: float = 0.2) -> BenchResult:
    """Check, then time ``run(inp)`` at one size, beside the reference eager and compiled.

    Args:
        run: The candidate, ``run(inp) -> output``.
        inputs: ``inputs(size, seed, device) -> dict``.
        size: The size to time.
        reference: The torch reference; required for the check (and timed beside the kernel).
        bytes_moved: ``bytes_moved(inp) -> int`` for GB/s.
        flops: ``flops(inp) -> int`` for FLOP/s.
        device: ``"cuda"`` or ``"cpu"``.
        compile_reference: Also time ``torch.compile(reference)`` (GPU only).
        flush_l2: Cold-cache timing (default) or hot.
        tolerance_override: Passed to the check.
        name: Label.
        peak: Measured peaks; default: :func:`jitlab.judge.peaks.peaks` on a GPU.
        rep_s: Measurement budget per timed callable.

    Returns:
        A :class:`BenchResult`; its ``timing`` is ``None`` when the check failed.
    """
    if reference is None:
        raise ValueError("bench() checks before it times: pass reference=")
    verdict = check_mod.check(run, reference, inputs, sizes=[size], seeds=[0], device=device,
                              tolerance_override=tolerance_override, name=name)
    result = BenchResult(name, size, verdict)
    if not verdict.passed:
        return result
    inp = inputs(size, 0, device)
    kw = {"flush_l2": flush_l2, "rep_s": rep_s}
    result.timing = timing.time_fn(lambda: run(inp), device, **kw)
    result.torch_timing = timing.time_fn(lambda: reference(inp), device, **kw)
    if compile_reference and device == "cuda":
        compiled = torch.compile(reference)
        result.compiled_timing = timing.time_fn(lambda: compiled(inp), device, **kw)
    result.bytes_moved = bytes_moved(inp) if bytes_moved else None
    result.flops = flops(inp) if flops else None
    if device == "cuda":
        from jitlab.judge.peaks import peaks

        result.peak = peak or peaks()
    return result
