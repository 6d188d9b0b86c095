"""Timing a kernel the way experts trust: CUDA events per repetition, L2 flushed, median with IQR.

Warm-up and measurement are time budgets (as in Triton's ``do_bench``); repetitions run in rounds
and stop early once the median is stable. Raw samples are kept. On CPU (C++ snippets) the same
statistics come from ``time.perf_counter``.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import statistics
import time
from dataclasses import dataclass, field

import torch

from jitlab import config

#: The lock file of one GPU that several worker processes share (set in their environment by the pool).
GPU_LOCK_ENV = "JITLAB_GPU_LOCK"


@contextlib.contextmanager
def gpu_access(exclusive: bool):
    """Hold this process's GPU while a block runs, when several worker processes share it.

    Their environment names one lock file per GPU (``JITLAB_GPU_LOCK``; none: nothing to share, nothing
    held). Checks hold it shared and run side by side; timing holds it alone (``exclusive``), so no other
    process's kernels run under a timed one. The GPU's queued work is finished before the lock is let go.

    A timing waits only for the checks under way, not for every check that starts meanwhile: each process
    passes a second lock, the turnstile (the file's name with ``.turn``), on its way in, and a timing holds
    it while it waits, so new checks queue behind it (a plain shared lock would let eight lanes' checks,
    taking turns, keep a timing out for seconds).
    """
    path = os.environ.get(GPU_LOCK_ENV)
    if not path:
        yield
        return
    fd, turn = (os.open(p, os.O_RDWR | os.O_CREAT, 0o600) for p in (path, path + ".turn"))
    try:
        fcntl.flock(turn, fcntl.LOCK_EX)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turn, fcntl.LOCK_UN)
        try:
            yield
        finally:
            if torch.cuda.is_initialized():
                torch.cuda.synchronize()
    finally:
        os.close(fd)  # and with it the lock
        os.close(turn)


@dataclass
class Timing:
    """Repeated measurements of one callable, in milliseconds.

    Attributes:
        samples: Every repetition's time (ms), in order.
        cache: ``"cold"`` (L2 flushed before each repetition) or ``"hot"``.
        device: ``"cuda"`` or ``"cpu"``.
        load: The machine's 1-minute load average when the timing ended (None: unknown).
        cores: The CPU cores this process may use.
        threads: torch's intra-op threads while timing (``torch.get_num_threads()``; CPU timings).
    """

    samples: list[float] = field(default_factory=list)
    cache: str = "cold"
    device: str = "cuda"
    load: float | None = None
    cores: int | None = None
    threads: int | None = None

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def q25(self) -> float:
        return _quantile(self.samples, 0.25)

    @property
    def q75(self) -> float:
        return _quantile(self.samples, 0.75)

    @property
    def iqr(self) -> float:
        return self.q75 - self.q25

    @property
    def spread(self) -> float:
        """The IQR over the median: 0.1 means the middle half of the samples spans 10 % of the median."""
        return self.iqr / self.median if self.median > 0 else math.inf

    def __str__(self) -> str:
        return f"{_fmt_ms(self.median)} (IQR {_fmt_ms(self.q25)}–{_fmt_ms(self.q75)}, n={len(self.samples)}, {self.cache} L2)"

    def to_dict(self) -> dict:
        return {"median_ms": self.median, "q25_ms": self.q25, "q75_ms": self.q75, "n": len(self.samples),
                "cache": self.cache, "device": self.device, "samples_ms": self.samples, "load": self.load,
                "cores": self.cores, "threads": self.threads}


def _quantile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if len(s) == 1:
        return s[0]
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _fmt_ms(ms: float) -> str:
    return f"{ms * 1000:.2f} µs" if ms < 1 else f"{ms:.3f} ms"


_clock = time.perf_counter  # seconds; the one clock of CPU timing and of every time budget (tests swap it)

_flush_buffers: dict[int, torch.Tensor] = {}


def l2_flush_buffer(device: int | None = None) -> torch.Tensor:
    """A buffer of twice the GPU's L2 size, at least 256 MiB (as ``do_bench``); zeroing it evicts
    everything a kernel left in L2."""
    dev = torch.cuda.current_device() if device is None else device
    buf = _flush_buffers.get(dev)
    if buf is None:
        l2 = getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 0) or 64 * 2**20
        nbytes = max(2 * l2, 256 * 2**20)
        buf = _flush_buffers[dev] = torch.empty(nbytes // 4, dtype=torch.int32, device=f"cuda:{dev}")
    return buf


def _repeat(one_round, *, rep_s: float, min_reps: int, max_reps: int, stable_rtol: float) -> list[float]:
    """Run rounds of samples until the median moved by less than ``stable_rtol`` between two rounds
    (after ``min_reps``), the budget ``rep_s`` is spent, or ``max_reps`` is reached."""
    samples: list[float] = []
    last_median = None
    t0 = _clock()
    while len(samples) < max_reps:
        samples += one_round()
        med = statistics.median(samples)
        if len(samples) >= min_reps and last_median is not None and abs(med - last_median) <= stable_rtol * last_median:
            break
        if _clock() - t0 > rep_s:
            break
        last_median = med
    return samples


def _warm_up(fn, warmup_s: float, sync=lambda: None) -> None:
    fn()
    sync()
    t0 = _clock()
    while _clock() - t0 < warmup_s:
        fn()
        sync()


def time_cuda(fn, *, warmup_s: float = 0.025, rep_s: float = 0.2, flush_l2: bool = True, min_reps: int = 10,
              max_reps: int = 2000, round_size: int = 10, stable_rtol: float = 0.005) -> Timing:
    """Time ``fn()`` on the GPU.

    Args:
        fn: The work to time (one kernel launch or a torch call).
        warmup_s: Warm-up budget in seconds (at least one call).
        rep_s: Measurement budget in seconds.
        flush_l2: Zero an L2-evicting buffer before each repetition (cold cache); ``False`` keeps L2 hot.
        min_reps: Repetitions before stopping early is allowed.
        max_reps: Hard cap.
        round_size: Repetitions between stability checks.
        stable_rtol: Stop once the median moved by less than this between two rounds.

    Returns:
        The :class:`Timing`; each sample is one CUDA-event interval around one call.
    """
    flush = l2_flush_buffer() if flush_l2 else None
    _warm_up(fn, warmup_s, torch.cuda.synchronize)

    def one_round() -> list[float]:
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(round_size)]
        for start, end in events:
            if flush is not None:
                flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in events]

    samples = _repeat(one_round, rep_s=rep_s, min_reps=min_reps, max_reps=max_reps, stable_rtol=stable_rtol)
    return Timing(samples, "cold" if flush_l2 else "hot", "cuda", *machine_load())


def time_cpu(fn, *, warmup_s: float = 0.02, rep_s: float = 0.2, min_reps: int = 10, max_reps: int = 2000,
             stable_rtol: float = 0.01) -> Timing:
    """Time ``fn()`` on the CPU with ``perf_counter`` (C++ snippets); same stopping rule as :func:`time_cuda`."""
    _warm_up(fn, warmup_s)

    def one_round() -> list[float]:
        out = []
        for _ in range(10):
            s = _clock()
            fn()
            out.append((_clock() - s) * 1e3)
        return out

    samples = _repeat(one_round, rep_s=rep_s, min_reps=min_reps, max_reps=max_reps, stable_rtol=stable_rtol)
    return Timing(samples, "hot", "cpu", *machine_load(), threads=torch.get_num_threads())


def machine_load() -> tuple[float | None, int | None]:
    """``(1-minute load average, CPU cores this process may use)``; the load is None where the OS has none."""
    cores = config.cores()
    try:
        return os.getloadavg()[0], cores
    except (AttributeError, OSError):
        return None, cores


#: A timing whose IQR spans more than this fraction of its median decides nothing (see :func:`busy`).
BUSY_SPREAD = 0.5


def busy(*timings: Timing) -> str | None:
    """Why these timings were taken on a machine too busy to compare them, or None.

    Two rules, each on every timing: a CPU timing that ended with the 1-minute load average above
    the cores this process may use (other work waited for a core, so ours did too); any timing whose
    IQR spans more than :data:`BUSY_SPREAD` of its median (the samples disagree too much to mean
    anything). GPU timings skip the load rule: CUDA events time the device, which CPU load
    hardly touches; a stalled launch still shows in the spread.

    Returns:
        The figure that says so (``"load 3.9 on 2 cores"``, ``"spread 80% of the median"``), or None.
    """
    for t in timings:
        if t.device == "cpu" and t.load is not None and t.cores and t.load > t.cores:
            return f"load {t.load:.1f} on {t.cores} cores"
    for t in timings:
        if t.spread > BUSY_SPREAD:
            return f"spread {100 * t.spread:.0f}% of the median"
    return None


def time_fn(fn, device: str, **kw) -> Timing:
    """:func:`time_cuda` or :func:`time_cpu` by device."""
    if device == "cuda":
        return time_cuda(fn, **kw)
    kw.pop("flush_l2", None)
    return time_cpu(fn, **kw)


@dataclass
class ABVerdict:
    """Version B against version A: ``"faster"``, ``"same"`` (inside the noise), ``"slower"``, or
    ``"busy"`` (the machine was too busy to compare them: ``why`` gives the figure, :func:`busy`)."""

    verdict: str
    a: Timing
    b: Timing
    why: str = ""

    @property
    def speedup(self) -> float:
        """A's median over B's: above 1 means B is faster."""
        return self.a.median / self.b.median

    def __str__(self) -> str:
        return f"B is {self.verdict}: {self.speedup:.3f}x (A {self.a}, B {self.b})"


def ab(fn_a, fn_b, device: str = "cuda", rounds: int = 5, **kw) -> ABVerdict:
    """Compare two versions of a kernel, alternating rounds so drifting clocks hit both alike.

    "same" means the medians differ by less than the larger interquartile range (the noise), both
    on a log scale: relative spread, so a busy machine that stretches the slower version's samples
    cannot hide a tenfold difference.
    """
    ta, tb = Timing(device=device), Timing(device=device)
    kw.setdefault("rep_s", 0.05)
    for _ in range(rounds):
        ra, rb = time_fn(fn_a, device, **kw), time_fn(fn_b, device, **kw)
        ta.samples += ra.samples
        tb.samples += rb.samples
        ta.cache = tb.cache = ra.cache
        (ta.load, ta.cores), (tb.load, tb.cores) = (ra.load, ra.cores), (rb.load, rb.cores)
    why = busy(ta, tb)
    return ABVerdict("busy" if why else ab_verdict(ta, tb), ta, tb, why or "")


def ab_verdict(a: Timing, b: Timing) -> str:
    """B against A from their samples: ``"same"`` when the medians differ by less than the larger
    interquartile range, both on a log scale; otherwise ``"faster"`` or ``"slower"``."""
    la, lb = (Timing([math.log(x) for x in t.samples if x > 0]) for t in (a, b))
    noise = max(la.iqr, lb.iqr)
    diff = la.median - lb.median
    return "same" if abs(diff) <= noise else ("faster" if diff > 0 else "slower")
