"""torch.utils.cpp_extension's front doors on jitlab's pipeline: ``load_inline``, and ``load``'s keywords.

``load_inline`` takes torch's arguments, writes the source strings (with torch's implicit headers and
the ``functions=`` bindings, as torch does) to ``<cache>/inline/<name>/`` and builds them as any snippet:
split units, the object cache, precompiled headers. The folder is named by ``name`` so an edit leaves
the other units' text (which holds the file's path) and their cached objects unchanged; the build key
is the content, so a new source under an old name is a new module in the same process, and a failed
build leaves nothing behind. A lock on the folder keeps two writers of one name from building each
other's text: while another build holds it, other sources of that name are written to a folder of
their own (the name and a hash of the sources), so graders running many solutions that all call
their extension ``matmul`` build them side by side. Compile errors are moved from the written files back to the strings they came from:
``load_inline 'square' cuda_sources[0], line 7``, and the cell's line when the string is a literal in
the calling notebook cell (or script).
"""

from __future__ import annotations

import contextlib
import contextvars
import difflib
import hashlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

from jitlab import config, progress, snippets
from jitlab.errors import ArgumentError, CompileError
from jitlab.jit import binding, diagnostics, locks, origins, shellwords
from jitlab.jit.flags import Options
from jitlab.jit.origins import Origin

#: torch's implicit prelude of each source list (``no_implicit_headers=False``).
CPP_PRELUDE = ["#include <torch/extension.h>"]
CUDA_PRELUDE = ["#include <torch/types.h>", "#include <cuda.h>", "#include <cuda_runtime.h>"]

#: torch arguments jitlab accepts but has no use for: (value that is not worth a note, why).
IGNORED = {
    "keep_intermediates": (True, "jitlab keeps each build in its cache; `jitlab clean` removes them"),
    "use_pch": (False, "jitlab always uses its own precompiled torch headers"),
    "with_sycl": (None, "jitlab builds C++ and CUDA only"),
    "extra_sycl_cflags": (None, "jitlab builds C++ and CUDA only"),
}
#: torch's ``load`` keywords that ``jitlab.load`` takes besides ``name`` and ``sources``.
LOAD_KEYWORDS = ("extra_cflags", "extra_cuda_cflags", "extra_sycl_cflags", "extra_ldflags", "extra_include_paths",
                 "build_directory", "verbose", "with_cuda", "with_sycl", "is_python_module", "is_standalone",
                 "keep_intermediates")
_noted: set[str] = set()


@dataclass
class InlineSnippet:
    """A ``load_inline`` call's sources written as snippet files.

    Attributes:
        name: The ``name=`` given.
        folder: Where the files are (``<cache>/inline/<safe name>``).
        files: The written ``.cpp``/``.cu`` files, to build as one snippet.
        origins: Each file (absolute path) → the stretches it is made of.
    """

    name: str
    folder: Path
    files: list[Path]
    origins: dict[str, list[Origin]] = field(default_factory=dict)


def note_ignored(call: str, **given) -> None:
    """Say once per process, in one line, that a torch argument given a value means nothing to jitlab."""
    for arg, value in given.items():
        default, why = IGNORED[arg]
        if value != default and value not in ([], ()) and arg not in _noted:
            _noted.add(arg)
            progress.say(f"jitlab: {call}({arg}=...) is accepted and means nothing here: {why}")


