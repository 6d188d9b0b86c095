"""C-level output (host and device ``printf``, compiler output) captured or forwarded to Python's streams.

In a terminal, C's stdout is the terminal and needs only a flush; in a notebook or under pytest's
capture, ``sys.stdout`` is not file descriptor 1, so the descriptors are piped into it. Device printf
is flushed by the driver at synchronization, so CUDA calls synchronize inside.

File descriptors belong to the whole process, so every capture, on any thread, shares one tap: the
first capture to open points fds 1 and 2 at pipes, the last to close points them back, and each
capture gets what was written while it was open (a build's log gets everything; of several forwarding
captures only the oldest, so no line is shown twice). Swapping the descriptors per capture (what
wurlitzer does) breaks when two threads capture at once, as the playground's build thread and a
printing call do: they restore out of order and leave fds 1 and 2 on a closed pipe.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import sys
import threading

_libc = ctypes.CDLL(None)


def flush_c() -> None:
    _libc.fflush(None)


def _flush_all() -> None:
    """Flush Python's and C's stdout/stderr buffers into file descriptors 1 and 2."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, OSError, ValueError):
            stream.flush()
    flush_c()


def _is_real_fd(stream, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


class _Sink:
    """What one capture receives, as bytes per file descriptor (both in one for a merged log).

    Attributes:
        forward: The capture shows output to the user: only the oldest such capture gets a chunk.
    """

    def __init__(self, merge: bool = False, forward: bool = False):
        self.merge = merge
        self.forward = forward
        self.chunks: dict[int, list[bytes]] = {1: [], 2: []}

    def take(self, fd: int, data: bytes, tap: "_Tap") -> None:
        self.chunks[1 if self.merge else fd].append(data)

    def text(self, fd: int = 1) -> str:
        return b"".join(self.chunks[fd]).decode("utf-8", errors="replace")


class _Passthrough(_Sink):
    """A forwarding capture whose stdout is fd 1 itself (a terminal): writes to the original files at once."""

    def __init__(self):
        super().__init__(forward=True)

    def take(self, fd: int, data: bytes, tap: "_Tap") -> None:
        view = memoryview(data)
        with contextlib.suppress(OSError):  # a closed terminal: the text has nowhere to go
            while view:
                view = view[os.write(tap.saved[fd], view):]


class _Tap:
    """File descriptors 1 and 2 pointed at pipes, and a thread handing what arrives to the open sinks."""

    def __init__(self):
        _flush_all()
        self.saved = {fd: os.dup(fd) for fd in (1, 2)}
        self.reads: dict[int, int] = {}  # read end of a pipe -> the descriptor it stands in for
        for fd in (1, 2):
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.dup2(w, fd)
            os.close(w)
            self.reads[r] = fd
        self.wake_r, self.wake_w = os.pipe()
        self.sinks: list[_Sink] = []
        self.lock = threading.Lock()  # one reader at a time: the pump, or a closing capture's drain
        self.pump = threading.Thread(target=self._pump, name="jitlab-output", daemon=True)
        self.pump.start()

    def _pump(self) -> None:
        while True:
            ready, _, _ = select.select([*self.reads, self.wake_r], [], [])
            if self.wake_r in ready:
                return
            self.drain()

    def drain(self) -> None:
        """Hand everything readable now to the sinks (at most 16 MiB a pipe, so a thread that prints
        without pause cannot keep a closing capture here)."""
        with self.lock:
            for r, fd in self.reads.items():
                for _ in range(256):
                    try:
                        data = os.read(r, 1 << 16)
                    except BlockingIOError:
                        break
                    if not data:
                        break
                    self._give(fd, data)

    def _give(self, fd: int, data: bytes) -> None:
        shown = False
        for sink in self.sinks:
            if sink.forward:
                if shown:
                    continue
                shown = True
            sink.take(fd, data, self)

    def restore(self) -> None:
        """Point fds 1 and 2 back at the files they had before."""
        for fd, saved in self.saved.items():
            os.dup2(saved, fd)

    def close(self) -> None:
        """Stop the pump, hand over the rest, close the pipes (after :meth:`restore`)."""
        os.write(self.wake_w, b"x")
        self.pump.join()
        self.drain()
        for f in (*self.reads, self.wake_r, self.wake_w, *self.saved.values()):
            os.close(f)


_tap: _Tap | None = None
_tap_guard = threading.Lock()  # opening and closing captures, from any thread


def _forget_tap() -> None:
    """In a forked child (a DataLoader worker): the parent's tap has no pump here, so start afresh."""
    global _tap, _tap_guard
    _tap, _tap_guard = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_tap)


@contextlib.contextmanager
def _tapped(sink: _Sink):
    """Run the body with ``sink`` receiving what fds 1 and 2 get (see the module's docstring)."""
    global _tap
    _flush_all()  # what this thread wrote before belongs to whoever had the descriptors then
    with _tap_guard:
        if _tap is None:
            _tap = _Tap()
        tap = _tap
        with tap.lock:
            tap.sinks.append(sink)
    try:
        yield
    finally:
        _flush_all()
        with _tap_guard:
            last = len(tap.sinks) == 1
            if last:
                tap.restore()
            tap.drain()
            with tap.lock:
                tap.sinks.remove(sink)
            if last:
                tap.close()
                _tap = None


@contextlib.contextmanager
def forward_c_output(sync: bool = False):
    """Run the body with C-level stdout/stderr reaching Python's ``sys.stdout``/``sys.stderr``.

    Args:
        sync: Synchronize CUDA before leaving, so device printf buffers are flushed inside.
    """
    direct = _is_real_fd(sys.stdout, 1) and _is_real_fd(sys.stderr, 2)
    if direct and _tap is None:  # nothing captures: C's stdout is where Python's goes
        sys.stdout.flush()
        with _synced_and_flushed(sync):
            yield
        return
    # Captured into buffers and written out here, in the caller's thread: ipykernel 7 routes a
    # write to the cell that made it by thread-local context, so text written from the tap's
    # thread would miss the cell (seen with nbclient: the printf reached the terminal).
    sink = _Passthrough() if direct else _Sink(forward=True)
    try:
        with _tapped(sink), _synced_and_flushed(sync):
            yield
    finally:
        for fd, stream in ((1, sys.stdout), (2, sys.stderr)):
            text = sink.text(fd)
            if text:
                stream.write(text)


@contextlib.contextmanager
def _synced_and_flushed(sync: bool):
    """The body, then a CUDA synchronize (device printf) and a flush of C's stdio buffers."""
    try:
        yield
        if sync:
            _sync()
    finally:
        flush_c()


def _sync() -> None:
    import torch

    if torch.cuda.is_initialized():  # is_available() would ask the driver again: 0.05-0.18 s before CUDA is
        torch.cuda.synchronize()


@contextlib.contextmanager
def capture_fds():
    """Capture everything written to file descriptors 1 and 2 (subprocesses included) as one string.

    Safe beside other captures on other threads (each gets what was written while it was open).
    Yields a list that holds the captured text once the block exits.
    """
    box: list[str] = []
    sink = _Sink(merge=True)
    try:
        with _tapped(sink):
            yield box
    finally:
        box.append(sink.text(1))
