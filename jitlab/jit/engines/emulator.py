"""The CPU emulator engine: kernel-only ``.cu`` snippets built by the host C++ compiler, run exactly, no GPU.

``jitlab.load(path, device="cpu")`` builds the snippet against jitlab's SIMT header
(``simt/include/jitlab_simt.h``: CUDA's qualifiers, built-in variables, barriers, warp collectives,
atomics, math, ``__half``/``__nv_bfloat16``) and links the scheduler (``simt/runtime.cpp``, compiled
once per toolchain into the cache). The kernels are called exactly as on a GPU, with CPU tensors:
``k.saxpy(y, x, 2.0, n, grid=..., block=...)``. What a GPU never tells, the emulator reports at the
user's line as a :class:`jitlab.LaunchError`: a ``__syncthreads()`` some threads never reach, a warp
mask naming lanes that returned, an index past a ``__shared__`` array, a failed ``assert``, a bad
address; and, within :func:`jitlab.jit.emulator_run.checking` (what ``jitlab.check`` runs), a result
that depends on the order the threads run (a missing barrier) and an access past a tensor's end.

What it refuses (before compiling, naming the feature: :mod:`jitlab.jit.emulator_support`, the plan
stage): inline PTX, tensor cores (WMMA, wgmma, TMA), grid-wide cooperative sync, CUB/Thrust device code,
textures. Running the kernels is :mod:`jitlab.jit.emulator_run`'s job.
"""

from __future__ import annotations

import platform
import re
import subprocess
from pathlib import Path

from jitlab import config, progress
from jitlab.errors import CompileError
from jitlab.jit import cache, codegen, diagnostics, symbols, toolchain
from jitlab.jit.emulator_support import ENGINE
from jitlab.jit.engines import linker, lockstep, plain_reads
from jitlab.jit.flags import Options
from jitlab.jit.parse import Function, SourceFile, line_directive, syntax_tree
from jitlab.jit.plan import KernelPlan, Manifest
from jitlab.jit.shims import call_shim, runtime_helpers, shim_params
from jitlab.jit.sources import sources_by_path, user_include_dirs

#: What its progress line says compiles it (``ENGINE``, what a build records, is the plan stage's word).
COMPILER = ENGINE
SIMT = Path(__file__).parent / "simt"
INCLUDE = SIMT / "include"
RUNTIME = SIMT / "runtime.cpp"
#: Host compiler flags of every emulated build: optimised, line tables (-g1: a bad address's line), and
#: -fsanitize=bounds so an index past a fixed-size (``__shared__`` or local) array calls the runtime's
#: handler with the user's line.
CXXFLAGS = ["-O2", "-g1", "-std=c++17", "-fPIC", "-fno-strict-aliasing", "-w",
            "-fsanitize=bounds", "-fno-sanitize-recover=bounds",
            # TLS descriptors: a `__shared__` array (thread_local) and the runtime's worker pointer, read on every
            # access, cost a load instead of a __tls_get_addr call
            *(["-mtls-dialect=gnu2"] if platform.machine() in ("x86_64", "AMD64") else [])]
#: The snippet's unit also gets -fsanitize=thread: its loads, stores and atomics call the runtime's hooks
#: (not libtsan: ``simt/memory_checks.inc``), which check bounds in every run and races in the checked one;
#: -fno-builtin-printf, so every printf reaches the runtime's; and -fstack-clash-protection, so a large
#: local array touches its fiber's guard page (a stack overflow at its line) instead of another fiber's stack.
SNIPPET_FLAGS = ["-fsanitize=thread", "--param=tsan-distinguish-volatile=1",
                 "--param=tsan-instrument-func-entry-exit=0", "-fno-builtin-printf",
                 "-fstack-clash-protection"]

_EXTERN_SHARED = re.compile(
    r"extern\s+__shared__\s+(?:__align__\s*\(\s*\d+\s*\)\s*)?(?P<type>[A-Za-z_][\w:\s]*?)\s*"
    r"(?:__align__\s*\(\s*\d+\s*\)\s*)?(?P<name>\w+)\s*\[\s*\]\s*;")


