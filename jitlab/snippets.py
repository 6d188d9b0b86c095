"""Saving snippet files safely: atomic writes, and every replaced version kept in a history folder.

A user's ``.cu`` file is never lost or half-written: the new text goes to a temporary file in the
same folder and replaces the old one with ``os.replace``; the old text, if different, is first
copied to ``<folder>/.history/<name>/<time>-<hash>.<ext>``.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
import time
from pathlib import Path

from .errors import SnippetError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def check_name(name: str) -> str:
    """A snippet name must be a C/Python identifier (it names the file and the notebook variable).

    Raises:
        SnippetError: Naming the fix.
    """
    if not _NAME.match(name):
        raise SnippetError(f"{name!r} is not a valid kernel name: use letters, digits and _ (not first), e.g. `saxpy2`")
    return name


def history_dir(path: Path) -> Path:
    return path.parent / ".history" / path.stem


def history(path: str | Path) -> list[Path]:
    """Earlier versions of a snippet, oldest first."""
    d = history_dir(Path(path))
    return sorted(d.glob(f"*{Path(path).suffix}")) if d.is_dir() else []


def save(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically, keeping the replaced version in the history.

    Returns:
        The path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if not text.endswith("\n"):
        text += "\n"
    if path.is_file():
        old = path.read_text(encoding="utf-8", errors="surrogateescape")
        if old == text:
            return path
        d = history_dir(path)
        d.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(old.encode("utf-8", "surrogateescape")).hexdigest()[:8]
        stamp = time.strftime("%Y%m%d-%H%M%S")
        atomic_write(d / f"{stamp}-{digest}{path.suffix}", old)
    atomic_write(path, text)
    return path


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` all at once: a temporary file in the same folder, then ``os.replace``.

    A reader sees the old file or the new one, never half of it. The file gets ``mkstemp``'s mode (0600).
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
