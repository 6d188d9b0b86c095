"""What a build read: the files its compiler reports, stamped when it finished, checked on every hit.

The build key is known before compiling, the files the compiler reads only after: an ``#include``
inside a function body or an initializer list, a computed ``#include CFG``, ``-include`` in the
flags, a header found through ``CPATH``, a library named in ``ldflags``. So, as ccache's direct mode
and ninja's depfiles do, each entry's manifest records those files (gcc's and nvcc's ``-MD -MF``,
ninja's ``-t deps``, for NVRTC a reading of every ``#include`` line), each as a :class:`Stamp`; a hit needs all of them unchanged
(:func:`unchanged`). The toolchain's own headers (CUDA, torch, the system's) are not stamped: the
toolchain's fingerprint in the key stands for them (:func:`worth_checking`).

A file that moved while its build ran makes the entry unusable, never wrong (:func:`stamp`).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shlex
import subprocess
import sys
import sysconfig
from dataclasses import astuple, dataclass
from pathlib import Path

from jitlab import config
from jitlab.jit import ninja_tool, nvcc_shell, toolchain

#: A file written less than this before its build started may have been written during it: the
#: kernel stamps files with a clock that lags the real one by up to a tick (4-10 ms).
CLOCK_SLACK_NS = 20_000_000


@dataclass(frozen=True)
class Stamp:
    """One file a build read, as it was when the build finished.

    Attributes:
        path: Absolute path.
        size: Bytes.
        mtime_ns: Modification time; equal size and mtime mean unchanged without reading it.
        sha256: The content's hash: a file touched or copied back unchanged is still the same.
    """

    path: str
    size: int
    mtime_ns: int
    sha256: str


def file_sha256(path) -> str:
    """SHA-256 of a file's bytes (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def stamp(paths, started_ns: int, known: dict[str, str], keep=(), own: Path | None = None,
          skip=()) -> list[list] | None:
    """The stamps of the files a build read, for its manifest; ``None`` when one moved during the build.

    Args:
        paths: What the compiler reports it read (absolute, or relative to ``own``).
        started_ns: ``time.time_ns()`` when the build started.
        known: Path → SHA-256 of files hashed for the key before the build: they must still hash so.
        keep: Folders whose files are always stamped (the snippet's and the user's include folders).
        own: The build's folder: its files are the build's own copies, covered by the key.
        skip: The snippet's own sources: the key holds their text (nvcc lists the files its ``#line``
            directives name, which the build never opened).

    Returns:
        ``[path, size, mtime_ns, sha256]`` rows, or ``None``: a file the key hashed changed, or one
        the key could not know of was written after the build started, so what the compiler read is
        unknown; the entry is then never a hit (the next build compiles again). The artifacts of object-
        cache entries this build made or found (a torch-style NVRTC build's linked module and CUBINs) are
        stamped however new: such an entry is written once and never changes.
    """
    rows = []
    skipped = {os.path.realpath(p) for p in skip}
    objects = os.path.realpath(config.cache_dir() / "objects") + os.sep  # engines.objects.objects_root()
    for path in (p for p in worth_checking(paths, keep, own) if p not in skipped):
        try:
            st = os.stat(path)
            digest = file_sha256(path)
        except OSError:
            return None  # deleted during the build
        if path in known:
            if known[path] != digest:
                return None
        elif st.st_mtime_ns > started_ns - CLOCK_SLACK_NS and not path.startswith(objects):
            return None  # (an object-cache entry is written once, whole, under its key's lock: never moving)
        rows.append(list(astuple(Stamp(path, st.st_size, st.st_mtime_ns, digest))))
    return rows


def unchanged(rows) -> bool:
    """Whether every stamped file is as recorded (``None``: an entry whose inputs moved, never a hit).

    A file whose size and mtime match is not read; one whose mtime moved is hashed, so a touch or a
    revert by copy still hits. A malformed record is a miss, never a crash.
    """
    if rows is None:
        return False
    try:
        for path, size, mtime_ns, digest in rows:
            st = os.stat(path)
            if st.st_size != size:
                return False
            if st.st_mtime_ns != mtime_ns and file_sha256(path) != digest:
                return False
    except (OSError, TypeError, ValueError):
        return False
    return True