def torch_options(extra_cflags=None, extra_cuda_cflags=None, extra_ldflags=None, extra_include_paths=None,
                  base: Options | None = None, with_cuda=None) -> Options:
    """jitlab's options for torch's flag keywords, with torch's meaning, added to ``base``'s.

    Each flag entry is split into arguments as the shell under torch's ninja build would
    (:func:`jitlab.jit.shellwords.words`: ``""`` is no flag, ``"-O3 -Wall"`` two); each include path is
    one folder, spaces and quotes included, relative to the working directory. Without ``arch`` in
    ``base``, ``TORCH_CUDA_ARCH_LIST`` chooses the architectures when set, as in torch. ``with_cuda``:
    ``None`` (CUDA when there are CUDA sources), ``True`` (C++ sources get CUDA's headers and
    libraries too), ``False`` (as ``None``: jitlab compiles a CUDA source it is given).

    Raises:
        ArgumentError: A flag the shell would have acted on (``;``, ``$(...)``, a redirection), naming it.
    """
    base = base or Options()
    includes = [f"-I{Path(p.strip()).expanduser().resolve()}" for p in _as_list(extra_include_paths)]
    return replace(base, cflags=[*base.cflags, *shellwords.flag_list(extra_cflags, "extra_cflags"), *includes],
                   cuda_cflags=[*base.cuda_cflags, *shellwords.flag_list(extra_cuda_cflags, "extra_cuda_cflags"),
                                *includes],
                   ldflags=[*base.ldflags, *shellwords.flag_list(extra_ldflags, "extra_ldflags")],
                   arch=base.arch or shellwords.torch_arch_list(), with_cuda=bool(with_cuda) or base.with_cuda)


def _as_list(v) -> list[str]:
    return [] if v is None else [v] if isinstance(v, str) else list(v)


def materialize(name: str, cpp_sources, cuda_sources=None, functions=None, with_pytorch_error_handling: bool = True,
                no_implicit_headers: bool = False, python_module: bool = True, caller: str | None = None,
                folder: Path | None = None) -> InlineSnippet:
    """Write a ``load_inline`` call's sources as ``<name>.cpp`` (and ``<name>.cu``), as torch joins them.

    ``cpp_sources`` get ``#include <torch/extension.h>`` first and, for ``functions=``, the
    ``PYBIND11_MODULE`` torch generates; ``cuda_sources`` get ``torch/types.h``, ``cuda.h`` and
    ``cuda_runtime.h`` (none of these with ``no_implicit_headers``). A file is rewritten (atomically)
    only when its text changed. The caller holds the folder's lock (:func:`claimed`).

    Args:
        caller: The file (or IPython cell name in ``linecache``) of the call, to find the strings in.
        folder: Where to write them (:func:`claimed`); default the name's own folder.

    Raises:
        ArgumentError: ``functions`` is neither a name, a list nor a dict; a source is not a string.
    """
    cpp, cuda = _strings("cpp_sources", cpp_sources), _strings("cuda_sources", cuda_sources)
    folder = folder or folder_of(name)
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder.name
    parts = [] if no_implicit_headers else [(f"load_inline {name!r} implicit headers", "\n".join(CPP_PRELUDE))]
    parts += [(f"load_inline {name!r} cpp_sources[{i}]", s) for i, s in enumerate(cpp)]
    bindings = binding.functions_block(functions, with_pytorch_error_handling)
    if bindings is None and not python_module and not any("TORCH_LIBRARY" in t for t in (*cpp, *cuda)):
        bindings = "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {}"  # a plain library: bind nothing
    if bindings is not None:
        parts.append((f"load_inline {name!r} bindings made for functions=", bindings))
    out = InlineSnippet(name, folder, [])
    if cpp or bindings is not None:
        _write(out, folder / f"{stem}.cpp", parts, caller)
    if cuda:
        head = [] if no_implicit_headers else [(f"load_inline {name!r} implicit headers", "\n".join(CUDA_PRELUDE))]
        _write(out, folder / f"{stem}.cu", head + [(f"load_inline {name!r} cuda_sources[{i}]", s)
                                                  for i, s in enumerate(cuda)], caller)
    if not out.files:
        raise ArgumentError(f"load_inline {name!r}: no sources; give cpp_sources= and/or cuda_sources=")
    missing = binding.undeclared(functions, cpp) if bindings is not None else []
    if missing:
        raise origins.relocate(_undeclared(out.files[0], missing), name, out.origins)
    return out


def _undeclared(path: Path, names: list[str]) -> CompileError:
    """The error torch's build would stop with at each ``m.def`` of a name ``cpp_sources`` never declare, told
    before compiling anything (:func:`binding.undeclared`)."""
    text = path.read_text()
    log = "".join(f"{path}:{i}:{row.index(n, row.index(','))+1}: error: '{n}' was not declared in this scope\n"
                  for n in names for i, row in enumerate(text.splitlines(), 1) if row.startswith(f'm.def("{n}",'))
    log += "(jitlab found no declaration of these names in cpp_sources, so it ran no compiler)\n"
    diags = diagnostics.parse_log(log, {str(path): text})
    return CompileError(f"jitlab: {diagnostics.short_path(str(path))} was not compiled: functions= names "
                        f"{', '.join(map(repr, names))}, which cpp_sources do not declare", diags, log)


