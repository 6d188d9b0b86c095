"""Benchmark records: one JSON line per run, kept per kernel so a version history can be shown,
and a matplotlib plot of GB/s (or time) over size, kernel vs torch, with the GPU's peak."""

from __future__ import annotations

import json
import time
from pathlib import Path

from . import config


def results_dir() -> Path:
    """``<cache>/results``: ``<kernel>.jsonl`` histories and ``<kernel>.png`` plots."""
    d = config.cache_dir() / "results"
    d.mkdir(parents=True, exist_ok=True)
    return d


def append(kernel: str, record: dict) -> Path:
    """Add one run's record to the kernel's history; returns the file."""
    path = results_dir() / f"{kernel}.jsonl"
    with open(path, "a") as f:
        f.write(json.dumps({"time": time.time(), "kernel": kernel, **record}) + "\n")
    return path


def history(kernel: str) -> list[dict]:
    """Every record of a kernel, oldest first (unreadable lines are skipped)."""
    path = results_dir() / f"{kernel}.jsonl"
    out = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def plot(kernel: str, rows: list[dict], peak_gbps: float | None = None, path: Path | None = None) -> Path:
    """Plot GB/s over size (time if no byte count) for each variant and torch; returns the PNG path.

    Args:
        kernel: Title and default file name.
        rows: Records with ``variant``, ``size``, ``median_ms``, optional ``gbps``, ``torch_ms``, ``torch_gbps``.
        peak_gbps: Draw the measured copy bandwidth as a horizontal line.
        path: Where to write; default ``results/<kernel>.png``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    use_bw = all(r.get("gbps") for r in rows)
    fig, ax = plt.subplots(figsize=(7, 4))
    for variant in dict.fromkeys(r["variant"] for r in rows):
        pts = sorted((r["size"], r["gbps"] if use_bw else r["median_ms"]) for r in rows if r["variant"] == variant)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=variant)
    ref = sorted({(r["size"], r.get("torch_gbps") if use_bw else r.get("torch_ms")) for r in rows if r.get("torch_ms")})
    if ref:
        ax.plot([p[0] for p in ref], [p[1] for p in ref], marker="s", linestyle="--", color="black", label="torch")
    if use_bw and peak_gbps:
        ax.axhline(peak_gbps, color="red", linestyle=":", label=f"measured copy peak {peak_gbps:.0f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size")
    ax.set_ylabel("GB/s" if use_bw else "time (ms)")
    ax.set_title(kernel)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = path or results_dir() / f"{kernel}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
