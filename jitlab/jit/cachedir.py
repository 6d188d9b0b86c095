"""The cache folder itself: whose it is, its tag, and the errors of writing it.

A build cache (``$JITLAB_CACHE_DIR``) or header folder (``$JITLAB_PCH_DIR``) is trusted only when this
user owns it and no one else may write it (or a team named by ``$JITLAB_CACHE_GROUP`` does): a build
planted in it would run in the user's process. In a team's cache, what jitlab creates is the team's
to read and write (:func:`share`), whatever the umask. A folder jitlab creates carries ``CACHEDIR.TAG``.
A folder that cannot be written (read-only, a file in the way, a full disk) is a :class:`CacheError`
naming the fix.
"""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import pwd
import re
import shutil
import stat
from pathlib import Path

from jitlab import config
from jitlab.errors import CacheError

#: The Cache Directory Tagging Specification's tag (backup tools skip a tagged folder). jitlab writes it
#: into a cache folder it creates; ``clean`` reads it as "unfinished builds here are jitlab's too".
TAG = "CACHEDIR.TAG"
TAG_TEXT = ("Signature: 8a477f597d28d172789f06886806bc55\n"
            "# A jitlab build cache (https://bford.info/cachedir/): `jitlab clean` deletes only what jitlab made here.\n")
#: A build folder's name: ``<snippet>_<key>``, ``<unit>-<key>`` (objects), ``<kind>-<set>-<key>`` (headers).
ENTRY_NAME = re.compile(r"^[\w.+-]+[_-][0-9a-f]{16}$")


def make_root(root: Path) -> None:
    """Create the cache folder ``root`` if it is missing; one jitlab creates carries the cache tag."""
    if root.is_dir():
        return
    make_dirs(root)
    with contextlib.suppress(OSError):
        fd = os.open(root / TAG, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        share(root / TAG, fd)
        with os.fdopen(fd, "w") as f:
            f.write(TAG_TEXT)


def make_dirs(folder: Path) -> None:
    """``folder.mkdir(parents=True, exist_ok=True)``, each folder made shared as :func:`share` says."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    folder.mkdir(parents=True, exist_ok=True)
    for p in reversed(missing):
        share(p)


def share(path: Path, fd: int | None = None) -> None:
    """Give a file or folder jitlab just made its folder's group access, when that folder is the team's.

    A team cache is a folder group-owned by the group ``JITLAB_CACHE_GROUP`` names (usually setgid, mode
    2775): every member builds, locks and replaces entries in it, so what one member creates must be
    writable by the next, whatever that member's umask. A file gets the folder's group read and write
    bits (execute where its owner has it), a folder all of them; the setgid bit a folder inherits keeps the
    group. Outside a team's folder, and for a link, nothing changes: the umask rules.

    Args:
        path: What was made (a file, or a folder).
        fd: Its open descriptor, when there is one (changed through it, never through a path a link replaced).
    """
    if not config.getenv("JITLAB_CACHE_GROUP"):
        return
    team = _team_gid()
    try:
        folder = os.stat(path.parent)
        st = os.fstat(fd) if fd is not None else os.lstat(path)
        if folder.st_gid != team or stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
            return
        group = stat.S_IMODE(folder.st_mode) & 0o070
        if not stat.S_ISDIR(st.st_mode):
            group &= 0o060 | ((st.st_mode & stat.S_IXUSR) >> 3)
        mode = stat.S_IMODE(st.st_mode)
        if mode | group != mode:
            if fd is not None:
                os.fchmod(fd, mode | group)
            else:
                os.chmod(path, mode | group, follow_symlinks=False)
    except (OSError, NotImplementedError):
        return  # best effort: the member who needs it is told the file is not writable, with the fix


def share_tree(folder: Path) -> None:
    """:func:`share` ``folder`` and everything in it (a build's files, as its compilers left them)."""
    share(folder)
    for top, dirs, files in os.walk(folder):
        for name in [*dirs, *files]:
            share(Path(top) / name)


def is_tagged(root: Path) -> bool:
    """Whether ``root`` carries jitlab's cache tag (a folder jitlab created as a cache)."""
    try:
        return (root / TAG).read_text().startswith(TAG_TEXT.splitlines()[0])
    except OSError:
        return False


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
    problem = untrusted(st)
    if problem:
        raise CacheError(f"jitlab: will not use the cache folder {root}: {problem}; a build planted there would "
                         f"run in your process. Use a folder of your own (set {_setting_for(root)}), or for a "
                         f"team cache make it group-owned and not world-writable and set JITLAB_CACHE_GROUP to "
                         f"that group")
    return root


def untrusted(st: os.stat_result) -> str:
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