def _toolchain_roots() -> tuple[str, ...]:
    """Folders whose files the toolchain's fingerprint stands for (and jitlab's own: its version does)."""
    return _roots(toolchain.cuda_home(), toolchain.nvcc_path(), config.pch_dir())


@functools.cache
def _roots(cuda_home: Path, nvcc: str | None, pch: Path) -> tuple[str, ...]:
    """:func:`_toolchain_roots` for these settings, once per process (every edit stamps with them): each folder
    resolved, and as it is named (a venv reached through a link), so that a path is left by its name alone."""
    import torch

    roots = [cuda_home, Path(torch.__file__).parent, Path(sysconfig.get_path("include")),
             Path(sys.base_prefix) / "include", Path("/usr/include"), Path("/usr/lib"), Path("/usr/local/cuda"),
             Path(__file__).parent, pch]
    toolkit = Path(nvcc).resolve().parent.parent if nvcc else None
    if toolkit and (toolkit / "include" / "cuda_runtime.h").is_file():  # not a wrapper script's folder (~/bin/nvcc)
        roots.append(toolkit)
    return tuple(dict.fromkeys([*(str(r.resolve()) + os.sep for r in roots),
                                *(os.path.normpath(str(r)) + os.sep for r in roots)]))


def worth_checking(paths, keep=(), own: Path | None = None) -> list[str]:
    """The files of ``paths`` a hit must check: absolute, existing, neither the toolchain's nor the build's own.

    A path inside the toolchain's folders by its name alone is left at once, without a system call: clang lists
    every header of its precompiled set (~2,500 of torch's), and resolving each cost a unit ~0.5 s.
    """
    roots = _toolchain_roots()
    keep = tuple(str(Path(k).resolve()) + os.sep for k in keep) + tuple(os.path.normpath(k) + os.sep for k in keep)
    own_prefix = str(own.resolve()) + os.sep if own else None
    out = []
    for p in paths:
        full = os.path.join(own, p) if own and not os.path.isabs(p) else p
        plain = os.path.normpath(full)
        if plain.startswith(roots) and not plain.startswith(keep):
            continue
        path = os.path.realpath(full)
        if not os.path.isfile(path) or (own_prefix and path.startswith(own_prefix)):
            continue
        if path.startswith(keep) or not path.startswith(roots):
            out.append(path)
    return list(dict.fromkeys(out))


