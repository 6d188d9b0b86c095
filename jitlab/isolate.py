"""Isolated runs: build and check a snippet in a worker process with a timeout.

An illegal memory access, a device-side assert or an infinite loop ends the worker, not your
notebook, and you get a category (see :mod:`jitlab.jobs`) with the message and where it happened.
A worker stays warm between checks (torch imported, CUDA context made, about 0.05 s a call instead
of a few seconds of start-up) and is replaced after a fault or a timeout. Workers run with
``CUDA_LAUNCH_BLOCKING=1``, so a fault is reported by the launch that caused it.
"""

from __future__ import annotations

import atexit
import itertools
import os
import pickle
import select
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import jobs
from .jobs import Job, Outcome

DEFAULT_TIMEOUT = 60.0
_START_TIMEOUT = 120.0  # importing torch and making a CUDA context on a cold, busy machine


class Worker:
    """One warm worker process (``python -m jitlab.jobs --serve``).

    Each job carries an id the worker's answer repeats, so an answer is only ever taken for its own
    job; a call interrupted while the worker is busy (Ctrl-C) stops the worker, so the next call
    starts clean instead of reading the interrupted job's late answer.
    """

    def __init__(self, env: dict | None = None):
        self.env = env or {}
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self._ids = itertools.count(1)

    def _start(self) -> None:
        root = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1", **self.env)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self.proc = subprocess.Popen([sys.executable, "-m", "jitlab.jobs", "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        if self._receive(time.monotonic() + _START_TIMEOUT) != "ready":
            self.stop()
            raise RuntimeError("jitlab: the worker process did not start (run `python -m jitlab.jobs --serve` "
                               "to see why)")

    def _receive(self, deadline: float):
        """The next frame from the worker, ``TimeoutError`` when none comes by ``deadline`` (a
        ``time.monotonic()`` value), ``None`` if it died."""
        out = self.proc.stdout
        buf = b""
        need = 8
        size = None
        while len(buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([out], [], [], left)
            if not ready:
                continue
            chunk = os.read(out.fileno(), need - len(buf))
            if not chunk:
                return None  # the worker exited
            buf += chunk
            if size is None and len(buf) == 8:
                size = int.from_bytes(buf, "little")
                need = 8 + size
        return pickle.loads(buf[8:])

    def _answer(self, job_id: int, deadline: float) -> Outcome | None:
        """The worker's answer to job ``job_id``; answers to earlier jobs (nobody waits for them) are skipped."""
        while True:
            frame = self._receive(deadline)
            if frame is None:
                return None
            answered, outcome = frame
            if answered == job_id:
                return outcome

    def run(self, job: Job, timeout: float = DEFAULT_TIMEOUT) -> Outcome:
        """Run one job; never raises for what the job does (that is the outcome's category).

        Raises:
            KeyboardInterrupt: Ctrl-C while waiting; the worker is stopped first, so the next call
                gets a fresh one (the job's answer would otherwise come later, to the wrong call).
        """
        with self.lock:
            try:
                return self._run(job, timeout)
            except BaseException:
                self.stop()
                if job.log:
                    Path(job.log).unlink(missing_ok=True)
                raise

    def _run(self, job: Job, timeout: float) -> Outcome:
        """Send the job to the worker (started if needed) and turn its answer, or its end, into an outcome."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        with tempfile.NamedTemporaryFile(prefix="jitlab-job-", suffix=".log", delete=False) as f:
            job.log = f.name
        job.id = next(self._ids)
        t0 = time.perf_counter()
        try:
            data = pickle.dumps(job)
            self.proc.stdin.write(len(data).to_bytes(8, "little") + data)
            self.proc.stdin.flush()
            result = self._answer(job.id, time.monotonic() + timeout)
        except TimeoutError:
            self.stop()
            result = Outcome(jobs.TIMEOUT, f"no answer within {timeout:g} s: the worker was stopped (an infinite "
                             f"loop, a deadlock such as __syncthreads() inside a branch, or a very slow kernel); "
                             f"raise timeout= if the kernel is just slow", "")
        except (BrokenPipeError, OSError):
            result = None
        if result is None:  # the worker died without answering: a segfault, an abort, a kill
            how = _how_it_ended(self.proc)
            self.stop()
            result = Outcome(jobs.CRASH, f"the worker process {how} before answering (a host-side crash: "
                             f"a bad pointer in C++ code, an abort); the output below may say more")
        result.output = _read_log(job.log) or result.output
        if result.category == jobs.ASSERT and not result.where:
            result.where = jobs.assert_location(result.output)
        if result.category in (jobs.TIMEOUT, jobs.CRASH):
            result.seconds = time.perf_counter() - t0
        if result.category in jobs.STICKY:
            self.stop()
        return result

    def stop(self) -> None:
        """End the worker (and any kernel it is stuck in)."""
        p, self.proc = self.proc, None
        if p is None:
            return
        if p.poll() is None:
            try:
                os.killpg(p.pid, 9)
            except (ProcessLookupError, PermissionError):
                p.kill()
        p.wait()
        for f in (p.stdin, p.stdout):
            try:
                f.close()
            except OSError:
                pass


def _how_it_ended(proc: subprocess.Popen | None) -> str:
    try:
        code = proc.wait(timeout=10) if proc else None
    except subprocess.TimeoutExpired:
        return "stopped answering"
    if code is not None and code < 0:
        import signal

        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _read_log(path: str | None) -> str:
    if not path:
        return ""
    p = Path(path)
    try:
        return p.read_text(errors="replace")
    except OSError:
        return ""
    finally:
        p.unlink(missing_ok=True)


_workers: dict[tuple, Worker] = {}


def worker(**env) -> Worker:
    """The warm worker for this environment, started on first use and stopped at exit."""
    key = tuple(sorted(env.items()))
    if key not in _workers:
        _workers[key] = Worker(env)
    return _workers[key]


@atexit.register
def _stop_all() -> None:
    for w in _workers.values():
        w.stop()


def check_snippet(path, *, isolate: bool = True, timeout: float = DEFAULT_TIMEOUT, variant: str | None = None,
                  sizes=None, ref=None, debug: bool = False, sanitize: str | None = None, **options) -> Outcome:
    """Build a snippet and check it against its ``NAME.ref.py``: what ``jitlab.check(path, …)`` does.

    Args:
        path: The snippet (a ``.cu``/``.cpp`` file or a folder).
        isolate: Run in a worker process (default); ``False`` runs here, where a fault or an
            infinite loop takes this process with it.
        timeout: Seconds before an isolated run is stopped and reported as a timeout.
        variant: Check one version only (``"original"`` or a name in the ref's ``VARIANTS``).
        sizes: Sizes to check instead of the ref's ``SIZES``.
        ref: The reference file, if not ``NAME.ref.py`` beside the snippet.
        debug: A debug build (``-G``, asserts on); see :func:`jitlab.load`.
        sanitize: Run under compute-sanitizer instead: ``"memcheck"``, ``"racecheck"``,
            ``"initcheck"`` or ``"synccheck"``; returns a :class:`jitlab.sanitizer.Report`.
        **options: Build options for :func:`jitlab.load` (``arch``, ``defines`` …).

    Returns:
        An :class:`~jitlab.jobs.Outcome`: ``bool(outcome)`` is whether it passed; ``.category``
        says what went wrong (compile error, link/import error, launch error, illegal address,
        device assert, mismatch, timeout, crashed).
    """
    if debug:
        options["debug"] = True
    jobs.reference_for(path, ref)  # no reference: say which file is missing now, not from a worker
    from .config import cache_dir

    job = Job("check", str(path), ref=str(ref) if ref else None, variant=variant,
              sizes=list(sizes) if sizes else None, options=options, cache_dir=str(cache_dir()))
    if sanitize:
        from .sanitizer import sanitize as _sanitize

        return _sanitize(path, tool=sanitize, job=job, timeout=max(timeout, 600.0))
    if not isolate:
        return jobs.run_job(job)
    return worker().run(job, timeout)


#: Options of :func:`jitlab.checker.check` that only mean something for two callables.
_CALLABLE_ONLY = ("seeds", "device", "tolerance_override", "tf32", "name", "block")


def check(run, reference=None, inputs=None, *, sizes=None, **options):
    """``jitlab.check``: a snippet path is checked against its ``NAME.ref.py`` by
    :func:`check_snippet` (in a worker by default); two callables are compared in this process by
    :func:`jitlab.checker.check`, which documents the arguments."""
    if isinstance(run, (str, os.PathLike)):
        return check_snippet(run, sizes=sizes, **{k: v for k, v in options.items() if k not in _CALLABLE_ONLY})
    from .checker import check as compare

    return compare(run, reference, inputs, sizes=sizes, **options)
