"""nvcc's own shell: what must never reach it.

nvcc runs each step of a compile (the host preprocessor, cicc, ptxas, fatbinary) with ``system()``, every
argument inside double quotes, where a backtick still runs a command (``$`` it escapes, a ``"`` it refuses).
A snippet's folder reaches those command lines as ``-I``, a cache folder as the files' paths; so every nvcc
jitlab runs goes through :func:`run_nvcc`, and torch's ninja build (whose rules run nvcc) is refused what
would reach it (:mod:`jitlab.jit.engines.ninja`).
"""

from __future__ import annotations

import os
import subprocess

from jitlab import config
from jitlab.errors import ToolchainError
from jitlab.jit import processes

#: What nvcc's shell reads as code inside its double quotes.
NVCC_SHELL_CODE = "`"
_INCLUDE = ("-I", "--include-path=")


def run_nvcc(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, ...)`` for an nvcc command (through :func:`jitlab.jit.processes.run`), with
    nothing on nvcc's own command lines that its shell would run.

    An include folder (``-I``) whose path holds a backtick reaches the host preprocessor through ``CPATH``
    instead (searched as ``-I`` is, after the others, read from the environment and never from a command
    line); the files it reads are listed, and errors in them named, by their real paths.

    Raises:
        ToolchainError: Another argument (a cache folder's path, a flag) holds a backtick, naming the fix.
    """
    args, moved = [], []
    words = iter(cmd)
    for arg in words:
        if arg in ("-I", "--include-path"):
            arg += next(words, "") if arg == "-I" else "=" + next(words, "")
        prefix = next((p for p in _INCLUDE if arg.startswith(p)), None)
        if NVCC_SHELL_CODE not in arg:
            args.append(arg)
        elif prefix and os.pathsep not in arg[len(prefix):]:
            moved.append(arg[len(prefix):])
        else:
            raise nvcc_shell_code_error(arg)
    env = dict(kwargs.pop("env", None) or os.environ)
    if moved:
        env["CPATH"] = os.pathsep.join([*moved, *filter(None, [env.get("CPATH")])])
    return processes.run(args, env=env, **kwargs)


def nvcc_shell_code_error(arg: str) -> ToolchainError:
    """The error for an nvcc argument holding a backtick, naming the fix (a cache setting, or a rename)."""
    roots = [str(config.cache_dir()), str(config.pch_dir())]
    fix = ("set JITLAB_CACHE_DIR (and JITLAB_PCH_DIR) to a folder whose path has no backtick"
           if any(r in arg for r in roots) else "rename the folder without it, or take it out of the flag")
    return ToolchainError(f"jitlab: nvcc runs its steps through a shell, which would run the backtick (`) in "
                          f"{arg!r} as a command; {fix}")
