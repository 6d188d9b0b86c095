"""Build and cache: a plan → a build folder named by its key → a binary, compiled at most once.

``build()`` is the single entry point. A cache hit parses and hashes the snippet (milliseconds) and
compiles nothing; a miss takes a per-build lock, compiles with ``load_inline`` (or, compile-only,
with nvcc directly) and writes the manifest last.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

from . import cache, codegen, config, diagnostics, output, progress, toolchain
from .compiler import nvrtc, objects
from .errors import SnippetError, ToolchainError
from .parse import SourceFile, language_of, parse_file, parse_header


@dataclass
class Options:
    """Everything a user can set that changes the binary.

    Attributes:
        mode: ``"auto"``, ``"kernel"`` or ``"torch"``.
        arch: Archs to build for (``["sm_90"]``); default: the current GPU.
        defines: Preprocessor macros (``{"BLOCK": 256}``).
        cflags: Extra host compiler flags.
        cuda_cflags: Extra nvcc flags.
        ldflags: Extra linker flags.
        compile_only: Compile CUDA to an object without linking or loading (machines without a GPU).
        debug: A debug build: device code with ``-G`` (no optimization, full debug info), host code
            with ``-g -O0``, and ``assert`` on even if a flag defines ``NDEBUG``.
        engine: ``"auto"``, ``"nvrtc"`` or ``"nvcc"`` (see :func:`choose_engine`).
    """

    mode: str = "auto"
    arch: list[str] | None = None
    defines: dict[str, object] = field(default_factory=dict)
    cflags: list[str] = field(default_factory=list)
    cuda_cflags: list[str] = field(default_factory=list)
    ldflags: list[str] = field(default_factory=list)
    compile_only: bool = False
    debug: bool = False
    engine: str = "auto"


ENGINES = ("auto", "nvrtc", "nvcc")


@dataclass
class Build:
    """One build in the cache.

    Attributes:
        name: Module name (the snippet's name plus the key).
        folder: The build folder.
        plan: What was generated.
        manifest: The manifest (artifact, hash, timings, resource usage).
        cached: ``True`` when nothing was compiled.
        seconds: Wall time of this build call (0 for a cache hit's compile).
        archs: The archs built for.
    """

    name: str
    folder: Path
    plan: codegen.Plan
    manifest: dict
    cached: bool
    seconds: float
    archs: list[str]

    @property
    def artifact(self) -> Path:
        return self.folder / self.manifest["artifact"]

    @property
    def compile_only(self) -> bool:
        return bool(self.manifest.get("compile_only"))

    @property
    def resources(self) -> dict:
        """Per-kernel resource usage from ptxas: registers, shared/local/constant memory, spills."""
        return self.manifest.get("resources", {})

    @property
    def engine(self) -> str:
        """``"nvrtc"`` or ``"nvcc"``: what compiled the CUDA code."""
        return self.manifest.get("engine", "nvcc")

    @property
    def notes(self) -> list[str]:
        """One line for each choice the build made that a user may want to know (engine, split, headers)."""
        return list(self.manifest.get("notes", self.plan.notes))

    @property
    def log(self) -> str:
        """The compiler output of the build (warnings and ptxas resource usage)."""
        p = self.folder / "build.log"
        return p.read_text(errors="replace") if p.is_file() else ""


def collect_sources(paths) -> list[Path]:
    """Expand a file, a folder, or a list of them into the source files to build, in a stable order.

    Raises:
        SnippetError: For a missing path, a folder with no sources, or only headers.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    out: list[Path] = []
    for p in map(Path, paths):
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


def with_header_deps(units: list[objects.Unit], per_file: dict[str, dict[str, str]]) -> list[objects.Unit]:
    """The units, each with the headers its own file includes (:attr:`objects.Unit.deps`), for its object's key."""
    return [replace(u, deps=tuple(sorted(per_file.get(u.source, {}).items()))) for u in units]


def prepare(paths, opts: Options) -> tuple[codegen.Plan, list[str], dict]:
    """Parse and plan a snippet; return the plan, the archs and the key's parts. Compiles nothing."""
    sources = collect_sources(paths)
    files = [parse_file(p) for p in sources]
    stem = codegen.stem_of([Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)])
    plan = codegen.plan(files, stem, opts.mode)
    user_dirs = user_include_dirs(opts)
    per_file = {str(f.path): local_headers([f], plan.include_dirs, user_dirs) for f in files}
    plan.units = with_header_deps(plan.units, per_file)
    archs: list[str] = []
    if plan.cuda:
        archs = [toolchain.normalize_arch(a) for a in opts.arch] if opts.arch else [toolchain.current_arch()]
    parts = {
        "format": config.FORMAT_VERSION,
        "kind": plan.kind,
        "cpp": plan.cpp_sources,
        "cuda": plan.cuda_sources,
        "functions": plan.functions,
        "units": [(u.name, u.compiler, u.text, u.torch, u.module, sorted(u.templates)) for u in plan.units],
        "include_dirs": plan.include_dirs,
        "headers": {path: digest for headers in per_file.values() for path, digest in headers.items()},
        "flags": [sorted((k, str(v)) for k, v in opts.defines.items()), opts.cflags, opts.cuda_cflags, opts.ldflags],
        "archs": archs,
        "compile_only": opts.compile_only,
        "debug": opts.debug,
        "toolchain": toolchain.fingerprint(plan.cuda),
    }
    return plan, archs, parts


def build(paths, opts: Options | None = None) -> Build:
    """Build a snippet, or find it in the cache.

    Args:
        paths: A ``.cu``/``.cpp`` file, a folder of them, or a list.
        opts: Build options.

    Returns:
        The build; ``build.cached`` says whether anything was compiled.

    Raises:
        SnippetError: The snippet cannot be read or mapped.
        ToolchainError: A build tool is missing.
        CompileError: The compiler rejected the code.
    """
    opts = opts or Options()
    t0 = time.perf_counter()
    plan, archs, parts = prepare(paths, opts)
    engine, why = choose_engine(plan, opts)
    if engine == "nvrtc":
        try:
            return _build_keyed(plan, archs, {**parts, "engine": "nvrtc", "nvrtc": nvrtc.version()}, opts, "nvrtc",
                                [], t0)
        except nvrtc.NvrtcError as e:
            # An error in the user's code is reported at once (nvcc would say the same, a second
            # later); one that only NVRTC has (a header it lacks, host code) goes to nvcc instead.
            if opts.engine == "nvrtc" or not nvrtc.only_nvrtc_fails(e.log, list(_sources_by_path(plan))):
                raise diagnostics.compile_error(_what(plan, archs, "NVRTC"), e.log, _sources_by_path(plan)) from None
            why = f"NVRTC could not compile it ({_first_error(e.log)})"
    notes = [f"built with nvcc: {why}"] if why else []
    return _build_keyed(plan, archs, parts, opts, "nvcc", notes, t0)


def choose_engine(plan: codegen.Plan, opts: Options) -> tuple[str, str]:
    """Which compiler builds the plan's CUDA code, and (for nvcc, where NVRTC was a candidate) why.

    ``auto`` takes NVRTC for a kernel-only ``.cu`` it can compile (:func:`nvrtc.unsuitable`) and nvcc
    for everything else; ``nvrtc`` refuses what NVRTC cannot build, naming why and the fix.

    Raises:
        SnippetError: ``engine`` is unknown, or ``"nvrtc"`` for a snippet NVRTC cannot build.
    """
    if opts.engine not in ENGINES:
        raise SnippetError(f"engine={opts.engine!r}: use one of {', '.join(map(repr, ENGINES))}")
    if opts.engine == "nvcc" or not plan.cuda:
        return "nvcc", ""
    flags = [*opts.cflags, *opts.cuda_cflags, *opts.ldflags]
    why = (nvrtc.unsuitable(plan) or (f"compiler flags given ({' '.join(flags)})" if flags else None)
           or nvrtc.unavailable())
    if why is None:
        return "nvrtc", ""
    if opts.engine == "nvrtc":
        raise SnippetError(f"engine='nvrtc' cannot build {_names(plan)}: {why}; "
                           f"use engine='auto' or 'nvcc'")
    return "nvcc", why if plan.kind == "kernel" else ""


def _first_error(log: str) -> str:
    line = next((ln for ln in log.splitlines() if "error" in ln), log.strip().splitlines()[0] if log.strip() else "")
    return line.strip()[:200]


def _build_keyed(plan: codegen.Plan, archs: list[str], parts: dict, opts: Options, engine: str, notes: list[str],
                 t0: float) -> Build:
    """Find the build of this key in the cache, or make it under the key's lock."""
    key = cache.build_key(parts)
    name = cache.module_name(plan.stem, key)
    folder = cache.entry_dir(name)
    manifest = _trusted_manifest(folder, name)
    if manifest is not None:
        return Build(name, folder, plan, manifest, True, time.perf_counter() - t0, archs)
    if engine == "nvcc":
        toolchain.check(plan.cuda, opts.compile_only)

    with cache.build_lock(name):  # says whom it waits for; a CacheError if the cache cannot be written
        manifest = _trusted_manifest(folder, name, quiet=True)  # another process may have finished it
        if manifest is not None:
            return Build(name, folder, plan, manifest, True, time.perf_counter() - t0, archs)
        # Silent when quick; past $JITLAB_PROGRESS_AFTER seconds a line, a live line naming what compiles, a line.
        with progress.Step(f"building {_what(plan, archs, 'NVRTC' if engine == 'nvrtc' else 'nvcc')}",
                           f"built {_names(plan)}"):
            for note in notes:
                progress.say(f"jitlab: {note}")
            cache.reset_dir(folder)
            if engine == "nvrtc":
                manifest = _build_nvrtc(plan, folder, archs, opts)
            elif plan.units:
                manifest = _build_objects(plan, name, folder, archs, opts)
            elif opts.compile_only:
                manifest = _compile_only(plan, name, folder, archs, opts)
            else:
                manifest = _load_inline(plan, name, folder, archs, opts)
            manifest["notes"] = [*notes, *manifest.get("notes", [])]
            manifest.update(seconds=round(time.perf_counter() - t0, 3), archs=archs, kind=plan.kind, engine=engine,
                            sources=[str(f.path) for f in plan.files], built_at=time.time())
            cache.write_manifest(folder, manifest)
    if config.verbose():
        print((folder / "build.log").read_text(errors="replace"), file=sys.stderr)
    return Build(name, folder, plan, manifest, False, time.perf_counter() - t0, archs)


def _build_nvrtc(plan: codegen.Plan, folder: Path, archs: list[str], opts: Options) -> dict:
    """A kernel-only ``.cu`` compiled in process by NVRTC: one CUBIN per arch, the first one the artifact."""
    cubins = nvrtc.compile_cubins(plan, archs, opts.defines, opts.debug)
    files = {}
    for c in cubins:
        path = folder / f"{plan.stem}.{c.arch}.cubin"
        path.write_bytes(c.code)
        files[c.arch] = path.name
    log = "\n".join(c.log for c in cubins)
    (folder / "build.log").write_text(log)
    resources = parse_resource_usage(log)
    for c in cubins:  # some cuda.core versions hand over no log for a clean compile: read the CUBIN
        if not all(c.arch in resources.get(k, {}) for k in c.names):
            for kernel, per_arch in nvrtc.resource_usage(folder / files[c.arch], c.arch).items():
                resources.setdefault(_demangle(kernel), {}).update(per_arch)
    first = folder / files[archs[0]]
    return {"artifact": first.name, "size": first.stat().st_size, "sha256": cache.file_sha256(first),
            "cubins": files, "kernels": cubins[0].names, "resources": resources,
            "compile_only": opts.compile_only, "nvrtc": nvrtc.version()}


def _trusted_manifest(folder: Path, name: str, quiet: bool = False) -> dict | None:
    manifest = cache.read_manifest(folder)
    if manifest is None:
        return None
    problem = cache.verify_artifact(folder, manifest)
    if problem:
        if not quiet:
            warnings.warn(f"jitlab: cached build {name} is corrupt ({problem}); rebuilding", stacklevel=3)
        return None
    return manifest


def _flags(plan: codegen.Plan, archs: list[str], opts: Options) -> tuple[list[str], list[str]]:
    defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()]
    # Optimize kernel-only C++ (a tiny unit, it is the kernel); torch-style units keep load_inline's
    # defaults, so they build no slower than plain load_inline. nvcc optimizes device code by default.
    cflags = [*(["-O2"] if plan.kind == "kernel" else []), *defines, *opts.cflags]
    # -lineinfo maps every SASS instruction to the snippet's line (through codegen's #line
    # directives) at no run-time cost, so compute-sanitizer, ncu and `jitlab inspect` name the
    # user's file and line without a second build. -G implies it.
    cuda = [*toolchain.gencode_flags(archs), "--resource-usage", "-G" if opts.debug else "-lineinfo",
            *defines, *opts.cuda_cflags]
    if opts.debug:
        cflags += ["-g", "-O0", "-UNDEBUG"]
        cuda += ["-UNDEBUG"]
    if plan.kind == "kernel":
        # torch's nvcc flags disable CUDA's half/bfloat16 operators to avoid clashes with its own
        # types; a kernel-only unit has no torch headers, so give the user CUDA's defaults back.
        cuda = ["-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
                "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_HALF2_OPERATORS__", *cuda]
    return cflags, cuda


