"""The compile-only engine: a snippet's CUDA unit compiled to an object by nvcc, nothing linked or loaded.

For machines without a GPU (``jitlab.build(..., compile_only=True)``): the flags are the ninja engine's
(:func:`jitlab.jit.flags.nvcc_command`), so the object is what a GPU build compiles, and its errors and
resource usage are the same.
"""

from __future__ import annotations

from pathlib import Path

from jitlab.errors import SnippetError
from jitlab.jit import cache, deps, diagnostics, nvcc_shell, toolchain
from jitlab.jit.flags import Options, nvcc_command
from jitlab.jit.plan import KernelPlan, Manifest
from jitlab.jit.resources import parse_resource_usage
from jitlab.jit.sources import describe, sources_by_path

#: What a build records as its engine (``Build.engine``), and what its progress line says compiles it.
ENGINE = "nvcc"
COMPILER = "nvcc"


def key_parts(plan: KernelPlan, archs: list[str], opts: Options, parts: dict) -> dict:
    """The plan's key parts as they are (``compile_only`` is one of them)."""
    return parts


def require_tools(plan: KernelPlan, opts: Options) -> None:
    """nvcc and the host compiler; neither ninja nor a CUDA torch."""
    toolchain.require_tools(plan.cuda, compile_only=True, ninja=True)


def make(plan: KernelPlan, name: str, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """Compile the CUDA unit to an object with nvcc (the flags load_inline would use), no link, no load."""
    if not plan.cuda:
        raise SnippetError(f"{describe(plan, archs)}: compile_only applies to CUDA snippets; C++ snippets build and run here")
    src = folder / "cuda.cu"
    src.write_text("\n".join(plan.cuda_sources), encoding="utf-8", errors="surrogateescape")
    depfile = folder / "cuda.d"
    cmd = nvcc_command(plan, name, archs, opts, ["-c", str(src), "-o", str(folder / "cuda.o"), "-MD", "-MF", str(depfile)])
    proc = nvcc_shell.run_nvcc(cmd, capture_output=True, text=True)
    log = " ".join(cmd) + "\n" + proc.stdout + proc.stderr
    (folder / "build.log").write_text(log)
    if proc.returncode != 0:
        raise diagnostics.compile_error(describe(plan, archs), log, sources_by_path(plan))
    obj = folder / "cuda.o"
    return cache.made(obj, resources=parse_resource_usage(log), compile_only=True, read=deps.read_depfile(depfile))
