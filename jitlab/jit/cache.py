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

A process waiting for another's build says whom it waits for and gives up after
``$JITLAB_LOCK_TIMEOUT`` seconds (a builder stopped with Ctrl-Z holds its lock for ever). A cache that
cannot be written (read-only, a file in the way, a full disk) is a :class:`~jitlab.errors.CacheError`
naming the fix; a build that ran out of space is removed, so it holds no space the user must free.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import hashlib
import json
import os
import pwd
import re
import shutil
import socket
import stat
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from jitlab import config
from jitlab.errors import CacheError

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
    """The folder of one build, in a cache folder this user may trust (:func:`trusted_root`)."""
    return trusted_root(root or config.cache_dir()) / name


def trusted_root(root: Path) -> Path:
    """``root``, once it is known that only this user (or the team named by ``JITLAB_CACHE_GROUP``) can
    write it: a build in a folder another user can write could run their code in this process.

    A folder that does not exist yet is fine: jitlab makes it, as this user.

    Raises:
        CacheError: The folder belongs to another user, or others (or a group not named) may write it.
    """
    try:
        st = os.stat(root)
    except OSError:
        return root
    problem = _untrusted(st)
    if problem:
        raise CacheError(f"jitlab: will not use the cache folder {root}: {problem}; a build planted there would "
                         f"run in your process. Use a folder of your own (set {_setting_for(root)}), or for a "
                         f"team cache make it group-owned and not world-writable and set JITLAB_CACHE_GROUP to "
                         f"that group")
    return root


def _untrusted(st: os.stat_result) -> str:
    """Why a file or folder with this status cannot be trusted, or ``""``."""
    team = _team_gid()
    if st.st_mode & stat.S_IWOTH:
        return "anyone may write it (mode {:o})".format(stat.S_IMODE(st.st_mode))
    if st.st_uid != os.geteuid() and not (team is not None and st.st_gid == team and _in_team(st.st_uid, team)):
        return f"it belongs to {_user(st.st_uid)}, not to you"
    if st.st_mode & stat.S_IWGRP and st.st_gid != team and st.st_gid not in _own_private_groups():
        return f"group {_group(st.st_gid)} may write it (JITLAB_CACHE_GROUP names no such team)"
    return ""


def _team_gid() -> int | None:
    name = config.getenv("JITLAB_CACHE_GROUP")
    if not name:
        return None
    try:
        return grp.getgrnam(name).gr_gid
    except KeyError:
        raise CacheError(f"JITLAB_CACHE_GROUP={name!r}: no such group on this machine (`getent group` lists them)") from None


def _in_team(uid: int, gid: int) -> bool:
    try:
        user = pwd.getpwuid(uid)
    except KeyError:
        return False
    return user.pw_gid == gid or user.pw_name in grp.getgrgid(gid).gr_mem


def _own_private_groups() -> set[int]:
    """The user's own group when no one else is in it (Debian's user private groups: umask 002 is safe)."""
    gid = os.getegid()
    try:
        g = grp.getgrgid(gid)
    except KeyError:
        return set()
    return {gid} if not g.gr_mem or g.gr_mem == [pwd.getpwuid(os.geteuid()).pw_name] else set()


def _user(uid: int) -> str:
    try:
        return f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(folder: Path) -> dict | None:
    """The manifest of a complete build, or ``None`` (missing or unreadable is a miss, never a crash).

    Raises:
        CacheError: The entry belongs to someone this user does not trust (see :func:`trusted_root`).
    """
    try:
        problem = _untrusted(os.stat(folder))
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


def write_manifest(folder: Path, data: dict) -> None:
    """Write the manifest atomically: it marks the build complete."""
    write_json(folder / MANIFEST, {"format": config.FORMAT_VERSION, **data})


