"""The persistent build cache: one folder per build, named by a key over everything that changes it.

Layout (``$JITLAB_CACHE_DIR``, default ``build_cache/``)::

    build_cache/
      saxpy_3f9c0a1b2c4d5e6f/      one build: load_inline's build directory
        main.cpp cuda.cu build.ninja saxpy_3f9c….so
        jitlab.json                the manifest, written last and atomically: its presence means "complete"
      saxpy_3f9c0a1b2c4d5e6f.lock  flock()ed while a process builds it (released by the OS if it dies);
                                   holds the builder's PID, host, command and start time meanwhile

A folder without a manifest is an unfinished build (killed, failed, or in progress elsewhere): the
process holding the lock wipes and rebuilds it. A manifest whose ``.so`` does not match its recorded
hash is a corrupt entry: it is rebuilt with a one-line warning. Other processes reuse every entry.

The lock (:mod:`jitlab.jit.locks`) says whom a waiter waits for; the folder itself (whose it is, its
tag, the errors of writing it) is :mod:`jitlab.jit.cachedir`'s; :mod:`jitlab.jit.cleaning` deletes only
what jitlab made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import shutil
import stat
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from jitlab import config
from jitlab.errors import CacheError, ToolchainError
from jitlab.jit import answers, cachedir, deps, locks
from jitlab.jit.plan import Manifest
from jitlab.jit.deps import file_sha256  # cache.file_sha256 to its callers: the artifacts' hash

MANIFEST = "jitlab.json"
#: Folders inside the cache that hold other caches (per-unit objects, precompiled headers), not builds.
SUBCACHES = ("objects", "pch")
#: Other folders and files jitlab writes in the cache: ``load_inline``'s sources, the measured peaks and results,
#: the command's compile logs, the answers about the tools and the machine (:mod:`jitlab.jit.answers`; an older
#: jitlab kept NVRTC's version in ``.nvrtc.json``).
OWN = ("inline", "results", "logs", "peaks.json", ".nvrtc.json", ".versions")


def build_key(parts: dict) -> str:
    """A 16-hex-digit key over a JSON-serializable description of the build."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


#: The most bytes of a snippet's stem a module name keeps: the folder of a build, named like the module,
#: plus its files' suffixes must stay under a file system's 255-byte limit on a name.
STEM_BYTES = 48


def module_name(stem: str, key: str) -> str:
    """A Python identifier that carries the key: two different builds never share an import name.

    A stem over :data:`STEM_BYTES` bytes keeps its start, readable, and ends with a hash of the whole
    (``a_very_long_..._name_3f9c2a1b``), so the build's folder name fits any file system.
    """
    safe = "".join(c if c.isalnum() else "_" for c in stem).strip("_") or "snippet"
    if safe[0].isdigit():
        safe = "k" + safe
    if len(safe.encode()) > STEM_BYTES:
        head = safe[:STEM_BYTES - 9]
        while len(head.encode()) > STEM_BYTES - 9:
            head = head[:-1]
        safe = f"{head.rstrip('_')}_{hashlib.sha256(stem.encode('utf-8', 'surrogateescape')).hexdigest()[:8]}"
    return f"{safe}_{key}"


