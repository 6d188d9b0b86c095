"""Configuration in one place: environment variables, cache location, format version."""

from __future__ import annotations

import functools
import os
from pathlib import Path

from jitlab.errors import CacheError, LaunchError

#: Bumped whenever generated code or the cache layout changes; part of every build key.
VERSION = "0.1.0"  # the package's version (jitlab.__version__)
#: The folder that holds the jitlab package (a checkout's root, or site-packages): child processes
#: get it first on PYTHONPATH so they import this jitlab.
SOURCE_ROOT = Path(__file__).resolve().parent.parent
FORMAT_VERSION = 4

#: Extensions jitlab treats as sources and headers when given a folder.
CUDA_EXTS = (".cu",)
CPP_EXTS = (".cpp", ".cc", ".cxx")
HEADER_EXTS = (".h", ".cuh", ".hpp", ".hh", ".inl")
SOURCE_EXTS = CUDA_EXTS + CPP_EXTS


def getenv(name: str, default: str = "") -> str:
    """Read a ``JITLAB_*`` setting (the one place environment variables are read)."""
    return os.environ.get(name, default)


def cache_dir() -> Path:
    """The build cache: ``$JITLAB_CACHE_DIR``, else ``build_cache/`` in the project or working dir.

    The project's ``build_cache/`` is used when jitlab runs from a checkout; an installed jitlab
    used elsewhere caches under the current directory's ``build_cache/``.
    """
    env = getenv("JITLAB_CACHE_DIR")
    if env:
        return _resolved(env, os.getcwd())
    if (SOURCE_ROOT / "build_cache").is_dir() and (SOURCE_ROOT / "jitlab").is_dir():
        return SOURCE_ROOT / "build_cache"
    return Path.cwd() / "build_cache"


@functools.lru_cache(maxsize=16)
def _resolved(path: str, cwd: str) -> Path:
    """``path`` made absolute (from ``cwd``) with its links resolved: once per setting and working folder, since a
    build asks for its cache folder about ten times (~0.1 ms each)."""
    return (Path(cwd) / Path(path).expanduser()).resolve()


def pch_dir() -> Path:
    """Where precompiled torch headers live, with jitlab's other once-per-toolchain builds (its binder, the CPU
    emulator's runtime): ``$JITLAB_PCH_DIR``, else ``pch/`` in the build cache.

    One header is ~0.8 GB and takes a minute to make on 2 cores, so processes that use separate
    build caches (a test suite with a fresh cache per test) can share one folder of them.
    """
    env = getenv("JITLAB_PCH_DIR")
    return Path(env).expanduser().resolve() if env else cache_dir() / "pch"


#: Archs a CUDA snippet is compile-checked for where no GPU says which one (``jitlab run`` without
#: a GPU, the playground's Build): Colab's T4, the A100, the H100.
DEFAULT_ARCHS = ("sm_75", "sm_80", "sm_90")
#: Seconds an isolated check may run before its worker is stopped (an endless loop, a deadlock).
CHECK_TIMEOUT = 60.0

#: Seconds a build waits for another process holding the same build's lock, unless
#: ``$JITLAB_LOCK_TIMEOUT`` says otherwise (``inf`` waits for ever).
DEFAULT_LOCK_TIMEOUT = 600.0


def lock_timeout() -> float:
    """How long a build waits for another process's build of the same key: ``$JITLAB_LOCK_TIMEOUT``
    seconds, default :data:`DEFAULT_LOCK_TIMEOUT` (a cold torch-style build with its precompiled
    headers takes a few minutes on 2 cores).

    Raises:
        CacheError: The variable is not a number.
    """
    return _seconds("JITLAB_LOCK_TIMEOUT", DEFAULT_LOCK_TIMEOUT, CacheError, "600 (or inf to wait for ever)")


#: Seconds one CPU-emulator launch may run before it stops at the line it was on, unless
#: ``$JITLAB_EMULATOR_TIMEOUT`` says otherwise (``0``: no limit).
DEFAULT_EMULATOR_TIMEOUT = 60.0


def emulator_timeout() -> float:
    """How long one CPU-emulator launch may run: ``$JITLAB_EMULATOR_TIMEOUT`` seconds (0: no limit), default
    :data:`DEFAULT_EMULATOR_TIMEOUT`.

    Raises:
        LaunchError: The variable is not a number.
    """
    return _seconds("JITLAB_EMULATOR_TIMEOUT", DEFAULT_EMULATOR_TIMEOUT, LaunchError, "60 (0 for no limit)")


def _seconds(variable: str, default: float, error: type, example: str) -> float:
    """``$variable`` as seconds (at least 0), ``default`` when unset; ``error`` naming an example when not a number."""
    raw = getenv(variable)
    if not raw.strip():
        return default
    try:
        return max(0.0, float(raw))
    except ValueError:
        raise error(f"{variable}={raw!r} is not a number of seconds; set it to one, e.g. {variable}={example}") from None


def cores() -> int:
    """The CPU cores this process may use (its affinity: ``taskset``, a container's cpuset), not the machine's."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def prepare_headers() -> bool:
    """Whether a notebook that loads jitlab starts precompiling torch's headers in the background
    (:mod:`jitlab.jit.prepare`): yes unless ``JITLAB_PREPARE_HEADERS=0`` (or ``off``, ``no``, ``false``)."""
    return getenv("JITLAB_PREPARE_HEADERS", "1").strip().lower() not in ("0", "off", "no", "false")


def verbose() -> bool:
    """``JITLAB_VERBOSE=1`` prints each build's compiler output (commands, warnings, resource usage)."""
    return getenv("JITLAB_VERBOSE") not in ("", "0")
