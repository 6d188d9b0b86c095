"""jitlab: a JIT CUDA kernel playground for PyTorch.

Keep a kernel as a ``.cu`` snippet, call it with torch tensors, edit it, and get the new kernel back
in about a second, in the same process::

    import jitlab, torch
    k = jitlab.load("kernels/saxpy.cu")                     # kernel-only: no torch headers compiled
    k.saxpy(y, x, 2.0, n, grid=(n + 255) // 256, block=256)

    m = jitlab.load("kernels/square_matrix.cu")             # torch-style: the seeds' host functions
    y = m.square_matrix(x)

Builds land in ``build_cache/`` (``JITLAB_CACHE_DIR`` overrides it), one folder per build, named
by a key over everything that changes the binary; other processes reuse them.
"""

from __future__ import annotations

from jitlab import config
from jitlab.errors import (
    ArgumentError,
    CacheError,
    CompileError,
    FlagError,
    JitlabError,
    LaunchError,
    SnippetError,
    ToolchainError,
)
from jitlab.jit.api import build, clean, load, load_inline
from jitlab.jit.plan import Build
from jitlab.jit.flags import Options

__version__ = config.VERSION
__all__ = [
    "load", "load_inline", "build", "clean", "run_program", "check", "check_many", "bench", "ab", "roofline", "sanitize",
    "profile", "tune", "tuned", "playground", "Build", "Options", "Module",
    "JitlabError", "CompileError", "SnippetError", "ToolchainError", "LaunchError", "ArgumentError", "FlagError", "CacheError",
]


#: ``jitlab.exercises`` and ``from jitlab import inspect`` in the lessons: the modules behind them.
_PUBLIC_MODULES = {"exercises": "jitlab.notebook.exercises", "inspect": "jitlab.tools.inspect"}


def __getattr__(name):
    if name == "Module":
        from jitlab.jit.loader import Module

        return Module
    if name == "run_program":
        from jitlab.worker.execute import run_program

        return run_program
    if name == "check":
        from jitlab.worker.isolate import check

        return check
    if name == "bench":
        from jitlab.judge.benchmark import bench

        return bench
    if name == "sanitize":
        from jitlab.worker.sanitizer import sanitize

        return sanitize
    if name == "profile":
        from jitlab.worker.profiler import profile

        return profile
    if name == "roofline":
        from jitlab.judge.roofline import Chart

        return Chart
    if name == "tune":
        from jitlab.worker.tune import tune

        return tune
    if name == "tuned":  # the exported table's defines for a size: jitlab.load(p, defines=jitlab.tuned(p, n))
        from jitlab.judge.tunereport import best_defines

        return best_defines
    if name == "check_many":
        from jitlab.worker.batch import check_many

        return check_many
    if name == "ab":
        from jitlab.judge.timing import ab

        return ab
    if name in _PUBLIC_MODULES:  # modules the lessons use by their short public names
        import importlib

        return importlib.import_module(_PUBLIC_MODULES[name])
    if name == "playground":
        from jitlab.notebook.panel import playground

        return playground
    raise AttributeError(f"module 'jitlab' has no attribute {name!r}")




def load_ipython_extension(ipython):
    """``%load_ext jitlab``: the ``%%cuda`` and ``%%cpp`` cell magics."""
    from jitlab.notebook.magic import load_ipython_extension as _load

    _load(ipython)
