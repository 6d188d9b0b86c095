"""Where the tuner's and the batch checker's work runs: one warm worker process per device, fed serially.

Two pools give the same three operations:

- :class:`LocalPool` (the default, no extra dependency): on this machine, one
  :class:`~jitlab.worker.isolate.Worker` per device with its own ``CUDA_VISIBLE_DEVICES``, each fed
  by a thread of this process; builds run in a thread pool (NVRTC in process, nvcc and the host
  compiler as child processes).
- :class:`jitlab.worker.dask_pool.DaskPool`: the same jobs as Dask tasks, one Dask worker per GPU
  (a ``GPU=1`` resource each), on a local Dask cluster or any ``tcp://`` scheduler.

Either way a job runs inside a jitlab worker process, never in the pool's own: a configuration that
crashes or hangs costs that worker (restarted for the next job), and its point is marked, not the sweep.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator

from jitlab import config
from jitlab.judge.timing import GPU_LOCK_ENV
from jitlab.worker import isolate, jobs
from jitlab.worker.jobs import Job, Outcome
from jitlab.worker.tunejob import device_identity

#: Builds in flight per build thread (:meth:`LocalPool.builds`): most of a cold build's first seconds are waits.
BUILDS_PER_THREAD = 4


@dataclass
class Slot:
    """One device that runs jobs one at a time.

    Attributes:
        name: The device as its machine numbers it (``"0"``, ``"1"``), or the Dask worker's name.
        env: The environment of its worker process (``{"CUDA_VISIBLE_DEVICES": "0"}``).
        device: Its model and driver, from the worker's probe (``"NVIDIA H100 80GB HBM3, driver 13.0"``).
        arch: ``sm_XY``, or None for the CPU.
        host: The machine it is on.
        address: The Dask worker's address (Dask pools only).
        lane: Which of the device's slots this is, when it has several (:func:`local_slots`'s ``lanes``).
    """

    name: str
    env: dict = field(default_factory=dict)
    device: str = ""
    arch: str | None = None
    host: str = ""
    address: str = ""
    lane: int = 0

    @property
    def key(self) -> str:
        """The slot's own name: the device's, with the lane after a dot when it is not the first."""
        return f"{self.name}.{self.lane}" if self.lane else self.name


def local_slots(gpus, timing: bool = True, lanes: int = 1) -> list[Slot]:
    """Slots for ``gpus``: a count (``2``: this process's visible devices 0 and 1) or device numbers
    (``"0,2"``, ``[0, 2]``), numbered as this process sees them (under ``CUDA_VISIBLE_DEVICES``).

    Args:
        timing: The workers time kernels, so launches stay asynchronous (``CUDA_LAUNCH_BLOCKING=0``;
            a blocking launch would add its host-side latency to every timed kernel). Checks keep the
            isolated worker's ``CUDA_LAUNCH_BLOCKING=1``, which makes a fault name its launch.
        lanes: Worker processes per device. More than one share the device through its lock file
            (:func:`jitlab.judge.timing.gpu_access`): their checks run side by side, their timings one at a time.
    """
    if isinstance(gpus, int):
        names = [str(i) for i in range(gpus)]
    elif isinstance(gpus, str):
        names = [g.strip() for g in gpus.split(",") if g.strip()]
    else:
        names = [str(g) for g in gpus]
    if not names:
        raise ValueError(f"gpus={gpus!r}: name at least one device (a count, or numbers such as '0,1')")
    blocking = {"CUDA_LAUNCH_BLOCKING": "0"} if timing else {}
    visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    # Slot N is this process's visible device N: under CUDA_VISIBLE_DEVICES=2,3 slot 0 is device 2.
    slots = []
    for n in names:
        device = visible[int(n)] if visible and n.isdigit() and int(n) < len(visible) else n
        shared = {GPU_LOCK_ENV: str(gpu_lock_path(device))} if lanes > 1 else {}
        slots += [Slot(n, {"CUDA_VISIBLE_DEVICES": device, **blocking, **shared}, lane=k) for k in range(lanes)]
    return slots


def gpu_lock_path(device: str) -> Path:
    """The lock file of this machine's GPU ``device`` (as ``CUDA_VISIBLE_DEVICES`` names it), one per user:
    every pool of this user on the machine times on it one at a time."""
    return Path(tempfile.gettempdir()) / f"jitlab-{os.getuid()}-gpu-{device}.lock"


def identify(slot: Slot, cuda: bool, index: int) -> Slot:
    """Fill a slot's device (model and driver), arch and host: what its results are keyed by."""
    found = device_identity(cuda, index)
    slot.device, slot.arch, slot.host = found["device"], found["arch"], found["host"]
    return slot


def run_guarded(worker: isolate.Worker, job: Job, timeout: float) -> Outcome:
    """``worker.run(job)``, with a worker that cannot be started again reported as the job's crash."""
    try:
        return worker.run(job, timeout)
    except RuntimeError as e:
        return Outcome(jobs.CRASH, str(e))


class Feed:
    """Jobs shared by several slot threads: each :meth:`take` is the next job, or None when there are no more.

    The jobs may come from an iterator that blocks until the next one exists; one thread asks it at a time.
    """

    def __init__(self, jobs: Iterable[Job]):
        self._jobs, self._lock = iter(jobs), threading.Lock()

    def take(self) -> Job | None:
        with self._lock:
            return next(self._jobs, None)


class LocalPool:
    """One warm worker process per device of this machine; builds in up to ``build_threads`` threads.

    Args:
        slots: The devices (:func:`local_slots`).
        build_threads: Parallel builds (default: the CPU cores this process may use).
    """

    def __init__(self, slots: list[Slot], build_threads: int | None = None):
        self.slots = slots
        self.build_threads = build_threads or config.cores()
        self._workers = {s.key: isolate.Worker(dict(s.env)) for s in slots}

    def probe(self, cuda: bool) -> list[Slot]:
        """Each slot's device, asked in this process: no worker starts until a job needs it, so a rerun
        with nothing left to do starts none."""
        return [identify(s, cuda, int(s.name) if s.name.isdigit() else 0) for s in self.slots]

    def warm(self) -> None:
        """Start every worker process in the background (each imports torch and makes its CUDA context,
        seconds), so that they are ready when the builds are."""
        for w in self._workers.values():
            threading.Thread(target=w.start, daemon=True, name="jitlab-warm").start()

    def builds(self, build: Callable, items: Iterable) -> Iterator[tuple[object, object]]:
        """``(item, build(item))`` for each item, as each finishes.

        Up to ``BUILDS_PER_THREAD`` builds per build thread run at once: a build waiting for a header set
        another one makes holds no core, and the compilers they start run one per core (``MAX_JOBS``:
        :mod:`jitlab.jit.processes`), so the builds that waited all compile as soon as the set is made.
        """
        items = list(items)
        with ThreadPoolExecutor(max(1, min(len(items), BUILDS_PER_THREAD * self.build_threads))) as ex:
            futures = {ex.submit(build, item): item for item in items}
            for f in as_completed(futures):
                yield futures[f], f.result()

    def run(self, queues: dict[str | None, Iterable[Job]], timeout: float, deadline: float | None = None
            ) -> Iterator[tuple[Slot, Job, Outcome]]:
        """Run each device model's jobs on the slots of that model, one job at a time per slot.

        Args:
            queues: Jobs by device model (:attr:`Slot.device`); a slot takes the next job of its model's queue.
                Jobs under the key None go to any slot (a check's answer does not depend on the model).
                A queue may be an iterator that blocks until its next job exists (jobs made as builds end):
                the slots take its jobs as they come, one slot at a time asking it.
            timeout: Seconds one job may take before its worker is stopped (its outcome: timeout).
            deadline: A ``time.monotonic()`` after which no job is started (running ones finish).

        Yields:
            ``(slot, job, outcome)`` as each job finishes.
        """
        shared = {model: Feed(waiting) for model, waiting in queues.items()}
        answers: queue.SimpleQueue = queue.SimpleQueue()
        busy = [s for s in self.slots if s.device in shared or None in shared]

        def feed(slot: Slot) -> None:
            mine = shared[slot.device if slot.device in shared else None]
            try:
                while deadline is None or time.monotonic() < deadline:
                    job = mine.take()
                    if job is None:
                        return
                    answers.put((slot, job, run_guarded(self._workers[slot.key], job, timeout)))
            except BaseException as e:  # a bug here, not a job's failure: raised in the caller's thread
                answers.put(e)
            finally:
                answers.put(None)

        threads = [threading.Thread(target=feed, args=(s,), daemon=True, name=f"jitlab-slot-{s.key}") for s in busy]
        for t in threads:
            t.start()
        left = len(threads)
        while left:
            item = answers.get()
            if item is None:
                left -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item

    def close(self) -> None:
        """Stop the worker processes, all at once (each exit tears down a CUDA context: a second or so)."""
        workers = list(self._workers.values())
        with ThreadPoolExecutor(max(1, len(workers))) as ex:
            list(ex.map(isolate.Worker.stop, workers))
