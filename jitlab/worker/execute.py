"""Run a whole program (a ``.cu``/``.cpp`` with ``int main``) in a child process, its output streamed.

:func:`run_program` is ``nvcc prog.cu -o prog && ./prog`` through the build cache: the executable is
built (or found) by :func:`jitlab.build` (``mode="program"``; a ``.cu`` program's kernels in an NVRTC CUBIN
beside it where they can be, so a kernel edit relinks nothing), then run in a child process of its own session
with a timeout. Its stdout and stderr are written to this process's ``sys.stdout``/``sys.stderr`` as
they come, from the calling thread (so an ipykernel cell shows them live; reader threads only move
bytes), line-buffered through ``stdbuf`` where it exists, as a terminal would have them. A program
that runs past its timeout is killed with its children, and the message names the timeout and how
to raise it; a nonzero exit or a signal is said in one line. :func:`stream` is the same for any
command line: compute-sanitizer and ncu wrapped around a program.

Nothing is lost: the run is its process group. When the program exits (or its time is up) the
group is killed, so nothing it forked outlives it, and the pipes are then read to their end however
slowly the caller's own output drains. Only a process that left the group (``setsid``) can hold a
pipe open past that; the run then says that its output may be incomplete (``Run.output_lost``).
Arguments and stdin are checked at the door: a ``str``, ``bytes``, path or number per argument;
stdin as text, bytes or a file object (read to its end).
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import math
import os
import queue
import reprlib
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
#: Seconds to keep reading after the program's group was killed, while a process that left the group
#: (``setsid``) still holds its stdout or stderr.
_GRACE = 1.0
#: The longest one argument may be (Linux's MAX_ARG_STRLEN: 32 pages).
_MAX_ARG = 32 * 4096


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
        output_lost: Whether some of its output may be missing: a process that left its group (``setsid``)
            still held its stdout or stderr when the run ended, so they were not read to their end.
        build: The program's build (``build.cached``: nothing was compiled).
    """

    command: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    seconds: float
    timeout: float
    timed_out: bool = False
    output_lost: bool = False
    build: Build | None = field(default=None, repr=False)

    @property
    def ok(self) -> bool:
        """It exited with status 0 within its timeout, and all its output was read."""
        return self.returncode == 0 and not self.timed_out and not self.output_lost

    @property
    def status(self) -> str:
        """How it ended, in words: ``exited with status 3``, ``killed by signal SIGSEGV``, ``timed out …``."""
        if self.output_lost:
            return (f"{self._ending()}, but its output may be incomplete: a process it started in a session of "
                    f"its own (setsid) still held its stdout or stderr; have the program wait for it")
        return self._ending()

    def _ending(self) -> str:
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
                cflags=None, cuda_cflags=None, ldflags=None, debug: bool = False, engine: str = "auto",
                echo: bool = True) -> Run:
    """Build a program (or find it in the cache) and run it, its output streamed as it comes.

    What ``nvcc prog.cu -o prog && ./prog ARGS`` gives, in a child process with a timeout: a crash or
    a hang ends the program, never the caller.

    Args:
        path: A ``.cu``/``.cpp`` file with ``int main`` (or a folder or list of files, one with main).
        args: Its command-line arguments: each a ``str``, ``bytes`` (passed as they are), a path or a
            number (written as text).
        stdin: Its standard input: text, bytes, or a file object (binary or text, ``BytesIO``) read to its
            end; ``None`` gives it an empty one.
        timeout: Seconds before it is killed (``None``: no limit).
        arch: Archs to build for (default: this GPU).
        defines: Preprocessor macros, e.g. ``{"N": 1024}``.
        cflags: Extra host compiler flags (nvcc passes them with ``-Xcompiler``).
        cuda_cflags: Extra nvcc flags.
        ldflags: Extra linker flags and libraries, e.g. ``["-lcublas"]``.
        debug: ``-G`` device code and ``-g`` host code.
        engine: ``"auto"``: a ``.cu`` program's kernels compiled by NVRTC into a CUBIN its executable loads,
            where it can be (a kernel edit then compiles no host code); ``"nvcc"``: one executable holding
            them, as ``nvcc prog.cu -o prog`` builds it; ``"nvrtc"``: NVRTC or an error saying why not.
        echo: Write its output to ``sys.stdout``/``sys.stderr`` as it comes (it is kept in the result either way).

    Returns:
        A :class:`Run`: ``returncode``, ``stdout``, ``stderr``, ``seconds``, ``build``; ``ok`` is exit status 0.

    Raises:
        ArgumentError: ``args`` is one string or holds something other than text, bytes, a path or a number
            (or a NUL, or more than the system passes to a program); ``stdin`` is of another kind; or
            ``timeout`` is not a positive number.
        SnippetError: No ``main`` in the file. CompileError: at your file and line. ToolchainError: no compiler.
    """
    argv, data = program_args(args), stdin_bytes(stdin)
    _check_timeout(timeout)
    b = build_program(path, arch=arch, defines=defines, cflags=cflags, cuda_cflags=cuda_cflags, ldflags=ldflags, debug=debug,
                      engine=engine)
    if b.plan.cuda and echo and not toolchain.gpu_available():
        print("jitlab: no CUDA GPU here: the program's CUDA calls will fail", file=sys.stderr, flush=True)
    run = stream([str(b.artifact), *argv], stdin=data, timeout=timeout, echo=echo, name=str(path))
    run.build = b
    return run