def translated(f: SourceFile, twins: bool = True) -> tuple[str, set[str]]:
    """The file's text as the host compiler takes it, every line where it was, and the kernels given a lock-step twin.

    ``extern __shared__ T name[];`` becomes a pointer to the block's dynamic shared memory, a launch
    ``k<<<g, b, s, st>>>(args)`` a call of the runtime's launcher, ``__noinline__`` GCC's attribute
    (a macro would break libstdc++, which spells the attribute so), ``static __shared__`` plain
    ``__shared__`` (a static already), and a read of a ``__shared__`` array indexed in full or of a pointer
    parameter a choice that a plain run takes without the access hook (:mod:`jitlab.jit.engines.plain_reads`),
    each on the same line; after each kernel it can, its lock-step twin (:mod:`jitlab.jit.engines.lockstep`), which
    ends with a ``#line`` back to where the kernel ended.
    """
    src = f.text.encode("utf-8", "surrogateescape")
    root = syntax_tree(src).root_node
    edits: list[tuple[int, int, bytes]] = plain_reads.edits(root, src)
    twins, stepped = lockstep.twins(root, src, f.path, edits) if twins else ([], set())
    stack = [root]
    while stack:
        node = stack.pop()
        stack.extend(node.named_children)
        if node.type != "call_expression":
            continue
        config_ = next((c for c in node.children if c.type == "kernel_call_syntax"), None)
        callee = node.child_by_field_name("function")
        if config_ is None or callee is None:
            continue
        open_, close = config_.children[0], config_.children[-1]
        edits += [(callee.start_byte, callee.start_byte, b"::jitlab_simt::launcher("),
                  (open_.start_byte, open_.end_byte, b", "), (close.start_byte, close.end_byte, b")")]
    text = re.sub(r"\b__noinline__\b", "__attribute__((noinline))", plain_reads.rendered(src, edits + twins))
    text = re.sub(r"\bstatic(\s+)__shared__\b", r"      \1__shared__", text)  # __shared__ is static already
    return _EXTERN_SHARED.sub(
        lambda m: f"{m['type'].strip()}* const {m['name']} = "
                  f"reinterpret_cast<{m['type'].strip()}*>(::jitlab_simt::dynamic_shared());", text), stepped


def launch_shim(fn: Function, twin: bool = False) -> str:
    """The ``extern "C"`` launcher of one kernel, with the prototype a GPU build's shim has; with ``twin``, it also
    hands the runtime the kernel's lock-step twin (unless the unit is compiled without twins)."""
    decls, args = shim_params(fn)
    head = [f"unsigned jitlab_{v}" for v in ("gx", "gy", "gz", "bx", "by", "bz", "smem")] + ["void* jitlab_stream"]
    grid = "jitlab_gx, jitlab_gy, jitlab_gz, jitlab_bx, jitlab_by, jitlab_bz, jitlab_smem"
    body = "[](void* c) JITLAB_UNHOOKED { (*static_cast<decltype(jitlab_body)*>(c))(); }, &jitlab_body"
    launch = f"  return jitlab_simt_launch({grid},\n      {body}, \"{fn.name}\");\n"
    if twin:
        steps = f"{fn.qualname[:len(fn.qualname) - len(fn.name)]}jitlab_steps_{fn.name}"
        launch = (f"#ifndef JITLAB_NO_STEPS\n"
                  f"  auto jitlab_steps = [&]() JITLAB_UNHOOKED {{ return {steps}({', '.join(args)}); }};\n"
                  f"  return jitlab_simt_launch_steps({grid},\n      {body},\n"
                  f"      [](void* c) JITLAB_UNHOOKED {{ return (*static_cast<decltype(jitlab_steps)*>(c))(); }}, "
                  f"&jitlab_steps, \"{fn.name}\");\n#else\n{launch}#endif\n")
    return (f'extern "C" int jitlab_launch_{fn.name}({", ".join(head + decls)}) {{\n'
            f"  auto jitlab_body = [&]() JITLAB_UNHOOKED {{ {fn.qualname}({', '.join(args)}); }};\n"
            f"{launch}}}\n")


def unit_text(files: list[SourceFile], exported: list[Function]) -> str:
    """The one translation unit of an emulated build: the user's files at their lines, then the shims."""
    parts, stepped = [], set()
    for f in files:
        text, twins = translated(f)
        parts.append(line_directive(f.path) + text + "\n")
        stepped |= twins
    shims = [launch_shim(fn, fn.name in stepped) if fn.kind == "global" else call_shim(fn, cuda=True)
             for fn in exported]
    # The GPU unit's error helpers: the header's cudaGetErrorName/String answer for the emulator.
    return "".join(parts) + line_directive(f"{codegen.GENERATED}.cpp") + runtime_helpers(cuda=True) + "\n".join(shims)


