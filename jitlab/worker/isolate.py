"""Isolated runs: build and check a snippet in a worker process with a timeout.

An illegal memory access, a device-side assert or an infinite loop ends the worker, not your
notebook, and you get a category (see :mod:`jitlab.worker.jobs`) with the message and where it happened.
A worker stays warm between checks (torch imported, CUDA context made, about 0.05 s a call instead
of a few seconds of start-up) and is replaced after a fault or a timeout. Workers run with
``CUDA_LAUNCH_BLOCKING=1``, so a fault is reported by the launch that caused it.
"""

from __future__ import annotations

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

from jitlab import config
from jitlab.errors import ArgumentError, ToolchainError
from jitlab.jit import api, builder, processes, toolchain
from jitlab.jit.sources import has_cuda, locate
from jitlab.judge import checker, refs
from jitlab.worker import forkserver, jobs, proc
from jitlab.worker.jobs import Job, Outcome

_START_TIMEOUT = 120.0  # importing torch and making a CUDA context on a cold, busy machine


class Worker:
    """One warm worker process (``python -m jitlab.worker.jobs --serve``, forked from a warm start where it can
    be: :mod:`jitlab.worker.forkserver`).

    Each job carries an id the worker's answer repeats, so an answer is only ever taken for its own
    job; a call interrupted while the worker is busy (Ctrl-C) stops the worker, so the next call
    starts clean instead of reading the interrupted job's late answer.
    """

    def __init__(self, env: dict | None = None):
        self.env = env or {}
        self.proc: subprocess.Popen | forkserver.Forked | None = None
        self.lock = threading.Lock()
        self._ids = itertools.count(1)

    def _start(self) -> None:
        env = proc.python_env(**{"CUDA_LAUNCH_BLOCKING": "1", **self.env})  # a tuner's worker times: "0"
        deadline = time.monotonic() + _START_TIMEOUT
        self.proc = forkserver.start_worker(env, deadline) or subprocess.Popen(
            [sys.executable, "-m", "jitlab.worker.jobs", "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            ready = self._receive(deadline) == "ready"
        except TimeoutError:  # a machine too busy to import torch in time: the job's crash, not the caller's
            ready = False
        if not ready:
            self.stop()
            raise RuntimeError(f"jitlab: the worker process did not start within {_START_TIMEOUT:g} s (run "
                               "`python -m jitlab.worker.jobs --serve` to see why)")

    def _receive(self, deadline: float):
        """The next frame from the worker, ``TimeoutError`` when none comes by ``deadline`` (a
        ``time.monotonic()`` value), ``None`` if it died."""
        out = self.proc.stdout
        buf = b""
        need = proc.HEADER
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
            if size is None and len(buf) == proc.HEADER:
                size = proc.frame_size(buf)
                need = proc.HEADER + size
        return pickle.loads(buf[proc.HEADER:])

    def _answer(self, job_id: int, deadline: float) -> Outcome | None:
        """The worker's answer to job ``job_id``; answers to earlier jobs (nobody waits for them) are skipped."""
        while True:
            frame = self._receive(deadline)
            if frame is None:
                return None
            answered, outcome = frame
            if answered == job_id:
                return outcome

    def run(self, job: Job, timeout: float = config.CHECK_TIMEOUT) -> Outcome:
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
            proc.write_frame(self.proc.stdin, job)
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

    def start(self) -> None:
        """Start the worker now if it is not running (a pool warms its workers while it builds); a
        worker that fails to start is left for :meth:`run` to start again and report."""
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                try:
                    self._start()
                except RuntimeError:
                    pass
                except (OSError, ValueError, AttributeError):  # stopped while it started (its pool closed): done
                    if self.proc is not None:
                        raise

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


def _how_it_ended(proc: subprocess.Popen | forkserver.Forked | None) -> str:
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


@processes.at_end
def stop_all() -> None:
    """Stop every warm worker of this process (at exit, and when a Dask pool closes)."""
    for w in _workers.values():
        w.stop()


def check_snippet(path, *, isolate: bool = True, timeout: float = config.CHECK_TIMEOUT, variant: str | None = None,
                  sizes=None, ref=None, debug: bool = False, **options) -> Outcome:
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
        **options: Build options for :func:`jitlab.load` (``arch``, ``defines`` …); ``device="cpu"`` runs
            a kernel-only ``.cu`` on the CPU emulator, each launch race- and bounds-checked, as ``"auto"``
            (the default) does on a machine without a GPU.

    Returns:
        An :class:`~jitlab.worker.jobs.Outcome`: ``bool(outcome)`` is whether it passed; ``.category``
        says what went wrong (compile error, link/import error, launch error, illegal address,
        device assert, mismatch, timeout, crashed).

    Raises:
        ToolchainError: A CUDA snippet the emulator does not take (or ``device="cuda"``) and no GPU
            ("no CUDA GPU found …", naming what would run): nothing could run.
    """
    if debug:
        options["debug"] = True
    path = locate(path)
    refs.path_for(path, ref)  # no reference: say which file is missing now, not from a worker
    if not toolchain.gpu_available() and has_cuda(path) and options.get("device") != "cpu":
        if options.get("device", "auto") != "auto" or not api.runs_on_emulator(path, **options):
            raise needs_a_gpu(path, options)
        builder.tell_once_on_the_emulator()  # said here, once: the worker's notes are the kernel's output
        options["device"] = "cpu"
    from jitlab.config import cache_dir

    # absolute: a warm worker may have been started from another folder than this call's
    job = Job("check", str(Path(path).absolute()), ref=str(Path(ref).absolute()) if ref else None, variant=variant,
              sizes=list(sizes) if sizes else None, options=options, cache_dir=str(cache_dir()))
    if not isolate:
        return jobs.run_job(job)
    return worker().run(job, timeout)


def needs_a_gpu(path, options: dict) -> ToolchainError:
    """The error of a check of a CUDA snippet without a GPU, after compiling it for the first default arch
    (sm_75, Colab's T4) so that it can say the code compiles and with how many registers.

    Raises:
        CompileError: The snippet does not compile (the more useful answer).
    """
    b = api.build(path, **{**options, "compile_only": True, "arch": options.get("arch") or config.DEFAULT_ARCHS[0]})
    return ToolchainError(f"no CUDA GPU found: checking {path} runs its kernels, and torch sees no CUDA GPU here "
                          f"(on Colab: Runtime > Change runtime type > T4 GPU); it compiles for {', '.join(b.archs)} "
                          f"({b.registers or 'no kernels'}); jitlab.check({str(path)!r}, device='cpu') (from a shell: "
                          f"`jitlab check {path} --device cpu`) runs a kernel-only snippet on the CPU emulator")


#: Options of :func:`jitlab.judge.checker.check` that only mean something for two callables.
CALLABLE_ONLY = ("seeds", "tolerance_override", "tf32", "name", "block")


def check(target, reference=None, inputs=None, **options):
    """``jitlab.check``: one dispatch on what is checked.

    - A snippet path (``str`` or path): :func:`check_snippet` builds it and checks it against its
      ``NAME.ref.py``, in a worker by default; returns an :class:`~jitlab.worker.jobs.Outcome`.
    - A callable: :func:`jitlab.judge.checker.check` compares it with ``reference`` on
      ``inputs`` in this process; returns a :class:`~jitlab.judge.checker.Verdict`.

    Running under compute-sanitizer is :func:`jitlab.sanitize`.

    Raises:
        ArgumentError: Options of the other form (the message says which form takes them).
    """
    if isinstance(target, (str, os.PathLike)):
        wrong = [k for k in options if k in CALLABLE_ONLY or k == "sanitize"]
        if reference is not None or inputs is not None or wrong:
            given = ", ".join(wrong + [n for n, v in (("reference", reference), ("inputs", inputs)) if v is not None])
            hint = ("; under compute-sanitizer: jitlab.sanitize(path, tool=...)" if "sanitize" in wrong else "")
            raise ArgumentError(f"jitlab.check({str(target)!r}, ...) checks a snippet against its NAME.ref.py, which "
                                f"supplies the reference and inputs; {given} apply to check(run, reference, inputs, "
                                f"sizes=[...]){hint}")
        return check_snippet(target, **options)
    return checker.check(target, reference, inputs, **options)