def write_json(path: Path, data: dict) -> None:
    """Write a JSON file atomically (temp file beside it, fsync, ``os.replace``): readers see the old
    file or the whole new one, never a part."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def verify_artifact(folder: Path, manifest: dict, content: bool = True) -> str | None:
    """Why the manifest's artifact cannot be trusted, or ``None`` if it matches its recorded size and
    (with ``content``) hash."""
    name = manifest.get("artifact")
    if not isinstance(name, str) or not name or Path(name).name != name or name in (".", ".."):
        return f"its artifact {name!r} is not a file of the build's own folder"
    art = folder / name
    if art.is_symlink() or not art.is_file():
        return f"{art.name or 'artifact'} is missing"
    if art.stat().st_size != manifest.get("size"):
        return f"{art.name} has {art.stat().st_size} bytes, expected {manifest.get('size')}"
    if content and file_sha256(art) != manifest.get("sha256"):
        return f"{art.name} does not match its recorded hash"
    return None


def trusted_manifest(folder: Path, content: bool = True) -> dict | None:
    """The manifest of a complete entry whose artifact matches it, else ``None`` (make it again)."""
    manifest = read_manifest(folder)
    if manifest is None or verify_artifact(folder, manifest, content):
        return None
    return manifest


#: Seconds between a waiting build's reports of whom it waits for.
LOCK_REPORT_EVERY = 10.0
_LOCK_POLL = 0.1  # seconds between tries of a held lock


@contextlib.contextmanager
def build_lock(name: str, root: Path | None = None, on_wait=None, timeout: float | None = None):
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
        if not _try_lock(f):
            if on_wait:
                on_wait()
            _wait_for_lock(f, path, timeout)
        try:
            _claim(f)
            with writing(root / name, discard=True):
                yield
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
    return os.fdopen(fd, "r+")


def _try_lock(f) -> bool:
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _wait_for_lock(f, path: Path, timeout: float) -> None:
    """Take the lock once its holder lets go, saying whom we wait for; ``CacheError`` after ``timeout`` s."""
    t0 = time.monotonic()
    next_report = t0
    while not _try_lock(f):
        now = time.monotonic()
        if now - t0 >= timeout:
            raise CacheError(_lock_timeout_message(path, lock_holder(path), now - t0))
        if now >= next_report:
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


_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
_FULL = (errno.ENOSPC, errno.EDQUOT)
_NO_SPACE_TEXT = ("No space left on device", "Disk quota exceeded")
_LOW_SPACE = 1 << 20  # bytes: nothing builds in less


@contextlib.contextmanager
def writing(where: Path, discard: bool = False):
    """The body, with a failure to write ``where`` raised as a :class:`CacheError` naming the fix.

    Covers an ``OSError`` (read-only, permissions, a file in the way, a full disk) and a build that
    failed because the disk filled up (its compiler or linker says so, or the disk has under 1 MiB
    left). ``discard=True`` removes ``where`` (a half-written build) when the disk is full.
    """
    try:
        yield
    except CacheError:
        raise
    except OSError as e:
        error = unwritable(where, e)
        if error is None:
            raise
        if discard and e.errno in _FULL:
            shutil.rmtree(where, ignore_errors=True)
        raise error from e
    except Exception as e:  # a compiler or linker that could not write its output
        said = f"{e}\n{getattr(e, 'log', '')}"
        if not (any(t in said for t in _NO_SPACE_TEXT) or _free_bytes(where) < _LOW_SPACE):
            raise
        if discard:
            shutil.rmtree(where, ignore_errors=True)
        first = said.strip().splitlines()[0].removeprefix("jitlab: ") if said.strip() else type(e).__name__
        raise disk_full(where, _first_line_with(said, _NO_SPACE_TEXT) or first) from e


def unwritable(where: Path, e: OSError) -> CacheError | None:
    """The :class:`CacheError` for an ``OSError`` met writing ``where``, or ``None`` if it is another failure."""
    setting = _setting_for(where)
    if e.errno in _FULL:
        return disk_full(where, e.strerror or str(e))
    if e.errno in (errno.EEXIST, errno.ENOTDIR):
        blocker = _file_in_the_way(Path(e.filename) if e.filename else where)
        if blocker is not None:
            return CacheError(f"jitlab: cannot use {where} as a build cache: {blocker} is a file, not a folder; "
                              f"move that file away, or set {setting} to a folder")
        return None
    if e.errno in _READ_ONLY:
        what = "is on a read-only file system" if e.errno == errno.EROFS else "is not writable by this user"
        return CacheError(f"jitlab: the build cache {_cache_root(where)} {what} ({e.strerror}: {e.filename}); "
                          f"builds already in it still load, a new one needs a writable cache: set {setting} to "
                          f"a writable folder")
    return None


def disk_full(where: Path, said: str) -> CacheError:
    """The :class:`CacheError` of a build that ran out of disk space in ``where``."""
    return CacheError(f"jitlab: no space left on the disk holding {_cache_root(where)} "
                      f"({_free_bytes(where) // 1024} KiB free) while writing {where} ({said.strip()}); "
                      f"free disk space there (`jitlab clean` deletes cached builds, `df -h {_cache_root(where)}` "
                      f"shows the disk), or set {_setting_for(where)} to a folder on a disk with room")


def _first_line_with(text: str, words: tuple[str, ...]) -> str:
    return next((ln.strip() for ln in text.splitlines() if any(w in ln for w in words)), "")


def _free_bytes(where: Path) -> int:
    """Free bytes on the disk holding ``where`` (its nearest existing folder); large if unknown."""
    for p in (where, *where.parents):
        if p.is_dir():
            try:
                return shutil.disk_usage(p).free
            except OSError:
                break
    return 1 << 62


def _file_in_the_way(path: Path) -> Path | None:
    """The file (not folder) at ``path`` or at its nearest existing ancestor, if there is one."""
    for p in (path, *path.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def _cache_root(where: Path) -> Path:
    """The cache folder (build cache or precompiled headers) that ``where`` lies in."""
    for root in (config.pch_dir(), config.cache_dir()):
        if where == root or root in where.parents:
            return root
    return where


def _setting_for(where: Path) -> str:
    """The variable that moves the cache ``where`` lies in."""
    pch = config.pch_dir()
    if config.getenv("JITLAB_PCH_DIR") and (where == pch or pch in where.parents):
        return "JITLAB_PCH_DIR"
    return "JITLAB_CACHE_DIR"


def reset_dir(folder: Path) -> None:
    """Remove an unfinished or corrupt build folder and make it anew, empty."""
    if folder.exists():
        shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)


#: The Cache Directory Tagging Specification's tag (backup tools skip a tagged folder). jitlab writes it
#: into a cache folder it creates; ``clean`` reads it as "unfinished builds here are jitlab's too".
TAG = "CACHEDIR.TAG"
TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
            "# A jitlab build cache (https://bford.info/cachedir/): `jitlab clean` deletes only what jitlab made here.\n")
#: A build folder's name: ``<snippet>_<key>``, ``<unit>-<key>`` (objects), ``<kind>-<set>-<key>`` (headers).
_ENTRY_NAME = re.compile(r"^[\w.+-]+[_-][0-9a-f]{16}$")


def make_root(root: Path) -> None:
    """Create the cache folder ``root`` if it is missing; one jitlab creates carries the cache tag."""
    if root.is_dir():
        return
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        fd = os.open(root / TAG, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(TAG_TEXT)


def is_tagged(root: Path) -> bool:
    """Whether ``root`` carries jitlab's cache tag (a folder jitlab created as a cache)."""
    try:
        return (root / TAG).read_text().startswith(TAG_TEXT.splitlines()[0])
    except OSError:
        return False


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
    return bool(_ENTRY_NAME.match(folder.name)) and (tagged or (folder.parent / f"{folder.name}.lock").is_file())


def entries(root: Path | None = None) -> list[tuple[Path, dict | None]]:
    """Every build folder jitlab made in ``root`` with its manifest (``None`` if unfinished), newest first."""
    root = root or config.cache_dir()
    if not root.is_dir():
        return []
    tagged = is_tagged(root)
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
    object cache inside is cleaned by the same rule; the precompiled torch headers (minutes to make
    again) only with ``headers=True``. Builds whose lock another process holds are left alone.

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
    with writing(root):
        for folder, _ in builds:
            if older_than_s is not None and now - folder.stat().st_mtime < older_than_s:
                continue
            lock = root / f"{folder.name}.lock"
            with open_lock(lock) as f:
                if not _try_lock(f):
                    done.busy += 1
                    continue
                shutil.rmtree(folder)
                done.removed += 1
            lock.unlink(missing_ok=True)
    tagged = is_tagged(root)
    done.left = sorted(p for p in root.iterdir()
                       if p.name not in (*SUBCACHES, TAG, "README.md") and not p.name.startswith(".")
                       and not made_by_jitlab(p, tagged) and not (p.suffix == ".lock" and _ENTRY_NAME.match(p.stem)))
    return done
