"""Build locks: one ``flock`` per build, released by the OS if its holder dies.

The holder writes its PID, host, command and start time into the lock file; a waiter says whom it
waits for and gives up after ``$JITLAB_LOCK_TIMEOUT`` seconds (a builder stopped with Ctrl-Z holds its
lock for ever). Lock files are never opened through a symbolic link.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

from jitlab import config
from jitlab.errors import CacheError
from jitlab.jit.cachedir import make_root, share, trusted_root, writing

#: Seconds between a waiting build's reports of whom it waits for.
LOCK_REPORT_EVERY = 10.0
_LOCK_POLL = 0.1  # seconds between tries of a held lock


@contextlib.contextmanager
def build_lock(name: str, root: Path | None = None, on_wait=None, timeout: float | None = None, wait: bool = True):
    """Hold an exclusive ``flock`` on ``<name>.lock`` while building ``name`` (the folder ``root/name``).

    The kernel releases the lock when the holder exits, so a lock file left by a killed build never
    blocks anyone. The holder writes its PID, host, command and start time into the lock file; a
    waiter prints them at once and every :data:`LOCK_REPORT_EVERY` seconds. A build inside that fails
    to write the cache (read-only, full disk) is raised as a :class:`CacheError`, and a build that ran
    out of space is removed.

    Args:
        name: The build (its folder's name).
        root: The cache folder holding it; default :func:`config.cache_dir`.
        on_wait: Called once if another process holds the lock.
        timeout: Seconds to wait for another holder; default ``$JITLAB_LOCK_TIMEOUT``
            (:func:`config.lock_timeout`).
        wait: ``False``: when another holds the lock, take nothing and yield ``False`` at once.

    Yields:
        ``True`` while the lock is held (``False`` only with ``wait=False``, for a lock held elsewhere).

    Raises:
        CacheError: The cache cannot be written, or the lock is still held after ``timeout`` seconds
            (the message names the holder's PID, the lock file and the fix).
    """
    root = root or config.cache_dir()
    path = root / f"{name}.lock"
    timeout = config.lock_timeout() if timeout is None else timeout  # a bad setting says so before a wait
    with writing(root):
        make_root(trusted_root(root))
        f = open_lock(path)
    with f:
        if not wait and not try_lock(f):
            yield False
            return
        if wait and not try_lock(f):
            sibling = _ours(lock_holder(path))  # another thread of this process: its progress line says it all
            if on_wait and not sibling:
                on_wait()
            _wait_for_lock(f, path, timeout, quiet=sibling)
        try:
            _claim(f)
            with writing(root / name, discard=True):
                yield True
        finally:
            with contextlib.suppress(OSError):
                os.ftruncate(f.fileno(), 0)  # no holder any more
            fcntl.flock(f, fcntl.LOCK_UN)


def open_lock(path: Path):
    """Open (or create) a lock file without following a symbolic link: a link planted at a lock's
    predictable path must not make jitlab truncate the file it points to.

    Raises:
        CacheError: ``path`` is a link.
    """
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise CacheError(f"jitlab: the lock file {path} is a symbolic link, which jitlab never makes; "
                             f"someone else may have planted it: remove it (`rm {path}`) and look at who can "
                             f"write {path.parent}") from None
        raise
    share(path, fd)
    return os.fdopen(fd, "r+")


def try_lock(f) -> bool:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _ours(holder: dict) -> bool:
    """Whether a lock's holder is this very process (a build in another of its threads)."""
    return holder.get("pid") == os.getpid() and holder.get("host") in (None, socket.gethostname())


def _wait_for_lock(f, path: Path, timeout: float, quiet: bool = False) -> None:
    """Take the lock once its holder lets go, saying whom we wait for (unless ``quiet``); ``CacheError``
    after ``timeout`` s."""
    t0 = time.monotonic()
    next_report = t0
    while not try_lock(f):
        now = time.monotonic()
        if now - t0 >= timeout:
            raise CacheError(_lock_timeout_message(path, lock_holder(path), now - t0))
        if now >= next_report and not quiet:
            print(f"jitlab: waiting for {_describe_holder(lock_holder(path))} to finish building "
                  f"{path.stem}; waited {int(now - t0)} s of {timeout:g} s (JITLAB_LOCK_TIMEOUT)",
                  file=sys.stderr, flush=True)
            next_report += LOCK_REPORT_EVERY
        time.sleep(max(0.0, min(_LOCK_POLL, t0 + timeout - now)))


def _claim(f) -> None:
    """Write who holds the lock into its file (best effort: a full disk must not stop the build)."""
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time(),
              "command": " ".join(sys.argv)[:200]}
    with contextlib.suppress(OSError):  # unbuffered: nothing is left to fail again when the file closes
        os.ftruncate(f.fileno(), 0)
        os.write(f.fileno(), json.dumps(holder).encode())


def lock_holder(path: Path) -> dict:
    """What a lock file says about its holder (``pid``, ``host``, ``since``, ``command``), or ``{}``."""
    try:
        holder = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _describe_holder(holder: dict) -> str:
    """``PID 123 (python train.py, building for 40 s)``, or ``another process``."""
    pid = holder.get("pid")
    if not pid:
        return "another process"
    notes = []
    if holder.get("host") not in (None, socket.gethostname()):
        notes.append(f"on host {holder['host']}")
    elif pid == os.getpid():
        notes.append("this process, another thread")
    if holder.get("command"):
        notes.append(str(holder["command"]))
    if isinstance(holder.get("since"), (int, float)):
        notes.append(f"building for {time.time() - holder['since']:.0f} s")
    return f"PID {pid}" + (f" ({', '.join(notes)})" if notes else "")


def _lock_timeout_message(path: Path, holder: dict, waited: float) -> str:
    pid = holder.get("pid")
    here = holder.get("host") in (None, socket.gethostname())
    state = _process_state(pid) if pid and here else None
    head = f"jitlab: gave up after {waited:.0f} s waiting for the build lock {path}, held by {_describe_holder(holder)}"
    slow = "if it is just slow, raise JITLAB_LOCK_TIMEOUT (seconds; inf waits for ever)"
    if state == "T":
        return (f"{head}: it is stopped (Ctrl-Z, SIGSTOP). Let it go on (`kill -CONT {pid}`, or `fg` in its "
                f"shell) or end it (`kill -9 {pid}`), then load again")
    if state is not None:
        return f"{head}. If it is stuck, end it (`kill {pid}`); {slow}"
    return (f"{head}. If that process is stuck, end it{f' (`kill {pid}` on its host)' if pid else ''}; {slow}; "
            f"`fuser -v {path}` shows which process holds the lock")


def _process_state(pid: int) -> str | None:
    """The state letter of a local process (``R``, ``S``, ``T`` for stopped …), ``None`` if unknown or gone."""
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except (OSError, ValueError):
        return None
    return stat.rpartition(")")[2].split()[0] if ")" in stat else None