def _strings(arg: str, v) -> list[str]:
    items = _as_list(v)
    bad = [type(s).__name__ for s in items if not isinstance(s, str)]
    if bad:
        raise ArgumentError(f"{arg}= takes a string or a list of strings (source code), not {bad[0]}")
    return items


#: The set of names this thread's ``load_inline`` calls live in (:func:`names_of`); ``""`` is the user's own.
_names: contextvars.ContextVar[str] = contextvars.ContextVar("jitlab_inline_names", default="")


@contextlib.contextmanager
def names_of(owner: str):
    """``load_inline`` names inside this block belong to ``owner``: its ``"matmul"`` is not another owner's.

    A grader building many people's solutions at once gives each its own folders, so two solutions that
    both call their extension ``matmul`` build side by side instead of waiting on one name's lock and
    rewriting each other's files; the same owner later finds its builds in the cache.
    """
    token = _names.set(re.sub(r"\W", "_", owner).strip("_"))
    try:
        yield
    finally:
        _names.reset(token)


def folder_of(name: str) -> Path:
    """The folder a name's sources are written to (one per name, whatever its content)."""
    safe = re.sub(r"\W", "_", name).strip("_") or "inline"
    owner = _names.get()
    return config.cache_dir() / "inline" / (f"{owner}__{safe}" if owner else safe)


@contextlib.contextmanager
def claimed(name: str, *texts):
    """The folder to write and build a name's sources in, locked for the block: the name's own folder, or,
    while another build holds that one (another process building other sources under this name), a
    folder of the name and this content, so different sources build side by side and the same
    sources wait for one build. The lock keeps a name's files from being rewritten while a build reads them."""
    folder = folder_of(name)
    with locks.build_lock(folder.name, root=folder.parent, wait=False) as held:
        if held:
            yield folder
            return
    digest = hashlib.sha256(repr(texts).encode("utf-8", "surrogateescape")).hexdigest()[:12]
    other = folder.with_name(f"{folder.name}__{digest}")
    with locks.build_lock(other.name, root=other.parent):
        yield other


def _write(out: InlineSnippet, path: Path, parts: list[tuple[str, str]], caller: str | None) -> None:
    stretches, line = [], 1
    for label, text in parts:
        stretches.append(Origin(label, line, text, origins.find_in_caller(text, caller) if "_sources[" in label else None))
        line += text.count("\n") + 1
    text = "\n".join(t for _, t in parts)
    if not (path.is_file() and path.read_text(encoding="utf-8", errors="surrogateescape") == text):
        snippets.atomic_write(path, text)
    out.files.append(path)
    out.origins[str(path.resolve())] = stretches


def torch_load_args(path, more: tuple, name, sources) -> tuple[object, str | None]:
    """What to build for ``jitlab.load``, read the jitlab way (``path``, ``*more``) or torch's (``name``, ``sources``).

    torch's positional form ``load("ext", ["a.cpp", "b.cu"])`` is recognised: a first argument that
    names no file and has no source suffix, followed by one more (the sources).

    Returns:
        ``(paths, name)``: the files, folder or list to build, and torch's module name if given.
    """
    if sources is None and len(more) == 1 and isinstance(path, str) and not Path(path).exists() \
            and Path(path).suffix.lower() not in (*config.SOURCE_EXTS, *config.HEADER_EXTS):
        return more[0], snippets.check_extension_name(path, "load")
    if sources is not None:
        if path is not None:
            raise ArgumentError("load() takes a path or sources=, not both")
        return sources, snippets.check_extension_name(name, "load") if name is not None else None
    if path is None:
        raise ArgumentError("load() needs what to build: a path (file, folder or list), or torch's sources=[...]")
    return ([path, *more] if more else path), name


