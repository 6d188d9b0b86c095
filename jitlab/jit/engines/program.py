"""The program engine: a ``.cu``/``.cpp`` with ``int main`` → an executable in the build cache.

A program is a plan like any other (``Options(mode="program")``, :func:`jitlab.jit.builder.prepare`),
built as ``nvcc prog.cu -o prog`` (the host compiler for ``.cpp``) would build it, plus ``-lineinfo``
so compute-sanitizer and ncu name its lines: a key over the sources, local headers, flags, defines,
archs and toolchain; an edit rebuilds, anything else is a cache hit that compiles nothing.
The build compiles copies of the texts it hashed, each after ``#line 1 "<its path>"``, so errors,
``__FILE__`` and line info name the user's file; the user's file is only read. Running it is
:mod:`jitlab.worker.execute`'s job. A ``.cu`` program whose kernels NVRTC can take is built by
:mod:`.nvrtc_program` instead (a kernel edit then compiles no host code); this engine builds the others,
with the reason in the build's notes, and every program under ``engine="nvcc"``.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from jitlab import config
from jitlab.jit import cache, deps, diagnostics, nvcc_shell, toolchain
from jitlab.jit.flags import Options, arch_flags
from jitlab.jit.parse import line_directive
from jitlab.jit.plan import Manifest, ProgramPlan
from jitlab.jit.resources import parse_resource_usage
from jitlab.jit.sources import describe, sources_by_path

#: The executable's name inside its build folder.
EXECUTABLE = "program"
#: What a build records as its engine (``Build.engine``: ``c++`` for a ``.cpp``), and what its progress
#: line says compiles it.
ENGINE = "nvcc"
COMPILER = "nvcc"


def key_parts(plan: ProgramPlan, archs: list[str], opts: Options, parts: dict) -> dict:
    """A program's key: its files' texts (compiled as they are), their local headers, flags, archs, toolchain."""
    return {"format": config.FORMAT_VERSION, "kind": "program", "sources": [(str(f.path), f.text) for f in plan.files],
            "headers": parts["headers"], "archs": archs, "debug": opts.debug, "flags": parts["flags"],
            "toolchain": parts["toolchain"]}


def require_tools(plan: ProgramPlan, opts: Options) -> None:
    """nvcc for a ``.cu`` program, the host compiler for a ``.cpp`` one."""
    toolchain.require_tool(toolchain.nvcc_path() if plan.cuda else toolchain.cxx_path(), "nvcc" if plan.cuda else "c++")


def command(plan: ProgramPlan, inputs: list[str], output: str, archs: list[str], opts: Options) -> list[str]:
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


def make(plan: ProgramPlan, name: str, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """Write each file's text after its ``#line`` directive into ``folder``, compile and link them."""
    inputs = []
    for i, f in enumerate(plan.files):
        copy = folder / f"{i}_{f.path.name}"
        copy.write_text(line_directive(f.path) + f.text + "\n", encoding="utf-8", errors="surrogateescape")
        inputs.append(copy.name)
    cmd = [*command(plan, inputs, EXECUTABLE, archs, opts), "-MD"]  # a depfile per input: what the build read
    run = nvcc_shell.run_nvcc if plan.cuda else subprocess.run  # nvcc's steps go through a shell
    proc = run(cmd, cwd=folder, capture_output=True, text=True, errors="replace")
    log = f"{' '.join(cmd)}\n{proc.stdout}{proc.stderr}"
    (folder / "build.log").write_text(log)
    exe = folder / EXECUTABLE
    if proc.returncode != 0 or not exe.is_file():
        raise diagnostics.compile_error(describe(plan, archs), proc.stdout + proc.stderr, sources_by_path(plan))
    return cache.made(exe, resources=parse_resource_usage(proc.stdout + proc.stderr) if plan.cuda else {},
                      command=cmd, compile_only=False,
                      read=[p for d in sorted(folder.glob("*.d")) for p in deps.read_depfile(d)])
