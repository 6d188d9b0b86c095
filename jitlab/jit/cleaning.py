"""Cleaning the build cache: delete the builds jitlab made (all, or those unused for a while), nothing else.

A folder is jitlab's when it has a jitlab manifest, or is named like an entry in a tagged cache or beside
its lock (:func:`made_by_jitlab`); a build another process holds the lock of is left alone.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from jitlab import config
from jitlab.jit import cachedir, locks
from jitlab.jit.cache import MANIFEST, OWN, SUBCACHES, read_manifest

#: Folders of small records the object cache keeps about its builds (the header set a unit needed, why NVRTC
#: refused a program): cleaned with the builds, by the same age.
MEMOS = ("hints", "refused")


def made_by_jitlab(folder: Path, tagged: bool) -> bool:
    """Whether ``folder`` is a build jitlab made: it has a jitlab manifest (any format version), or it
    is named like an entry and sits in a tagged cache or beside its lock file (an unfinished build)."""
    if folder.is_symlink() or not folder.is_dir():
        return False
    try:
        data = json.loads((folder / MANIFEST).read_text())
        if isinstance(data, dict) and "format" in data and "artifact" in data:
            return True
    except (OSError, ValueError):
        pass
    return bool(cachedir.ENTRY_NAME.match(folder.name)) and (tagged or (folder.parent / f"{folder.name}.lock").is_file())


def entries(root: Path | None = None) -> list[tuple[Path, dict | None]]:
    """Every build folder jitlab made in ``root`` with its manifest (``None`` if unfinished), newest first."""
    root = root or config.cache_dir()
    if not root.is_dir():
        return []
    tagged = cachedir.is_tagged(root)
    found = [(p, read_manifest(p)) for p in root.iterdir()
             if p.name not in SUBCACHES and made_by_jitlab(p, tagged)]
    return sorted(found, key=lambda e: e[0].stat().st_mtime, reverse=True)


@dataclass
class Cleaned:
    """What :func:`clean` did.

    Attributes:
        removed: How many build folders were deleted.
        busy: Builds left because another process is building them.
        left: Files and folders in the cache that jitlab did not make: never deleted, listed.
    """

    removed: int = 0
    busy: int = 0
    left: list[Path] = field(default_factory=list)


def clean(root: Path | None = None, older_than_s: float | None = None, headers: bool = False) -> Cleaned:
    """Delete the builds jitlab made in ``root`` (all, or those not used for ``older_than_s`` seconds).

    Only folders :func:`made_by_jitlab` are deleted, with their lock files; anything else in the folder
    (a user's files, where ``JITLAB_CACHE_DIR`` points at the wrong folder) is left and listed. The
    object cache inside is cleaned by the same rule, its records about builds (:data:`MEMOS`) with it; the
    precompiled torch headers (minutes to make again) only with ``headers=True``. Builds whose lock another
    process holds are left alone.

    Raises:
        ValueError: ``older_than_s`` is negative.
        CacheError: The cache cannot be written (read-only, not this user's).
    """
    if older_than_s is not None and not older_than_s >= 0:
        raise ValueError(f"older than {older_than_s} s: an age is 0 or more (0 deletes every build)")
    root = root or config.cache_dir()
    done = Cleaned()
    if not root.is_dir():
        return done
    for sub in SUBCACHES:
        if (root / sub).is_dir() and (sub != "pch" or headers):
            inner = clean(root / sub, older_than_s)
            done.removed, done.busy = done.removed + inner.removed, done.busy + inner.busy
    builds = entries(root)
    now = time.time()
    with cachedir.writing(root):
        for folder, _ in builds:
            if older_than_s is not None and now - folder.stat().st_mtime < older_than_s:
                continue
            lock = root / f"{folder.name}.lock"
            with locks.open_lock(lock) as f:
                if not locks.try_lock(f):
                    done.busy += 1
                    continue
                shutil.rmtree(folder)
                done.removed += 1
            lock.unlink(missing_ok=True)
        for memo in (root / m for m in MEMOS if (root / m).is_dir() and not (root / m).is_symlink()):
            for record in memo.iterdir():
                if record.is_file() and (older_than_s is None or now - record.stat().st_mtime >= older_than_s):
                    record.unlink(missing_ok=True)
    tagged = cachedir.is_tagged(root)
    done.left = sorted(p for p in root.iterdir()
                       if p.name not in (*SUBCACHES, *OWN, *MEMOS, cachedir.TAG, "README.md")
                       and not made_by_jitlab(p, tagged) and not (p.suffix == ".lock" and cachedir.ENTRY_NAME.match(p.stem)))
    return done
