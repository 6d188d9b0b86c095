"""Build and cache: a plan → a build folder named by its key → a binary, compiled at most once.

``build()`` is the single entry point. A cache hit parses and hashes the snippet (milliseconds) and
compiles nothing; a miss takes a per-build lock, compiles with the engine it chose (NVRTC in process,
the object cache's units, or :mod:`jitlab.jit.inline`'s ``load_inline``/nvcc) and writes the manifest
last. What goes into the key comes from :mod:`jitlab.jit.sources` (files and headers) and
:mod:`jitlab.jit.flags` (options and flags).
"""

from __future__ import annotations

import subprocess
import sys
import time
import dataclasses
from dataclasses import dataclass
from pathlib import Path

from jitlab import config, progress
from jitlab.errors import SnippetError
from jitlab.jit import cache, codegen, deps, diagnostics, inline, linker, nvrtc, objects, pch, shellwords, toolchain, torch_headers
from jitlab.jit import flags as flags_mod
from jitlab.jit.flags import (
    ENGINES,
    Options,
    object_flags,
)
from jitlab.jit.plan import Manifest
from jitlab.jit.parse import parse_file
from jitlab.jit.resources import demangle, parse_resource_usage
from jitlab.jit.sources import (
    collect_sources,
    describe,
    file_names,
    local_headers,
    sources_by_path,
    user_include_dirs,
    with_header_deps,
)


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
    manifest: Manifest
    cached: bool
    seconds: float
    archs: list[str]

    @property
    def artifact(self) -> Path:
        return self.folder / self.manifest.artifact

    @property
    def compile_only(self) -> bool:
        return bool(self.manifest.compile_only)

    @property
    def resources(self) -> dict:
        """Per-kernel resource usage from ptxas: registers, shared/local/constant memory, spills."""
        return self.manifest.resources or {}

    @property
    def registers(self) -> str:
        """Each kernel's registers per thread (the most over its archs), one phrase: ``saxpy: 10 registers``."""
        return ", ".join(f"{k}: {max(a['registers'] for a in per.values())} registers"
                         for k, per in sorted(self.resources.items()))

    @property
    def engine(self) -> str:
        """``"nvrtc"`` or ``"nvcc"``: what compiled the CUDA code; ``"c++"`` for a snippet without CUDA."""
        return (self.manifest.engine or "nvcc") if self.plan.cuda else "c++"

    @property
    def notes(self) -> list[str]:
        """One line for each choice the build made that a user may want to know (engine, split, headers)."""
        return list(self.plan.notes if self.manifest.notes is None else self.manifest.notes)

    @property
    def log(self) -> str:
        """The compiler output of the build (warnings and ptxas resource usage)."""
        p = self.folder / "build.log"
        return p.read_text(errors="replace") if p.is_file() else ""


def snippet_files(paths) -> tuple[list, str]:
    """The front of every build: the snippet's files, parsed, and its name (its module's and folder's stem)."""
    files = [parse_file(p) for p in collect_sources(paths)]
    return files, codegen.stem_of([Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)])


def flag_parts(opts: Options, with_cuda: bool = False) -> list:
    """The key's part for what the command lines get from the user: defines, host, nvcc and linker flags
    (:func:`find_or_build` reads the linker's, index 3, for the libraries it names)."""
    return [sorted((k, str(v)) for k, v in opts.defines.items()), opts.cflags, opts.cuda_cflags, opts.ldflags,
            *(["with_cuda"] if with_cuda else [])]


def prepare(paths, opts: Options) -> tuple[codegen.Plan, list[str], dict]:
    """Parse and plan a snippet; return the plan, the archs and the key's parts. Compiles nothing."""
    files, stem = snippet_files(paths)
    try:
        plan = codegen.plan(files, stem, opts.mode, opts.defines)
    except codegen.NothingToCall:
        if any(f.parse_error for f in files):
            compiler_first(files, opts)  # a syntax error the parser stumbled on: the compiler's message
        raise
    user_dirs = user_include_dirs(opts)
    per_file = {str(f.path): local_headers([f], plan.include_dirs, user_dirs) for f in files}
    plan.units = with_header_deps(plan.units, per_file)
    archs: list[str] = []
    if plan.cuda:
        archs = ([toolchain.normalize_arch(a) for a in opts.arch] if opts.arch else
                 shellwords.archs_named(opts.cuda_cflags) or [toolchain.current_arch()])  # the user's -gencode
        toolchain.check_archs(archs)
    parts = {
        "format": config.FORMAT_VERSION,
        "kind": plan.kind,
        "cpp": plan.cpp_sources,
        "cuda": plan.cuda_sources,
        "functions": plan.functions,
        "units": [(u.name, u.compiler, u.text, u.torch, u.module, sorted(u.templates)) for u in plan.units],
        "include_dirs": plan.include_dirs,
        "headers": {path: digest for headers in per_file.values() for path, digest in headers.items()},
        "flags": flag_parts(opts, opts.with_cuda and not plan.cuda),
        "archs": archs,
        "compile_only": opts.compile_only,
        "debug": opts.debug,
        "toolchain": toolchain.fingerprint(plan.cuda),
    }
    return plan, archs, parts


