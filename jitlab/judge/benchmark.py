"""``bench()``: time a kernel that is known to be right, beside torch eager and ``torch.compile``.

A wrong kernel is never timed: the kernel is checked at the benchmark size first. Derived figures
are printed beside every time: GB/s and % of the measured copy bandwidth for a memory-bound kernel,
TFLOP/s and % of the matching matmul peak for a compute-bound one (the roofline's rule). A ratio
against torch carries its spread from the quartiles and is a verdict only when the machine was
quiet and the two timings stand apart by more than their noise (:class:`Comparison`).
"""

from __future__ import annotations

import contextlib
import html
from dataclasses import dataclass

import torch

from jitlab.judge import checker as check_mod
from jitlab.judge import timing
from jitlab.judge.roofline import Roofs


@dataclass(frozen=True)
class Comparison:
    """The kernel against other code timed beside it (torch eager, ``torch.compile``).

    A verdict needs two things: the machine was quiet enough to time (:func:`jitlab.judge.timing.busy`)
    and the medians stand apart by more than the noise (:func:`jitlab.judge.timing.ab_verdict`, the
    rule A/B uses). Otherwise the comparison says why it gives none.

    Attributes:
        other: What the kernel is compared with, as printed (``"torch eager, 1 thread"``).
        ratio: The other's median over the kernel's: above 1 the kernel is faster.
        low: The least the ratio reads from the quartiles (the other's q25 over the kernel's q75).
        high: The most (the other's q75 over the kernel's q25).
        verdict: ``"faster"`` or ``"slower"`` (decided), ``"same"`` (within noise) or ``"busy"``.
        why: Why there is no verdict (``"within noise"``, ``"load 3.9 on 2 cores"``); ``""`` when decided.
    """

    other: str
    ratio: float
    low: float
    high: float
    verdict: str
    why: str = ""

    @classmethod
    def of(cls, kernel: timing.Timing, other: timing.Timing, label: str) -> Comparison:
        """Compare the kernel's timing with the other code's (both taken in the same run)."""
        busy = timing.busy(kernel, other)
        verdict = "busy" if busy else timing.ab_verdict(other, kernel)
        why = busy or ("within noise" if verdict == "same" else "")
        return cls(label, other.median / kernel.median, other.q25 / kernel.q75, other.q75 / kernel.q25, verdict, why)

    @property
    def decided(self) -> bool:
        return self.verdict in ("faster", "slower")

    def cell(self) -> str:
        """A table cell under ``× faster than …``: ``1.64× (1.52–1.77)``, ``0.31× (0.29–0.33; 3.23× slower)``,
        ``within noise: no verdict (0.80–1.30×)`` or ``machine busy: no verdict (load 3.9 on 2 cores)``."""
        span = f"{self.low:.2f}–{self.high:.2f}"
        if self.verdict == "busy":
            return f"machine busy: no verdict ({self.why})"
        if self.verdict == "same":
            return f"within noise: no verdict ({span}×)"
        return f"{self.ratio:.2f}× ({span})" if self.verdict == "faster" else \
            f"{self.ratio:.2f}× ({span}; {1 / self.ratio:.2f}× slower)"

    def __str__(self) -> str:
        """The same in words: ``1.64× faster than torch eager (1.52–1.77× by the quartiles)``."""
        if self.verdict == "busy":
            return f"machine busy: no verdict against {self.other} ({self.why})"
        if self.verdict == "same":
            return f"within noise of {self.other}: no verdict ({self.low:.2f}–{self.high:.2f}×)"
        if self.verdict == "faster":
            return f"{self.ratio:.2f}× faster than {self.other} ({self.low:.2f}–{self.high:.2f}× by the quartiles)"
        return (f"{1 / self.ratio:.2f}× slower than {self.other} "
                f"({1 / self.high:.2f}–{1 / self.low:.2f}× slower by the quartiles)")

    def to_dict(self) -> dict:
        return {"other": self.other, "ratio": self.ratio, "low": self.low, "high": self.high,
                "verdict": self.verdict, "why": self.why}


