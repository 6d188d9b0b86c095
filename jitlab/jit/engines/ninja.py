"""The ninja engine: a whole snippet compiled and linked by torch's ``cpp_extension`` ninja build.

:func:`make` runs ``torch.utils.cpp_extension.load_inline`` in the build's cache folder (reached
through a safe link when the folder's path has a character ninja cannot read), and turns a failure
into a compile error or, for a library that built but does not load, the dynamic loader's own reason.
It builds kernel-only snippets, CUDA and C++, that NVRTC does not (a torch-style snippet's units go to
the object engine); the torch-compatible ``jitlab.load_inline`` is :mod:`jitlab.jit.torch_compat`'s,
and plans like any other snippet.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import stat
import subprocess
import tempfile
import threading
from pathlib import Path

from jitlab import output
from jitlab.errors import ToolchainError
from jitlab.jit import cache, deps, diagnostics, ninja_tool, nvcc_shell, toolchain
from jitlab.jit.flags import Options, compile_flags
from jitlab.jit.resources import parse_resource_usage
from jitlab.jit.sources import describe, sources_by_path
from jitlab.jit.plan import KernelPlan, Manifest

#: What a build records as its engine (``Build.engine``), and what its progress line says compiles it.
ENGINE = "nvcc"
COMPILER = "nvcc"


def key_parts(plan: KernelPlan, archs: list[str], opts: Options, parts: dict) -> dict:
    """The plan's key parts as they are: its sources, flags and toolchain say everything."""
    return parts


def require_tools(plan: KernelPlan, opts: Options) -> None:
    """nvcc (CUDA snippets), the host compiler and ninja."""
    toolchain.require_tools(plan.cuda, opts.compile_only, ninja=True)


