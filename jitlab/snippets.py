"""Saving snippet files safely: atomic writes, and every replaced version kept in a history folder.

A user's ``.cu`` file is never lost or half-written: the new text goes to a temporary file in the
same folder and replaces the old one with ``os.replace``, keeping the file's mode; the old text, if
different, is first copied to ``<folder>/.history/<name>/<date>-<time>-<nanoseconds>-<hash>.<ext>``,
named and listed in save order. A snippet path that is a symbolic link is refused, never written through:
jitlab made no link, so one there may point anywhere (a planted ``kernels/k.cu`` → ``~/.bashrc``).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tempfile
import time
from pathlib import Path

from jitlab.errors import ArgumentError, SnippetError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_name(name: str) -> str:
    """A snippet name must be a C/Python identifier (it names the file and the notebook variable).

    Raises:
        SnippetError: Naming the fix.
    """
    if not _NAME.match(name):
        raise SnippetError(f"{name!r} is not a valid kernel name: use letters, digits and _ (not first), e.g. `saxpy2`")
    if len(name) > MAX_NAME:
        raise SnippetError(f"the kernel name {name[:24]}… is {len(name)} characters: use at most {MAX_NAME} "
                           f"(it names the snippet's file and its history folder, and file names have a limit)")
    return name


#: The longest snippet name: ``<name>.cpp`` is a file name, at most 255 bytes (the build's folders and
#: module shorten it themselves).
MAX_NAME = 250
#: The longest extension name (``load_inline``'s ``name=``): its sources' folder and files, and the
#: object-cache entries named after them with a key added, must each stay within 255 bytes.
MAX_EXTENSION_NAME = 100


def check_extension_name(name, call: str) -> str:
    """An extension's ``name=``: a string jitlab can name files and the module's C symbol after.

    torch writes it into ``PyInit_<name>``; jitlab turns other ASCII punctuation into ``_`` as well, so
    ``"my-ext"`` builds, but a name outside ASCII (no C symbol or portable file name to make of it) or
    longer than :data:`MAX_EXTENSION_NAME` is refused here, naming the fix, not later as a link error or
    ``File name too long``.

    Raises:
        ArgumentError: Naming the fix.
    """
    if not isinstance(name, str) or not name.strip():
        raise ArgumentError(f"{call}(name=...) takes the extension's name as a non-empty string, e.g. name='my_ext'")
    if not name.isascii():
        raise ArgumentError(f"{call}(name={name!r}): the name becomes file names and the module's C symbol, so it "
                            f"must be ASCII: use letters, digits and _, e.g. name='my_ext'")
    if len(name) > MAX_EXTENSION_NAME:
        raise ArgumentError(f"{call}(name={name[:24]!r}…) is {len(name)} characters: use at most "
                            f"{MAX_EXTENSION_NAME} (it names files, and a file name has a limit)")
    return name


def history_dir(path: Path) -> Path:
    return path.parent / ".history" / path.stem


#: A history entry's name: the local date and time it was saved, nanoseconds, the first 8 hex digits
#: of the kept text's SHA-256 (``20240102-134501-000123456-abcd1234.cu``). Names from before the
#: nanoseconds (``20240102-134501-abcd1234.cu``) are still read.
_ENTRY = re.compile(r"(?P<date>\d{8})-(?P<time>\d{6})(?:-(?P<ns>\d{9}))?-(?P<digest>[0-9a-f]+)\Z")


def history(path: str | Path) -> list[Path]:
    """Earlier versions of a snippet, oldest first, in the order they were saved."""
    d = history_dir(Path(path))
    return sorted(d.glob(f"*{Path(path).suffix}"), key=_saved_at) if d.is_dir() else []


def _saved_at(entry: Path) -> tuple[str, str, str, int]:
    """A history entry's sort key: the save time its name records (to the nanosecond), then its mtime,
    which orders the older names that record whole seconds only."""
    m = _ENTRY.match(entry.stem)
    try:
        mtime = entry.stat().st_mtime_ns
    except OSError:
        mtime = 0
    return (m["date"], m["time"], m["ns"] or "", mtime) if m else ("", "", "", mtime)


def version_label(entry: Path) -> str:
    """``20240102-134501-123456789-abcd1234.cu`` → ``2024-01-02 13:45:01.123 (abcd1234)``."""
    m = _ENTRY.match(entry.stem)
    if not m:
        return entry.name
    d, t = m["date"], m["time"]
    millis = f".{m['ns'][:3]}" if m["ns"] else ""
    return f"{d[:4]}-{d[4:6]}-{d[6:]} {t[:2]}:{t[2:4]}:{t[4:]}{millis} ({m['digest']})"


def save(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically, keeping the replaced version in the history.

    Returns:
        The path written (``path`` itself).

    Raises:
        SnippetError: ``path`` is a symbolic link (nothing is written, the history included).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    refuse_link(path)
    if not text.endswith("\n"):
        text += "\n"
    if path.is_file():
        old = path.read_text(encoding="utf-8", errors="surrogateescape")
        if old == text:
            return path
        keep_in_history(path, old)
    atomic_write(path, text)
    return path


def keep_in_history(path: Path, old: str) -> Path:
    """Write ``old`` (the text about to be replaced) as the newest entry of ``path``'s history.

    Entries are named by their save time to the nanosecond, and each is named later than the newest
    one already there (two saves in one clock tick, or a clock set back, keep their order).

    Returns:
        The entry written.
    """
    d = history_dir(path)
    d.mkdir(parents=True, exist_ok=True)
    stamp = _stamp(time.time_ns())
    newest = history(path)[-1:]
    m = _ENTRY.match(newest[0].stem) if newest else None
    if m and m["ns"] and (m["date"], m["time"], m["ns"]) >= tuple(stamp.split("-")):
        stamp = f"{m['date']}-{m['time']}-{int(m['ns']) + 1:09d}"
    digest = hashlib.sha256(old.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    entry = d / f"{stamp}-{digest}{path.suffix}"
    atomic_write(entry, old)
    return entry


def _stamp(ns: int) -> str:
    """``YYYYMMDD-HHMMSS-NNNNNNNNN``: local date and time of a ``time.time_ns()`` value, with its nanoseconds."""
    seconds, fraction = divmod(ns, 1_000_000_000)
    return f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(seconds))}-{fraction:09d}"


def refuse_link(path: Path) -> None:
    """Refuse to write ``path`` when it is a symbolic link (jitlab never writes through one it did not make).

    Raises:
        SnippetError: Naming the link, where it points, and the fix.
    """
    if not path.is_symlink():
        return
    target = os.path.realpath(path)
    raise SnippetError(f"{path} is a symbolic link to {target}, and jitlab never writes through a link it did not "
                       f"make (it could point anywhere); nothing was written. To edit that file, give its folder "
                       f"(--dir {os.path.dirname(target)}, or load it by its own path); to keep the snippet here, "
                       f"remove the link (`rm {path}`) and save again")


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` all at once: a temporary file in the same folder, then ``os.replace``.

    A reader sees the old file or the new one, never half of it. The file keeps the mode it had; a new
    file gets the usual mode for this process's umask (``0644`` under umask ``022``), not the ``0600``
    of the temporary file. ``os.replace`` swaps the name itself, so a link made after the check is
    replaced, never written through.

    Raises:
        SnippetError: ``path`` is a symbolic link.
    """
    path = Path(path)
    refuse_link(path)
    try:
        mode = stat.S_IMODE(path.lstat().st_mode)
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    # the temporary name keeps at most 100 characters of the file's: beside a 250-character name it still fits
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name[:100]}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """This process's umask, read without changing it (Linux shows it in /proc; elsewhere set and restored)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
