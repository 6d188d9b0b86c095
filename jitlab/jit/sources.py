"""Which files a build reads: the snippet's sources, and every local header they include.

``collect_sources`` turns a file, a folder or a list into the sources to build (``locate`` finds a
relative path from the project root when the working folder is another); ``local_headers``
follows ``#include`` from them through the snippet's folders and the user's ``-I`` folders (never the
toolchain's: its fingerprint stands for those) to the headers whose bytes go into the build key;
``with_header_deps`` gives each object unit its own file's headers. ``file_names`` and ``describe``
name a plan's files the way progress lines and compiler errors do.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import replace
from pathlib import Path

from jitlab import config
from jitlab.errors import SnippetError
from jitlab.jit import diagnostics, toolchain
from jitlab.jit.plan import Plan, Unit
from jitlab.jit.flags import Options
from jitlab.jit.parse import SourceFile, language_of, parse_file, parse_header


def locate(path) -> Path:
    """A relative path as the user means it: as given when it exists from the working folder, else
    from the nearest folder above it that holds ``kernels/`` (the project root) if it exists there.

    A notebook in ``notebooks/`` that names ``kernels/x.cu`` means ``../kernels/x.cu`` (returned in
    that form). Absolute paths, and paths found nowhere, come back as given.
    """
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    for folder in Path.cwd().parents:
        if (folder / "kernels").is_dir() and (folder / p).exists():
            return Path(os.path.relpath(folder / p))
    return p


def has_cuda(paths) -> bool:
    """Whether a snippet (file, folder or list) has a CUDA source file."""
    return any(p.suffix in config.CUDA_EXTS for p in collect_sources(paths))


def collect_sources(paths) -> list[Path]:
    """Expand a file, a folder, or a list of them into the source files to build, in a stable order.

    A relative path missing from the working folder is looked up from the project root (:func:`locate`).

    Raises:
        SnippetError: For a missing path, a folder with no sources, or only headers.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out: list[Path] = []
    for p in map(locate, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in config.SOURCE_EXTS)
            if not found:
                raise SnippetError(f"{p}: folder has no .cu or .cpp files to build")
            out += found
        elif p.is_file():
            if language_of(p) == "header":
                raise SnippetError(f"{p}: a header is included by sources, not built alone; pass the .cu/.cpp files or their folder")
            out.append(p)
        else:
            close = _near_names(p)
            raise SnippetError(f"{p}: no such file or folder" + (f"; did you mean {close}?" if close else ""))
    return [p.resolve() for p in dict.fromkeys(out)]


def _near_names(p: Path) -> str:
    import difflib

    parent = p.parent if p.parent.is_dir() else Path(".")
    names = [c.name for c in parent.iterdir()] if parent.is_dir() else []
    hits = difflib.get_close_matches(p.name, names, n=1)
    return str(parent / hits[0]) if hits else ""


def local_headers(files: list[SourceFile], include_dirs: list[str], user_dirs: list[str] = ()) -> dict[str, str]:
    """Every header the files include (recursively) from the snippet's or the user's folders → its SHA-256.

    ``#include "…"`` is looked up in the including file's folder, then in ``include_dirs`` (the
    snippet's folders) and ``user_dirs`` (the ones the user's ``-I``/``-isystem`` flags add);
    ``#include <…>`` in those folders only. System, torch and CUDA headers are not in them: the
    toolchain's fingerprint stands for those.

    Returns:
        Absolute path → SHA-256 of the header's bytes, for the build key.
    """
    folders = [*map(Path, include_dirs), *map(Path, user_dirs)]
    seen: dict[str, str] = {}
    todo = [(f.path.parent, f.local_includes, f.system_includes) for f in files]
    while todo:
        base, quoted, angled = todo.pop()
        found_quoted = [_find_header(inc, [base, *folders]) for inc in quoted]
        for found in found_quoted + [_find_header(inc, folders) for inc in angled]:
            if found is None or str(found) in seen:
                continue
            data = found.read_bytes()
            digest = seen[str(found)] = hashlib.sha256(data).hexdigest()
            todo.append((found.parent, *_includes_of(found, data, digest)))
    return seen


