"""Build and cache: a plan → a build folder named by its key → a binary, compiled at most once.

:func:`build` is the one entrance of every build kind. :func:`prepare` plans the snippet (kernel-only,
torch-style, a whole program, a CPU-emulator build) and gives the key's parts; :func:`choose_engine`
picks the engine (:mod:`jitlab.jit.engines`: NVRTC, the object cache, ninja, compile-only, program, the
CPU emulator), the one place that chooses between the GPU and the CPU emulator; :func:`find_or_build`
finds the key's entry, or has the engine make it under the key's lock (:func:`jitlab.jit.cache.find_or_make`).
A cache hit parses and hashes the snippet (milliseconds) and compiles nothing. What goes into the key
comes from :mod:`jitlab.jit.sources` (files and headers), :mod:`jitlab.jit.flags` (options and flags)
and the engine's ``key_parts``.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

from jitlab import config, progress
from jitlab.errors import SnippetError
from jitlab.jit import cache, codegen, deps, diagnostics, emulator_support, shellwords, toolchain
from jitlab.jit import flags as flags_mod
# The kernel-only engine; the others are imported when chosen (:func:`choose_engine`): a kernel-only cache hit
# in a new process imports none of them (~10 ms of `import jitlab`).
from jitlab.jit.engines import nvrtc
from jitlab.jit.flags import ENGINES, Options
from jitlab.jit.parse import parse_file
from jitlab.jit.plan import Build, KernelPlan, Manifest, Plan, ProgramPlan, TorchPlan
from jitlab.jit.sources import (
    collect_sources,
    describe,
    file_names,
    local_headers,
    sources_by_path,
    user_include_dirs,
    with_header_deps,
)


def snippet_files(paths) -> tuple[list, str]:
    """The front of every build: the snippet's files, parsed, and its name (its module's and folder's stem)."""
    files = [parse_file(p) for p in collect_sources(paths)]
    return files, codegen.stem_of([Path(p) for p in ([paths] if isinstance(paths, (str, Path)) else paths)])


def flag_parts(opts: Options, with_cuda: bool = False) -> list:
    """The key's part for what the command lines get from the user: defines, host, nvcc and linker flags
    (:func:`find_or_build` reads the linker's, index 3, for the libraries it names)."""
    return [sorted((k, str(v)) for k, v in opts.defines.items()), opts.cflags, opts.cuda_cflags, opts.ldflags,
            *(["with_cuda"] if with_cuda else [])]


def on_emulator(files, opts: Options) -> bool:
    """The CPU-or-GPU choice: whether the snippet builds for the CPU emulator.

    ``device="cpu"``: whenever there is CUDA code to emulate. ``device="auto"`` (the default): on a machine
    without a CUDA GPU, for a kernel-only ``.cu`` the emulator runs (no torch, nothing it refuses), unless
    compile-only or an arch is named (``arch="sm_75"`` asks for that GPU's build, as the tuner's pruning
    does). Otherwise the GPU's build: a torch-style snippet keeps it, and a C++ snippet runs on the CPU
    either way, in its own build.
    """
    if opts.mode == "program" or not any(f.language == "cuda" for f in files):
        return False
    if opts.device != "auto":
        return opts.device == "cpu"
    return (not opts.compile_only and not opts.arch and opts.mode != "torch" and not toolchain.gpu_available()
            and not emulator_support.available() and not emulator_support.refused(files))


#: What a process is told, once, when ``device="auto"`` runs a snippet on the CPU emulator.
ON_THE_EMULATOR = ("jitlab: no CUDA GPU here, so kernel-only .cu snippets run on the CPU emulator (CPU tensors, "
                   "untimed); to compile for a GPU instead: device=\"cuda\", compile_only=True (--device cuda --compile-only)")
_told = False


def tell_once_on_the_emulator() -> None:
    """Say :data:`ON_THE_EMULATOR` in one line, the first time in this process."""
    global _told
    if not _told:
        _told = True
        progress.say(ON_THE_EMULATOR)


