"""NVRTC's own precompiled headers for the text before the user's code, kept for the process's next edits.

Every NVRTC compile reads NVRTC's builtin declarations and jitlab's ``jitlab_nvrtc.h`` before the user's first
line: about a sixth of a kernel-only edit (68.9 → 57.2 ms a compile-only edit on the 2-core CPU machine). NVRTC (12.8 and
later) can keep that work as a precompiled header (``-pch``): the first compile of a prefix writes one, the next
compiles of the same prefix and options read it, and the CUBIN is the same byte for byte (a test holds it).

The files (~7 MB each) live in a temporary folder of this process, removed at its exit. A compile borrows one
of its folders for its duration (:func:`borrowed`): two builds compiling at once in one process use two, so
neither reads a file the other is writing, and one edit after another gets the same folder back (NVRTC checks
that a file's options and headers match before it reads one). The text marks
where the part ends (:data:`STOP`); NVRTC's notes about the files are off, and so is its warning about the
``#line`` after the mark.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import tempfile
import threading
from pathlib import Path

#: Where the precompiled part of a text ends: before the ``#line`` naming the user's file (a ``#line`` inside the
#: part would turn its making off) and the user's own ``#include`` lines.
STOP = "#pragma nv_hdrstop\n"
#: NVRTC's warnings about its files, none of them the user's: "PCH creation disabled because #line directive
#: encountered" (20283, which it gives for the ``#line`` after :data:`STOP` although it makes the file), and
#: "the command line options do not match those used when precompiled header file ... was created" (629, for a
#: file of another arch or other defines in the folder; it makes one for these).
QUIET = (20283, 629)

_lock = threading.Lock()
#: (process id, program name) → its folders no compile is using now: a forked child has folders of its own, and
#: each name too (NVRTC looks through every file of a folder for one it can use).
_free: dict[tuple[int, str], list[Path]] = {}
_made = 0


@contextlib.contextmanager
def borrowed(nvrtc_version: str | None, program_options, name: str):
    """A folder for the precompiled headers of programs called ``name`` (the snippet's stem) that no other
    compile of this process uses until the block ends; ``None`` where NVRTC (before 12.8) or cuda.core (no
    ``pch`` field) lacks them."""
    known = getattr(program_options, "__dataclass_fields__", {})
    if not nvrtc_version or _version(nvrtc_version) < (12, 8) or not {"pch", "pch_dir", "pch_messages"} <= set(known):
        yield None
        return
    with _lock:
        free = _free.setdefault((os.getpid(), name), [])
        folder = free.pop() if free else _new()
    try:
        yield folder
    finally:
        with _lock:
            free.append(folder)


def fields(folder: Path | None, given: dict) -> dict:
    """``given`` (``ProgramOptions``' keywords) with the precompiled headers of ``folder`` turned on (as they are
    where ``folder`` is ``None``): NVRTC's notes and warnings about the files (:data:`QUIET`) off."""
    if folder is None:
        return given
    return {**given, "pch": True, "pch_dir": str(folder), "pch_messages": False,
            "diag_suppress": [*(given.get("diag_suppress") or []), *QUIET]}


def _new() -> Path:
    global _made
    _made += 1
    folder = _root() / f"{os.getpid()}-{_made}"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in text.split(".")[:2])
    except ValueError:
        return (0,)


@functools.cache
def _root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="jitlab-nvrtc-pch-"))
    atexit.register(_remove, root, os.getpid())
    return root


def _remove(root: Path, owner: int) -> None:
    """Remove the folder at exit, in the process that made it (a forked child exiting leaves it)."""
    if os.getpid() == owner:
        shutil.rmtree(root, ignore_errors=True)