@dataclass(frozen=True)
class Throughput:
    """What a version reaches against the roof it sits under (the roofline's rule).

    Attributes:
        value: GB/s (memory-bound) or TFLOP/s (compute-bound).
        unit: ``"GB/s"`` or ``"TFLOP/s"``.
        roof: ``"copy"``, ``"fp32 matmul"``, ``"bf16 matmul"``, ``"fp16 matmul"``; None: no measured roof (CPU).
        pct: The value as a percentage of that roof's measured peak.
    """

    value: float
    unit: str
    roof: str | None = None
    pct: float | None = None

    def __str__(self) -> str:
        return f"{self.value:.0f} GB/s" if self.unit == "GB/s" else f"{self.value:.1f} TFLOP/s"

    @property
    def of_roof(self) -> str:
        """``"97% copy"``, ``"62% fp32 matmul"``; ``""`` without a roof."""
        return f"{self.pct:.0f}% {self.roof}" if self.pct is not None else ""


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
        peak: The GPU's measured peaks (``copy_gbps``, ``matmul_fp32_tflops``, ``matmul_bf16_tflops``).
        dtype: The inputs' floating dtype (``"float32"``): which matmul roof a compute-bound kernel is under.
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
    dtype: str | None = None

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
        """GB/s as a percentage of the measured copy bandwidth (whatever roof the kernel is under)."""
        if self.gbps and self.peak and self.peak.get("copy_gbps"):
            return 100 * self.gbps / self.peak["copy_gbps"]
        return None

    @property
    def throughput(self) -> Throughput | None:
        """TFLOP/s against the matching matmul roof when the kernel is compute-bound (it declares
        ``flops``, and ``flops / bytes_moved`` is right of that roof's ridge), else GB/s against
        the copy roof; TFLOP/s without a roof when only ``flops`` is declared."""
        roofs = Roofs.from_peak(self.peak) if self.peak and self.peak.get("copy_gbps") else None
        intensity = self.flops / self.bytes_moved if self.flops and self.bytes_moved else None
        under = roofs.under(intensity, self.dtype) if roofs and self.tflops else None
        if under:
            return Throughput(self.tflops, "TFLOP/s", under[0], 100 * self.tflops / under[1])
        if self.gbps:
            return Throughput(self.gbps, "GB/s", "copy" if self.pct_peak else None, self.pct_peak)
        return Throughput(self.tflops, "TFLOP/s") if self.tflops else None

    def _against(self, other: timing.Timing | None, label: str) -> Comparison | None:
        if not (self.timing and other):
            return None
        threads = f", {other.threads} thread{'s' if other.threads != 1 else ''}" if other.threads else ""
        return Comparison.of(self.timing, other, label + threads)

    @property
    def torch(self) -> Comparison | None:
        """The kernel against torch eager (on CPU the label states torch's thread count)."""
        return self._against(self.torch_timing, "torch eager")

    @property
    def compiled(self) -> Comparison | None:
        """The kernel against ``torch.compile`` of the reference."""
        return self._against(self.compiled_timing, "torch.compile")

    @property
    def vs_torch(self) -> float | None:
        """How many times faster than torch eager the kernel is (torch's median over the kernel's; below 1: slower)."""
        return self.torch.ratio if self.torch else None

    @property
    def vs_compile(self) -> float | None:
        """How many times faster than ``torch.compile`` of the reference the kernel is (below 1: slower)."""
        return self.compiled.ratio if self.compiled else None

    def to_dict(self) -> dict:
        """The results-file record: the fields every release wrote, then the comparisons and the roof."""
        tp, t = self.throughput, self.timing
        return {
            "variant": self.name, "size": self.size, "passed": self.verdict.passed,
            "median_ms": t.median if t else None, "iqr_ms": t.iqr if t else None,
            "samples_ms": t.samples if t else None, "cache": t.cache if t else None,
            "gbps": self.gbps, "torch_gbps": self.torch_gbps, "tflops": self.tflops, "pct_peak": self.pct_peak,
            "torch_ms": self.torch_timing.median if self.torch_timing else None,
            "compile_ms": self.compiled_timing.median if self.compiled_timing else None,
            "vs_torch": self.vs_torch, "vs_compile": self.vs_compile, "peak": self.peak,
            "dtype": self.dtype, "throughput": tp.value if tp else None, "throughput_unit": tp.unit if tp else None,
            "roof": tp.roof if tp else None, "pct_roof": tp.pct if tp else None,
            "load": t.load if t else None, "cores": t.cores if t else None,
            "threads": self.torch_timing.threads if self.torch_timing else None,
            "torch": self.torch.to_dict() if self.torch else None,
            "compile": self.compiled.to_dict() if self.compiled else None,
        }

    def __str__(self) -> str:
        if not self.verdict.passed:
            return f"{self.name} @ {self.size}: not timed, the kernel is wrong\n{self.verdict}"
        parts = [f"{self.name} @ {self.size}: {self.timing}"]
        tp = self.throughput
        if tp:
            parts.append(str(tp) + (f" ({tp.pct:.0f}% of the measured {tp.roof} peak)" if tp.roof else ""))
        parts += [str(c) for c in (self.torch, self.compiled) if c]
        return ", ".join(parts)

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"


def input_dtype(inp: dict) -> str | None:
    """The first floating-point input's dtype name (``"float32"``), or None."""
    return next((str(v.dtype).removeprefix("torch.") for v in inp.values()
                 if isinstance(v, torch.Tensor) and v.is_floating_point()), None)


#: torch's intra-op threads while bench() times on the CPU, for the kernel and torch alike: the C++
#: snippets are single-threaded loops, so one thread compares like with like, and a shared machine's
#: other work cannot stall one of torch's threads (None: leave torch's setting as it is).
CPU_THREADS = 1


@contextlib.contextmanager
def _threads(n: int | None):
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def bench(run, inputs, size: int, *, reference=None, bytes_moved=None, flops=None, device: str = "cuda",
          compile_reference: bool = True, flush_l2: bool = True, tolerance_override: dict | None = None,
          name: str = "kernel", peak: dict | None = None, rep_s: float = 0.2,
          threads: int | None = CPU_THREADS) -> BenchResult:
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
        threads: torch's threads while timing on the CPU (both sides; the output states it).

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
    with _threads(threads if device == "cpu" else None):
        result.timing = timing.time_fn(lambda: run(inp), device, **kw)
        result.torch_timing = timing.time_fn(lambda: reference(inp), device, **kw)
    if compile_reference and device == "cuda":
        compiled = torch.compile(reference)
        result.compiled_timing = timing.time_fn(lambda: compiled(inp), device, **kw)
    result.bytes_moved = bytes_moved(inp) if bytes_moved else None
    result.flops = flops(inp) if flops else None
    result.dtype = input_dtype(inp)
    if device == "cuda":
        from jitlab.judge.peaks import peaks

        result.peak = peak or peaks()
    return result
