"""Run a whole program (a ``.cu``/``.cpp`` with ``int main``) in a child process, its output streamed.

:func:`run_program` is ``nvcc prog.cu -o prog && ./prog`` through the build cache: the executable is
built (or found) by :func:`jitlab.build` (``mode="program"``), then run in a child process of its own session
with a timeout. Its stdout and stderr are written to this process's ``sys.stdout``/``sys.stderr`` as
they come, from the calling thread (so an ipykernel cell shows them live; reader threads only move
bytes), line-buffered through ``stdbuf`` where it exists, as a terminal would have them. A program
that runs past its timeout is killed with its children, and the message names the timeout and how
to raise it; a nonzero exit or a signal is said in one line. :func:`stream` is the same for any
command line: compute-sanitizer and ncu wrapped around a program.
"""

from __future__ import annotations

import codecs
import contextlib
import math
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from jitlab.errors import ArgumentError
from jitlab.jit import api, toolchain
from jitlab.jit.plan import Build

#: Seconds a program may run when no ``timeout`` is given.
DEFAULT_TIMEOUT = 60.0
#: Seconds to keep reading after the program exited while something it started still holds its output.
_GRACE = 1.0


@dataclass
class Run:
    """One run of a program (or of a tool wrapped around it).

    Attributes:
        command: What ran: the executable (in the build cache) and its arguments.
        returncode: Its exit status; negative for a signal (``-11``: SIGSEGV); ``None`` if it never ended.
        stdout: Everything it wrote to stdout.
        stderr: Everything it wrote to stderr.
        seconds: Wall time of the run (the build not included).
        timeout: The limit it ran under, in seconds.
        timed_out: Whether it was stopped at the limit.
        build: The program's build (``build.cached``: nothing was compiled).
    """

    command: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timeout: float
    timed_out: bool = False
    build: Build | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """It exited with status 0 within its timeout."""
        return self.returncode == 0 and not self.timed_out

    @property
    def status(self) -> str:
        """How it ended, in words: ``exited with status 3``, ``killed by signal SIGSEGV``, ``timed out …``."""
        if self.timed_out:
            return (f"stopped after {self.timeout:g} s, its timeout: it may hang; if it is just slow, raise the "
                    f"limit (timeout= in Python, --timeout in `jitlab exec` and %%cuda)")
        if self.returncode is not None and self.returncode < 0:
            return f"killed by signal {_signal_name(-self.returncode)}"
        return f"exited with status {self.returncode}"

    def __repr__(self) -> str:
        built = "" if self.build is None else (", cache hit" if self.build.cached else f", built in {self.build.seconds:.2f} s")
        return (f"<jitlab run {' '.join(self.command)}: {self.status} in {self.seconds:.2f} s{built}; "
                f"{len(self.stdout.splitlines())} lines of stdout, {len(self.stderr.splitlines())} of stderr>")


def run_program(path, args=(), *, stdin=None, timeout: float | None = DEFAULT_TIMEOUT, arch=None, defines=None,
                cflags=None, cuda_cflags=None, ldflags=None, debug: bool = False, echo: bool = True) -> Run:
    """Build a program (or find it in the cache) and run it, its output streamed as it comes.

    What ``nvcc prog.cu -o prog && ./prog ARGS`` gives, in a child process with a timeout: a crash or
    a hang ends the program, never the caller.

    Args:
        path: A ``.cu``/``.cpp`` file with ``int main`` (or a folder or list of files, one with main).
        args: Its command-line arguments (strings, or numbers written as strings).
        stdin: Text or bytes for its standard input; ``None`` gives it an empty one.
        timeout: Seconds before it is killed (``None``: no limit).
        arch: Archs to build for (default: this GPU).
        defines: Preprocessor macros, e.g. ``{"N": 1024}``.
        cflags: Extra host compiler flags (nvcc passes them with ``-Xcompiler``).
        cuda_cflags: Extra nvcc flags.
        ldflags: Extra linker flags and libraries, e.g. ``["-lcublas"]``.
        debug: ``-G`` device code and ``-g`` host code.
        echo: Write its output to ``sys.stdout``/``sys.stderr`` as it comes (it is kept in the result either way).

    Returns:
        A :class:`Run`: ``returncode``, ``stdout``, ``stderr``, ``seconds``, ``build``; ``ok`` is exit status 0.

    Raises:
        ArgumentError: ``args`` is one string, or ``timeout`` is not a positive number.
        SnippetError: No ``main`` in the file. CompileError: at your file and line. ToolchainError: no compiler.
    """
    if isinstance(args, (str, bytes)):
        raise ArgumentError(f"args={args!r}: give a list of arguments, e.g. args={args.split()!r} "
                            f"(shlex.split(line) splits a command line)")
    b = build_program(path, arch=arch, defines=defines, cflags=cflags, cuda_cflags=cuda_cflags, ldflags=ldflags, debug=debug)
    if b.plan.cuda and echo and not toolchain.gpu_available():
        print("jitlab: no CUDA GPU here: the program's CUDA calls will fail", file=sys.stderr, flush=True)
    run = stream([str(b.artifact), *map(str, args)], stdin=stdin, timeout=timeout, echo=echo, name=str(path))
    run.build = b
    return run


