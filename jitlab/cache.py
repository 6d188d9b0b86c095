"""The persistent build cache: one folder per build, named by a key over everything that changes it.

Layout (``$JITLAB_CACHE_DIR``, default ``build_cache/``)::

    build_cache/
      saxpy_3f9c0a1b2c4d5e6f/      one build: load_inline's build directory
        main.cpp cuda.cu build.ninja saxpy_3f9c….so
        jitlab.json                the manifest, written last and atomically: its presence means "complete"
      saxpy_3f9c0a1b2c4d5e6f.lock  flock()ed while a process builds it (released by the OS if it dies)

A folder without a manifest is an unfinished build (killed, failed, or in progress elsewhere): the
process holding the lock wipes and rebuilds it. A manifest whose ``.so`` does not match its recorded
hash is a corrupt entry: it is rebuilt with a one-line warning. Other processes reuse every entry.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from . import config

MANIFEST = "jitlab.json"
#: Folders inside the cache that hold other caches (per-unit objects, precompiled headers), not builds.
SUBCACHES = ("objects", "pch")


def build_key(parts: dict) -> str:
    """A 16-hex-digit key over a JSON-serializable description of the build."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def module_name(stem: str, key: str) -> str:
    """A Python identifier that carries the key: two different builds never share an import name."""
    safe = "".join(c if c.isalnum() else "_" for c in stem).strip("_") or "snippet"
    if safe[0].isdigit():
        safe = "k" + safe
    return f"{safe}_{key}"


def entry_dir(name: str, root: Path | None = None) -> Path:
    """The folder of one build."""
    return (root or config.cache_dir()) / name


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a complete build, or ``None`` (missing or unreadable is a miss, never a crash)."""
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == config.FORMAT_VERSION else None


def write_manifest(folder: Path, data: dict) -> None:
    """Write the manifest atomically (temp file, fsync, ``os.replace``): it marks the build complete."""
    data = {"format": config.FORMAT_VERSION, **data}
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".manifest-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, folder / MANIFEST)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def verify_artifact(folder: Path, manifest: dict) -> str | None:
    """Why the manifest's artifact cannot be trusted, or ``None`` if it matches its recorded hash."""
    art = folder / manifest.get("artifact", "")
    if not manifest.get("artifact") or not art.is_file():
        return f"{art.name or 'artifact'} is missing"
    if art.stat().st_size != manifest.get("size"):
        return f"{art.name} has {art.stat().st_size} bytes, expected {manifest.get('size')}"
    if file_sha256(art) != manifest.get("sha256"):
        return f"{art.name} does not match its recorded hash"
    return None


@contextlib.contextmanager
def build_lock(name: str, root: Path | None = None, on_wait=None):
    """Hold an exclusive ``flock`` on ``<name>.lock`` while building ``name``.

    The kernel releases the lock when the holder exits, so a lock file left by a killed build never
    blocks anyone. ``on_wait`` is called once if another process holds it.
    """
    root = root or config.cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"{name}.lock"
    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait:
                on_wait()
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def reset_dir(folder: Path) -> None:
    """Remove an unfinished or corrupt build folder and make it anew, empty."""
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)


def entries(root: Path | None = None) -> list[tuple[Path, dict | None]]:
    """Every build folder with its manifest (``None`` if unfinished), newest first."""
    root = root or config.cache_dir()
    if not root.is_dir():
        return []
    found = [(p, read_manifest(p)) for p in root.iterdir()
             if p.is_dir() and not p.name.startswith(".") and p.name not in SUBCACHES]
    return sorted(found, key=lambda e: e[0].stat().st_mtime, reverse=True)


def clean(root: Path | None = None, older_than_s: float | None = None) -> int:
    """Delete build folders (all, or those not used for ``older_than_s``); returns how many.

    The object and precompiled-header caches inside it are cleaned by the same rule. Folders being
    built by another process (lock held) are left alone.
    """
    root = root or config.cache_dir()
    removed = sum(clean(root / sub, older_than_s) for sub in SUBCACHES if (root / sub).is_dir())
    now = time.time()
    for folder, _ in entries(root):
        if older_than_s is not None and now - folder.stat().st_mtime < older_than_s:
            continue
        lock = root / f"{folder.name}.lock"
        with open(lock, "a+") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
        lock.unlink(missing_ok=True)
    return removed
