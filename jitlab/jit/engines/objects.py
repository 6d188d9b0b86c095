"""Objects: each translation unit compiled once into a cached object, on a precompiled torch header.

A torch-style build is a few units (see :mod:`jitlab.jit.split`): device units for nvcc, host
units and a binding unit for the host compiler. Each unit's object is cached under a key over its
text, flags and toolchain, so an edit recompiles only the unit it touched; the module is then linked
from the objects (:mod:`jitlab.jit.linker`, about a tenth of a second)::

    build_cache/objects/square_matrix.device-3f9c0a1b2c4d5e6f/   unit text, .o, build.log, jitlab.json
    build_cache/pch/torch-host-9d1e.../jitlab_torch.h(.gch)       a precompiled torch header ($JITLAB_PCH_DIR)

Host units that use torch compile on a precompiled torch header set (:mod:`jitlab.jit.engines.pch`): the
smallest that covers what they use, with their own ``#include <torch/extension.h>`` lines blanked. A
unit that fails on a name only a larger set declares is compiled again on ``full``, and the snippet's
units start on ``full`` from then on: a smaller set makes a build faster, never different. Every cache
entry is written the way :mod:`jitlab.jit.cache` writes builds: under a lock, manifest last, a corrupt
entry rebuilt.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import time
from pathlib import Path

from jitlab import config, progress
from jitlab.errors import SnippetError, ToolchainError
from jitlab.jit import cache, codegen, deps, diagnostics, header_sets, nvcc_shell, processes, toolchain
from jitlab.jit.engines import binder, clang, linker, pch, torch_headers
from jitlab.jit.flags import Options, object_flags
from jitlab.jit.parse import SourceFile, line_directive
from jitlab.jit.plan import Flags, Manifest, Object, TorchPlan, Unit, UnitError
from jitlab.jit.resources import parse_resource_usage
from jitlab.jit.sources import describe, sources_by_path, user_include_dirs
from jitlab.jit.symbols import instantiations, undefined_symbols

GENERATED_CU = "jitlab-generated.cu"


def objects_root() -> Path:
    return config.cache_dir() / "objects"


def compile_all(units: list[Unit], flags: Flags, stem: str, sources: dict[str, str], cuda: bool | None = None) -> list[Object]:
    """Compile (or find) every unit's object, in parallel where they are independent.

    Host units go first when a device unit has kernel templates, whose instantiations are read from
    the host objects; the precompiled header is made while nvcc works, and jitlab's binder
    (:mod:`jitlab.jit.engines.binder`, once per toolchain) beside the units when one ends with C-ABI entries.
    ``cuda`` says whether host units get CUDA's precompiled torch header (default: whether a unit is nvcc's).

    Raises:
        CompileError: The first unit that failed, at the user's file and line.
    """
    first = sorted((u for u in units if not u.templates), key=_expected_cost, reverse=True)
    later = [u for u in units if u.templates]
    done: dict[str, Object] = {}
    workers = max(2, min(8, os.cpu_count() or 2))
    cuda = any(u.compiler == "nvcc" for u in units) if cuda is None else cuda
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        try:
            # Longest first: with fewer workers than units (2 cores: 2), a short unit never delays the long
            # one. progress.submit: each thread names its unit in the build's live line.
            made = progress.submit(pool, binder.library) if any(u.entries for u in units) else None
            futures = {progress.submit(pool, _compile, u, flags, stem, None) if u.compiler == "nvcc"
                       else progress.submit(pool, _compile_host, u, flags, stem, cuda): u for u in first}
            _collect(futures, done, sources)
            if later:
                wanted = [s for o in done.values() if o.unit.compiler == "cxx" for s in o.undefined]
                futures = {progress.submit(pool, _compile, u, flags, stem, None, instantiations(u.templates, wanted)): u
                           for u in later}
                _collect(futures, done, sources)
            if made is not None:
                made.result()
        except KeyboardInterrupt:  # Ctrl-C: the running compilers end now, not when they are done
            pool.shutdown(wait=False, cancel_futures=True)
            processes.end_all()
            raise
    return [done[u.name] for u in units]


def _expected_cost(unit: Unit) -> float:
    """A unit's rank by how long it compiles, for the order units start in.

    nvcc on torch's headers takes tens of seconds; a host unit costs what its precompiled set costs
    (on 2 cores with GCC 12: an empty unit ~3.3 s on ``bind``, ~1.8 s on ``casters`` and ``host``,
    more on ``full``); a device unit without torch ~0.7 s; a unit without torch, least.
    """
    if unit.compiler == "nvcc":
        return 4 if unit.torch else 1
    return {"full": 3, "bind": 2, "casters": 1.6, "host": 1.5}.get(unit.headers, 0) if unit.torch else 0


def _collect(futures: dict, done: dict[str, Object], sources: dict[str, str]) -> None:
    failed: list[UnitError] = []
    for fut in concurrent.futures.as_completed(futures):
        try:
            obj = fut.result()
        except UnitError as e:
            failed.append(e)
            continue
        done[obj.unit.name] = obj
    if failed:
        # Errors in the user's files first: a failure in generated code only matters if nothing else failed.
        failed.sort(key=lambda e: not any(path in e.log for path in sources))
        e = failed[0]
        tool = "nvcc" if e.unit.compiler == "nvcc" else "c++"
        raise diagnostics.compile_error(f"{', '.join(diagnostics.short_path(p) for p in sources)} ({e.unit.name}, {tool})",
                                        e.log, sources) from None


def _compile_host(unit: Unit, flags: Flags, stem: str, cuda: bool) -> Object:
    """A host unit's object, on the smallest precompiled header set that compiles it.

    With clang (:mod:`jitlab.jit.engines.clang`) on clang's set first; a unit clang refuses (or whose set clang
    cannot make) is compiled by GCC, and the snippet's later builds of that unit go to GCC at once (a hint in the
    object cache). On GCC, a unit that fails on its set on a name a larger set declares is compiled on that set
    (:func:`jitlab.jit.engines.pch.larger_set`), and its later builds start there (the hint). Other errors are
    reported from the set it failed on at once: GCC's message.
    """
    if not unit.torch:
        return _compile(unit, flags, stem, None)
    hint = _hint_path(stem, unit)
    hinted = hint.read_text(errors="replace") if hint.is_file() else ""
    start = "full" if unit.headers == "full" else _hinted(hinted) or unit.headers
    refused = CLANG_REFUSED in hinted or not clang.path()
    headers, ends = start, processes.ends()
    while True:
        try:
            obj = _compile(unit, flags, stem, pch.precompiled_header(flags, cuda, headers, with_clang=not refused),
                           headers=headers, after=pch.after_set(cuda, headers), compiler="" if refused else "clang")
            break
        except ToolchainError:  # clang could not make the set: GCC, on its own
            if refused or processes.ends() != ends:  # GCC's, or an interrupt ended the build: nothing more starts
                raise
            refused = True
        except UnitError as e:
            if processes.ends() != ends:  # an interrupt ended the build: nothing more starts, not even c++ -E
                raise
            larger = pch.larger_set(e.log, flags, cuda, headers)
            if larger is not None:
                headers = larger
            elif refused:
                raise
            else:  # clang refused the code: GCC takes it, or says why
                refused = True
    lines = [CLANG_REFUSED] if CLANG_REFUSED in hinted or (refused and clang.path()) else []
    if headers != start:
        lines.append(f"failed on the {start} headers, built on {headers}")
    else:
        lines += [line for line in hinted.splitlines() if line.startswith("failed on the ")]
    text = "".join(f"{line}\n" for line in lines)
    if text != hinted:
        hint.parent.mkdir(parents=True, exist_ok=True)
        hint.write_text(text)
    return obj


#: What a unit's hint says when clang refused it (or could not make its set): its builds go to GCC.
CLANG_REFUSED = "clang refused it: compiled by GCC"


def _hint_path(stem: str, unit: Unit) -> Path:
    return objects_root() / "hints" / f"{identifier(stem)}.{unit.name}.headers"


def _hinted(text: str) -> str | None:
    """The set a hint's text says this unit built on (``None`` when it names none)."""
    found = re.search(r"built on (\w+)", text)
    if not found:
        return None
    return found.group(1) if found.group(1) in header_sets.HEADERS else "full"


