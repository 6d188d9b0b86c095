"""What the compilers and the machine say about themselves (versions, archs, GPUs), asked once and remembered
across processes.

A new process would otherwise start the compilers four times before it can decide a cache hit
(``nvcc --version``, ``c++ --version``, ``nvcc --list-gpu-code``, ``c++ -print-file-name``): milliseconds each
from a process that has loaded torch, more than the rest of a kernel-only hit. An answer is kept in the
build cache's ``.versions`` file under the tool's :func:`identity` (resolved path, size, mtime), the
arguments and the values of the environment variables that change what the tool reads: a tool replaced,
rebuilt or touched, or another setting, is asked again. The file is read once per process, only when this
user may trust it (:func:`jitlab.jit.cachedir.untrusted`), and written atomically; one that cannot be read
or written costs only the questions. :func:`remembered` keeps answers that are not a tool's output the
same way (NVRTC's version, the GPUs torch sees), each with what it depends on.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

from jitlab import config
from jitlab.jit import cachedir

#: The file in the build cache that holds the answers.
FILE = ".versions"
#: Answers the file keeps (the newest): a few per toolchain.
KEPT = 64


def run(cmd: list[str]) -> str:
    """What ``cmd`` prints on stdout; ``""`` if it cannot run."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def identity(tool: str | None) -> str:
    """What a compiler binary is: its resolved path, size and mtime (``--version`` alone misses a
    wrapper script that adds flags, or a second toolkit of the same release at another path)."""
    if not tool:
        return "none"
    real = os.path.realpath(tool)
    try:
        st = os.stat(real)
    except OSError:
        return real
    return f"{real} {st.st_size} {st.st_mtime_ns}"


def asked(tool: str, args: tuple[str, ...], env: tuple[str, ...] = ()) -> str:
    """What ``tool args`` prints, from the answers file when this tool (same :func:`identity`) was asked the
    same with the same ``env`` variables' values; else asked now and kept."""
    key = " | ".join([identity(tool), *args, *(f"{v}={os.environ.get(v, '')}" for v in env)])
    answers = _answers(_file())
    if key not in answers:
        answers[key] = run([tool, *args])
        _keep(_file(), answers)
    return answers[key]


def remembered(name: str, probe: Callable[[], Any], check: Callable[[Any], list | None]) -> Any:
    """``probe()``'s answer, read from the answers file while ``check(answer)`` is what it was when the answer
    was kept; otherwise probed now and kept.

    ``check`` gives ``None`` where it cannot tell what the answer depends on: then nothing is kept. A ``None``
    answer (nothing found) is not kept either, so a library installed later is found. The answer is given as
    JSON gives it back (tuples become lists), whether read or probed.
    """
    key = f"{name} (remembered)"
    answers = _answers(_file())
    try:
        seen = json.loads(answers[key])
    except (KeyError, ValueError):
        seen = None
    if isinstance(seen, dict) and "answer" in seen:
        now = _plain(check(seen["answer"]))
        if now is not None and now == seen.get("check"):
            return seen["answer"]
    answer = _plain(probe())
    if answer is not None and (now := _plain(check(answer))) is not None:
        answers.pop(key, None)  # the newest last: KEPT keeps it
        answers[key] = json.dumps({"answer": answer, "check": now})
        _keep(_file(), answers)
    return answer


def _plain(value: Any) -> Any:
    """``value`` as JSON reads it back: how a remembered answer or check is compared and returned."""
    return json.loads(json.dumps(value))


def _file() -> Path:
    return config.cache_dir() / FILE


@functools.cache
def _answers(path: Path) -> dict[str, str]:
    """The answers file's contents (``{}`` when missing, unreadable, or not this user's to trust)."""
    try:
        st = os.lstat(path)
        if not stat.S_ISREG(st.st_mode) or cachedir.untrusted(st) or cachedir.untrusted(os.stat(path.parent)):
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def save() -> None:
    """Write the answers asked before the build cache existed, now that a build has made it (the cache calls
    this after making an entry)."""
    for path in list(_unsaved):
        if path.parent.is_dir():
            _keep(path, _answers(path))


#: Answers files whose answers are not written yet: their folder did not exist when they were asked.
_unsaved: set[Path] = set()


def _keep(path: Path, answers: dict[str, str]) -> None:
    """Write the newest :data:`KEPT` answers atomically, into a cache folder a build has made (never making one
    itself: until a build does, :func:`save` waits); a cache that cannot be written, or that this user may not
    trust (the build will refuse it, :func:`jitlab.jit.cachedir.untrusted`), keeps none."""
    tmp = None
    if not path.parent.is_dir():
        _unsaved.add(path)
        return
    _unsaved.discard(path)
    try:
        if cachedir.untrusted(os.stat(path.parent)):
            return
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".versions-", suffix=".tmp")
        cachedir.share(Path(tmp), fd)
        with os.fdopen(fd, "w") as f:
            json.dump(dict(list(answers.items())[-KEPT:]), f, indent=1)
        os.replace(tmp, path)
    except OSError:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