def compiler_first(files, opts: Options) -> None:
    """Compile files the parser could not read (syntax only, no output) so that a syntax error is the
    compiler's own message at the user's line, not "nothing found" where the parser stopped.

    Raises:
        CompileError: The compiler rejected a file.
    """
    for f in files:
        cuda = f.language == "cuda"
        tool = toolchain.nvcc_path() if cuda else toolchain.cxx_path()
        if tool is None:
            continue
        includes = [f"-I{f.path.parent}", *(f"-I{d}" for d in user_include_dirs(opts)),
                    *(flags_mod.torch_include_flags(cuda) if f.uses_torch else ())]
        defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()]
        mode = (["-c", "-o", "/dev/null", f"-arch={toolchain.oldest_arch()}", "-std=c++17"]
                if cuda else ["-fsyntax-only", "-std=c++17"])
        proc = subprocess.run([tool, *mode, *includes, *defines, str(f.path)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise diagnostics.compile_error(f"{f.path} ({'nvcc' if cuda else 'c++'})", proc.stdout + proc.stderr,
                                            {str(f.path): f.text})


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
            if opts.engine == "nvrtc" or not nvrtc.only_nvrtc_fails(e.log, list(sources_by_path(plan))):
                raise diagnostics.compile_error(describe(plan, archs, "NVRTC"), e.log, sources_by_path(plan)) from None
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
        raise SnippetError(f"engine='nvrtc' cannot build {file_names(plan)}: {why}; "
                           f"use engine='auto' or 'nvcc'")
    return "nvcc", why if plan.kind == "kernel" else ""


def _first_error(log: str) -> str:
    line = next((ln for ln in log.splitlines() if "error" in ln), log.strip().splitlines()[0] if log.strip() else "")
    return line.strip()[:200]


def _build_keyed(plan: codegen.Plan, archs: list[str], parts: dict, opts: Options, engine: str, notes: list[str],
                 t0: float) -> Build:
    """Find the build of this key in the cache, or make it under the key's lock with ``engine``."""

    def make(name: str, folder: Path) -> Manifest:
        if engine == "nvrtc":
            return _build_nvrtc(plan, folder, archs, opts)
        if plan.units:
            return _build_objects(plan, name, folder, archs, opts)
        if opts.compile_only:
            return inline.compile_only(plan, name, folder, archs, opts)
        return inline.load_inline(plan, name, folder, archs, opts)

    return find_or_build(plan, archs, parts, make, compiler="NVRTC" if engine == "nvrtc" else "nvcc", notes=notes,
                         t0=t0, before=(lambda: toolchain.check(plan.cuda, opts.compile_only, ninja=not plan.units)) if engine == "nvcc" else None,
                         extra={"engine": engine})


def find_or_build(plan: codegen.Plan, archs: list[str], parts: dict, make, *, compiler: str = "nvcc",
                  notes: list[str] = (), t0: float | None = None, before=None, extra: dict | None = None) -> Build:
    """The one find-or-build of every build kind: the entry of ``parts``' key, or ``make`` it under its lock.

    :func:`cache.find_or_make` with a progress line: a hit is an entry whose artifact matches its
    manifest and whose recorded inputs (every file the compiler read, the libraries in ``ldflags``)
    are unchanged; a miss compiles under the key's lock, into the key's folder or a new candidate's.

    Args:
        plan: What is built (its files name the progress line and the errors).
        archs: The archs built for.
        parts: Everything that changes the binary; hashed into the key.
        make: ``make(name, folder) -> manifest``: compiles into ``folder``; the manifest names ``artifact``,
            its ``size`` and ``sha256``, and under ``read`` the files the compiler reported reading.
        compiler: What compiles it, for the progress line.
        notes: Lines shown while it builds and kept in the manifest.
        t0: When the build call started (default now).
        before: Called before a miss takes the lock (a toolchain check).
        extra: Further manifest entries.

    Returns:
        The build; ``cached`` says whether anything was compiled.
    """
    t0 = time.perf_counter() if t0 is None else t0
    name = cache.module_name(plan.stem, cache.build_key(parts))

    def made(target: str, folder: Path) -> Manifest:
        # Silent when quick; past $JITLAB_PROGRESS_AFTER seconds a line, a live line naming what compiles, a line.
        with progress.Step(f"building {describe(plan, archs, compiler)}", f"built {file_names(plan)}"):
            for note in notes:
                progress.say(f"jitlab: {note}")
            manifest = make(target, folder)
        return dataclasses.replace(manifest, notes=[*notes, *(manifest.notes or [])], archs=archs, kind=plan.kind,
                                   seconds=round(time.perf_counter() - t0, 3), built_at=time.time(),
                                   sources=[str(f.path) for f in plan.files], **(extra or {}))

    entry = cache.find_or_make(name, made, known=parts.get("headers", {}), keep=plan.include_dirs,
                               reads=deps.ldflag_inputs(parts["flags"][3]), skip=[str(f.path) for f in plan.files],
                               before=before, warn=True)
    if not entry.cached and config.verbose():
        print((entry.folder / "build.log").read_text(errors="replace"), file=sys.stderr)
    return Build(entry.name, entry.folder, plan, entry.manifest, entry.cached, time.perf_counter() - t0, archs)


def _build_nvrtc(plan: codegen.Plan, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """A kernel-only ``.cu`` compiled in process by NVRTC: one CUBIN per arch, the first one the artifact."""
    cubins = nvrtc.compile_cubins(plan, archs, opts.defines, opts.debug)
    cu = next(f for f in plan.files if f.language == "cuda")
    read = deps.scanned_includes(cu.text, cu.path.parent, nvrtc.include_path(plan), opts.defines)
    if read is None:
        read = _nvcc_reads(plan, folder, opts)
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
                resources.setdefault(demangle(kernel), {}).update(per_arch)
    first = folder / files[archs[0]]
    return cache.made(first, cubins=files, kernels=cubins[0].names, resources=resources,
                      compile_only=opts.compile_only, nvrtc=nvrtc.version(), read=read)


def _nvcc_reads(plan: codegen.Plan, folder: Path, opts: Options) -> list[str]:
    """What an NVRTC build read, where a computed include names a macro jitlab cannot follow: nvcc's
    ``-M`` on the same text (a tenth of a second or so)."""
    nvcc = toolchain.nvcc_path()
    if not nvcc:
        return []
    src = folder / "nvrtc.cu"
    src.write_text(nvrtc.source(plan), encoding="utf-8", errors="surrogateescape")
    defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()]
    return deps.preprocessor_deps([nvcc, "-x", "cu", *(f"-I{d}" for d in nvrtc.include_path(plan)), *defines],
                                  src, folder)


def _build_objects(plan: codegen.Plan, name: str, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """A torch-style build: each unit compiled once into the object cache, then linked (or, compile-only,
    kept as one relocatable object)."""
    for note in plan.notes:
        progress.say(f"jitlab: {note}")
    flags = object_flags(plan, archs, opts)
    if opts.compile_only and not plan.cuda:
        raise SnippetError(f"{describe(plan, archs)}: compile_only applies to CUDA snippets; C++ snippets build and run here")
    torch_headers.check_cuda_includes(sources_by_path(plan), (*flags.includes, *flags.cxx, *flags.cuda_include))
    objs = objects.compile_all(plan.units, flags, plan.stem, sources_by_path(plan))
    notes = [*plan.notes, *(f"{o.unit.name} compiled with all of torch/extension.h: it names something outside "
                            f"jitlab's smaller precompiled header set ({o.unit.headers}), so its edits take longer"
                            for o in objs if o.headers == "full" and o.unit.headers != "full")]
    notes += [n for n in [pch.ignored_note({o.unit.name: o.log for o in objs})] if n]
    for note in notes[len(plan.notes):]:
        progress.say(f"jitlab: {note}")
    log = "\n".join(o.log for o in objs)
    (folder / "build.log").write_text(log)
    t_link = time.perf_counter()
    if opts.compile_only:
        artifact = linker.relocatable(objs, folder)
    else:
        try:
            artifact = linker.link(objs, name, folder, flags)
        except objects.UnitError as e:
            raise diagnostics.compile_error(f"{describe(plan, archs)} (link)", e.log, sources_by_path(plan)) from None
    return cache.made(artifact, resources=parse_resource_usage("\n".join(o.log for o in objs if o.unit.compiler == "nvcc")),
                      compile_only=opts.compile_only, notes=notes, read=[p for o in objs for p in o.read or ()],
                      link_seconds=round(time.perf_counter() - t_link, 3), unstable=any(o.read is None for o in objs),
                      units=[{"name": o.unit.name, "compiler": o.unit.compiler, "cached": o.cached,
                              "seconds": round(o.seconds, 3), "headers": o.headers} for o in objs])
