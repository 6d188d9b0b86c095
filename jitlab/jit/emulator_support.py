"""What the CPU emulator runs, decided while planning: the features it refuses, whether this machine can
build for it, and the words verdicts use for an emulated run.

The CPU emulator builds a kernel-only ``.cu`` with the host C++ compiler against jitlab's SIMT header
(:mod:`jitlab.jit.engines.emulator`) and runs it exactly, no GPU (:mod:`jitlab.jit.emulator_run`).
:func:`plan` is its plan stage: the snippet planned kernel-only, each refused feature named at its line
before anything compiles.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass

from jitlab.errors import SnippetError
from jitlab.jit import codegen, toolchain
from jitlab.jit.plan import KernelPlan
from jitlab.jit.flags import Options
from jitlab.jit.parse import SourceFile, parse_file
from jitlab.jit.sources import collect_sources

#: The engine name a build records (``Build.engine``), and what verdicts say the run was.
ENGINE = "cpu emulator"
RUN_ON = "run on the CPU emulator"
#: Why an emulated run has no timing figures (the verdicts and the playground say it).
NO_TIMING = ("no timing: the CPU emulator runs each GPU thread in turn on this CPU, so its time says "
             "nothing about a GPU's")


@dataclass(frozen=True)
class Refused:
    """A CUDA feature the emulator does not run, found in a snippet before compiling it.

    Attributes:
        pattern: What finds it in the source (comments removed).
        feature: What the user is told it is.
    """

    pattern: re.Pattern
    feature: str


REFUSED = (
    Refused(re.compile(r"\basm\s*(?:volatile\s*)?\(|\b__asm__\b"), "inline PTX (asm(...))"),
    Refused(re.compile(r"\bwmma::|nvcuda::|#\s*include\s*<mma\.h>"), "tensor cores (WMMA, mma.h)"),
    Refused(re.compile(r"\bwgmma\b|CUtensorMap|cp\.async\.bulk|\bcuda::barrier\b|\bcuda::memcpy_async\b"),
            "Hopper tensor cores and TMA (wgmma, cp.async.bulk, CUtensorMap)"),
    Refused(re.compile(r"\bthis_grid\s*\(|\bgrid_group\b|cudaLaunchCooperativeKernel"),
            "grid-wide cooperative sync (cooperative_groups::this_grid)"),
    Refused(re.compile(r"\bcub::|#\s*include\s*<cub/|\bthrust::|#\s*include\s*<thrust/"), "CUB/Thrust device code"),
    Refused(re.compile(r"\btex[123]D\w*\s*[<(]|\btexture\s*<|cudaTextureObject_t|\bsurf[123]D\w*\s*[<(]"),
            "textures and surfaces"),
)

_COMMENTS = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def refusal(f: SourceFile) -> str:
    """Why the emulator cannot run file ``f`` (``""`` when it can): the feature and its line."""
    text = _COMMENTS.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), f.text)
    for r in REFUSED:
        m = r.pattern.search(text)
        if m:
            line = text.count("\n", 0, m.start()) + 1
            return (f"{f.path}:{line}: the CPU emulator does not run {r.feature}; run this snippet on a GPU "
                    f"(on Colab: Runtime > Change runtime type > T4 GPU)")
    return ""


def plan(files: list[SourceFile], stem: str, opts: Options) -> KernelPlan:
    """The plan of an emulated build: the snippet kernel-only (``mode="auto"`` reads it so), every file
    free of what the emulator refuses.

    Raises:
        SnippetError: A torch-style snippet, or a feature the emulator does not run (named, with its line).
    """
    made = codegen.plan(files, stem, "kernel" if opts.mode == "auto" and not any(f.uses_torch for f in files)
                        else opts.mode, opts.defines)
    if made.kind != "kernel":
        raise SnippetError(f"{', '.join(str(f.path) for f in files)}: the CPU emulator runs kernel-only snippets "
                           f"(no torch in the file); load this torch-style snippet on a GPU")
    for f in files:
        why = refusal(f)
        if why:
            raise SnippetError(why)
    return made


def cannot_run(path) -> str:
    """Why the CPU emulator cannot run the snippet at ``path`` (``""`` when it can): no compiler, a
    torch-style snippet, or a feature it does not emulate (named, with its line)."""
    why = available()
    if why:
        return why
    try:
        files = [parse_file(p) for p in collect_sources(path)]
    except SnippetError as e:
        return str(e)
    return refused(files)


def refused(files: list[SourceFile]) -> str:
    """Why the CPU emulator cannot run these parsed files (``""`` when it can): a torch-style snippet, or a
    feature it does not emulate (named, with its line)."""
    if any(f.uses_torch for f in files):
        return "the CPU emulator runs kernel-only snippets, and this one uses torch"
    return next((why for why in map(refusal, files) if why), "")


def available() -> str:
    """Why this machine cannot build for the emulator (``""`` when it can)."""
    if platform.machine() not in ("x86_64", "AMD64", "aarch64", "arm64"):
        return f"the CPU emulator switches fibers on x86_64 and aarch64 only, not {platform.machine()}"
    if toolchain.cxx_path() is None:
        return "no C++ compiler found: install g++ (`apt-get install g++`) or set CXX"
    return ""
