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
from jitlab.jit.plan import Build
from jitlab.jit.flags import Options

__version__ = config.VERSION
__all__ = [
    "load", "load_inline", "build", "clean", "run_program", "check", "check_many", "bench", "ab", "roofline", "sanitize",
    "profile", "tune", "tuned", "playground", "Build", "Options", "Module",
    "JitlabError", "CompileError", "SnippetError", "ToolchainError", "LaunchError", "ArgumentError", "FlagError", "CacheError",
]


#: The public names imported on first use, ``name: (module, attribute)``: ``import jitlab`` imports no torch
#: (3-4 s), so ``jitlab check`` starts torch's precompiled headers first (:mod:`jitlab.jit.torch_install`).
_LAZY = {
    "load": ("jitlab.jit.api", "load"), "load_inline": ("jitlab.jit.torch_compat", "load_inline"),
    "build": ("jitlab.jit.api", "build"), "clean": ("jitlab.jit.api", "clean"),
    "Module": ("jitlab.jit.loader", "Module"), "run_program": ("jitlab.worker.execute", "run_program"),
    "check": ("jitlab.worker.isolate", "check"), "bench": ("jitlab.judge.benchmark", "bench"),
    "sanitize": ("jitlab.worker.sanitizer", "sanitize"), "profile": ("jitlab.worker.profiler", "profile"),
    "roofline": ("jitlab.judge.roofline", "Chart"), "tune": ("jitlab.worker.tune", "tune"),
    # the exported table's defines for a size: jitlab.load(p, defines=jitlab.tuned(p, n))
    "tuned": ("jitlab.judge.tunereport", "best_defines"), "check_many": ("jitlab.worker.batch", "check_many"),
    "ab": ("jitlab.judge.timing", "ab"), "playground": ("jitlab.notebook.panel", "playground"),
    # modules the lessons use by their short public names (jitlab.exercises, from jitlab import inspect)
    "exercises": ("jitlab.notebook.exercises", None), "inspect": ("jitlab.tools.inspect", None),
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        value = importlib.import_module(module)
        value = getattr(value, attr) if attr else value
        globals()[name] = value  # found directly from now on
        return value
    raise AttributeError(f"module 'jitlab' has no attribute {name!r}")


def __dir__():
    """The public names imported on first use too (a notebook's tab completion lists ``jitlab.load``)."""
    return sorted({*globals(), *_LAZY})


def load_ipython_extension(ipython):
    """``%load_ext jitlab``: the ``%%cuda`` and ``%%cpp`` cell magics."""
    from jitlab.notebook.magic import load_ipython_extension as _load

    _load(ipython)