#: The build options a program takes (those of :func:`jitlab.load` that apply to a program).
BUILD_OPTIONS = ("arch", "defines", "cflags", "cuda_cflags", "ldflags", "debug")


def build_program(path, **options) -> Build:
    """Build a program with :func:`jitlab.load`'s keyword options (``arch``, ``defines``, ``cflags``, ...).

    Raises:
        ArgumentError: An option a program does not take, naming those it does.
    """
    unknown = sorted(set(options) - set(BUILD_OPTIONS))
    if unknown:
        raise ArgumentError(f"{path} is a program (it has main): {', '.join(unknown)} does not apply to it; "
                            f"its build options are {', '.join(BUILD_OPTIONS)}")
    o = {k: options.get(k) for k in BUILD_OPTIONS}
    return api.build(path, mode="program", **{**o, "debug": bool(o["debug"])})


def stream(command: list[str], *, stdin=None, timeout: float | None = DEFAULT_TIMEOUT, env: dict | None = None,
           echo: bool = True, name: str | None = None) -> Run:
    """Run a command line in its own session, its output written to ``sys.stdout``/``sys.stderr`` as it comes.

    Args:
        command: The program and its arguments.
        stdin: Text or bytes for its standard input, or ``None`` (an empty one).
        timeout: Seconds before it and its children are killed (``None``: no limit).
        env: Its environment (default: this process's).
        echo: Write the output here as it comes; a run that fails ends with a line saying how.
        name: What that line calls it (default: the command's file name).

    Returns:
        The :class:`Run` (without a build).

    Raises:
        ArgumentError: ``timeout`` is not a positive number.
        KeyboardInterrupt: After killing the program, when the caller is interrupted.
    """
    limit = _check_timeout(timeout)
    data = stdin.encode() if isinstance(stdin, str) else stdin
    line_buffered = [shutil.which("stdbuf"), "-oL", "-eL"] if shutil.which("stdbuf") else []
    t0 = time.perf_counter()
    proc = subprocess.Popen([*line_buffered, *command], stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    chunks: queue.Queue = queue.Queue()
    for fd, pipe in ((1, proc.stdout), (2, proc.stderr)):
        threading.Thread(target=_pump, args=(pipe, fd, chunks), daemon=True).start()
    if data is not None:
        threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True).start()
    texts: dict[int, list[str]] = {1: [], 2: []}
    decoders = {fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in texts}
    timed_out, open_pipes, exited_at = False, 2, None
    try:
        while open_pipes:
            now = time.perf_counter()
            if now - t0 >= limit:
                timed_out = True
                break
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > _GRACE:
                break  # something the program started still holds its output: not ours to wait for
            try:
                fd, chunk = chunks.get(timeout=min(0.1, max(0.0, t0 + limit - now)))
            except queue.Empty:
                continue
            if chunk is None:
                open_pipes -= 1
            _emit(texts[fd], decoders[fd].decode(chunk or b"", final=chunk is None), fd, echo)
        if not timed_out and exited_at is None:  # its output closed: let it exit within its time
            proc.wait(timeout=None if math.isinf(limit) else max(0.0, t0 + limit - time.perf_counter()))
    except subprocess.TimeoutExpired:
        timed_out = True
    except BaseException:
        _kill(proc)
        raise
    _kill(proc)
    run = Run(command, proc.returncode, "".join(texts[1]), "".join(texts[2]), time.perf_counter() - t0, limit, timed_out)
    if echo and not run.ok:
        print(f"jitlab: {name or os.path.basename(command[0])} {run.status}", file=sys.stderr, flush=True)
    return run


def _check_timeout(timeout) -> float:
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise ArgumentError(f"timeout={timeout!r}: give the seconds the program may run, a number > 0 "
                            f"(e.g. timeout=120), or None for no limit")
    return float(timeout)


def _pump(pipe, fd: int, chunks: queue.Queue) -> None:
    """Move a pipe's bytes onto the queue as they come; ``None`` at its end."""
    with contextlib.suppress(OSError, ValueError):
        while data := os.read(pipe.fileno(), 65536):
            chunks.put((fd, data))
    chunks.put((fd, None))


def _feed(pipe, data: bytes) -> None:
    """Write the program's standard input, then close it (a program that stops reading is not an error)."""
    with contextlib.suppress(OSError):
        pipe.write(data)
    with contextlib.suppress(OSError):
        pipe.close()


def _emit(kept: list[str], text: str, fd: int, echo: bool) -> None:
    if not text:
        return
    kept.append(text)
    if echo:
        out = sys.stdout if fd == 1 else sys.stderr
        out.write(text)
        out.flush()


def _kill(proc: subprocess.Popen) -> None:
    """End the program and everything it started (its session), if still running, and reap it."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)
