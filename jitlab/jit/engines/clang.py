"""Clang for host units on precompiled torch header sets, where a ``clang++`` is found: the same units, a
fraction of GCC's time.

GCC writes a precompiled header before it instantiates the templates that the headers' inline functions use,
so every unit on a torch set instantiates them again: with GCC 12 on this 2-core VM an empty unit on the
`host` set costs 3.4 CPU-s, 3.1 of them template instantiation, whatever the unit holds. Clang's
``-fpch-instantiate-templates`` does that work once, in the set: the same empty unit costs 0.5 CPU-s and
``vector_add``'s host unit 1.3 against GCC's 4.9 (docs/benchmarks.md, "Host units with clang").

So a host unit that uses torch compiles with clang on clang's own set when one is found (:func:`path`). The
objects link with GCC's as before: one C++ runtime (libstdc++), one ABI. A unit that clang refuses, or a set
clang cannot make, is compiled by GCC as before (:mod:`jitlab.jit.engines.objects`): code GCC takes builds,
and a compile error is GCC's message, at the same line, as without clang.
"""

from __future__ import annotations

import functools
import os
import re
import shutil

from jitlab import config
from jitlab.jit import answers, toolchain

#: The oldest clang with ``-fpch-instantiate-templates``.
OLDEST = 11
#: Words of GCC's command lines that clang refuses and that mean nothing to it: ``-fno-gnu-unique`` (clang
#: never makes GNU unique symbols, which the flag turns off) and ``-Winvalid-pch`` (clang refuses a set it
#: cannot use, it never reads the header text instead).
GCC_ONLY = ("-fno-gnu-unique", "-Winvalid-pch")
_VERSION = re.compile(r"clang version (\d+)")


def path() -> str | None:
    """The clang++ host units use: ``$JITLAB_CLANG`` (a command or path; ``0``/``off`` for none), else
    ``clang++``, else the newest ``clang++-N`` on ``PATH``; one older than :data:`OLDEST` is none."""
    return _path(config.getenv("JITLAB_CLANG").strip(), os.environ.get("PATH", ""))


@functools.cache
def _path(asked: str, search: str) -> str | None:
    if asked.lower() in ("0", "off", "no", "false"):
        return None
    if asked:
        found = shutil.which(asked, path=search or None)
    else:
        found = shutil.which("clang++", path=search or None) or _newest(search)
    return found if found and _major(version(found)) >= OLDEST else None


def _newest(search: str) -> str | None:
    """The ``clang++-N`` with the largest N in the ``PATH`` folders."""
    best: tuple[int, str] | None = None
    for folder in (search or os.defpath).split(os.pathsep):
        try:
            names = os.listdir(folder or ".")
        except OSError:
            continue
        for name in names:
            m = re.fullmatch(r"clang\+\+-(\d+)", name)
            full = os.path.join(folder, name)
            if m and os.access(full, os.X_OK) and (best is None or int(m[1]) > best[0]):
                best = (int(m[1]), full)
    return best[1] if best else None


def version(clang: str) -> str:
    """The first line of ``clang --version`` (``Debian clang version 14.0.6``), asked once (:mod:`.answers`)."""
    return (answers.asked(clang, ("--version",), toolchain.COMPILER_ENV).splitlines() or [""])[0]


def _major(line: str) -> int:
    m = _VERSION.search(line)
    return int(m[1]) if m else 0


def fingerprint(clang: str) -> str:
    """What stands for this clang in a key: its version and :func:`jitlab.jit.answers.identity`."""
    return f"{version(clang)} @ {answers.identity(clang)}"


def words(flags) -> list[str]:
    """A GCC command line's flags as clang takes them: without :data:`GCC_ONLY`."""
    return [w for w in flags if w not in GCC_ONLY]
