"""KernelBench grades: the results file that makes a batch resumable, and the one-page table.

One JSON line per graded solution, appended as each one ends (as the tuner's store: a killed batch leaves
at worst a torn last line, which reading skips). A grade is keyed by both files' content, the grading
parameters and the device model (:meth:`jitlab.judge.kernelbench_pairs.Pair.key`): a rerun skips every solution
already graded with the same sources, and grades an edited one again.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jitlab.judge import results

PASS = "pass"  # an outcome's category when the solution is right (jitlab.worker.jobs.PASS)
BUILT = "built"  # a compile-only batch's category for a solution that builds (it was not run)


@dataclass
class Grade:
    """One solution's grade.

    Attributes:
        key: What it is keyed by (sources, parameters, device model).
        pair: The pair's name (its folder, or the solution's stem).
        problem, solution: The files.
        device: The device model it ran on (``"cpu: ..."`` on the CPU).
        category: ``"pass"`` or the failure category (compile error, mismatch, crashed, timeout, …).
        message: Why it failed, its first lines (the compile error at the solution's line, the checker's reasons).
        where: Where it failed, when known (the first wrong trial; the last kernel launched before a fault).
        build_s: Seconds its ``load_inline`` builds took in the compile phase.
        build_cached: Whether those builds were all cache hits.
        seconds: Seconds its grading took in the worker.
        ms, eager_ms, compile_ms: Median times of the solution, of ``Model`` eager and under ``torch.compile``.
        time: When it was graded (Unix time).
    """

    key: str
    pair: str
    problem: str
    solution: str
    device: str
    category: str
    message: str = ""
    where: str = ""
    build_s: float | None = None
    build_cached: bool = False
    seconds: float | None = None
    ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    time: float = field(default_factory=time.time)

    @property
    def passed(self) -> bool:
        return self.category == PASS

    def speedup(self, over: str) -> float | None:
        """``Model``'s time (``"eager"`` or ``"compile"``) over the solution's: above 1, the solution is faster."""
        ref = getattr(self, f"{over}_ms")
        return ref / self.ms if ref and self.ms else None

    def line(self, width: int = 0) -> str:
        """The one-line verdict: ``PASS 0.21 ms, 1.6x eager, 0.9x compile`` or ``FAIL [category] why``."""
        built = "  (build: cache hit)" if self.build_cached else \
            f"  (build {self.build_s:.1f} s)" if self.build_s is not None else ""
        if self.category == BUILT:
            return f"{self.pair:<{width}}  BUILT (not run){built}"
        if self.passed:
            figures = [f"{self.ms:.3g} ms"] if self.ms else ["right (untimed)"]
            figures += [f"{s:.2f}x {over}" for over in ("eager", "compile") if (s := self.speedup(over))]
            return f"{self.pair:<{width}}  PASS  {', '.join(figures)}{built}"
        return f"{self.pair:<{width}}  FAIL [{self.category}]  {first_line(self.message)}{built}"


def first_line(message: str) -> str:
    """The line of a message that says most: a compile error's first located error, else its first line
    and the checker's first reason (``- 1 of 4773 output elements were never written ...``)."""
    lines = [ln.strip() for ln in (message or "").splitlines() if ln.strip()]
    located = [ln for ln in lines if ", line " in ln and "error" in ln]
    reasons = [ln[2:] for ln in lines[1:] if ln.startswith("- ")]
    return (located[0] if located else "; ".join(lines[:1] + reasons[:1]))[:240]


class Gradebook:
    """The grades of earlier runs and this one, in a JSON-lines file (default ``<cache>/results/kernelbench.jsonl``)."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else results.results_dir() / "kernelbench.jsonl"
        self._lock = threading.Lock()

    def known(self) -> dict[str, Grade]:
        """Every readable grade by key (the latest of each); torn or foreign lines are skipped."""
        out = {}
        for d in results.read_lines(self.path):
            try:
                g = Grade(**d)
            except TypeError:  # JSON, but not a grade
                continue
            out[g.key] = g
        return out

    def append(self, grade: Grade) -> None:
        """Add a grade as one line (:func:`jitlab.judge.results.append_line`)."""
        with self._lock:
            results.append_line(self.path, asdict(grade))


@dataclass
class Report:
    """A batch's grades in the order the pairs were given.

    Attributes:
        grades: One per pair.
        graded: How many were graded in this run (the others came from the results file).
        seconds: Wall time of the batch.
        store: The results file.
        compile_only: Only built (no GPU, or asked): categories are ``built`` or ``compile error``.
    """

    grades: list[Grade]
    graded: int
    seconds: float
    store: Path | None = None
    compile_only: bool = False

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for g in self.grades:
            out[g.category] = out.get(g.category, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: (kv[0] != PASS, -kv[1])))

    def median_speedup(self, over: str) -> float | None:
        xs = [s for g in self.grades if g.passed and (s := g.speedup(over))]
        return statistics.median(xs) if xs else None

    def table(self) -> str:
        """A verdict line per solution, then the counts, the median speedups and where the grades are kept."""
        width = min(40, max((len(g.pair) for g in self.grades), default=0))
        lines = [g.line(width) for g in self.grades]
        counts = ", ".join(f"{n} {'right' if c == PASS else c}" for c, n in self.counts().items())
        skipped = len(self.grades) - self.graded
        lines.append(f"{len(self.grades)} solutions {'built' if self.compile_only else 'graded'} in "
                     f"{self.seconds:.1f} s: {counts or 'none'}" + (f" ({skipped} from earlier runs)" if skipped else ""))
        speedups = [f"{s:.2f}x over {over}" for over in ("eager", "compile") if (s := self.median_speedup(over))]
        if speedups:
            lines.append("median speedup of the right ones: " + ", ".join(speedups))
        if self.store and not self.compile_only:
            lines.append(f"grades kept in {self.store} (a rerun skips those with the same sources)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()

    def to_json(self) -> dict:
        return {"seconds": round(self.seconds, 2), "graded": self.graded, "counts": self.counts(),
                "median_speedup": {o: self.median_speedup(o) for o in ("eager", "compile")},
                "compile_only": self.compile_only, "store": str(self.store) if self.store else None,
                "grades": [asdict(g) for g in self.grades]}
