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


from .builder import Build, Options
from .errors import (
    ArgumentError,
    CacheError,
    CompileError,
    JitlabError,
    LaunchError,
    SnippetError,
    ToolchainError,
)

__version__ = "0.1.0"
__all__ = [
    "load", "build", "clean", "check", "bench", "ab", "sanitize", "profile", "playground", "Build", "Options", "Module",
    "JitlabError", "CompileError", "SnippetError", "ToolchainError", "LaunchError", "ArgumentError", "CacheError",
]


def _options(mode, arch, defines, cflags, cuda_cflags, ldflags, compile_only, debug=False, engine="auto") -> Options:
    if isinstance(arch, str):
        arch = [a for a in arch.split(",") if a.strip()]
    return Options(mode=mode, arch=list(arch) if arch else None, defines=dict(defines or {}),
                   cflags=list(cflags or ()), cuda_cflags=list(cuda_cflags or ()),
                   ldflags=list(ldflags or ()), compile_only=compile_only, debug=debug, engine=engine)


def load(path, *more, mode: str = "auto", arch=None, defines=None, cflags=None, cuda_cflags=None, ldflags=None,
         debug: bool = False, engine: str = "auto"):
    """Build a snippet (or find it in the cache) and return its functions.

    Args:
        path: A ``.cu``/``.cpp`` file, a folder of them (a multi-file snippet), or a list.
        *more: Further files of the same snippet.
        mode: ``"auto"`` (kernel-only unless the snippet uses torch), ``"kernel"`` or ``"torch"``.
        arch: Archs to build for, e.g. ``"sm_90"`` or ``["sm_80", "sm_90"]``; default: this GPU.
        defines: Preprocessor macros, e.g. ``{"BLOCK": 256}``.
        cflags: Extra host compiler flags.
        cuda_cflags: Extra nvcc flags.
        ldflags: Extra linker flags.
        debug: Build for debugging: ``-G`` device code, ``-g -O0`` host code, asserts on. Pair it
            with ``jitlab.check(path, isolate=True)``, whose worker also sets ``CUDA_LAUNCH_BLOCKING``.
        engine: ``"auto"`` (NVRTC, in process, for a kernel-only ``.cu`` it compiles; nvcc otherwise,
            with the reason in the build output), ``"nvrtc"`` or ``"nvcc"``.

    Returns:
        A module whose attributes are the snippet's kernels and host functions. Kernels take
        tensors for pointers, numbers for scalars, and ``grid=``, ``block=``, ``shared_mem=``,
        ``stream=`` (default: torch's current stream).

    Raises:
        SnippetError: Unreadable snippet, nothing to call, or a type jitlab cannot pass.
        ToolchainError: Missing nvcc/ninja/compiler, CUDA version mismatch, or no GPU for a ``.cu``.
        CompileError: The compiler's first errors at your file and line; ``.log`` has the rest.
    """
    from .loader import load_or_rebuild

    paths = [path, *more] if more else path
    return load_or_rebuild(paths, _options(mode, arch, defines, cflags, cuda_cflags, ldflags, False, debug, engine))


def build(path, *more, mode: str = "auto", arch=None, defines=None, cflags=None, cuda_cflags=None,
          ldflags=None, compile_only: bool = False, debug: bool = False, engine: str = "auto") -> Build:
    """Build a snippet without loading it; ``compile_only=True`` needs no GPU (nvcc, or NVRTC).

    Returns:
        The :class:`Build`: ``.cached``, ``.seconds``, ``.folder``, ``.resources`` (per kernel, per arch).
    """
    from .builder import build as _build

    paths = [path, *more] if more else path
    return _build(paths, _options(mode, arch, defines, cflags, cuda_cflags, ldflags, compile_only, debug, engine))


def clean(older_than_days: float | None = None) -> int:
    """Delete cached builds (all, or those unused for ``older_than_days``); returns how many."""
    from .cache import clean as _clean

    return _clean(older_than_s=None if older_than_days is None else older_than_days * 86400)


def __getattr__(name):
    if name == "Module":
        from .loader import Module

        return Module
    if name == "check":
        from .isolate import check

        return check
    if name == "bench":
        from .benchmark import bench

        return bench
    if name == "sanitize":
        from .sanitizer import sanitize

        return sanitize
    if name == "profile":
        from .profiler import profile

        return profile
    if name == "ab":
        from .timing import ab

        return ab
    if name == "exercises":  # a submodule: `from . import` would ask this __getattr__ again
        import importlib

        return importlib.import_module(".exercises", __name__)
    if name == "playground":
        from .panel import playground

        return playground
    raise AttributeError(f"module 'jitlab' has no attribute {name!r}")




def load_ipython_extension(ipython):
    """``%load_ext jitlab``: the ``%%cuda`` and ``%%cpp`` cell magics."""
    from .magic import load_ipython_extension as _load

    _load(ipython)
