"""C-level output (host and device ``printf``) forwarded to Python's ``sys.stdout``/``sys.stderr``.

In a terminal, C's stdout is the terminal and needs only a flush; in a notebook or under pytest's
capture, ``sys.stdout`` is not file descriptor 1, so wurlitzer pipes the descriptors into it.
Device printf is flushed by the driver at synchronization, so CUDA calls synchronize inside.
"""

from __future__ import annotations

import contextlib
import ctypes
import sys

_libc = ctypes.CDLL(None)


def _flush_c() -> None:
    _libc.fflush(None)


def _is_real_fd(stream, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):
        return False


@contextlib.contextmanager
def forward_c_output(sync: bool = False):
    """Run the body with C-level stdout/stderr reaching Python's ``sys.stdout``/``sys.stderr``.

    Args:
        sync: Synchronize CUDA before leaving, so device printf buffers are flushed inside.
    """
    if _is_real_fd(sys.stdout, 1) and _is_real_fd(sys.stderr, 2):
        sys.stdout.flush()
        with _synced_and_flushed(sync):
            yield
        return
    import io

    import wurlitzer

    # Captured into buffers and written out here, in the caller's thread: ipykernel 7 routes a
    # write to the cell that made it by thread-local context, so text written from wurlitzer's
    # reader thread would miss the cell (seen with nbclient: the printf reached the terminal).
    out, err = io.StringIO(), io.StringIO()
    try:
        with wurlitzer.pipes(stdout=out, stderr=err), _synced_and_flushed(sync):
            yield
    finally:
        if out.getvalue():
            sys.stdout.write(out.getvalue())
        if err.getvalue():
            sys.stderr.write(err.getvalue())


@contextlib.contextmanager
def _synced_and_flushed(sync: bool):
    """The body, then a CUDA synchronize (device printf) and a flush of C's stdio buffers."""
    try:
        yield
        if sync:
            _sync()
    finally:
        _flush_c()


def _sync() -> None:
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


@contextlib.contextmanager
def capture_fds():
    """Capture everything written to file descriptors 1 and 2 (subprocesses included) as one string.

    Yields a list that holds the captured text once the block exits.
    """
    import wurlitzer

    box: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    out = None
    try:
        with wurlitzer.pipes(stderr=wurlitzer.STDOUT) as (out, _):
            try:
                yield box
            finally:
                _flush_c()
    finally:
        if out is not None:
            box.append(out.getvalue())
