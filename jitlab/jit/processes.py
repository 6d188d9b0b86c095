"""The compilers a build runs, so that an interrupt ends them with it.

A torch-style build compiles its units in worker threads, each waiting on its compiler. Ctrl-C (a
terminal's, or Jupyter's interrupt, which signals the kernel's process alone) raises in the main thread;
without more, leaving the thread pool would wait for every running compiler to finish (15–50 s). Each
compiler started through :func:`run` is known here, and :func:`end_all` kills them, so the interrupted
build returns at once: the threads see their compilers fail, and no cache entry is published
(:func:`jitlab.jit.cache.find_or_make` publishes an entry only once its artifact is complete).

The compilers of one process run at most ``MAX_JOBS`` at once (torch's variable for its ninja builds;
default: the cores this process may use), however many builds run side by side: builds that wait (for a
precompiled header set another build makes, for a lock) hold no slot, so many builds may be started at
once and the cores still run one compiler each.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading

from jitlab import config

_running: set[subprocess.Popen] = set()
#: What ends the other processes jitlab started and keeps (background compilers, warm workers): :func:`at_end`.
_endings: list = []


def _jobs() -> int:
    jobs = os.environ.get("MAX_JOBS", "").strip()
    return int(jobs) if jobs.isdigit() and int(jobs) > 0 else config.cores()


#: One slot per compiler that may run at once in this process (``MAX_JOBS``, read at import).
_slots = threading.BoundedSemaphore(_jobs())
#: Counts :func:`end_all` calls: a compiler whose slot came after an interrupt is not started.
_ended = 0
#: Held from the moment a compiler is started until :func:`end_all` can see it (:func:`start`).
_starting = threading.Lock()
#: Set by :func:`end_everything`: the process is ending, and no compiler starts any more.
_closed = False
#: How long :func:`end_everything` waits for a compiler being started to be known (the interrupted thread may
#: be the one starting it, and it never comes back).
START_WAIT = 2.0


def start(cmd: list[str], **popen) -> subprocess.Popen | None:
    """Start ``cmd`` as the leader of a process group of its own, known to :func:`end_all` from its first
    instant; ``None`` (nothing started) once :func:`end_everything` has run."""
    with _starting:
        if _closed:
            return None
        proc = subprocess.Popen(cmd, start_new_session=True, **popen)
        _running.add(proc)
    return proc


@contextlib.contextmanager
def limited(jobs: int | None):
    """At most ``jobs`` compilers at once in this process while the block runs (``jitlab check -j N``: torch's
    ``MAX_JOBS`` for one command); ``None`` changes nothing. A compiler already running keeps its old slot."""
    global _slots
    before = _slots
    if jobs:
        _slots = threading.BoundedSemaphore(max(1, jobs))
    try:
        yield
    finally:
        _slots = before


def run(cmd: list[str], *, text: bool = True, capture_output: bool = True, **popen) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, **popen)``, its process ended by :func:`end_all`,
    once one of the process's ``MAX_JOBS`` compiler slots is free.

    The compiler leads a process group of its own, so ending it ends what it runs (nvcc's cicc, ptxas and host
    compiler) too.

    Raises:
        BaseException: What interrupted the wait (the process is killed first).
    """
    if not capture_output:
        raise ValueError("processes.run captures its compiler's output: it is the build's log")
    ended = _ended
    with _slots:
        proc = None if _ended != ended else start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text, **popen)
        if proc is None:  # an interrupt ended the build while this compiler waited for a slot, or jitlab is ending
            return subprocess.CompletedProcess(cmd, -signal.SIGKILL, "", "jitlab: not started: the build was interrupted\n")
        with proc, ended_on_interrupt(proc):
            out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@contextlib.contextmanager
def ended_on_interrupt(proc: subprocess.Popen):
    """While the block runs, :func:`end_all` may kill ``proc``; an exception out of the block kills it."""
    _running.add(proc)
    try:
        yield proc
    except BaseException:
        kill(proc)
        raise
    finally:
        _running.discard(proc)


def ends() -> int:
    """How many times :func:`end_all` has run: a caller that retries after a failed compile compares it with the
    count from before, so that a compiler an interrupt killed is not taken for one that refused the code."""
    return _ended


def end_all() -> None:
    """Kill every compiler :func:`run` started that is still running (after an interrupt), and start none
    of those waiting for a slot."""
    global _ended
    _ended += 1
    for proc in list(_running):
        kill(proc)


def kill(proc: subprocess.Popen) -> None:
    """Kill ``proc``, and its process group when it leads one (what it started goes with it)."""
    with contextlib.suppress(OSError):
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()


def at_end(stop):
    """Register ``stop`` (no arguments), which ends processes its module started and keeps: it runs at exit and
    from :func:`end_everything`. Returns ``stop`` (a decorator)."""
    atexit.register(stop)
    _endings.append(stop)
    return stop


def end_everything() -> None:
    """End every process jitlab started, and start no more: the builds' compilers and what :func:`at_end` names.

    Safe in a signal handler that interrupted any code: it imports nothing, runs no other library's exit hook
    (one waiting for a thread the interrupted code holds would never return), and waits at most
    :data:`START_WAIT` for a compiler another thread is starting (so that it is known, and killed), since the
    interrupted thread may be the one starting it.
    """
    global _closed
    _closed = True
    end_all()
    if _starting.acquire(timeout=START_WAIT):  # no thread is between starting a compiler and registering it
        try:
            end_all()
        finally:
            _starting.release()
    for stop in list(_endings):
        with contextlib.suppress(Exception):
            stop()
