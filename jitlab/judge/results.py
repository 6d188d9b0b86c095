"""Benchmark records: one JSON line per run, kept per kernel so a version history can be shown,
and a matplotlib plot of GB/s (or time) over size, kernel vs torch, with the GPU's peak."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from jitlab import config
from jitlab.errors import ArgumentError


def results_dir() -> Path:
    """``<cache>/results``: ``<kernel>.jsonl`` histories and ``<kernel>.png`` plots."""
    d = config.cache_dir() / "results"
    d.mkdir(parents=True, exist_ok=True)
    return d


def check_file(path: Path, suffix: str = "jsonl") -> None:
    """Refuse a results file that is a folder, naming a file in it to give instead.

    Raises:
        ArgumentError: ``path`` is a folder.
    """
    if path.is_dir():
        raise ArgumentError(f"{path} is a folder, not a results file: give a file's path, e.g. "
                            f"{path / ('results.' + suffix)}, or leave it out for the default")


def read_lines(path: Path) -> list:
    """Every readable JSON line of an append-only file, oldest first (none if it is missing); a torn or
    foreign line is skipped, never an error.

    Raises:
        ArgumentError: ``path`` is a folder.
    """
    check_file(path)
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def append_line(path: Path, record: dict) -> None:
    """Add ``record`` as one JSON line: a single ``write`` on an ``O_APPEND`` descriptor, after a newline if
    the file ends in a torn line (a killed writer's), so the new line is never glued to it."""
    line = json.dumps(record, default=str) + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        end = os.lseek(fd, 0, os.SEEK_END)
        if end and os.pread(fd, 1, end - 1) != b"\n":
            line = "\n" + line
        os.write(fd, line.encode())
    finally:
        os.close(fd)


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


def chart_kind(rows: list[dict]) -> str:
    """``"lines"`` (GB/s over size) when some version was timed at several sizes, else ``"bars"``:
    a line through one point per version is a lone dot."""
    sizes = {}
    for r in rows:
        sizes.setdefault(r["variant"], set()).add(r["size"])
    return "lines" if any(len(v) > 1 for v in sizes.values()) else "bars"


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
    series = {variant: sorted((r["size"], r["gbps"] if use_bw else r["median_ms"]) for r in rows
                              if r["variant"] == variant) for variant in dict.fromkeys(r["variant"] for r in rows)}
    ref = sorted({(r["size"], r.get("torch_gbps") if use_bw else r.get("torch_ms")) for r in rows if r.get("torch_ms")})
    if chart_kind(rows) == "bars":  # one size each (`jitlab run` times the largest): a bar per version
        bars = [(name, *pts[0]) for name, pts in series.items()] + ([("torch", *ref[-1])] if ref else [])
        one_size = len({size for _, size, _ in bars}) == 1
        ax.bar([name if one_size else f"{name}\n(size {size})" for name, size, _ in bars], [v for *_, v in bars],
               color=["C%d" % i for i in range(len(series))] + (["black"] if ref else []))
        ax.set_xlabel(f"version, at size {bars[0][1]}" if one_size else "version (the size it was timed at)")
        ax.tick_params(axis="x", labelrotation=20)
    else:
        for variant, pts in series.items():
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=variant)
        if ref:
            ax.plot([p[0] for p in ref], [p[1] for p in ref], marker="s", linestyle="--", color="black", label="torch")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("size")
    if use_bw and peak_gbps:
        ax.axhline(peak_gbps, color="red", linestyle=":", label=f"measured copy peak {peak_gbps:.0f} GB/s")
    ax.set_ylabel("GB/s" if use_bw else "time (ms)")
    ax.set_title(kernel)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = path or results_dir() / f"{kernel}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