def check_syntax(f: SourceFile, opts: Options) -> None:
    """Compile a torch C++ file the parser found nothing in as its build would: its unit on its torch header set,
    to a cached object. A syntax error is GCC's message at the user's line, from a second or two on a set instead
    of ~13 s parsing torch's headers; what compiles is the object the build that follows finds.

    Raises:
        CompileError: GCC rejected it.
    """
    units, _ = codegen.torch_units([f], [], binds_itself=True)
    plan = TorchPlan(stem=f.path.stem, cuda=False, files=[f], include_dirs=[str(f.path.parent), *user_include_dirs(opts)],
                     exported=[], units=units, binds_itself=True)
    compile_all(units, object_flags(plan, [], opts), plan.stem, sources_by_path(plan), cuda=False)


def compile_unit(unit: Unit, flags: Flags, stem: str) -> Object:
    """One unit without torch (a generated one) → its cached object; compiles only on a miss.

    Raises:
        UnitError: The compiler rejected it.
    """
    return _compile(unit, flags, stem, None)


def _compile(unit: Unit, flags: Flags, stem: str, header: Path | None, extra: str = "", headers: str = "",
             after: tuple[str, ...] = (), compiler: str = "") -> Object:
    """One unit → its cached object; compiles only on a miss. ``after``: headers included right after the
    precompiled ``header`` (:func:`jitlab.jit.engines.pch.after_set`); ``compiler="clang"``: clang compiles it on
    clang's set ``header`` (a ``.pch``)."""
    text = unit.text
    if headers and headers != "full":
        text = header_sets.without_umbrellas(text)  # the set is precompiled; the umbrella would parse all of torch
    if extra:
        text = _with_instantiations(text, extra)
    includes = [] if unit.own else flags.includes
    if unit.compiler == "nvcc":
        # Instantiations for torch's scalar types: their headers, light (jitlab.jit.engines.torch_headers).
        light = torch_headers.light_scalar_dir() if "c10::" in extra and not unit.torch else None
        cmd_flags = [*includes, *flags.nvcc, *([f"-I{light}"] if light else []),
                     *(flags.nvcc_torch if unit.torch or "c10::" in extra else ())]
    else:
        cmd_flags = [*includes, *flags.cxx, *flags.cuda_include, *flags.cxx_user]
    # A unit that includes nothing (a binding unit: declarations and PYBIND11_MODULE) cannot depend on
    # the snippet's include folders: leaving them out of its key shares it between folders.
    key_flags = cmd_flags if "#include" in text else [f for f in cmd_flags if f not in includes]
    key = cache.build_key({"format": config.FORMAT_VERSION, "unit": unit.name, "text": text, "flags": key_flags,
                           "pch": " ".join([str(header), *after]) if header else "", "toolchain": flags.toolchain,
                           "deps": unit.deps, **({"clang": clang.fingerprint(clang.path())} if compiler else {})})
    # The module name the unit's PYBIND11_MODULE gets: from its own key, never from the build's, so a
    # kernel edit (a new build name) reuses the host objects.
    extension = f"{identifier(stem)}_{key[:12]}" if unit.torch else ""
    name = f"{unit.name}-{key}"
    t0 = time.perf_counter()

    def make(target: str, folder: Path) -> Manifest:
        with progress.doing(f"compiling {unit.name}"):
            return _run_compiler(unit, text, cmd_flags, folder, header, extension, after, compiler)

    entry = cache.find_or_make(name, make, root=objects_root(), known=dict(unit.deps),
                               keep=[f[2:] for f in includes if f.startswith("-I")],
                               skip=[unit.source] if unit.source else [])
    return _object(unit, entry.folder, entry.manifest, entry.cached, 0.0 if entry.cached else time.perf_counter() - t0,
                   headers)


