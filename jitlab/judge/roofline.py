"""The roofline: each timed version placed by arithmetic intensity (FLOPs per DRAM byte) and achieved
FLOP/s, under the roofs this GPU measured (copy bandwidth, fp32 and bf16 matmul peaks).

A version left of the ridge point is under the memory roof: only fewer bytes or better bandwidth
help. Right of it, the compute roof: more FLOPs per cycle (tiling, tensor cores) help. The gap to
the roof above a point is how much is left. Intensity is the *compulsory* traffic a ref declares
(``bytes_moved``), so a version that re-reads memory shows a lower FLOP/s, not a different x.
"""

from __future__ import annotations

import io
from dataclasses import dataclass


@dataclass(frozen=True)
class Point:
    """One timed version on the chart."""

    label: str
    intensity: float   # FLOPs per byte moved
    tflops: float      # achieved
    torch: bool = False


@dataclass(frozen=True)
class Roofs:
    """The measured limits: GB/s of a device copy, and TFLOP/s of large matmuls (None: not measured)."""

    copy_gbps: float
    fp32_tflops: float | None = None
    bf16_tflops: float | None = None

    @classmethod
    def from_peak(cls, peak: dict) -> Roofs:
        return cls(peak["copy_gbps"], peak.get("matmul_fp32_tflops"), peak.get("matmul_bf16_tflops"))

    def attainable(self, intensity: float, compute_tflops: float) -> float:
        """min(compute roof, bandwidth × intensity), in TFLOP/s."""
        return min(compute_tflops, self.copy_gbps * intensity / 1e3)

    def ridge(self, compute_tflops: float) -> float:
        """The intensity (FLOP/B) where bandwidth × intensity meets a compute roof."""
        return compute_tflops * 1e3 / self.copy_gbps

    def matmul(self, dtype: str | None) -> tuple[str, float] | None:
        """The compute roof for inputs of ``dtype``: ``("fp32 matmul", TFLOP/s)`` for float32,
        the bf16 tensor-core roof for bfloat16 and float16 (the same rate on every GPU with bf16
        tensor cores; float16 is named as such), None for other dtypes or an unmeasured roof."""
        name, tflops = {"float32": ("fp32 matmul", self.fp32_tflops), "bfloat16": ("bf16 matmul", self.bf16_tflops),
                        "float16": ("fp16 matmul", self.bf16_tflops)}.get(dtype, (None, None))
        return (name, tflops) if tflops else None

    def under(self, intensity: float | None, dtype: str | None) -> tuple[str, float] | None:
        """The compute roof a kernel of this intensity and input dtype sits under, or None for the
        memory roof: right of the matching matmul roof's ridge is compute-bound, left of it memory-bound."""
        roof = self.matmul(dtype) if intensity else None
        return roof if roof and intensity > self.ridge(roof[1]) else None


def points(rows: list) -> list[Point]:
    """The timed rows that declare both ``flops`` and ``bytes_moved``, and torch beside each size."""
    out, torch_sizes = [], set()
    for r in rows:
        if not (r.timing and r.flops and r.bytes_moved):
            continue
        out.append(Point(f"{r.name} @ {r.size}", r.flops / r.bytes_moved, r.tflops))
        if r.torch_timing and r.size not in torch_sizes:
            torch_sizes.add(r.size)
            out.append(Point(f"torch @ {r.size}", r.flops / r.bytes_moved,
                             r.flops / (r.torch_timing.median * 1e-3) / 1e12, torch=True))
    return out


class Chart:
    """A roofline chart: ``_repr_png_`` shows it in a notebook, :meth:`save` writes it, ``png`` is the bytes.

    Args:
        rows: Bench results (``jitlab.bench``, ``jitlab run``, the panel's Bench).
        peak: The GPU's measured peaks (default: those of the rows).
        title: The chart's title.

    Raises:
        ValueError: No row declares ``flops`` and ``bytes_moved``, or no peak is known.
    """

    def __init__(self, rows: list, peak: dict | None = None, title: str = "roofline"):
        self.points = points(rows)
        peak = peak or next((r.peak for r in rows if r.peak), None)
        if not self.points:
            raise ValueError("nothing to place: the roofline needs timed results whose .ref.py declares both "
                             "flops(inputs) and bytes_moved(inputs)")
        if not peak or not peak.get("copy_gbps"):
            raise ValueError("no measured peaks: the roofline needs a GPU run (jitlab.judge.peaks.peaks())")
        self.roofs, self.title = Roofs.from_peak(peak), title
        self.png = self._render()

    def _render(self) -> bytes:
        from matplotlib.figure import Figure  # not pyplot: thread-safe, and the notebook's backend is left alone

        r = self.roofs
        xs = [p.intensity for p in self.points]
        lo, hi = min(xs + [0.05]) / 4, max(xs + [200.0]) * 4
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        fig = Figure(figsize=(9.5, 4.6))
        ax = fig.subplots()
        roofs = [(t, name, style) for t, name, style in (
            (r.fp32_tflops, "fp32 matmul", "-"), (r.bf16_tflops, "bf16 matmul (tensor cores)", "--")) if t]
        for tflops, name, style in roofs:
            ax.plot(grid, [r.attainable(x, tflops) for x in grid], color="0.25", linestyle=style, linewidth=1.2,
                    label=f"{name}: {tflops:.0f} TFLOP/s, ridge at {r.ridge(tflops):.0f} FLOP/B")
        if not roofs:
            ax.plot(grid, [r.copy_gbps * x / 1e3 for x in grid], color="0.25", linewidth=1.2)
        ax.annotate(f"copy bandwidth {r.copy_gbps:.0f} GB/s", xy=(grid[20], r.copy_gbps * grid[20] / 1e3),
                    rotation=28, fontsize=8, color="0.25", xytext=(0, 6), textcoords="offset points")
        for p in self.points:
            ax.scatter([p.intensity], [p.tflops], marker="s" if p.torch else "o", s=36, zorder=3,
                       color="0.5" if p.torch else None, label=p.label)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOPs per byte of compulsory DRAM traffic)")
        ax.set_ylabel("achieved TFLOP/s")
        ax.set_title(self.title)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)  # beside, never over the points
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100)
        return buf.getvalue()

    def _repr_png_(self) -> bytes:
        return self.png

    def save(self, path) -> None:
        """Write the PNG to ``path``."""
        from pathlib import Path

        Path(path).write_bytes(self.png)
