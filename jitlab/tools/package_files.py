"""Writing an exported package: file names as text the generated code cannot run, and no write through a link.

A snippet's file and folder names end up in the package's ``setup.py`` (a comment, ``include_dirs``),
its ``__init__.py`` docstring and its C++ (``#include "..."``, comments). Python gets them as escaped
literals (:func:`literal`, :func:`docstring`, :func:`comment`); C++ has no escape inside ``#include "..."``, so
a name holding a quote or a control character (a newline) is refused (:func:`check_names`).

:func:`write` writes into a folder the user may have filled (``export --force``): it never follows a
symbolic link it did not make, and new files and folders get the modes the user's umask gives.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from jitlab.errors import SnippetError


def check_names(paths: list[str]) -> None:
    """Refuse file names the package's C++ cannot quote: a ``"`` or a control character (a newline, a tab).

    Args:
        paths: The user's files, as the package names them (relative to its ``csrc/``).

    Raises:
        SnippetError: Naming the file, the character and the fix (rename it).
    """
    for p in paths:
        bad = next((c for c in p if _unquotable(c)), None)
        if bad is not None:
            raise SnippetError(f"{p!r}: a file or folder name with {bad!r} cannot be written into the package's "
                               f"C++ (#include \"...\" has no escapes); rename it, e.g. {_renamed(p)!r}")


def _unquotable(c: str) -> bool:
    return c == '"' or not c.isprintable()


def _renamed(p: str) -> str:
    return "".join("_" if _unquotable(c) else c for c in p)


def literal(text: str) -> str:
    """``text`` as a double-quoted Python string literal (JSON's escapes are Python's)."""
    return json.dumps(text)


def comment(text: str) -> str:
    """``text`` for a ``#`` comment: as is when it is one printable line, else escaped (``\\n`` stays two characters)."""
    return text if text.isprintable() else repr(text)[1:-1]


def docstring(text: str) -> str:
    """``text`` as a Python string literal for a docstring: triple-quoted when that reads back as ``text``, else ``repr``."""
    plain = all(c.isprintable() or c == "\n" for c in text) and "\\" not in text and '"' not in text[-1:]
    return f'"""{text}"""' if plain and '"""' not in text else repr(text)


def write(out: Path, files: dict[str, str]) -> None:
    """Write each file atomically (temporary file + ``os.replace``), never through a symbolic link.

    A link at any file or folder the package writes (one planted in an ``export --force`` folder) is
    refused before anything is written; every folder and file is then opened with ``O_NOFOLLOW``, so a
    link made meanwhile fails the write instead of redirecting it. New files and folders get the
    modes the user's umask gives (``0644``/``0755`` under ``022``, ``0600``/``0700`` under ``077``).

    Args:
        out: The package folder (absolute; created if missing).
        files: Relative posix path → text.

    Raises:
        SnippetError: Naming the link and how to go on.
    """
    for rel in files:
        p = out
        for part in rel.split("/"):
            p = p / part
            if p.is_symlink():
                raise _link_error(p)
    out.mkdir(parents=True, exist_ok=True)
    for rel, text in files.items():
        _write_one(out, rel, text)


def _link_error(p: Path) -> SnippetError:
    return SnippetError(f"{p} is a symbolic link (to {os.readlink(p)}): jitlab export never writes through a link it "
                        f"did not make; remove it (`rm {p}`) or export to another --out")


def _write_one(out: Path, rel: str, text: str) -> None:
    """Write ``out/rel`` through folder descriptors opened without following links."""
    *folders, name = rel.split("/")
    fd = os.open(out, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i, part in enumerate(folders):
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=fd)
            try:
                sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as e:  # ELOOP (a link), ENOTDIR (a link or a file)
                where = out.joinpath(*folders[: i + 1])
                raise (_link_error(where) if where.is_symlink() else SnippetError(f"{where}: {e.strerror}")) from e
            os.close(fd)
            fd = sub
        tmp = f".{name[:100]}.{os.getpid()}.tmp"  # fits beside a file whose name is 255 bytes
        f = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666, dir_fd=fd)
        try:
            with os.fdopen(f, "w", encoding="utf-8", errors="surrogateescape", newline="") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)  # replaces a name, never writes through it
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            raise
    finally:
        os.close(fd)