def read_depfile(path: Path) -> list[str]:
    """The prerequisites of a make-style depfile (``-MD -MF``), escaped spaces kept; ``[]`` if none."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    text = text.replace("\\\n", " ")
    out = []
    for line in text.splitlines():
        _, sep, rest = line.partition(": ")
        if not sep:
            continue
        words = re.split(r"(?<!\\)\s+", rest.strip())
        out += [w.replace("\\ ", " ").replace("$$", "$") for w in words if w]
    return out


def ninja_deps(folder: Path) -> list[str]:
    """What ninja recorded each output read (torch's build.ninja has ``deps = gcc``: ninja keeps the
    depfiles in ``.ninja_deps`` and deletes them), as ``ninja -t deps`` lists it."""
    ninja = ninja_tool.ninja_path()
    if not ninja:
        return []
    proc = subprocess.run([ninja, "-t", "deps"], cwd=folder, capture_output=True, text=True)
    return [ln.strip() for ln in proc.stdout.splitlines() if ln.startswith((" ", "\t")) and ln.strip()]


_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>|([A-Za-z_]\w*))', re.MULTILINE)
_DEFINE = re.compile(r'^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+(?:"([^"\n]+)"|<([^>\n]+)>)', re.MULTILINE)


def scanned_includes(text: str, base: Path, folders, defines: dict) -> list[str] | None:
    """Every file an NVRTC compile of ``text`` can open, found by reading it as the preprocessor
    searches: each ``#include`` line wherever it stands (a function body, an initializer list, an
    ``#if`` branch: a file too many is a needless rebuild, never a stale one), a computed
    ``#include CFG`` through ``#define CFG "cfg.h"`` in the files read or in ``defines``.

    NVRTC 13 has no dependency output (and its ``-fdevice-time-trace``, which names the headers it
    opens, crashes the process after a few dozen programs), so this reads the text itself, in about
    a millisecond; the toolchain's headers are not read. ``None``: a computed include it cannot
    resolve (the caller asks ``nvcc -M``).
    """
    macros = {k: ("<" if str(v).startswith("<") else '"', str(v).strip('"<>')) for k, v in defines.items()
              if v and str(v)[:1] in '"<'}
    roots = _toolchain_roots()
    found: dict[str, None] = {}
    todo, pending = [(text, Path(base))], []
    while todo or pending:
        if not todo:  # computed includes, retried once every file read so far has defined its macros
            ready = [(b, macros[name]) for b, name in pending if name in macros]
            if not ready:
                return None
            pending = [(b, name) for b, name in pending if name not in macros]
            includes = [(b, kind, name) for b, (kind, name) in ready]
        else:
            text, here = todo.pop()
            for m in _DEFINE.finditer(text):
                macros.setdefault(m[1], ('"', m[2]) if m[2] else ("<", m[3]))
            includes = []
            for m in _INCLUDE.finditer(text):
                if m[3]:
                    pending.append((here, m[3]))
                else:
                    includes.append((here, '"' if m[1] else "<", m[1] or m[2]))
        for here, kind, name in includes:
            for d in ([here] if kind == '"' else []) + [Path(f) for f in folders]:
                path = os.path.realpath(d / name)
                if os.path.isfile(path):
                    if path not in found and not path.startswith(roots):
                        found[path] = None
                        todo.append((Path(path).read_text(errors="replace"), Path(path).parent))
                    break
    return list(found)


def ldflag_inputs(ldflags) -> list[str]:
    """The files ``ldflags`` link: archives, objects and libraries named by path, and ``-lname`` found
    in the ``-L`` folders given with them (``libname.so``, then ``libname.a``)."""
    ldflags = list(ldflags)
    dirs = [f[2:] for f in ldflags if f.startswith("-L") and len(f) > 2]
    out = []
    for f in ldflags:
        if f.startswith("-l") and len(f) > 2:
            name = f[2:]
            cands = [name[1:]] if name.startswith(":") else [f"lib{name}.so", f"lib{name}.a"]
            out += next(([os.path.join(d, c)] for d in dirs for c in cands if os.path.isfile(os.path.join(d, c))), [])
        elif not f.startswith("-") and os.path.isfile(f):
            out.append(os.path.abspath(f))
    return out


def preprocessor_deps(command: list[str], source: Path, folder: Path) -> list[str]:
    """Every file ``command`` (a compile command) reads for ``source``, system headers included: the
    command run as ``-M`` (preprocessing only), for compilers whose build wrote ``-MMD`` lists."""
    cmd = [c for c in command if c not in ("-c", "-MMD", "-MD")]
    out = folder / (source.name + ".all.d")
    run = nvcc_shell.run_nvcc if Path(cmd[0]).name == "nvcc" else subprocess.run  # nvcc's steps go through a shell
    proc = run([*cmd, "-M", "-MF", str(out), str(source)], cwd=folder, capture_output=True, text=True)
    return read_depfile(out) if proc.returncode == 0 else []


def ninja_cxx_command(folder: Path) -> list[str]:
    """The host compiler and its flags from torch's ``build.ninja`` in ``folder`` (``cxx`` and ``cflags``)."""
    values = {}
    try:
        for line in (folder / "build.ninja").read_text().splitlines():
            key, sep, value = line.partition(" = ")
            if sep and key in ("cxx", "cflags", "post_cflags"):
                values[key] = shlex.split(value.replace("$$", "$"))
    except (OSError, ValueError):
        return []
    return [*values.get("cxx", []), *values.get("cflags", []), *values.get("post_cflags", [])]