def program_args(args) -> list[str]:
    """A program's arguments as the command line takes them: ``str`` and paths as they are, ``bytes`` decoded
    as the file system does (so the program gets exactly those bytes), numbers as they are written.

    Raises:
        ArgumentError: ``args`` is one string or not a list; an item of another kind, or with a NUL; more than
            the system passes to a program (the message says to send the data through stdin or a file).
    """
    if args is None:
        return []
    if isinstance(args, (str, bytes, os.PathLike)):
        split = args.split() if isinstance(args, str) else [args]
        raise ArgumentError(f"args={args!r}: give a list of arguments, e.g. args={split!r} "
                            f"(shlex.split(line) splits a command line)")
    try:
        items = list(args)
    except TypeError:
        raise ArgumentError(f"args={args!r}: give a list of arguments, e.g. args=[{str(args)!r}]") from None
    argv = [_arg(i, a) for i, a in enumerate(items)]
    longest = max(map(len, argv), default=0)
    # What exec counts against ARG_MAX: each string with its NUL and its pointer, the environment's too.
    total = sum(len(a) + 9 for a in argv) + sum(len(k) + len(v) + 10 for k, v in os.environb.items())
    if longest > _MAX_ARG or total > os.sysconf("SC_ARG_MAX"):
        what = (f"an argument of {longest} bytes (the system passes at most {_MAX_ARG})" if longest > _MAX_ARG else
                f"{total} bytes of arguments and environment (the system passes at most {os.sysconf('SC_ARG_MAX')})")
        raise ArgumentError(f"args: {what}: give the data through stdin= (--stdin FILE for `jitlab exec`) "
                            f"or write it to a file and pass its name")
    return [os.fsdecode(a) for a in argv]


def _arg(i: int, a) -> bytes:
    if isinstance(a, (str, bytes, os.PathLike)):
        out = os.fsencode(a)
    elif isinstance(a, (int, float)) and not isinstance(a, bool):
        out = str(a).encode()
    else:
        raise ArgumentError(f"args[{i}] is {a!r}: give each argument as a str, bytes, a path or a number "
                            f"(str(x) for anything else; leave out an argument that is None)")
    if b"\0" in out:
        raise ArgumentError(f"args[{i}]={reprlib.repr(a)} holds a NUL, which no program argument can: pass such data "
                            f"through stdin= or a file")
    return out


def stdin_bytes(stdin) -> bytes | None:
    """A program's standard input as bytes: text (UTF-8), bytes, or a file object read to its end.

    Raises:
        ArgumentError: A path (the message says to open it) or anything else that is not data.
    """
    if stdin is None or isinstance(stdin, bytes):
        return stdin
    if isinstance(stdin, str):
        return stdin.encode()
    if isinstance(stdin, (bytearray, memoryview)):
        return bytes(stdin)
    if isinstance(stdin, os.PathLike):
        raise ArgumentError(f"stdin={stdin!r} is a path, not its contents: pass stdin=open({str(stdin)!r}, 'rb') "
                            f"(or Path(...).read_bytes())")
    if callable(getattr(stdin, "read", None)):
        data = stdin.read()
        return data.encode() if isinstance(data, str) else bytes(data)
    raise ArgumentError(f"stdin={stdin!r}: give str, bytes or a file object (open(path, 'rb'), io.BytesIO) for the "
                        f"program's standard input, or None for an empty one")


#: The build options a program takes (those of :func:`jitlab.load` that apply to a program).
BUILD_OPTIONS = ("arch", "defines", "cflags", "cuda_cflags", "ldflags", "debug", "engine")


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
    return api.build(path, mode="program", **{**o, "debug": bool(o["debug"]), "engine": o["engine"] or "auto"})