def check_load_keywords(kwargs: dict) -> None:
    """Refuse a keyword neither jitlab's ``load`` nor torch's takes, with the closest one."""
    for k in kwargs:
        if k not in LOAD_KEYWORDS:
            hint = difflib.get_close_matches(k, LOAD_KEYWORDS, n=1)
            raise ArgumentError(f"load() got an unexpected keyword {k}=" + (f"; did you mean {hint[0]}=?" if hint else
                                f"; torch's keywords it takes: {', '.join(LOAD_KEYWORDS)}"))
    if kwargs.get("is_standalone"):
        raise ArgumentError("load(is_standalone=True): jitlab builds Python modules and libraries, not executables; "
                            "use torch.utils.cpp_extension.load for a standalone program")
    note_ignored("load", **{k: v for k, v in kwargs.items() if k in IGNORED})


def library_options(opts: Options, build_directory, is_python_module: bool) -> Options:
    """``opts`` for a call that hands over torch's library file (``build_directory``, ``is_python_module=False``):
    it holds its kernels, as torch's does, for whoever loads or inspects it (``cuobjdump``, another process).
    The torch-style NVRTC engine's module has none (the loader fills it from a CUBIN): the nvcc split builds it.
    """
    wants_file = bool(build_directory) or not is_python_module
    return replace(opts, engine="nvcc") if wants_file and opts.engine == "auto" else opts


def place_library(build_directory, name: str, artifact: Path) -> Path:
    """torch's ``build_directory``: the built library is also ``<build_directory>/<name>.so``, where torch's
    would be (jitlab builds in its cache; this is a copy, replaced all at once, for whoever looks there).

    Raises:
        ArgumentError: The folder cannot be made or written, naming the reason and the fix.
    """
    folder = Path(build_directory).expanduser()
    target = folder / f"{name}{artifact.suffix}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name[:100]}.", suffix=".tmp")
        os.close(fd)
        try:
            shutil.copyfile(artifact, tmp)
            os.chmod(tmp, 0o755)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    except OSError as e:
        raise ArgumentError(f"build_directory={str(build_directory)!r}: the library cannot be put there ({e.strerror}); "
                            f"give a folder you can write, or leave build_directory out (jitlab's cache, "
                            f"JITLAB_CACHE_DIR, holds every build)") from None
    return target


def show_log(b) -> None:
    """``verbose=True``: the build's notes and compiler output on stderr."""
    for note in b.notes:
        progress.say(f"jitlab: {note}")
    print(b.log, file=sys.stderr)