def _object(unit: Unit, folder: Path, manifest: Manifest, cached: bool, seconds: float, headers: str) -> Object:
    return Object(unit=unit, path=folder / manifest.artifact, cached=cached, seconds=seconds,
                  log=(folder / "build.log").read_text(errors="replace") if (folder / "build.log").is_file() else "",
                  extension=manifest.extension or "", undefined=manifest.undefined or [], headers=headers,
                  read=None if manifest.deps is None else [row[0] for row in manifest.deps])


def _run_compiler(unit: Unit, text: str, cmd_flags: list[str], folder: Path, header: Path | None, extension: str,
                  after: tuple[str, ...] = (), compiler: str = "") -> Manifest:
    src = folder / unit.name
    obj = folder / (unit.name + ".o")
    depfile = folder / (unit.name + ".d")  # every file it read, for the entry's manifest (jit/deps.py)
    src.write_text(f"#define TORCH_EXTENSION_NAME {extension}\n{text}" if extension else text,
                   encoding="utf-8", errors="surrogateescape")  # a source's bytes as they were
    if unit.compiler == "nvcc":
        cmd = [toolchain.require_tool(toolchain.nvcc_path(), "nvcc"), "-c", str(src), "-o", str(obj), *cmd_flags,
               "-MD", "-MF", str(depfile)]
    elif compiler == "clang":
        cmd = [clang.path(), "-x", "c++", "-c", str(src), "-o", str(obj), "-include-pch", str(header),
               *(w for h in after for w in ("-include", h)), *clang.words(cmd_flags), "-MD", "-MF", str(depfile)]
    else:
        include = ["-include", str(header), "-Winvalid-pch", *(w for h in after for w in ("-include", h))] \
            if header and unit.torch else []
        cmd = [toolchain.require_tool(toolchain.cxx_path(), "c++"), "-x", "c++", "-c", str(src), "-o", str(obj),
               *include, *cmd_flags, "-MD", "-MF", str(depfile)]
    run = nvcc_shell.run_nvcc if unit.compiler == "nvcc" else processes.run  # nvcc's steps go through a shell
    proc = run(cmd, capture_output=True, text=True, cwd=folder)
    log = shlex.join(cmd) + "\n" + proc.stdout + proc.stderr  # the command as a shell would take it back
    (folder / "build.log").write_text(log)
    if proc.returncode != 0:
        raise UnitError(unit, log)
    return cache.made(obj, extension=extension, undefined=undefined_symbols(obj) if unit.compiler == "cxx" else [],
                      read=deps.read_depfile(depfile))


