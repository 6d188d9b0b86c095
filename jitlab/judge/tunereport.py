"""What a sweep found: the best configuration per size and device, against torch, as a table, a chart
and an exported table the snippet's users load (``NAME.tuned.json`` beside the kernel).

The report reads the results store, so a finished sweep, a resumed one and one cut short by its
budget or time limit are reported the same way: the best of what was measured.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from jitlab.judge import tunestore
from jitlab.judge.space import Space, config_key
from jitlab.judge.tunestore import Record


@dataclass
class Best:
    """The fastest right configuration at one size on one device model.

    Attributes:
        device: The device model and driver.
        size: The problem size.
        record: The winning point (its ``config``, ``median_ms``, ``throughput``, ``pct_roof``).
        baseline: torch eager (``median_ms``) and ``torch.compile`` (``compile_ms``) at that size, if timed.
        tried: Points of this size and device with a result; ``timed`` of them were right and timed.
    """

    device: str
    size: object
    record: Record
    baseline: Record | None = None
    tried: int = 0
    timed: int = 0

    @property
    def vs_torch(self) -> float | None:
        """torch eager's median over the winner's: above 1 the tuned kernel is faster."""
        b = self.baseline
        return b.median_ms / self.record.median_ms if b and b.median_ms else None

    @property
    def vs_compile(self) -> float | None:
        """``torch.compile``'s median over the winner's (GPU only)."""
        b = self.baseline
        return b.compile_ms / self.record.median_ms if b and b.compile_ms else None


@dataclass
class TuneReport:
    """A sweep's results over its space.

    Attributes:
        name: The snippet's name.
        kernel: Its content hash (the store's key).
        space: The space that was searched.
        records: The latest record of every point of the space (configurations and sizes) on every device.
        store: The results file.
        measured: Points run in this call (compiled, checked, timed, or found to crash or hang).
        skipped: Points the store already had, so this call did not run them again.
        seconds: Wall time of the call.
        stopped: Why the search ended early (``"time limit"``), or ``""``.
        devices: The device models it ran on.
        phases: Where ``seconds`` went: ``plan`` (probing the devices, choosing each round's
            configurations, looking up or making their builds), ``points`` (the workers' jobs, their
            start-up included), ``stop`` (stopping the workers); empty when nothing ran.
    """

    name: str
    kernel: str
    space: Space
    records: list[Record]
    store: Path
    measured: int = 0
    skipped: int = 0
    seconds: float = 0.0
    stopped: str = ""
    devices: list[str] = field(default_factory=list)
    phases: dict[str, float] = field(default_factory=dict)

    def best(self) -> list[Best]:
        """The best configuration per (device, size), in the space's size order; sizes with none right are left out."""
        out = []
        for device in self.devices or sorted({r.device for r in self.records}):
            for size in self.space.sizes:
                here = [r for r in self.records if r.device == device and same_size(r.size, size)]
                timed = [r for r in here if r.status == tunestore.OK]
                base = next((r for r in here if r.status == tunestore.BASELINE), None)
                if timed:
                    win = min(timed, key=lambda r: r.median_ms)
                    out.append(Best(device, size, win, base, len([r for r in here if r.config is not None]),
                                    len(timed)))
        return out

    def counts(self) -> dict[str, int]:
        """How many points ended in each status (baselines left out)."""
        out: dict[str, int] = {}
        for r in self.records:
            if r.status != tunestore.BASELINE:
                out[r.status] = out.get(r.status, 0) + 1
        return out

    def table(self) -> str:
        """The best configuration per size and device, its time, % of roof and ratios to torch, as text."""
        lines = [f"{self.name}: {self.measured} points run, {self.skipped} known from {self.store}"
                 + (f"; stopped early ({self.stopped}), the best so far kept" if self.stopped else "")]
        counts = ", ".join(f"{n} {status}" for status, n in sorted(self.counts().items()))
        if counts:
            lines.append(f"  points: {counts}")
        if self.phases:
            lines.append(f"  {self.seconds:.1f} s: " + ", ".join(f"{k} {v:.1f} s" for k, v in self.phases.items()))
        for b in self.best():
            r = b.record
            figure = f", {r.throughput:.4g} {r.unit}" if r.throughput else ""
            roof = f" ({r.pct_roof:.0f}% of roof)" if r.pct_roof is not None else ""
            vs = "".join(f", {v:.2f}× {label}" for v, label in ((b.vs_torch, "torch eager"),
                                                                 (b.vs_compile, "torch.compile")) if v)
            lines.append(f"  [{b.device}] size {b.size}: {_defines(r.config)}  {r.median_ms:.4g} ms{figure}{roof}{vs}"
                         f"  (best of {b.timed} timed, {b.tried} tried)")
        if not self.best():
            lines.append("  no configuration was right at any size: nothing to report (see the records' reasons)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def export(self, path: str | Path) -> Path:
        """Write the exported table: ``{"kernel", "content", "defines", "best": {device: {size: defines}}}``.

        :func:`best_defines` reads it back: ``jitlab.load(path, defines=best_defines(path, n))``.
        """
        best: dict[str, dict[str, dict]] = {}
        for b in self.best():
            best.setdefault(b.device, {})[json.dumps(b.size)] = b.record.config
        path = Path(path)
        path.write_text(json.dumps({"kernel": self.name, "content": self.kernel, "defines": list(self.space.defines),
                                    "best": best}, indent=1) + "\n")
        return path

    def chart(self, path: str | Path) -> Path:
        """A PNG: per size, a heatmap of time over the first two defines (the best over any others), or a
        line over the one define, for the first device; unrun or failed cells are blank."""
        import matplotlib  # lazy: matplotlib costs a second to import

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        device = (self.devices or sorted({r.device for r in self.records}) or [""])[0]
        names = list(self.space.defines)
        sizes = self.space.sizes
        fig, axes = plt.subplots(1, len(sizes), figsize=(4.2 * len(sizes), 3.6), squeeze=False)
        for ax, size in zip(axes[0], sizes):
            timed = {config_key(r.config): r.median_ms for r in self.records
                     if r.device == device and same_size(r.size, size) and r.status == tunestore.OK}
            if len(names) >= 2:
                xs, ys = self.space.defines[names[0]], self.space.defines[names[1]]
                grid = [[min((t for k, t in timed.items() if json.loads(k)[names[0]] == x
                              and json.loads(k)[names[1]] == y), default=math.nan) for x in xs] for y in ys]
                im = ax.imshow(grid, cmap="viridis_r", aspect="auto")
                for (i, j), t in ((ij, grid[ij[0]][ij[1]]) for ij in itertools.product(range(len(ys)), range(len(xs)))):
                    if not math.isnan(t):  # the time in each cell: a color scale alone hides a 2 % difference
                        ax.text(j, i, f"{t:.3g}", ha="center", va="center", fontsize=7,
                                color="black" if im.norm(t) < 0.5 else "white")  # fast cells are light
                ax.set_xticks(range(len(xs)), [str(x) for x in xs])
                ax.set_yticks(range(len(ys)), [str(y) for y in ys])
                ax.set_xlabel(names[0])
                ax.set_ylabel(names[1])
                fig.colorbar(im, ax=ax, label="time (ms)")
            else:
                xs = self.space.defines[names[0]]
                ax.plot([str(x) for x in xs], [timed.get(config_key({names[0]: x}), math.nan) for x in xs], marker="o")
                ax.set_xlabel(names[0])
                ax.set_ylabel("time (ms)")
            ax.set_title(f"size {size}")
        fig.suptitle(f"{self.name} on {device}", fontsize=9)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return Path(path)

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(self.table())}</pre>"


def same_size(a, b) -> bool:
    """Sizes as the store keeps them: a tuple and the list JSON gives back for it are the same size."""
    return json.dumps(a) == json.dumps(b)


def _magnitude(size) -> float:
    """A size as one number to measure nearness by: itself, or the product of a shape's dimensions."""
    return float(math.prod(size)) if isinstance(size, (list, tuple)) else float(size)


def _defines(config: dict | None) -> str:
    return " ".join(f"{k}={v}" for k, v in (config or {}).items())


def tuned_path(snippet: str | Path) -> Path:
    """Where a snippet's exported table goes: ``NAME.tuned.json`` beside it."""
    p = Path(snippet)
    return p.parent / f"{p.name.split('.')[0]}.tuned.json"


def best_defines(snippet: str | Path, size, device: str | None = None) -> dict:
    """The tuned defines for ``size`` from the snippet's ``NAME.tuned.json`` (the nearest tuned size).

    Args:
        snippet: The snippet (its table is beside it) or the table itself.
        size: The problem size to be run.
        device: The device model as the table names it; default: the only one, or the first whose name
            starts with this process's GPU's name.

    Raises:
        FileNotFoundError: No table: run ``jitlab tune SNIPPET`` first (the message says so).
        KeyError: The table has no entry for ``device``.
    """
    path = Path(snippet) if str(snippet).endswith(".tuned.json") else tuned_path(snippet)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no tuned table; make it with `jitlab tune {snippet}`")
    best = json.loads(path.read_text())["best"]
    if device is None:
        device = next(iter(best)) if len(best) == 1 else _this_device(best)
    per_size = best[device]
    want = math.log(max(_magnitude(size), 1))
    chosen = min(per_size, key=lambda s: abs(math.log(max(_magnitude(json.loads(s)), 1)) - want))
    return per_size[chosen]


def _this_device(best: dict) -> str:
    import torch  # lazy: only a table of several devices needs to know which one this is

    name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    found = next((d for d in best if d.startswith(name)), None)
    if found is None:
        raise KeyError(f"no tuned entry for {name}: the table has {', '.join(best)}; pass device= or tune on this GPU")
    return found