def _names(plan: codegen.Plan) -> str:
    return ", ".join(diagnostics._short(str(f.path)) for f in plan.files)


def _what(plan: codegen.Plan, archs: list[str], compiler: str = "nvcc") -> str:
    tool = f"{compiler}, {'/'.join(archs)}" if plan.cuda else "c++"
    return f"{_names(plan)} ({tool})"


def _sources_by_path(plan: codegen.Plan) -> dict[str, str]:
    return {str(f.path): f.text for f in plan.files}


def _load_inline(plan: codegen.Plan, name: str, folder: Path, archs: list[str], opts: Options) -> dict:
    """Compile and link with ``torch.utils.cpp_extension.load_inline`` into ``folder``."""
    from torch.utils import cpp_extension

    cflags, cuda_cflags = _flags(plan, archs, opts)
    _forget_name(name)
    ok = False
    with output.capture_fds() as box:
        try:
            cpp_extension.load_inline(
                name=name,
                cpp_sources=plan.cpp_sources,
                cuda_sources=plan.cuda_sources or None,
                functions=plan.functions,
                extra_cflags=cflags,
                extra_cuda_cflags=cuda_cflags if plan.cuda else None,
                extra_ldflags=[*toolchain.runtime_ldflags(), *opts.ldflags],
                extra_include_paths=[_ninja_escape(d) for d in plan.include_dirs],
                build_directory=str(_ninja_folder(folder)),
                verbose=True,
                with_cuda=plan.cuda,
                is_python_module=plan.kind == "torch",
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
        raise diagnostics.compile_error(_what(plan, archs), log or str(err), _sources_by_path(plan)) from None
    so = folder / f"{name}.so"
    return {"artifact": so.name, "size": so.stat().st_size, "sha256": cache.file_sha256(so),
            "resources": parse_resource_usage(log), "compile_only": False}


def _ninja_escape(flag: str) -> str:
    """A flag as ``build.ninja`` must spell it: torch quotes flags for the shell, but ninja reads ``$`` first."""
    return flag.replace("$", "$$")


#: What torch's ``build.ninja`` cannot hold in a source's path: it escapes spaces only, ninja reads ``$`` and ``:``.
_NINJA_UNSAFE = ("$", ":", "\n")


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
    root = Path(tempfile.gettempdir()) / f"jitlab-ninja-{os.getuid()}"
    try:
        root.mkdir(mode=0o700, exist_ok=True)
        st = root.lstat()
    except OSError as e:
        raise ToolchainError(f"jitlab: the build cache {folder.parent} has a character ninja cannot read, and "
                             f"{root} cannot be made for a link to it ({e}); {fix}") from e
    if any(c in str(root) for c in _NINJA_UNSAFE) or not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        raise ToolchainError(f"jitlab: the build cache {folder.parent} has a character ninja cannot read, and "
                             f"{root} is not a private folder of yours to link it from; {fix}")
    link = root / hashlib.sha256(str(folder.parent).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    tmp = root / f".{link.name}.{os.getpid()}.{threading.get_ident()}"
    tmp.unlink(missing_ok=True)
    os.symlink(folder.parent, tmp)
    os.replace(tmp, link)  # atomic: a concurrent build sees the old link or this one, both to the same folder
    return link / folder.name


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


def _compile_only(plan: codegen.Plan, name: str, folder: Path, archs: list[str], opts: Options) -> dict:
    """Compile the CUDA unit to an object with nvcc (the flags load_inline would use), no link, no load."""
    if not plan.cuda:
        raise SnippetError(f"{_what(plan, archs)}: compile_only applies to CUDA snippets; C++ snippets build and run here")
    src = folder / "cuda.cu"
    src.write_text("\n".join(plan.cuda_sources))
    cmd = nvcc_command(plan, name, archs, opts, ["-c", str(src), "-o", str(folder / "cuda.o")])
    proc = subprocess.run(cmd, capture_output=True, text=True)
    log = " ".join(cmd) + "\n" + proc.stdout + proc.stderr
    (folder / "build.log").write_text(log)
    if proc.returncode != 0:
        raise diagnostics.compile_error(_what(plan, archs), log, _sources_by_path(plan))
    obj = folder / "cuda.o"
    return {"artifact": obj.name, "size": obj.stat().st_size, "sha256": cache.file_sha256(obj),
            "resources": parse_resource_usage(log), "compile_only": True}


def nvcc_command(plan: codegen.Plan, name: str, archs: list[str], opts: Options, what: list[str]) -> list[str]:
    """nvcc with the flags load_inline would use for the plan's CUDA unit.

    Args:
        name: The module name (``-DTORCH_EXTENSION_NAME``).
        what: The input and what to make, e.g. ``["-c", "cuda.cu", "-o", "cuda.o"]`` or
            ``["-ptx", "cuda.cu", "-o", "cuda.ptx"]``.
    """
    from torch.utils import cpp_extension

    includes = [f"-I{d}" for d in plan.include_dirs]
    if plan.device_needs_torch:
        includes += _torch_includes("-isystem=")
    return [toolchain.nvcc_path(), *what, f"-DTORCH_EXTENSION_NAME={name}", *includes, *_nvcc_flags(plan, archs, opts)]


def _torch_defines() -> list[str]:
    return ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={toolchain.fingerprint(False)['abi']}"]


def _torch_includes(prefix: str) -> list[str]:
    from torch.utils import cpp_extension

    return [f"{prefix}{d}" for d in cpp_extension.include_paths("cpu") + [_python_include()]]


def _nvcc_flags(plan: codegen.Plan, archs: list[str], opts: Options) -> list[str]:
    """nvcc flags without inputs, outputs or include folders: load_inline's, then the build's."""
    from torch.utils import cpp_extension

    _, cuda_cflags = _flags(plan, archs, opts)
    return [*_torch_defines(), *cpp_extension.COMMON_NVCC_FLAGS, "--compiler-options", "-fPIC", *cuda_cflags,
            "-std=c++20"]


def object_flags(plan: codegen.Plan, archs: list[str], opts: Options) -> objects.Flags:
    """The flags of a torch-style build's units: the ones ``load_inline`` would use, split by compiler."""
    import torch

    cflags, _ = _flags(plan, archs, opts)
    user = [f"-I{d}" for d in plan.include_dirs]
    cuda_include = [f"-isystem{toolchain.cuda_home() / 'include'}"] if plan.cuda else []
    debug = ["-g", "-O0", "-UNDEBUG"] if opts.debug else []
    # The precompiled header is made with the base flags (a debug build gets its own); the user's
    # defines and cflags come after. GCC checks that they leave the header valid and, if not, reads
    # the headers themselves (slow, never wrong; -Winvalid-pch says so in the log).
    cxx = [*_torch_includes("-isystem"), *_torch_defines(), "-fPIC", "-std=c++20", *debug]
    user_cflags = [f for f in cflags if f not in debug]
    lib = Path(torch.__file__).parent / "lib"
    ld = [f"-L{lib}", "-lc10", *(["-lc10_cuda"] if plan.cuda else []), "-ltorch_cpu",
          *(["-ltorch_cuda"] if plan.cuda else []), "-ltorch", "-ltorch_python"]
    if plan.cuda:
        ld += [f"-L{toolchain.cuda_lib_dir()}", "-lcudart"]
    nvcc = _nvcc_flags(plan, archs, opts) if plan.cuda else []
    return objects.Flags(includes=tuple(user), cxx=tuple(cxx), cuda_include=tuple(cuda_include),
                         cxx_user=tuple(user_cflags), nvcc=tuple(nvcc), nvcc_torch=tuple(_torch_includes("-isystem=")),
                         ld=(*ld, *toolchain.runtime_ldflags(), *opts.ldflags), toolchain=tuple(sorted(toolchain.fingerprint(plan.cuda).items())))


def _build_objects(plan: codegen.Plan, name: str, folder: Path, archs: list[str], opts: Options) -> dict:
    """A torch-style build: each unit compiled once into the object cache, then linked (or, compile-only,
    kept as one relocatable object)."""
    for note in plan.notes:
        progress.say(f"jitlab: {note}")
    flags = object_flags(plan, archs, opts)
    if opts.compile_only and not plan.cuda:
        raise SnippetError(f"{_what(plan, archs)}: compile_only applies to CUDA snippets; C++ snippets build and run here")
    objs = objects.compile_all(plan.units, flags, plan.stem, _sources_by_path(plan))
    notes = [*plan.notes, *(f"{o.unit.name} compiled with all of torch/extension.h: it names something outside "
                            f"jitlab's smaller precompiled header set ({o.unit.headers}), so its edits take longer"
                            for o in objs if o.headers == "full" and o.unit.headers != "full")]
    for note in notes[len(plan.notes):]:
        progress.say(f"jitlab: {note}")
    log = "\n".join(o.log for o in objs)
    (folder / "build.log").write_text(log)
    if opts.compile_only:
        artifact = objects.relocatable(objs, folder)
    else:
        try:
            artifact = objects.link(objs, name, folder, flags)
        except objects.UnitError as e:
            raise diagnostics.compile_error(f"{_what(plan, archs)} (link)", e.log, _sources_by_path(plan)) from None
    return {"artifact": artifact.name, "size": artifact.stat().st_size, "sha256": cache.file_sha256(artifact),
            "resources": parse_resource_usage("\n".join(o.log for o in objs if o.unit.compiler == "nvcc")),
            "compile_only": opts.compile_only, "notes": notes,
            "units": [{"name": o.unit.name, "compiler": o.unit.compiler, "cached": o.cached,
                       "seconds": round(o.seconds, 3), "headers": o.headers} for o in objs]}


def _python_include() -> str:
    import sysconfig

    return sysconfig.get_path("include")


_RU_LINE = re.compile(r"Used (\d+) registers")


def parse_resource_usage(log: str) -> dict:
    """Per-kernel, per-arch resource usage from nvcc ``--resource-usage`` output.

    Returns:
        ``{kernel: {arch: {"registers", "shared", "local", "constant", "spill_stores", "spill_loads", "stack"}}}``
        keyed by the demangled kernel name.
    """
    usage: dict[str, dict[str, dict]] = {}
    current: tuple[str, str] | None = None
    spills: dict[tuple[str, str], dict] = {}
    for line in log.splitlines():
        m = re.search(r"Compiling entry function '(\S+)' for '(\S+)'", line)
        if m:
            current = (m.group(1), m.group(2))
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and current:
            spills[current] = {"stack": int(m.group(1)), "spill_stores": int(m.group(2)), "spill_loads": int(m.group(3))}
            continue
        m = _RU_LINE.search(line)
        if m and current:
            rec = {"registers": int(m.group(1)), "shared": 0, "local": 0, "constant": 0}
            for amount, what in re.findall(r"(\d+) bytes (smem|lmem|cmem\[\d+\])", line):
                if what == "smem":
                    rec["shared"] += int(amount)
                elif what == "lmem":
                    rec["local"] += int(amount)
                else:
                    rec["constant"] += int(amount)
            rec.update(spills.get(current, {"stack": 0, "spill_stores": 0, "spill_loads": 0}))
            usage.setdefault(_demangle(current[0]), {})[current[1]] = rec
            current = None
    return usage


def _demangle(symbol: str) -> str:
    """``_Z5saxpyPfPKffi`` → ``saxpy``: the unqualified name is what Python calls it by."""
    m = re.match(r"_Z(?:N(?:\d+\w+?)*)?(\d+)", symbol)
    if not m or not symbol.startswith("_Z"):
        return symbol
    if symbol.startswith("_ZN"):
        rest, last = symbol[3:], symbol
        while rest and rest[0].isdigit():
            n = int(re.match(r"\d+", rest).group())
            digits = len(str(n))
            last, rest = rest[digits:digits + n], rest[digits + n:]
        return last
    n = int(m.group(1))
    start = 2 + len(m.group(1))
    return symbol[start:start + n]