def check_syntax(files: list[SourceFile], opts: Options) -> None:
    """Compile files the parser found nothing in, syntax only, as an emulated build compiles them (the host
    compiler, the SIMT header, the same translation), so that a syntax error is that compiler's message at
    the user's line (:func:`jitlab.jit.builder.compiler_first`). Nothing without a host compiler.

    Raises:
        CompileError: The host compiler rejected the code.
    """
    cxx = toolchain.cxx_path()
    if cxx is None:
        return
    includes = ["-I", str(INCLUDE), *(f"-I{f.path.parent}" for f in files), *(f"-I{d}" for d in user_include_dirs(opts))]
    defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()]
    proc = subprocess.run([cxx, "-fsyntax-only", *CXXFLAGS, *SNIPPET_FLAGS, *includes, "-include",
                           str(precompiled_header()), *defines, *opts.cflags, "-x", "c++", "-"],
                          input=unit_text(files, []), capture_output=True, text=True, errors="surrogateescape")
    if proc.returncode != 0:
        raise diagnostics.compile_error(f"{', '.join(f.path.name for f in files)} (c++, {ENGINE})",
                                        proc.stdout + proc.stderr, {str(f.path): f.text for f in files})


#: What the snippet's unit calls when one of its threads may have to wait for another: a barrier, a warp collective
#: (runtime.cpp), a volatile read, an atomic load or compare-and-swap (memory_checks.inc: each gives way to a
#: spin-wait's other side). A unit that calls none of them lets its threads run one after the other.
_WAITS = re.compile(r"_ZN11jitlab_simt(?:7barrier|4warp)|__tsan_volatile_read|__tsan_atomic\d+_(?:load|compare_exchange)")


def runs_in_turn(library: Path) -> bool:
    """Whether the threads of ``library``'s kernels only end: its unit's object (beside it) names no runtime entry
    point that waits. False where that cannot be read (no object, no ``nm``): the threads then run as fibers."""
    obj = Path(library).with_name("emulated.o")
    try:
        return obj.is_file() and not any(_WAITS.match(s) for s in symbols.undefined_symbols(obj))
    except OSError:
        return False


def _digest_of_runtime() -> str:
    return cache.build_key({"files": {str(p.relative_to(SIMT)): p.read_text() for p in sorted(SIMT.rglob("*"))
                                      if p.is_file()}})


def runtime_object() -> Path:
    """The scheduler compiled once per toolchain and runtime text, kept with the toolchain's other builds (the
    precompiled torch headers, jitlab's binder: ``config.pch_dir()``), so caches that share those share it."""
    cxx = toolchain.require_tool(toolchain.cxx_path(), "a C++ compiler")

    def make(target: str, folder: Path) -> Manifest:
        obj = folder / "runtime.o"
        _compile([cxx, *CXXFLAGS, "-fvisibility=hidden", "-I", str(INCLUDE), "-c", str(RUNTIME), "-o", str(obj)],
                 "jitlab's CPU emulator runtime", {})
        return cache.made(obj)

    entry = _per_toolchain("jitlab_simt_runtime", CXXFLAGS, make)
    return entry.folder / entry.manifest.artifact


def precompiled_header() -> Path:
    """The SIMT header precompiled with every emulated unit's flags, once per toolchain and runtime text, beside
    the runtime object: what ``-include`` names (a one-line header whose ``.gch`` GCC takes instead). A unit
    parses jitlab_simt.h and the C++ headers it includes in 0.3 CPU-s on this 2-core VM, a third of an
    exercise's compile; from the ``.gch``, 0.1. The header says ``#include <jitlab_simt.h>``, so a unit whose
    flags make the ``.gch`` unusable (``-O0``, a define the header reads) reads the header itself, as before.
    """
    cxx = toolchain.require_tool(toolchain.cxx_path(), "a C++ compiler")

    def make(target: str, folder: Path) -> Manifest:
        header = folder / "simt.h"
        header.write_text("#include <jitlab_simt.h>\n")
        gch = Path(f"{header}.gch")
        _compile([cxx, *CXXFLAGS, *SNIPPET_FLAGS, "-I", str(INCLUDE), "-x", "c++-header", str(header),
                  "-o", str(gch)], "jitlab's CPU emulator header", {})
        return cache.made(gch, stamp=cache.stamp_of(gch), companions={header.name: cache.file_sha256(header)})

    # held to its stamp, as torch's sets are: hashing its 18 MB on every emulated build cost ~35 ms each
    return _per_toolchain("jitlab_simt_header", [*CXXFLAGS, *SNIPPET_FLAGS], make, content=False).folder / "simt.h"