def identifier(stem: str) -> str:
    safe = "".join(c if c.isalnum() else "_" for c in stem).strip("_") or "snippet"
    return "k" + safe if safe[0].isdigit() else safe


# ---- template instantiation ----------------------------------------------------------------------

def _with_instantiations(text: str, extra: str) -> str:
    includes = "".join(f"#include <c10/util/{t}.h>\n" for t in sorted(set(re.findall(r"c10::(\w+)", extra))))
    return f"{includes}{text}\n{line_directive(GENERATED_CU)}{extra}\n"


#: What a build records as its engine (``Build.engine``), and what its progress line says compiles it.
ENGINE = "nvcc"
COMPILER = "nvcc"


def key_parts(plan: TorchPlan, archs: list[str], opts: Options, parts: dict) -> dict:
    """The plan's key parts as they are: its units, flags and toolchain say everything."""
    return parts


def require_tools(plan: TorchPlan, opts: Options) -> None:
    """nvcc (CUDA snippets) and the host compiler; no ninja: this engine drives the compilers itself."""
    toolchain.require_tools(plan.cuda, opts.compile_only, ninja=False)


def make(plan: TorchPlan, name: str, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """A torch-style build: each unit compiled once into the object cache, then linked (or, compile-only,
    kept as one relocatable object)."""
    for note in plan.notes:
        progress.say(f"jitlab: {note}")
    flags = object_flags(plan, archs, opts)
    if opts.compile_only and not plan.cuda:
        raise SnippetError(f"{describe(plan, archs)}: compile_only applies to CUDA snippets; C++ snippets build and run here")
    torch_headers.check_cuda_includes(sources_by_path(plan), (*flags.includes, *flags.cxx, *flags.cuda_include))
    objs = compile_all(plan.units, flags, plan.stem, sources_by_path(plan))
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
        except UnitError as e:
            raise diagnostics.compile_error(f"{describe(plan, archs)} (link)", e.log, sources_by_path(plan)) from None
    return cache.made(artifact, resources=parse_resource_usage("\n".join(o.log for o in objs if o.unit.compiler == "nvcc")),
                      compile_only=opts.compile_only, notes=notes, read=[p for o in objs for p in o.read or ()],
                      link_seconds=round(time.perf_counter() - t_link, 3), unstable=any(o.read is None for o in objs),
                      units=[{"name": o.unit.name, "compiler": o.unit.compiler, "cached": o.cached,
                              "seconds": round(o.seconds, 3), "headers": o.headers} for o in objs])