def stream(command: list[str], *, stdin=None, timeout: float | None = DEFAULT_TIMEOUT, env: dict | None = None,
           echo: bool = True, name: str | None = None) -> Run:
    """Run a command line as a process group of its own, its output written to ``sys.stdout``/``sys.stderr`` as it comes.

    The group ends with the run: when the command exits (or its time is up) whatever it started is killed,
    and its pipes are read to their end, however long the caller's own output takes to take them.

    Args:
        command: The program and its arguments.
        stdin: Its standard input, as :func:`run_program` takes it, or ``None`` (an empty one).
        timeout: Seconds before it and its children are killed (``None``: no limit).
        env: Its environment (default: this process's).
        echo: Write the output here as it comes; a run that fails ends with a line saying how.
        name: What that line calls it (default: the command's file name).

    Returns:
        The :class:`Run` (without a build).

    Raises:
        ArgumentError: ``timeout`` is not a positive number, ``stdin`` is not data, or the command line is
            longer than the system passes to a program.
        KeyboardInterrupt: After killing the program, when the caller is interrupted.
    """
    limit = _check_timeout(timeout)
    data = stdin_bytes(stdin)
    line_buffered = [shutil.which("stdbuf"), "-oL", "-eL"] if shutil.which("stdbuf") else []
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen([*line_buffered, *command], stdin=subprocess.DEVNULL if data is None else subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    except OSError as e:
        if e.errno != errno.E2BIG:
            raise
        raise ArgumentError("the command line is longer than the system passes to a program: give the data "
                            "through stdin= or a file") from None
    chunks: queue.Queue = queue.Queue()
    pumps = [threading.Thread(target=_pump, args=(pipe, fd, chunks), daemon=True)
             for fd, pipe in ((1, proc.stdout), (2, proc.stderr))]
    for pump in pumps:
        pump.start()
    if data is not None:
        threading.Thread(target=_feed, args=(proc.stdin, data), daemon=True).start()
    out = _Output(echo)
    try:
        timed_out = _follow(proc, chunks, out, t0 + limit)
        seconds = time.perf_counter() - t0
        _end_group(proc)
        complete = _drain(pumps, chunks, out)
    except BaseException:
        _end_group(proc)
        raise
    run = Run(command, proc.returncode, out.text(1), out.text(2), seconds, limit, timed_out, output_lost=not complete)
    if echo and not run.ok:
        print(f"jitlab: {name or os.path.basename(command[0])} {run.status}", file=sys.stderr, flush=True)
    return run


class _Output:
    """A run's stdout and stderr: decoded as they come, kept, and shown here when asked to."""

    def __init__(self, echo: bool):
        self.echo = echo
        self.kept: dict[int, list[str]] = {1: [], 2: []}
        self.decoders = {fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in self.kept}

    def add(self, fd: int, chunk: bytes | None) -> None:
        """One chunk of a pipe (``None``: its end)."""
        text = self.decoders[fd].decode(chunk or b"", final=chunk is None)
        if not text:
            return
        self.kept[fd].append(text)
        if self.echo:
            shown = sys.stdout if fd == 1 else sys.stderr
            shown.write(text)
            shown.flush()

    def text(self, fd: int) -> str:
        return "".join(self.kept[fd]) + self.decoders[fd].decode(b"", final=True)


def _follow(proc: subprocess.Popen, chunks: queue.Queue, out: _Output, deadline: float) -> bool:
    """Show the output as it comes until the program exits (returns False) or its time is up (True)."""
    while not _exited(proc):
        now = time.perf_counter()
        if now >= deadline:
            return True
        try:
            fd, chunk = chunks.get(timeout=min(0.1, deadline - now))
        except queue.Empty:
            continue
        out.add(fd, chunk)
    return False


def _exited(proc: subprocess.Popen) -> bool:
    """Whether the program has ended, leaving it unreaped: until it is reaped its pid names its group,
    so killing the group cannot reach a stranger that was given the number again."""
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def _drain(pumps: list[threading.Thread], chunks: queue.Queue, out: _Output) -> bool:
    """Take the rest of the output once the group is dead: the pipes' last bytes and all that was not shown
    yet. Returns whether both pipes reached their end (``False``: a process outside the group held one
    for :data:`_GRACE` seconds; what it writes later is not read)."""
    end = time.perf_counter() + _GRACE
    for pump in pumps:  # the pumps read into memory: they end as soon as the pipes do, whatever the caller's speed
        pump.join(max(0.0, end - time.perf_counter()))
    complete = not any(pump.is_alive() for pump in pumps)
    while True:
        try:
            fd, chunk = chunks.get_nowait()
        except queue.Empty:
            return complete
        out.add(fd, chunk)


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


def _end_group(proc: subprocess.Popen) -> None:
    """Kill the program's process group (the program, if still running, and everything it started that
    stayed in it), then reap the program. Once reaped, its number may be another's: the group is left alone."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _signal_name(number: int) -> str:
    try:
        return f"{signal.Signals(number).name} ({number})"
    except ValueError:
        return str(number)
