"""The jit layer's front door: ``load``, ``build`` and ``clean`` with their keyword options.

``jitlab.load``/``jitlab.build``/``jitlab.clean`` are these functions; modules of the layers above
import them from here, never from the package root. ``jitlab.load_inline`` is :mod:`.torch_compat`'s (torch's
arguments), imported only when called: a kernel-only cache hit in a new process imports none of torch's forms.
"""

from __future__ import annotations

import inspect

from jitlab.errors import SnippetError
from jitlab.jit import builder
from jitlab.jit.plan import Build
from jitlab.jit.flags import Options, normalize_defines


DEVICES = ("auto", "cuda", "cpu")


def options(*, mode: str = "auto", arch=None, defines=None, cflags=None, cuda_cflags=None, ldflags=None,
            compile_only: bool = False, debug: bool = False, engine: str = "auto", device="auto") -> Options:
    """The :class:`Options` of the front door's keywords, checked and normalized: ``arch`` as a list (``"sm_75,sm_90"``
    or ``90`` read too), ``defines`` as the compilers get them, ``device`` one of :data:`DEVICES`.

    Raises:
        SnippetError: An unknown ``device`` or a bad define.
    """
    if isinstance(arch, (str, int, float)):  # "sm_75,sm_90", or arch=90
        arch = [a for a in str(arch).split(",") if a.strip()]
    arch = [str(a) for a in arch or ()]  # toolchain.normalize_arch reads 90, "9.0", "sm_90"
    device = "auto" if device is None else str(device)
    if device not in DEVICES:
        raise SnippetError(f"device={device!r}: use 'auto' (a GPU, else the CPU emulator for a kernel-only .cu), "
                           f"'cuda' (a GPU) or 'cpu' (the CPU emulator; .cpp snippets run on the CPU either way)")
    return Options(mode=mode, arch=arch or None, defines=normalize_defines(defines),
                   cflags=list(cflags or ()), cuda_cflags=list(cuda_cflags or ()),
                   ldflags=list(ldflags or ()), compile_only=compile_only, debug=debug, engine=engine,
                   device=device)