def entry_dir(name: str, root: Path | None = None) -> Path:
    """The folder of one build, in a cache folder this user may trust (:func:`cachedir.trusted_root`)."""
    return cachedir.trusted_root(root or config.cache_dir()) / name


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a complete build, or ``None`` (missing or unreadable is a miss, never a crash).

    Raises:
        CacheError: The entry belongs to someone this user does not trust (see :func:`trusted_root`).
    """
    try:
        problem = cachedir.untrusted(os.stat(folder))
    except OSError:
        return None
    if problem:
        raise CacheError(f"jitlab: will not load the cached build {folder}: {problem}; delete it (`rm -r {folder}`) "
                         f"if you trust no one else with this cache")
    try:
        data = json.loads((folder / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == config.FORMAT_VERSION else None


def made(artifact: Path, **fields) -> Manifest:
    """The :class:`~jitlab.jit.plan.Manifest` of an artifact just written: its name, size and hash, and ``fields``."""
    return Manifest(artifact=artifact.name, size=artifact.stat().st_size, sha256=file_sha256(artifact), **fields)


def write_manifest(folder: Path, manifest: Manifest) -> dict:
    """Write the manifest atomically, with jitlab's format version: it marks the build complete.

    Returns:
        The record written.
    """
    record = dataclasses.replace(manifest, format=config.FORMAT_VERSION).record()
    write_json(folder / MANIFEST, record)
    return record


def write_json(path: Path, data: dict) -> None:
    """Write a JSON file atomically (temp file beside it, then ``os.replace``): readers see the old file or the
    whole new one, never a part.

    Not fsynced: every file written here is a cache's record (a manifest, a memo, a table of peaks), and a reader
    takes one it cannot read after a power loss as absent (:func:`read_manifest`), so a sync per build (1–6 ms,
    most of a kernel-only cache hit's budget) would buy nothing.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        cachedir.share(Path(tmp), fd)  # mkstemp's 0600 is the team's too in a team cache
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def verify_artifact(folder: Path, manifest: dict, content: bool = True) -> str | None:
    """Why the manifest's artifact cannot be trusted, or ``None`` if it matches its record.

    The artifact must be a plain file of the entry's own folder, owned by someone this user trusts
    (:func:`cachedir.untrusted`), of its recorded size and (with ``content``) hash. An artifact too large
    to hash on every use (``content=False``: a precompiled header) is held to its ``stamp`` instead: its
    inode and change time, which only the kernel sets, so any write to it after it was made shows. The
    entry's small ``companions`` (name → SHA-256: the header text beside a precompiled header) are hashed
    on every check.
    """
    name = manifest.get("artifact")
    if not _own_file_name(name):
        return f"its artifact {name!r} is not a file of the build's own folder"
    art = folder / name
    st, problem = _plain_trusted_file(art)
    if problem:
        return problem
    if st.st_size != manifest.get("size"):
        return f"{art.name} has {st.st_size} bytes, expected {manifest.get('size')}"
    if content and file_sha256(art) != manifest.get("sha256"):
        return f"{art.name} does not match its recorded hash"
    if not content and [st.st_ino, st.st_ctime_ns] != manifest.get("stamp"):
        return f"{art.name} was changed after it was made"
    companions = manifest.get("companions", {})
    if not isinstance(companions, dict):
        return "its companion files are not recorded as name → hash"
    for other, digest in companions.items():
        if not _own_file_name(other):
            return f"its companion file {other!r} is not a file of the build's own folder"
        _, problem = _plain_trusted_file(folder / other)
        if problem or file_sha256(folder / other) != digest:
            return problem or f"{other} was changed after it was made"
    return None


def stamp_of(path: Path) -> list[int]:
    """A file's inode and change time (:func:`verify_artifact`'s ``stamp``): any later write changes it."""
    st = os.lstat(path)
    return [st.st_ino, st.st_ctime_ns]


def _own_file_name(name) -> bool:
    return isinstance(name, str) and bool(name) and Path(name).name == name and name not in (".", "..")


def _plain_trusted_file(path: Path) -> tuple[os.stat_result | None, str | None]:
    """``path``'s own status (``lstat``), and why it is not a plain file this user may trust (missing, a
    link, someone else's) or ``None``."""
    try:
        st = os.lstat(path)
    except OSError:
        return None, f"{path.name or 'artifact'} is missing"
    if stat.S_ISLNK(st.st_mode):
        return st, f"{path.name} is a link"
    if not stat.S_ISREG(st.st_mode):
        return st, f"{path.name} is missing"
    problem = cachedir.untrusted(st)
    return st, (f"{path.name}: {problem}" if problem else None)


def trusted_manifest(folder: Path, content: bool = True) -> dict | None:
    """The manifest of a complete entry whose artifact matches it, else ``None`` (make it again)."""
    manifest = read_manifest(folder)
    if manifest is None or verify_artifact(folder, manifest, content):
        return None
    return manifest


#: How many later results one key keeps besides its first (see :func:`find_or_make`).
MAX_CANDIDATES = 8


@dataclass
class Entry:
    """A usable cache entry.

    Attributes:
        name: Its name (a build's module name): the key's own, or a later candidate's.
        folder: Its folder.
        manifest: Its manifest.
        cached: ``True`` when it was found, ``False`` when made just now.
    """

    name: str
    folder: Path
    manifest: Manifest
    cached: bool


def lookup(name: str, root: Path | None = None, content: bool = True, warn: bool = False) -> Entry | None:
    """The entry of key ``name`` whose artifact matches its manifest and whose recorded inputs
    (:mod:`jitlab.jit.deps`) are all unchanged now: the key's first result, or one of its later candidates.

    Args:
        warn: Warn about a corrupt artifact (it is then rebuilt).
    """
    first = entry_dir(name, root)
    manifest = read_manifest(first)
    if manifest is None:
        return None
    others = manifest.get("others", [])
    for cand in [name, *(others if isinstance(others, list) else [])]:
        folder = first if cand == name else entry_dir(str(cand), root)
        found = manifest if cand == name else read_manifest(folder)
        if found is None:
            continue
        problem = verify_artifact(folder, found, content)
        if problem:
            if warn:
                warnings.warn(f"jitlab: cached build {cand} is corrupt ({problem}); rebuilding", stacklevel=4)
        elif deps.unchanged(found.get("deps", [])):
            return Entry(str(cand), folder, Manifest.from_record(found), True)
    return None


def find_or_make(name: str, make, *, root: Path | None = None, content: bool = True, known: dict | None = None,
                 keep=(), reads=(), skip=(), before=None, on_wait=None, warn: bool = False, use=None,
                 rebuild_once: bool = False):
    """The one find-or-build of every cache entry (builds, objects, precompiled headers).

    A key's inputs are known before compiling, the files the compiler read only after, so the key
    names a first result, whose manifest lists later candidates (ccache's direct mode): a hit is the
    first of them whose artifact matches and whose recorded inputs are all unchanged. On a miss the
    key's lock is taken, the cache is read again (another process may have made it), and
    ``make(name, folder)`` compiles into an empty folder: the key's own one when it has no complete
    result yet, else a new candidate's (the old results stay, so a revert is a hit). The manifest
    ``make`` returns lists what the compiler read under ``"read"`` (``"unstable": True`` when a part it
    used moved while made); it is stamped (:func:`deps.stamp`) and written last.

    Args:
        name: The key's entry name.
        make: ``make(name, folder) -> Manifest`` (:func:`made` makes one of the artifact it wrote).
        root: The cache folder (default the build cache).
        content: Check the artifact's hash on a hit, not only its size.
        known: Path → SHA-256 of the files the key hashed before the build.
        keep: Folders whose files are always checked (the snippet's and the user's).
        reads: Files the build reads besides those the compiler reports (libraries in ``ldflags``).
        skip: The snippet's sources, whose text the key holds: never stamped.
        before: Called before a miss takes the lock (a toolchain check).
        on_wait: Called when another process holds the lock.
        warn: Warn about a corrupt entry.
        use: Called with the entry found or made; what it returns is returned instead of the entry.
        rebuild_once: An entry found in the cache that ``use`` finds unusable (it raises :class:`Unusable`:
            a library that matches its manifest and still does not load) is emptied under its lock
            (:func:`discard`), with a warning, and made once more; ``use``'s verdict on that one stands.

    Returns:
        The entry (``cached`` says whether it was found), or what ``use`` made of it.

    Raises:
        Unusable: ``use`` could not use the entry (one made just now, or without ``rebuild_once``).
    """
    args = (name, make, root, content, known, keep, reads, skip, before, on_wait)
    entry = _found_or_made(*args, warn)
    if use is None:
        return entry
    try:
        return use(entry)
    except Unusable as e:
        if not (rebuild_once and entry.cached):
            raise
        warnings.warn(f"jitlab: cached build {entry.name} {e.reason}; rebuilding", stacklevel=6)  # the user's load
    discard(entry.name, root)
    return use(_found_or_made(*args, False))


def _found_or_made(name: str, make, root, content, known, keep, reads, skip, before, on_wait, warn: bool) -> Entry:
    """:func:`find_or_make`'s protocol, up to the entry."""
    entry = lookup(name, root, content, warn)
    if entry is not None:
        return entry
    if before is not None:
        before()
    with locks.build_lock(name, root, on_wait=on_wait):  # a CacheError if the cache cannot be written
        entry = lookup(name, root, content)
        if entry is not None:
            return entry
        first_folder = entry_dir(name, root)
        first = trusted_manifest(first_folder, content)  # complete, but its inputs moved: keep it
        target = name if first is None else f"{name}_{build_key({'after': name, 'at': time.time_ns(), 'pid': os.getpid()})}"
        folder = entry_dir(target, root)
        reset_dir(folder)
        started = time.time_ns()
        result = make(target, folder)
        cachedir.share_tree(folder)  # what the compilers wrote, the team's in a team cache
        rows = deps.stamp([*result.read, *reads], started, known or {}, keep, folder, skip)
        record = write_manifest(folder, dataclasses.replace(result, deps=None if result.unstable else rows))
        answers.save()  # the tools' answers asked before this cache existed
        if first is not None:
            kept = [o for o in first.get("others", []) if isinstance(o, str)]
            first_manifest = Manifest.from_record(first)
            write_manifest(first_folder, dataclasses.replace(first_manifest, others=[target, *kept][:MAX_CANDIDATES]))
    return Entry(target, folder, Manifest.from_record(record), False)


class Unusable(ToolchainError):
    """An entry whose artifact matches its manifest and still cannot be used (a library that does not load):
    the message says what to do; ``reason`` says what went wrong, for the warning when it is made again."""

    def __init__(self, message: str, reason: str = ""):
        super().__init__(message, reason)
        self.reason = reason

    def __str__(self) -> str:
        return self.args[0]


def discard(name: str, root: Path | None = None) -> None:
    """Empty the entry ``name`` (one whose artifact matched its manifest and still proved unusable, such as
    a library that does not load), under its lock, so the next :func:`find_or_make` makes it again; a
    process rebuilding it meanwhile is waited for, never emptied under."""
    root = root or config.cache_dir()
    with locks.build_lock(name, root):
        reset_dir(entry_dir(name, root))


def reset_dir(folder: Path) -> None:
    """Remove an unfinished or corrupt build folder and make it anew, empty."""
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
    cachedir.make_dirs(folder)