def prepare(paths, opts: Options) -> tuple[Plan, list[str], dict]:
    """Parse and plan a snippet; return the plan, the archs and the key's parts. Compiles nothing.

    Every kind is planned here: a kernel-only or torch-style snippet (:func:`codegen.plan`), a whole
    program (``mode="program"``, :func:`program_plan`), a build for the CPU emulator
    (:func:`emulator_support.plan`). The engine adds its own parts to the key (``key_parts``).
    """
    files, stem = snippet_files(paths)
    emulated = on_emulator(files, opts)
    if emulated and opts.device == "auto":
        tell_once_on_the_emulator()
    if opts.mode == "program":
        plan = program_plan(files, stem)
    else:
        try:
            plan = emulator_support.plan(files, stem, opts) if emulated else codegen.plan(files, stem, opts.mode, opts.defines)
        except codegen.NothingToCall:
            compiler_first(files, opts)  # the parser found nothing: the compiler's message, if it has one
            raise
    user_dirs = user_include_dirs(opts)
    per_file = {str(f.path): local_headers([f], plan.include_dirs, user_dirs) for f in files}
    if isinstance(plan, TorchPlan):
        plan.units = with_header_deps(plan.units, per_file)
    archs = [] if emulated else _archs(plan, opts)
    parts = {
        "format": config.FORMAT_VERSION,
        "kind": plan.kind,
        **compiled_parts(plan),
        "include_dirs": plan.include_dirs,
        "headers": {path: digest for headers in per_file.values() for path, digest in headers.items()},
        "flags": flag_parts(opts, opts.with_cuda and not plan.cuda),
        "archs": archs,
        "compile_only": opts.compile_only,
        "debug": opts.debug,
        "toolchain": toolchain.fingerprint(plan.cuda and not emulated),
    }
    return plan, archs, parts


def compiled_parts(plan: Plan) -> dict:
    """The key's part for what the plan compiles: a kernel-only plan's two sources, a torch-style plan's units
    (each with what decides how it compiles); none for a program, whose engine keys its files as they are."""
    if isinstance(plan, KernelPlan):
        return {"cpp": plan.cpp_sources, "cuda": plan.cuda_sources}
    if isinstance(plan, TorchPlan):
        return {"units": [(u.name, u.compiler, u.text, u.torch, u.module, sorted(u.templates)) for u in plan.units]}
    return {}


def program_plan(files, stem: str) -> ProgramPlan:
    """The plan of a whole program: its files compiled as they are, nothing generated.

    Raises:
        SnippetError: No file defines ``main``.
    """
    if not any(f.has_main for f in files):
        raise SnippetError(f"{', '.join(str(f.path) for f in files)}: no `int main` here, so nothing to run; "
                           f"a program defines main(), a snippet's kernels load with jitlab.load")
    return ProgramPlan(stem=stem, cuda=any(f.language == "cuda" for f in files), files=files,
                       include_dirs=list(dict.fromkeys(str(f.path.parent) for f in files)))


def _archs(plan: Plan, opts: Options) -> list[str]:
    """The archs a GPU build compiles for: ``arch=``, else the user's ``-gencode`` (a program's stand alone
    in its command), else this GPU's."""
    if not plan.cuda:
        return []
    if opts.arch:
        archs = [toolchain.normalize_arch(a) for a in opts.arch]
    else:
        archs = (shellwords.archs_named(opts.cuda_cflags) if plan.kind != "program" else []) or [toolchain.current_arch()]
    if plan.kind != "program":
        toolchain.check_archs(archs)
    return archs


