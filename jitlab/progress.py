"""Progress for steps that may take long: silent when a step ends quickly, then a line, a live line, a line.

A build that ends within ``$JITLAB_PROGRESS_AFTER`` seconds (default 2: a kernel-only edit takes
0.05-1 s) prints nothing. Past it, a :class:`Step` prints one line saying what it is doing
(``jitlab: building square_matrix_cpu.cpp (c++) …``), keeps a live line naming what runs now with
the elapsed time, and ends with one line (``jitlab: built square_matrix_cpu.cpp in 38.2 s``). The
live line is tqdm's (``tqdm.auto``): a widget in a notebook, a text line in a terminal, nothing when
stderr is a pipe or a file, where units that start later get one line each instead.

A timer thread waits out the threshold, so a quick step never touches the terminal; it is stopped
and joined when the step ends, error or not. Steps show on the main thread only: the playground's
build thread has its own status line and ``jitlab run``'s parallel compile-checks print their rows.
A worker process (``python -m jitlab.worker.jobs``) never shows progress, since what it prints is reported
as the kernel's output. ``JITLAB_PROGRESS_AFTER=off`` turns progress off; ``0`` shows every step.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import os
import sys
import threading
import time
import warnings

from jitlab import config

#: Seconds a step runs before it shows progress, unless ``$JITLAB_PROGRESS_AFTER`` says otherwise.
DEFAULT_AFTER = 2.0
#: Seconds between refreshes of the live line.
TICK_S = 0.5

_current: contextvars.ContextVar[Step | None] = contextvars.ContextVar("jitlab_progress_step", default=None)
_quiet: contextvars.ContextVar[bool] = contextvars.ContextVar("jitlab_progress_quiet", default=False)


def threshold() -> float | None:
    """Seconds a step runs silently: ``$JITLAB_PROGRESS_AFTER`` (``off``: never show), default :data:`DEFAULT_AFTER`."""
    raw = config.getenv("JITLAB_PROGRESS_AFTER").strip().lower()
    if not raw:
        return DEFAULT_AFTER
    if raw in ("off", "never", "no", "inf"):
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        warnings.warn(f"JITLAB_PROGRESS_AFTER={raw!r} is not a number of seconds; using {DEFAULT_AFTER:g} "
                      f"(set it to e.g. 2, to 0 to show every step, or to off)", stacklevel=3)
        return DEFAULT_AFTER


def _in_worker() -> bool:
    """Whether this process is a jitlab worker (``python -m jitlab.worker.jobs``, or one forked by
    ``jitlab.worker.forkserver``), whose output is the kernel's."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return getattr(spec, "name", "") in ("jitlab.worker.jobs", "jitlab.worker.forkserver")