def load_inline(name, cpp_sources, cuda_sources=None, sycl_sources=None, functions=None, extra_cflags=None,
                extra_cuda_cflags=None, extra_sycl_cflags=None, extra_ldflags=None, extra_include_paths=None,
                build_directory=None, verbose=False, with_cuda=None, with_sycl=None, is_python_module=True,
                with_pytorch_error_handling=True, keep_intermediates=True, use_pch=False, no_implicit_headers=False):
    """``torch.utils.cpp_extension.load_inline``, built by jitlab: same arguments, same prelude, cached units.

    Change the import and nothing else. The sources are joined as torch joins them (``cpp_sources``
    after ``#include <torch/extension.h>``, then the bindings ``functions=`` asks for, a list of names
    or a dict of name → docstring; ``cuda_sources`` after ``torch/types.h``, ``cuda.h`` and
    ``cuda_runtime.h``), written to ``<cache>/inline/<name>/`` and built as a jitlab snippet: a kernel
    edit recompiles only the kernels. The build is keyed by content, so calling again under the same
    ``name`` with new sources gives the new module in this process, and a failed build never blocks
    the name. Flag entries mean what they mean to torch (split as its shell would; see
    :func:`torch_options`), and ``TORCH_CUDA_ARCH_LIST`` chooses the architectures when set. The build
    lives in jitlab's cache; with ``build_directory`` the library is also put there as ``<name>.so``,
    as torch's would be, its kernels inside (:func:`library_options`). ``keep_intermediates``, ``use_pch`` and the SYCL options are accepted and
    have no effect (said once per process).

    Args:
        name: The extension's name (names the folder its sources are written to).
        cpp_sources: C++ source string(s).
        cuda_sources: CUDA source string(s).
        functions: Names to bind (list) or name → docstring (dict); ``None`` binds every host
            function taking torch types, or uses the sources' own ``PYBIND11_MODULE``.
        extra_cflags, extra_cuda_cflags, extra_ldflags: Extra host compiler, nvcc and linker flags.
        extra_include_paths: Folders added with ``-I``.
        verbose: Print the build's notes and compiler output.
        is_python_module: ``False`` loads the library for its ``TORCH_LIBRARY`` operators (in
            ``torch.ops``; a new source under the same name replaces them) and returns the library's
            path, as torch's.
        with_pytorch_error_handling: Bind through ``torch::wrap_pybind_function`` (C++ errors as
            Python exceptions, as torch does) or bind the functions directly.
        no_implicit_headers: Add no headers to the sources.

    Returns:
        A jitlab module with the bound functions as attributes (the library's path with ``is_python_module=False``).

    Raises:
        CompileError: At the line inside your source string (and your cell's or script's line when the
            string is written there): ``load_inline 'name' cuda_sources[0], line 7``.
        ArgumentError: Bad ``functions=``, no sources, or ``sycl_sources``.
    """
    from jitlab.jit import loader  # lazy: the loader brings the launch machinery

    snippets.check_extension_name(name, "load_inline")
    if sycl_sources:
        raise ArgumentError("load_inline(sycl_sources=...): jitlab builds C++ and CUDA, not SYCL; "
                            "use torch.utils.cpp_extension.load_inline for SYCL")
    note_ignored("load_inline", keep_intermediates=keep_intermediates,
                 use_pch=use_pch, with_sycl=with_sycl, extra_sycl_cflags=extra_sycl_cflags)
    opts = library_options(torch_options(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths,
                                         Options(mode="torch"), with_cuda), build_directory, is_python_module)
    where = origins.caller_file()
    with claimed(name, cpp_sources, cuda_sources, functions) as folder:
        snip = materialize(name, cpp_sources, cuda_sources, functions, with_pytorch_error_handling,
                           no_implicit_headers, is_python_module, where, folder)
        try:
            mod = loader.load_or_rebuild(snip.files, opts)  # operators: the earlier build unloaded first
        except CompileError as e:
            raise origins.relocate(e, snip.name, snip.origins) from None
    if verbose:
        show_log(mod.build)
    library = place_library(build_directory, name, mod.build.artifact) if build_directory else mod.build.artifact
    return mod if is_python_module else str(library)  # as torch's: the library's path; its operators are in torch.ops


def build_inline(name, cpp_sources, cuda_sources=None, functions=None, *, compile_only: bool = False, arch=None,
                 caller: str | None = None, **torch_kwargs):
    """Build a ``load_inline`` call without loading it: ``compile_only=True, arch=["sm_75"]`` needs no GPU.

    Takes ``load_inline``'s flag keywords (``extra_cflags``, ``extra_cuda_cflags``, ``extra_ldflags``,
    ``extra_include_paths``, ``with_cuda``, ``with_pytorch_error_handling``, ``no_implicit_headers``).
    ``caller``: the file that makes the call, where its strings are found for errors at their lines (default:
    the first frame outside jitlab; a call started on another thread names it).

    Returns:
        The :class:`jitlab.jit.plan.Build`.
    """
    from jitlab.jit import builder

    snippets.check_extension_name(name, "build_inline")
    flags = {k: torch_kwargs.pop(k, None) for k in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags",
                                                    "extra_include_paths", "with_cuda")}
    base = Options(mode="torch", compile_only=compile_only, arch=[arch] if isinstance(arch, str) else arch)
    opts = torch_options(**flags, base=base)
    where = caller or origins.caller_file()
    with claimed(name, cpp_sources, cuda_sources, functions) as folder:
        snip = materialize(name, cpp_sources, cuda_sources, functions, caller=where, folder=folder, **torch_kwargs)
        try:
            return builder.build(snip.files, opts)
        except CompileError as e:
            raise origins.relocate(e, snip.name, snip.origins) from None