_INCLUDES: dict[str, tuple[list[str], list[str]]] = {}


def _includes_of(path: Path, data: bytes, digest: str) -> tuple[list[str], list[str]]:
    """A header's ``"…"`` and ``<…>`` includes, parsed once per content in a process (a cache hit
    walks every header again; a library's include folder can hold hundreds)."""
    if digest not in _INCLUDES:
        header = parse_header(path, data.decode("utf-8", errors="replace"))
        _INCLUDES[digest] = (header.local_includes, header.system_includes)
    return _INCLUDES[digest]


def _find_header(name: str, folders: list[Path]) -> Path | None:
    """The first ``folder/name`` that is a file, as the compiler searches, or ``None``."""
    for d in folders:
        cand = d / name
        if cand.is_file():
            return cand.resolve()
    return None


#: Flags that add an include folder (GCC's and nvcc's spellings); the folder follows, joined or as the next flag.
_INCLUDE_FLAGS = ("-isystem", "-iquote", "-idirafter", "--include-path", "--system-include", "-I")


def user_include_dirs(opts: Options) -> list[str]:
    """The include folders the user's ``cflags``/``cuda_cflags`` add, absolute, the toolchain's left out."""
    found: list[str] = []
    for flags in (opts.cflags, opts.cuda_cflags):
        it = iter(flags)
        for flag in it:
            prefix = next((p for p in _INCLUDE_FLAGS if flag.startswith(p)), None)
            if prefix is None:
                continue
            rest = flag[len(prefix):]
            folder = rest.removeprefix("=") if rest else next(it, "")
            if folder:
                found.append(str(Path(folder).expanduser().resolve()))
    toolchain_dirs = _toolchain_include_roots() if found else []
    return [d for d in dict.fromkeys(found)
            if not any(Path(d) == r or r in Path(d).parents for r in toolchain_dirs)]


def _toolchain_include_roots() -> list[Path]:
    """Folders whose headers belong to the toolchain (torch, CUDA, Python, the system), not to the snippet."""
    import sysconfig

    import torch

    roots = [Path(torch.__file__).parent, toolchain.cuda_home(), Path(sysconfig.get_path("include")),
             Path("/usr/include"), Path("/usr/local/include")]
    return [r.resolve() for r in roots]


def with_header_deps(units: list[Unit], per_file: dict[str, dict[str, str]]) -> list[Unit]:
    """The units, each with the headers its own file includes (:attr:`jitlab.jit.plan.Unit.deps`), for its object's key."""
    return [replace(u, deps=tuple(sorted(per_file.get(u.source, {}).items()))) for u in units]


def file_names(plan: Plan) -> str:
    """The plan's files, short, comma-separated: what a progress line or an error names."""
    return ", ".join(diagnostics.short_path(str(f.path)) for f in plan.files)


def describe(plan: Plan, archs: list[str], compiler: str = "nvcc") -> str:
    """The plan's files and what compiles them: ``saxpy.cu (nvcc, sm_90)``."""
    tool = (f"{compiler}, {'/'.join(archs)}" if archs else compiler) if plan.cuda else "c++"
    return f"{file_names(plan)} ({tool})"


def sources_by_path(plan: Plan) -> dict[str, str]:
    """Each of the plan's files → its text, for a compile error to quote the lines it names."""
    return {str(f.path): f.text for f in plan.files}


def is_program(paths) -> bool:
    """Whether a snippet (a file, a folder or a list) defines ``int main``: a whole program, which builds
    with ``mode="program"`` and runs with :func:`jitlab.run_program`.

    Raises:
        SnippetError: A file cannot be read.
    """
    return any(parse_file(p).has_main for p in collect_sources(paths))