def make(plan: KernelPlan, name: str, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """Compile and link with ``torch.utils.cpp_extension.load_inline`` into ``folder``."""
    from torch.utils import cpp_extension

    cflags, cuda_cflags = compile_flags(plan, archs, opts)
    if plan.cuda:  # torch's ninja rule hands these to nvcc, whose own shell would run a backtick in them
        bad = [a for a in [*(f"-I{d}" for d in plan.include_dirs), *cuda_cflags] if nvcc_shell.NVCC_SHELL_CODE in a]
        if bad:
            raise nvcc_shell.nvcc_shell_code_error(bad[0])
    ninja_tool.ensure_ninja()
    _forget_name(name)
    ok = False
    with output.capture_fds() as box:
        try:
            cpp_extension.load_inline(
                name=name,
                cpp_sources=plan.cpp_sources,
                cuda_sources=plan.cuda_sources or None,
                functions=None,
                extra_cflags=_for_ninja(cflags),
                extra_cuda_cflags=_for_ninja(cuda_cflags) if plan.cuda else None,
                extra_ldflags=_for_ninja([*toolchain.runtime_ldflags(), *opts.ldflags]),
                extra_include_paths=[_include_dir(str(d)) for d in plan.include_dirs],
                build_directory=str(_ninja_folder(folder)),
                verbose=True,
                with_cuda=plan.cuda or opts.with_cuda,
                is_python_module=False,
                no_implicit_headers=True,
            )
            ok = True
        except (RuntimeError, OSError, ImportError) as e:
            err = e
    log = box[0] if box else ""
    (folder / "build.log").write_text(log)
    if not ok:
        _forget_name(name)
        if isinstance(err, ImportError) or "Error building extension" not in str(err):
            raise ToolchainError(f"jitlab: {name} built but could not be loaded: "
                                 f"{_load_failure(folder / f'{name}.so') or err}") from err
        raise diagnostics.compile_error(describe(plan, archs), log or str(err), sources_by_path(plan)) from None
    so = folder / f"{name}.so"
    return cache.made(so, resources=parse_resource_usage(log), compile_only=False, read=_ninja_reads(folder, cflags))


def _ninja_reads(folder: Path, cflags: list[str]) -> list[str]:
    """Every file the ninja build's compilers read: ninja's record of their depfiles, and, where the
    host compiler's ``-MMD`` leaves system folders out that are not the toolchain's (``C_INCLUDE_PATH``,
    ``CPLUS_INCLUDE_PATH``, the user's ``-isystem``), its ``-M`` list of the host unit."""
    read = deps.ninja_deps(folder)
    hidden = any(os.environ.get(v) for v in ("C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH")) or any(
        f.startswith(("-isystem", "-idirafter")) for f in cflags)
    if hidden and (folder / "main.cpp").is_file():
        read += deps.preprocessor_deps(deps.ninja_cxx_command(folder), folder / "main.cpp", folder)
    return read


def _for_ninja(flags: list[str]) -> list[str]:
    """Flags as ``build.ninja`` must hold them: torch writes them unquoted into commands that ninja runs
    through ``/bin/sh -c``, so each is quoted for the shell (a define's ``;`` or backtick stays text)."""
    return [_ninja_escape(shlex.quote(f)) for f in flags]


def _ninja_escape(flag: str) -> str:
    """A flag as ``build.ninja`` must spell it: torch quotes flags for the shell, but ninja reads ``$`` first."""
    return flag.replace("$", "$$")


#: What torch's ``build.ninja`` cannot hold in a source's path: it escapes spaces only, ninja reads ``$`` and ``:``,
#: and nvcc, which its rules run, hands a backtick to a shell.
_NINJA_UNSAFE = ("$", ":", "\n", "`")


def _ninja_folder(folder: Path) -> Path:
    """``folder``, or the same folder reached through a link whose path ``build.ninja`` can hold.

    A cache under a path with ``$`` or ``:`` keeps its place; ninja sees it through a symbolic link
    to the cache folder in a private folder of the temporary directory (one link per cache folder).

    Raises:
        ToolchainError: The link cannot be made safely, naming the fix.
    """
    if not any(c in str(folder) for c in _NINJA_UNSAFE):
        return folder
    fix = f"set JITLAB_CACHE_DIR to a folder whose path has no {' or '.join(map(repr, _NINJA_UNSAFE[:2]))}"
    return _linked(folder.parent, f"the build cache {folder.parent}", fix) / folder.name


def _include_dir(folder: str) -> str:
    """An include folder as ``build.ninja`` can hold it: a name with a newline (which ends a ninja line, where
    torch's quoting cannot help) is reached through a link; ``$`` is escaped."""
    if "\n" in folder:
        folder = str(_linked(Path(folder), f"the include folder {folder!r}",
                             "rename the folder without the newline"))
    return _ninja_escape(folder)


def _linked(target: Path, what: str, fix: str) -> Path:
    """A symbolic link to ``target`` whose path ninja can read: in a private folder of the temporary
    directory, named by a hash of ``target`` (one link per target, replaced atomically).

    Raises:
        ToolchainError: The link cannot be made safely, naming ``what`` and ``fix``.
    """
    root = Path(tempfile.gettempdir()) / f"jitlab-ninja-{os.getuid()}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        st = root.lstat()
    except OSError as e:
        raise ToolchainError(f"jitlab: {what} has a character ninja cannot read, and "
                             f"{root} cannot be made for a link to it ({e}); {fix}") from e
    if any(c in str(root) for c in _NINJA_UNSAFE) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ToolchainError(f"jitlab: {what} has a character ninja cannot read, and "
                             f"{root} is not a private folder of yours to link it from; {fix}")
    link = root / hashlib.sha256(str(target).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    tmp = root / f".{link.name}.{os.getpid()}.{threading.get_ident()}"
    tmp.unlink(missing_ok=True)
    os.symlink(target, tmp)
    os.replace(tmp, link)  # atomic: a concurrent build sees the old link or this one, both to the same folder
    return link


def _load_failure(so: Path) -> str:
    """The dynamic loader's own reason (torch's message drops it), with C++ symbols demangled."""
    import ctypes
    import shutil

    try:
        ctypes.CDLL(str(so))
    except OSError as e:
        text = str(e)
    else:
        return ""
    m = re.search(r"undefined symbol: (\S+)", text)
    if m:
        filt = shutil.which("c++filt")
        name = subprocess.run([filt, m.group(1)], capture_output=True, text=True).stdout.strip() if filt else m.group(1)
        return (f"undefined symbol {name}: something is declared and called but never defined "
                f"(a missing function body, or a source file left out of the snippet)")
    return text


def _forget_name(name: str) -> None:
    """torch remembers each name's source hash per process and skips the build when it sees the name
    again; forget it, so a rebuild (after a failure, or of a corrupt entry) really compiles."""
    from torch.utils import cpp_extension

    entries = getattr(getattr(cpp_extension, "JIT_EXTENSION_VERSIONER", None), "entries", None)
    if isinstance(entries, dict):
        entries.pop(name, None)