def load(path=None, *more, mode: str = "auto", arch=None, defines=None, cflags=None, cuda_cflags=None, ldflags=None,
         debug: bool = False, engine: str = "auto", device: str = "auto", name=None, sources=None,
         **torch_keywords):
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
        device: ``"auto"`` (a GPU where torch sees one; without one, a kernel-only ``.cu`` the emulator runs
            goes to the CPU emulator, said once per process), ``"cuda"`` (a GPU build, compile-only without
            one), or ``"cpu"``: a kernel-only ``.cu`` built for jitlab's CPU emulator and called the same way
            with CPU tensors (no GPU needed; see :mod:`jitlab.jit.engines.emulator`).
        name, sources, **torch_keywords: ``torch.utils.cpp_extension.load``'s arguments, so its calls run
            unchanged: ``load(name="ext", sources=["ext.cpp", "ext.cu"], extra_cflags=[...],
            extra_cuda_cflags=[...], extra_ldflags=[...], extra_include_paths=[...], verbose=True,
            is_python_module=False)`` (the last loads a ``TORCH_LIBRARY`` library and returns its path, as torch's);
            ``build_directory`` gets a copy of the library as ``<name>.so``, where torch's would be;
            ``keep_intermediates`` is accepted with a one-time note.

    Returns:
        A module whose attributes are the snippet's kernels and host functions. Kernels take
        tensors for pointers, numbers for scalars, and ``grid=``, ``block=``, ``shared_mem=``,
        ``stream=`` (default: torch's current stream).

    Raises:
        SnippetError: Unreadable snippet, nothing to call, or a type jitlab cannot pass.
        ToolchainError: Missing nvcc/ninja/compiler, CUDA version mismatch, or no GPU for a ``.cu``.
        CompileError: The compiler's first errors at your file and line; ``.log`` has the rest.
    """
    from jitlab.jit.loader import load_or_rebuild  # loader imports builder: load it when first used

    opts = options(mode=mode, arch=arch, defines=defines, cflags=cflags, cuda_cflags=cuda_cflags, ldflags=ldflags,
                   debug=debug, engine=engine, device=device)
    if name is None and sources is None and not torch_keywords and path is not None and len(more) != 1:
        return load_or_rebuild([path, *more] if more else path, opts)
    return _load_torch_style(path, more, name, sources, opts, torch_keywords)


def _load_torch_style(path, more, name, sources, opts: Options, kw: dict):
    """``load`` called with torch's arguments: its flags added to jitlab's, ``verbose`` and ``is_python_module`` obeyed."""
    from jitlab.jit import loader, torch_compat

    paths, _ = torch_compat.torch_load_args(path, more, name, sources)
    torch_compat.check_load_keywords(kw)
    opts = torch_compat.torch_options(kw.get("extra_cflags"), kw.get("extra_cuda_cflags"), kw.get("extra_ldflags"),
                                      kw.get("extra_include_paths"), opts, kw.get("with_cuda"))
    opts = torch_compat.library_options(opts, kw.get("build_directory"), kw.get("is_python_module", True))
    mod = loader.load_or_rebuild(paths, opts)  # operators (TORCH_LIBRARY): the earlier build unloaded first
    if kw.get("verbose"):
        torch_compat.show_log(mod.build)
    library = mod.build.artifact
    if kw.get("build_directory"):
        library = torch_compat.place_library(kw["build_directory"], name or mod.build.plan.stem, library)
    return mod if kw.get("is_python_module", True) else str(library)  # torch's returns the library's path


def build(path, *more, mode: str = "auto", arch=None, defines=None, cflags=None, cuda_cflags=None,
          ldflags=None, compile_only: bool = False, debug: bool = False, engine: str = "auto",
          device: str = "auto") -> Build:
    """Build a snippet without loading it; ``compile_only=True`` needs no GPU (nvcc, or NVRTC), nor
    does ``device="cpu"`` (the CPU emulator's build of a kernel-only ``.cu``), which ``device="auto"`` takes
    for one on a machine without a GPU (see :func:`load`).

    Returns:
        The :class:`Build`: ``.cached``, ``.seconds``, ``.folder``, ``.resources`` (per kernel, per arch).
    """
    paths = [path, *more] if more else path
    opts = options(mode=mode, arch=arch, defines=defines, cflags=cflags, cuda_cflags=cuda_cflags, ldflags=ldflags,
                   compile_only=compile_only, debug=debug, engine=engine, device=device)
    return builder.build(paths, opts)


def runs_on_emulator(path, **keywords) -> bool:
    """Whether :func:`load` of ``path`` with ``keywords`` (its build options) builds for the CPU emulator here:
    ``device="cpu"``, or ``"auto"`` without a GPU for a kernel-only ``.cu`` the emulator runs."""
    files, _ = builder.snippet_files(path)
    known = inspect.signature(options).parameters  # a check's other keywords (variant, sizes) are not build options
    return builder.on_emulator(files, options(**{k: v for k, v in keywords.items() if k in known}))


def clean(older_than_days: float | None = None, headers: bool = False):
    """Delete the builds jitlab made in the cache (all, or those unused for ``older_than_days``).

    Args:
        older_than_days: Keep builds used more recently than this (0 or more).
        headers: Also delete the precompiled torch headers (the next torch-style build makes them
            again: about a minute, several on 2 cores).

    Returns:
        A :class:`jitlab.jit.cleaning.Cleaned`: ``removed``, ``busy`` (being built elsewhere) and ``left``
        (files jitlab did not make: never deleted).

    Raises:
        ValueError: A negative age. CacheError: The cache cannot be written.
    """
    from jitlab.jit.cleaning import clean as _clean

    return _clean(older_than_s=None if older_than_days is None else older_than_days * 86400, headers=headers)
