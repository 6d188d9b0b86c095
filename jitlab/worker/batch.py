"""Batch checks: many snippets (a class's submissions, every kernel of a folder) checked on the tuner's
engine, spread over the GPUs (or Dask workers), each in an isolated worker with its own timeout, in
one table.

``jitlab check submissions/ --ref kernels/add2.ref.py --gpus 0,1`` checks every ``.cu``/``.cpp`` in the
folder against one reference; without ``--ref`` every snippet with a ``NAME.ref.py`` beside it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from jitlab import config
from jitlab.jit.sources import has_cuda, locate
from jitlab.judge import refs
from jitlab.worker.jobs import Job, Outcome
from jitlab.worker.tune import make_pool


def submissions(paths, ref: str | Path | None = None) -> list[Path]:
    """The snippets to check: each file named, and in each folder every snippet (with ``ref``: every
    ``.cu``/``.cpp`` file, all checked against it; without: those with a ``NAME.ref.py`` beside them)."""
    found: list[Path] = []
    for p in map(locate, paths):
        if p.is_dir() and ref is not None:
            found += sorted(f for f in p.iterdir() if f.suffix in config.SOURCE_EXTS)
        elif p.is_dir():
            found += [k.path for k in refs.find_kernels(p)]
        else:
            found.append(p)
    return found


@dataclass
class BatchResult:
    """Every snippet's outcome, in the order given.

    Attributes:
        results: ``(snippet, outcome, device)`` per snippet (the device: the slot that checked it).
        seconds: Wall time of the batch.
    """

    results: list[tuple[Path, Outcome, str]]
    seconds: float

    @property
    def passed(self) -> int:
        return sum(out.passed for _, out, _ in self.results)

    def table(self) -> str:
        """One line per snippet (PASS, or FAIL with its category and the first line of why), then the count."""
        width = max((len(str(p)) for p, _, _ in self.results), default=0)
        lines = []
        for path, out, device in self.results:
            why = "" if out.passed else " " + ((out.message or "").strip().splitlines() or [""])[0][:100]
            head = "PASS" if out.passed else f"FAIL [{out.category}]"
            lines.append(f"{str(path):<{width}}  {head:<26} {out.seconds:6.2f} s  on {device}{why}")
        lines.append(f"{len(self.results)} snippets checked in {self.seconds:.1f} s: {self.passed} passed, "
                     f"{len(self.results) - self.passed} failed")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()


def check_many(paths, *, ref: str | Path | None = None, gpus=None, cluster: str | None = None,
               timeout: float = config.CHECK_TIMEOUT, sizes=None, variant: str | None = None,
               **options) -> BatchResult:
    """Check snippets in parallel, one isolated worker per device, each with ``timeout``.

    Args:
        paths: Snippet files or folders (see :func:`submissions`).
        ref: One reference for all of them (a class's submissions of one exercise).
        gpus: Devices (a count, or numbers such as ``"0,1"``); default every GPU here, or one worker for C++ only.
        cluster: ``"local"`` or a Dask scheduler's ``tcp://`` address (see :mod:`jitlab.worker.dask_pool`).
        timeout: Seconds per snippet before its worker is stopped (the snippet fails with ``timeout``).
        sizes, variant, **options: As :func:`jitlab.check` takes them (``defines``, ``arch`` …).

    Returns:
        The :class:`BatchResult`; ``print`` it for the table.
    """
    t0 = time.monotonic()
    found = submissions(paths, ref)
    for p in found:
        refs.path_for(p, ref)  # a missing reference is named now, not as every worker's error
    cuda = any(has_cuda(p) for p in found)
    pool = make_pool(cuda, gpus, cluster, timing=False)
    outcomes: dict[str, tuple[Outcome, str]] = {}
    try:
        pool.probe(cuda)
        jobs = [Job("check", str(p), ref=str(ref) if ref else None, variant=variant,
                    sizes=list(sizes) if sizes else None, options=options, cache_dir=str(config.cache_dir()))
                for p in found]
        for slot, job, out in pool.run({None: jobs}, timeout):  # None: any device takes the next snippet
            outcomes[job.path] = (out, slot.name)
    finally:
        pool.close()
    return BatchResult([(p, *outcomes[str(p)]) for p in found], time.monotonic() - t0)
