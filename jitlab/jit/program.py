"""Whole programs: a ``.cu``/``.cpp`` with ``int main`` → an executable in the build cache.

A program is built as ``nvcc prog.cu -o prog`` (the host compiler for ``.cpp``) would build it, plus
``-lineinfo`` so compute-sanitizer and ncu name its lines, through the same find-or-build as every
other build (:func:`jitlab.jit.builder.find_or_build`): a key over the sources, local headers, flags,
defines, archs and toolchain; an edit rebuilds, anything else is a cache hit that compiles nothing.
The build compiles copies of the texts it hashed, each after ``#line 1 "<its path>"``, so errors,
``__FILE__`` and line info name the user's file; the user's file is only read. Running it is
:mod:`jitlab.worker.program`'s job.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from jitlab import config
from jitlab.errors import SnippetError
from jitlab.jit import cache, codegen, deps, diagnostics, toolchain
from jitlab.jit.builder import Build, find_or_build, flag_parts, snippet_files
from jitlab.jit.flags import Options, arch_flags
from jitlab.jit.parse import line_directive, parse_file
from jitlab.jit.resources import parse_resource_usage
from jitlab.jit.sources import collect_sources, describe, local_headers, sources_by_path, user_include_dirs
from jitlab.jit.plan import Manifest

#: The executable's name inside its build folder.
EXECUTABLE = "program"


def is_program(paths) -> bool:
    """Whether a snippet (a file, a folder or a list) defines ``int main``: a whole program.

    Raises:
        SnippetError: A file cannot be read.
    """
    return any(parse_file(p).has_main for p in collect_sources(paths))


def build(paths, opts: Options | None = None) -> Build:
    """Build a program into the cache (or find it there) as ``nvcc``/``c++`` would, with ``-lineinfo``.

    Args:
        paths: A ``.cu``/``.cpp`` file with ``main``, or a folder or list of files, one of which has it.
        opts: Build options; ``arch`` defaults to this GPU (a ``.cu`` without a GPU must name one).

    Returns:
        The :class:`~jitlab.jit.builder.Build`; ``build.artifact`` is the executable.

    Raises:
        SnippetError: No file defines ``main``.
        ToolchainError: nvcc or the host compiler is missing, or no GPU and no ``arch``.
        CompileError: The compiler's or linker's errors, at your file and line.
    """
    opts = opts or Options()
    t0 = time.perf_counter()
    files, stem = snippet_files(paths)
    if not any(f.has_main for f in files):
        raise SnippetError(f"{', '.join(str(f.path) for f in files)}: no `int main` here, so nothing to run; "
                           f"a program defines main(), a snippet's kernels load with jitlab.load")
    cuda = any(f.language == "cuda" for f in files)
    plan = codegen.Plan(stem=stem, kind="program", cuda=cuda, cpp_sources=[], cuda_sources=[], functions=None,
                        include_dirs=list(dict.fromkeys(str(f.path.parent) for f in files)), exported=[], files=files,
                        has_printf=any(f.has_printf for f in files))
    archs = ([toolchain.normalize_arch(a) for a in opts.arch] if opts.arch else [toolchain.current_arch()]) if cuda else []
    headers = local_headers(files, plan.include_dirs, user_include_dirs(opts))
    parts = {"format": config.FORMAT_VERSION, "kind": "program", "sources": [(str(f.path), f.text) for f in files],
             "headers": headers, "archs": archs, "debug": opts.debug,
             "flags": flag_parts(opts),
             "toolchain": toolchain.fingerprint(cuda)}
    return find_or_build(plan, archs, parts, lambda name, folder: _compile(plan, folder, archs, opts),
                         compiler="nvcc" if cuda else "c++", t0=t0, before=lambda: _require_compiler(cuda))


def command(plan: codegen.Plan, inputs: list[str], output: str, archs: list[str], opts: Options) -> list[str]:
    """The compile-and-link command line: ``nvcc`` (or the host compiler) with the build's flags."""
    defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()]
    includes = [f"-I{d}" for d in plan.include_dirs]
    if plan.cuda:
        device = ["-G"] if opts.debug else ["-lineinfo"]
        host = [f"-Xcompiler={f}" for f in opts.cflags] + (["-g"] if opts.debug else [])
        return [toolchain.nvcc_path(), *arch_flags(archs, opts), *device, "--resource-usage", *includes,
                *defines, *host, *opts.cuda_cflags, *inputs, "-o", output, *opts.ldflags]
    return [toolchain.cxx_path(), "-O0" if opts.debug else "-O2", *(["-g"] if opts.debug else []), *includes,
            *defines, *opts.cflags, *inputs, "-o", output, *opts.ldflags]


def _require_compiler(cuda: bool) -> None:
    toolchain.require_tool(toolchain.nvcc_path() if cuda else toolchain.cxx_path(), "nvcc" if cuda else "c++")


def _compile(plan: codegen.Plan, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """Write each file's text after its ``#line`` directive into ``folder``, compile and link them."""
    inputs = []
    for i, f in enumerate(plan.files):
        copy = folder / f"{i}_{f.path.name}"
        copy.write_text(line_directive(f.path) + f.text + "\n", encoding="utf-8", errors="surrogateescape")
        inputs.append(copy.name)
    cmd = [*command(plan, inputs, EXECUTABLE, archs, opts), "-MD"]  # a depfile per input: what the build read
    proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, errors="replace")
    log = f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    (folder / "build.log").write_text(log)
    exe = folder / EXECUTABLE
    if proc.returncode != 0 or not exe.is_file():
        raise diagnostics.compile_error(describe(plan, archs), proc.stdout + proc.stderr, sources_by_path(plan))
    return cache.made(exe, resources=parse_resource_usage(proc.stdout + proc.stderr) if plan.cuda else {},
                      command=cmd, compile_only=False,
                      read=[p for d in sorted(folder.glob("*.d")) for p in deps.read_depfile(d)])