def _per_toolchain(stem: str, flags: list[str], make, content: bool = True):
    """The cache entry ``make`` builds once per host compiler, runtime text and flags, in the folder of the
    toolchain's other builds (``config.pch_dir()``); ``content=False``: held to its stamp, not its hash
    (:func:`jitlab.jit.cache.verify_artifact`)."""
    name = cache.module_name(stem, cache.build_key(
        {"format": config.FORMAT_VERSION, "runtime": _digest_of_runtime(), "cxx": toolchain.fingerprint(False)["cxx"],
         "flags": flags}))
    return cache.find_or_make(name, make, root=config.pch_dir(), content=content)


def _compile(cmd: list[str], what: str, sources: dict[str, str], run=None) -> None:
    proc = run(cmd) if run else subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise diagnostics.compile_error(what, proc.stdout + proc.stderr, sources)


def key_parts(plan: KernelPlan, archs: list[str], opts: Options, parts: dict) -> dict:
    """An emulated build's key: the one unit it compiles (translated), the runtime's text, the host
    compiler's flags and fingerprint, and the plan's local headers and user flags."""
    return {"format": config.FORMAT_VERSION, "engine": ENGINE, "text": unit_text(plan.files, plan.exported),
            "runtime": _digest_of_runtime(), "compiler_flags": [*CXXFLAGS, *SNIPPET_FLAGS, "-Wl,-Bsymbolic-functions"],
            "headers": parts["headers"], "flags": parts["flags"], "debug": opts.debug,
            "toolchain": toolchain.fingerprint(False)}


def require_tools(plan: KernelPlan, opts: Options) -> None:
    """The host C++ compiler."""
    toolchain.require_tool(toolchain.cxx_path(), "a C++ compiler")


def make(plan: KernelPlan, name: str, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """Compile the snippet's one unit against the SIMT header and link it with the runtime into ``name.so``.

    Raises:
        CompileError: The host compiler rejected the code, at the user's file and line.
    """
    for note in plan.notes:
        progress.say(f"jitlab: {note}")
    runtime = runtime_object()
    cxx = toolchain.cxx_path()
    unit, obj, lib = folder / "emulated.cpp", folder / "emulated.o", folder / f"{name}.so"
    unit.write_text(unit_text(plan.files, plan.exported), encoding="utf-8", errors="surrogateescape")
    includes = ["-I", str(INCLUDE), *(f"-I{d}" for d in plan.include_dirs), *(f"-I{d}" for d in user_include_dirs(opts))]
    defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()]
    debug = ["-g", "-O0"] if opts.debug else []
    cmd = [cxx, *CXXFLAGS, *SNIPPET_FLAGS, *debug, *includes, "-include", str(precompiled_header()), *defines,
           *opts.cflags, "-c", str(unit), "-o", str(obj)]
    what = f"{', '.join(f.path.name for f in plan.files)} (c++, {ENGINE})"
    try:
        _compile(cmd, what, sources_by_path(plan))
    except CompileError:
        if "jitlab_steps_" not in unit.read_text(encoding="utf-8", errors="surrogateescape"):
            raise
        # a twin the compiler refused, or the user's own mistake: the unit without twins says which, each error once
        _compile([*cmd[:-4], "-DJITLAB_NO_STEPS", *cmd[-4:]], what, sources_by_path(plan))
    # -Bsymbolic-functions: the snippet's calls of printf, __assert_fail … bind to the runtime's own,
    # never to the C library's that Python loaded first.
    _compile([cxx, "-shared", str(obj), str(runtime), "-o", str(lib), "-pthread", "-Wl,-Bsymbolic-functions",
              *toolchain.runtime_ldflags()], f"{plan.stem} (link, {ENGINE})", {}, run=linker.run)
    (folder / "build.log").write_text("")
    return cache.made(lib, notes=list(plan.notes))
