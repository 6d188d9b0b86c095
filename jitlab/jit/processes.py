"""The compilers a build runs, so that an interrupt ends them with it.

A torch-style build compiles its units in worker threads, each waiting on its compiler. Ctrl-C (a
terminal's, or Jupyter's interrupt, which signals the kernel's process alone) raises in the main thread;
without more, leaving the thread pool would wait for every running compiler to finish (15–50 s). Each
compiler started through :func:`run` is known here, and :func:`end_all` kills them, so the interrupted
build returns at once: the threads see their compilers fail, and no cache entry is published
(:func:`jitlab.jit.cache.find_or_make` publishes an entry only once its artifact is complete).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess

_running: set[subprocess.Popen] = set()


def run(cmd: list[str], *, text: bool = True, capture_output: bool = True, **popen) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, **popen)``, its process ended by :func:`end_all`.

    The compiler leads a process group of its own, so ending it ends what it runs (nvcc's cicc, ptxas and host
    compiler) too.

    Raises:
        BaseException: What interrupted the wait (the process is killed first).
    """
    if not capture_output:
        raise ValueError("processes.run captures its compiler's output: it is the build's log")
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=text, start_new_session=True,
                          **popen) as proc, \
            ended_on_interrupt(proc):
        out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@contextlib.contextmanager
def ended_on_interrupt(proc: subprocess.Popen):
    """While the block runs, :func:`end_all` may kill ``proc``; an exception out of the block kills it."""
    _running.add(proc)
    try:
        yield proc
    except BaseException:
        _kill(proc)
        raise
    finally:
        _running.discard(proc)


def end_all() -> None:
    """Kill every compiler :func:`run` started that is still running (after an interrupt)."""
    for proc in list(_running):
        _kill(proc)


def _kill(proc: subprocess.Popen) -> None:
    """Kill ``proc``, and its process group when it leads one (what it started goes with it)."""
    with contextlib.suppress(OSError):
        if os.getpgid(proc.pid) == proc.pid:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