class Step:
    """One step that may take long (a build, a benchmark), shown only once it has run ``after`` seconds.

    Use it as a context manager; :func:`doing` inside it (on any thread that got the context, see
    :func:`submit`) names what runs now.

    Args:
        what: What the step does, for the first line and the live line (``"building add2.cu (nvcc, sm_90)"``).
        done: The end line's words before ``in X s`` (``"built add2.cu"``); ``None`` for a step that
            shows only the live line (``jitlab run``'s checks and timings, whose rows say the rest).
        after: Seconds before anything shows; default :func:`threshold`.
    """

    def __init__(self, what: str, done: str | None = None, *, after: float | None = None):
        self.what, self.done = what, done
        self.after = threshold() if after is None else after
        self.shown = False
        self._active: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = None
        self._out = None
        self._own_out = False
        self._token = None

    # ---- the context manager ----------------------------------------------------------------------

    def __enter__(self) -> Step:
        self._t0 = time.perf_counter()
        self._token = _current.set(self)
        if (self.after is not None and threading.current_thread() is threading.main_thread() and not _in_worker()
                and sys.stderr is not None):
            self._out, self._own_out = _terminal()
            # In the caller's context: ipykernel sends what a thread writes to the cell of its context.
            ctx = contextvars.copy_context()
            self._thread = threading.Thread(target=ctx.run, args=(self._watch,), name="jitlab-progress", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        _current.reset(self._token)
        if self._thread is None:
            return False
        self._stop.set()
        self._thread.join()
        if self.shown and (self.done is not None or kind is not None):
            secs = time.perf_counter() - self._t0
            if kind is None:
                self._line(f"jitlab: {self.done} in {secs:.1f} s")
            elif self.done is not None:
                self._line(f"jitlab: {self.what} stopped after {secs:.1f} s ({kind.__name__})")
        if self._own_out:
            with contextlib.suppress(OSError):
                self._out.close()
        return False

    # ---- what runs now ----------------------------------------------------------------------------

    def status(self) -> str:
        """The live line: what runs now (or the step itself) and the seconds since the step began."""
        with self._lock:
            now = _together(self._active) or self.what
        return f"{now} … {time.perf_counter() - self._t0:.1f} s"

    def _start_item(self, text: str) -> None:
        with self._lock:
            self._active.append(text)
            one_line = self.shown and self._bar is None and self.done is not None
        if one_line:  # no live line (stderr is a file or a pipe): one line per item that starts late
            self._line(f"jitlab:   {text} … (at {time.perf_counter() - self._t0:.1f} s)")

    def _end_item(self, text: str) -> None:
        with self._lock:
            self._active.remove(text)

    # ---- the timer thread -------------------------------------------------------------------------

    def _watch(self) -> None:
        if self._stop.wait(self.after):
            return
        with self._lock:
            self.shown = True
            active = _together(self._active)
        if self.done is not None:
            self._line(f"jitlab: {self.what} …" + (f" ({active})" if active else ""))
        try:
            bar = self._make_bar()
        except Exception:  # noqa: BLE001 - the live line is a nicety; the lines above and below still come
            bar = None
        with self._lock:
            self._bar = bar
        if bar is None:
            return
        try:
            while True:
                with contextlib.suppress(OSError, ValueError):  # a closed terminal: keep building
                    bar.set_description_str(self.status())
                if self._stop.wait(TICK_S):
                    break
        finally:
            with self._lock:
                self._bar = None
            with contextlib.suppress(OSError, ValueError):
                bar.close()

    def _make_bar(self):
        """tqdm's live line (``tqdm.auto``: a widget in a notebook, text in a terminal), or ``None``
        where tqdm shows none (stderr is not a terminal)."""
        live = _live_class()
        if live is None:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tqdm's "IProgress not found": it falls back to text
            bar = live(total=None, desc=self.status(), bar_format="{desc}", file=self._out, leave=False,
                       disable=None, ncols=_columns(self._out))
        if bar.disable:
            bar.close()
            return None
        return bar

    def _line(self, text: str) -> None:
        """One whole line on the step's stream, around the live line if one is up."""
        with contextlib.suppress(OSError, ValueError):
            bar = self._bar
            if bar is not None:
                type(bar).write(text, file=self._out)
            else:
                self._out.write(text + "\n")
                self._out.flush()


def _together(items: list[str]) -> str:
    """``["compiling a.cpp", "compiling b.cu"]`` → ``"compiling a.cpp, b.cu"``: one verb per kind of work."""
    by_verb: dict[str, list[str]] = {}
    for item in items:
        verb, _, rest = item.partition(" ")
        by_verb.setdefault(verb, []).append(rest)
    return "; ".join(f"{verb} {', '.join(rests)}".strip() for verb, rests in by_verb.items())


@functools.cache
def _live_class():
    """``tqdm.auto``'s class (the notebook's or the terminal's) with no monitor thread and a thread lock
    (tqdm's default lock is also a multiprocessing one, which can start a resource-tracker process)."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None

    class Live(tqdm):
        monitor_interval = 0  # each step refreshes its own line

    Live.set_lock(threading.RLock())
    return Live


def notes_stream():
    """Where notes and a step's lines go: ``sys.stderr``, or ``sys.stdout`` in a Jupyter kernel, whose
    front ends paint stderr as an error (a pink box around a build that went well)."""
    if type(sys.stderr).__module__.startswith("ipykernel"):
        return sys.stdout
    return sys.stderr


def _terminal():
    """Where a step writes: :func:`notes_stream`, or when that is file descriptor 2 itself, a copy of it.

    A build captures fds 1 and 2 into its log while the compiler runs (:func:`jitlab.output.capture_fds`);
    a copy made before keeps pointing at the terminal, so progress never lands in ``build.log``.

    Returns:
        The stream and whether the step must close it.
    """
    err = notes_stream()
    try:
        real = err.fileno() == 2
    except (AttributeError, OSError, ValueError):
        real = False
    if not real:
        return err, False
    err.flush()
    fd = os.dup(2)
    return os.fdopen(fd, "w", buffering=1, encoding=getattr(err, "encoding", None) or "utf-8",
                     errors="replace"), True


def _columns(stream) -> int | None:
    """The terminal's width less one (a full line would wrap and break the redraw); ``None`` if unknown."""
    try:
        cols = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return None
    return cols - 1 if cols > 1 else None


@contextlib.contextmanager
def doing(text: str):
    """Name what runs now in the current step's live line (``"compiling bind.cpp"``); nothing without one."""
    step = _current.get()
    if step is None:
        yield
        return
    step._start_item(text)
    try:
        yield
    finally:
        step._end_item(text)


@contextlib.contextmanager
def quietly():
    """Say nothing in this context (work in the background, whose lines would land in whatever cell runs)."""
    token = _quiet.set(True)
    try:
        yield
    finally:
        _quiet.reset(token)


def say(line: str, file=None) -> None:
    """Print a note (on ``file``, default :func:`notes_stream`), around the current step's live line if one
    is up; nothing inside :func:`quietly`."""
    if _quiet.get():
        return
    step = _current.get()
    if step is not None and step._bar is not None:
        step._line(line)
    else:
        print(line, file=file or notes_stream(), flush=True)


def submit(pool, fn, *args):
    """``pool.submit(fn, *args)`` in a copy of this context, so :func:`doing` on the pool's thread reaches the step."""
    return pool.submit(contextvars.copy_context().run, fn, *args)