def compiler_first(files, opts: Options) -> None:
    """Compile files the parser found nothing in with the compiler the build would use, so that a syntax error is
    that compiler's message at the user's line, not "nothing found". The rule for every engine: the CPU emulator's
    files go to the host compiler against the SIMT header (:func:`jitlab.jit.engines.emulator.check_syntax`); a
    ``.cu`` file to NVRTC where the build would take it (:func:`_nvrtc_reads_it`), to nvcc otherwise and, for
    ``engine="auto"``, where NVRTC's error may be its own (a host header it lacks); a torch ``.cpp`` file as its unit
    on its header set (:func:`jitlab.jit.engines.objects.check_syntax`), another to the host compiler (syntax
    only). A missing compiler is skipped, and code that compiles leaves the parser's message to be raised.

    Raises:
        CompileError: The compiler rejected a file.
    """
    if on_emulator(files, opts):
        from jitlab.jit.engines import emulator  # lazy: see the engines' import above

        emulator.check_syntax(files, opts)
        return
    for f in files:
        if f.language == "cuda" and _nvrtc_reads_it(opts) and nvrtc.check_syntax(f, opts, nvcc_next=opts.engine != "nvrtc"):
            continue  # NVRTC compiled it
        if f.language == "cpp" and f.uses_torch:
            from jitlab.jit.engines import objects  # lazy: see the engines' import above
            objects.check_syntax(f, opts)
            continue
        cuda = f.language == "cuda"
        tool = toolchain.nvcc_path() if cuda else toolchain.cxx_path()
        if tool is None:
            continue
        includes = [f"-I{f.path.parent}", *(f"-I{d}" for d in user_include_dirs(opts)),
                    *(flags_mod.torch_include_flags(cuda) if f.uses_torch else ())]
        defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()]
        mode = ["-c", "-o", "/dev/null", f"-arch={toolchain.oldest_arch()}"] if cuda else ["-fsyntax-only"]
        proc = subprocess.run([tool, *mode, "-std=c++17", *includes, *defines, str(f.path)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise diagnostics.compile_error(f"{f.path} ({'nvcc' if cuda else 'c++'})", proc.stdout + proc.stderr, {str(f.path): f.text})


def _nvrtc_reads_it(opts: Options) -> bool:
    """Whether a ``.cu`` file the parser could not read goes to NVRTC first, as its build would (:func:`choose_engine`):
    NVRTC is here, not ``engine="nvcc"``, and no compiler flags (which send a build to nvcc)."""
    flags = [*opts.cflags, *opts.cuda_cflags, *opts.ldflags]
    return opts.engine != "nvcc" and (opts.engine == "nvrtc" or not flags) and nvrtc.unavailable() is None


def build(paths, opts: Options | None = None, *, use=None, rebuild_once: bool = False):
    """Build a snippet, or find it in the cache: the one entrance of every build kind.

    Args:
        paths: A ``.cu``/``.cpp`` file, a folder of them, or a list.
        opts: Build options (``mode="program"`` for a whole program, ``device="cpu"`` for the CPU emulator, which
            ``device="auto"`` also takes without a GPU: :func:`on_emulator`).
        use: Called with the build before it is returned (the loader's load); what it returns is returned.
        rebuild_once: A cached build that ``use`` finds unusable (:class:`cache.Unusable`) is made once more.

    Returns:
        The build (``build.cached`` says whether anything was compiled), or what ``use`` made of it.

    Raises:
        SnippetError: The snippet cannot be read or mapped.
        ToolchainError: A build tool is missing.
        CompileError: The compiler rejected the code.
    """
    opts = opts or Options()
    t0 = time.perf_counter()
    plan, archs, parts = prepare(paths, opts)
    engine, why = choose_engine(plan, opts, archs)
    if engine is nvrtc:
        try:
            return find_or_build(engine, plan, archs, parts, opts, t0=t0, use=use, rebuild_once=rebuild_once)
        except nvrtc.NvrtcError as e:
            # An error in the user's code is reported at once (nvcc would say the same, a second
            # later); one that only NVRTC has (a header it lacks, host code) goes to nvcc instead.
            if opts.engine == "nvrtc" or not nvrtc.only_nvrtc_fails(e.log, list(sources_by_path(plan))):
                raise diagnostics.compile_error(describe(plan, archs, "NVRTC"), e.log, sources_by_path(plan)) from None
            engine, why = nvcc_engine(plan, opts), f"NVRTC could not compile it ({_first_error(e.log)})"
    elif engine.__name__ in (_TORCH_NVRTC, _PROGRAM_NVRTC):
        from jitlab.jit.engines import nvrtc_torch  # lazy: imported already, by choose_engine

        try:
            return find_or_build(engine, plan, archs, parts, opts, t0=t0, use=use, rebuild_once=rebuild_once)
        except (nvrtc.NvrtcError, nvrtc_torch.Unsuitable) as e:
            # The device unit goes to nvcc, whose message is the one to show if the code is wrong; the host
            # objects are the same units, already in the object cache.
            if opts.engine == "nvrtc":
                if isinstance(e, nvrtc_torch.Unsuitable):
                    raise SnippetError(f"engine='nvrtc' cannot build {file_names(plan)}: {e}; use engine='auto' or 'nvcc'") from None
                raise diagnostics.compile_error(describe(plan, archs, "NVRTC"), e.log, sources_by_path(plan)) from None
            why = str(e) if isinstance(e, nvrtc_torch.Unsuitable) else f"NVRTC could not compile it ({_first_error(e.log)})"
            engine = nvcc_engine(plan, opts)
    notes = [f"built with nvcc: {why}"] if why else []
    return find_or_build(engine, plan, archs, parts, opts, notes=notes, t0=t0, use=use, rebuild_once=rebuild_once)


def choose_engine(plan: Plan, opts: Options, archs: list[str] = ()) -> tuple[ModuleType, str]:
    """The engine that builds the plan and, for nvcc where NVRTC was a candidate, why not NVRTC.

    A program goes to NVRTC or nvcc (:func:`_program_engine`); a CUDA snippet for the CPU emulator (``device="cpu"``, or ``"auto"``
    without a GPU: :func:`on_emulator`) to the emulator; otherwise ``engine="auto"`` takes NVRTC for a kernel-only ``.cu`` it can
    compile (:func:`nvrtc.unsuitable`) and for a split torch-style snippet's device code
    (:func:`_torch_engine`), nvcc (:func:`nvcc_engine`) for everything else, and
    ``"nvrtc"`` refuses what NVRTC cannot build, naming why and the fix.

    Raises:
        SnippetError: ``engine`` is unknown, or ``"nvrtc"`` for a snippet NVRTC cannot build.
    """
    if on_emulator(plan.files, opts):
        from jitlab.jit.engines import emulator  # lazy: see the engines' import above

        return emulator, ""
    if opts.engine not in ENGINES:
        raise SnippetError(f"engine={opts.engine!r}: use one of {', '.join(map(repr, ENGINES))}")
    if plan.kind == "program":
        return _program_engine(plan, opts, archs)
    if opts.engine == "nvcc" or not plan.cuda:
        return nvcc_engine(plan, opts), ""
    if plan.kind == "torch":
        return _torch_engine(plan, opts, archs)
    flags = [*opts.cflags, *opts.cuda_cflags, *opts.ldflags]
    why = (nvrtc.unsuitable(plan) or (f"compiler flags given ({' '.join(flags)})" if flags else None)
           or nvrtc.unavailable())
    if why is None:
        return nvrtc, ""
    if opts.engine == "nvrtc":
        raise SnippetError(f"engine='nvrtc' cannot build {file_names(plan)}: {why}; "
                           f"use engine='auto' or 'nvcc'")
    return nvcc_engine(plan, opts), why if plan.kind == "kernel" else ""


_TORCH_NVRTC, _PROGRAM_NVRTC = "jitlab.jit.engines.nvrtc_torch", "jitlab.jit.engines.nvrtc_program"

#: Whether ``engine="auto"`` takes the torch-style NVRTC engine for a split torch-style snippet on a GPU
#: (``engine="nvcc"`` keeps the nvcc split). On since its GPU tests (tests/test_nvrtc_torch_gpu.py) and the
#: GPU suite passed with it on the lent H100 (issue 35).
TORCH_NVRTC_BY_DEFAULT = True


def _torch_engine(plan: TorchPlan, opts: Options, archs: list[str] = ()) -> tuple[ModuleType, str]:
    """A torch-style CUDA snippet's engine: NVRTC for a split one it can build (:func:`nvrtc_torch.unsuitable`),
    so a kernel edit is an NVRTC compile and no host compile or link; else the nvcc split, saying why when
    NVRTC was a candidate (a file built as one unit has its own note). Compile-only builds stay nvcc's (the
    relocatable object ``jitlab inspect`` reads, ptxas' report) unless ``engine="nvrtc"`` asks.
    """
    if opts.engine != "nvrtc" and (opts.compile_only or not TORCH_NVRTC_BY_DEFAULT):
        return nvcc_engine(plan, opts), ""
    from jitlab.jit.engines import nvrtc_torch  # lazy: see the engines' import above

    why = nvrtc_torch.unsuitable(plan, opts, archs) or nvrtc.unavailable()
    if why is None:
        return nvrtc_torch, ""
    if opts.engine == "nvrtc":
        raise SnippetError(f"engine='nvrtc' cannot build {file_names(plan)}: {why}; use engine='auto' or 'nvcc'")
    split = plan.units and not any(u.compiler == "nvcc" and u.torch for u in plan.units)
    return nvcc_engine(plan, opts), why if split else ""


def _program_engine(plan: ProgramPlan, opts: Options, archs: list[str]) -> tuple[ModuleType, str]:
    """A CUDA program's engine: its kernels in an NVRTC CUBIN where it can (:func:`nvrtc_program.unsuitable`), so a
    kernel edit is an NVRTC compile and the executable a cache hit; else nvcc, saying why (a ``.cpp``: the host compiler)."""
    if opts.engine == "nvcc" or not plan.cuda:
        return nvcc_engine(plan, opts), ""
    from jitlab.jit.engines import nvrtc_program  # lazy: see the engines' import above

    why = nvrtc_program.unsuitable(plan, opts, archs) or nvrtc.unavailable()
    if why and opts.engine == "nvrtc":
        raise SnippetError(f"engine='nvrtc' cannot build {file_names(plan)}: {why}; use engine='auto' or 'nvcc'")
    return (nvcc_engine(plan, opts), why) if why else (nvrtc_program, "")


def nvcc_engine(plan: Plan, opts: Options) -> ModuleType:
    """The nvcc engine of a plan: the program engine, the object cache for a torch-style plan's units,
    compile-only, else ninja."""
    if isinstance(plan, ProgramPlan):
        from jitlab.jit.engines import program  # lazy: see the engines' import above

        return program
    if isinstance(plan, TorchPlan):
        from jitlab.jit.engines import objects  # lazy: see the engines' import above

        return objects
    if opts.compile_only:
        from jitlab.jit.engines import compile_only  # lazy: see the engines' import above

        return compile_only
    from jitlab.jit.engines import ninja  # lazy: see the engines' import above

    return ninja


def _first_error(log: str) -> str:
    line = next((ln for ln in log.splitlines() if "error" in ln), log.strip().splitlines()[0] if log.strip() else "")
    return line.strip()[:200]


def find_or_build(engine: ModuleType, plan: Plan, archs: list[str], parts: dict, opts: Options, *,
                  notes: list[str] = (), t0: float | None = None, use=None, rebuild_once: bool = False):
    """The find-or-build of every build kind: the entry of the engine's key, or the engine makes it.

    :func:`cache.find_or_make` with a progress line: a hit is an entry whose artifact matches its
    manifest and whose recorded inputs (every file the compiler read, the libraries in ``ldflags``)
    are unchanged; a miss checks the engine's tools, then compiles under the key's lock, into the
    key's folder or a new candidate's.

    Args:
        engine: A module of :mod:`jitlab.jit.engines` (``key_parts``, ``require_tools``, ``make``).
        plan: What is built (its files name the progress line and the errors).
        archs: The archs built for.
        parts: The plan's key parts (:func:`prepare`); the engine's ``key_parts`` makes the key of them.
        opts: Build options.
        notes: Lines shown while it builds and kept in the manifest.
        t0: When the build call started (default now).
        use, rebuild_once: As :func:`build`'s.

    Returns:
        The build (``cached`` says whether anything was compiled), or what ``use`` made of it.
    """
    t0 = time.perf_counter() if t0 is None else t0
    key = engine.key_parts(plan, archs, opts, parts)

    def made(target: str, folder: Path) -> Manifest:
        # Silent when quick; past $JITLAB_PROGRESS_AFTER seconds a line, a live line naming what compiles, a line.
        with progress.Step(f"building {describe(plan, archs, engine.COMPILER)}", f"built {file_names(plan)}"):
            for note in notes:
                progress.say(f"jitlab: {note}")
            manifest = engine.make(plan, target, folder, archs, opts)
        return dataclasses.replace(manifest, notes=[*notes, *(manifest.notes or [])], archs=archs, kind=plan.kind,
                                   seconds=round(time.perf_counter() - t0, 3), built_at=time.time(),
                                   sources=[str(f.path) for f in plan.files], engine=engine.ENGINE)

    def built(entry: cache.Entry) -> Build:
        if not entry.cached and config.verbose():
            print((entry.folder / "build.log").read_text(errors="replace"), file=sys.stderr)
        b = Build(entry.name, entry.folder, plan, entry.manifest, entry.cached, time.perf_counter() - t0, archs)
        return b if use is None else use(b)

    return cache.find_or_make(cache.module_name(plan.stem, cache.build_key(key)), made, known=key.get("headers", {}),
                              keep=plan.include_dirs, reads=deps.ldflag_inputs(key["flags"][3]),
                              skip=[str(f.path) for f in plan.files], before=lambda: engine.require_tools(plan, opts),
                              warn=True, use=built, rebuild_once=rebuild_once)
