"""The NVRTC engine: a kernel-only ``.cu`` compiled in process to CUBIN, with NVIDIA's cuda-python.

nvcc spends about a second per kernel-only edit (the compiler driver, a host pass, the host compiler,
a link); NVRTC compiles the same kernels in tens of milliseconds, in process, without a GPU. This
module decides whether a snippet can take that way (:func:`unsuitable`), compiles it for each arch
(:func:`compile_cubins`) and makes a build of the CUBINs (:func:`make`); :mod:`jitlab.jit.cubin` loads one.

What it compiles is the user's file after ``#line 1 "<file>"``, so NVRTC's messages (the same
front end as nvcc's) name the user's file and line, with the caret. NVRTC has no C++ standard
library; ``nvrtc_include/`` stands in for the headers kernels include (``<cstdio>`` and ``<cmath>``
are empty, since NVRTC declares ``printf``, ``assert`` and the math functions itself; ``<cstdint>``
and friends, and ``<limits>``'s ``std::numeric_limits``, come from libcu++). CUBIN, never PTX: a driver
older than the toolkit cannot load newer PTX (Colab), while CUBIN for the GPU's own arch always loads.
"""

from __future__ import annotations

import functools
import io
import re
from dataclasses import dataclass
from pathlib import Path

from jitlab.jit import answers, cache, deps, diagnostics, toolchain
from jitlab.jit.flags import Options
from jitlab.jit.parse import line_directive
from jitlab.jit.plan import KernelPlan, Manifest
from jitlab.jit.resources import demangle, parse_resource_usage
from jitlab.jit.sources import user_include_dirs

SHIMS = Path(__file__).parent / "nvrtc_include"
# System headers NVRTC compiles: its own and the toolkit's device headers, and jitlab's stand-ins.
DEVICE_HEADER = re.compile(r"^(cuda[_/].*|cooperative_groups.*|mma\.h|sm_\d+_.*|crt/.*|vector_(types|functions)\.h"
                            r"|device_.*\.h|math_constants\.h|cub/.*|cuda/.*|nv/.*|curand.*\.h)$")
_SYSTEM_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*<([^>]+)>', re.MULTILINE)


@dataclass
class Cubin:
    """One arch's compiled program.

    Attributes:
        arch: ``sm_90``.
        code: The CUBIN (an ELF file).
        names: Each kernel's C++ name → its symbol in the CUBIN.
        log: NVRTC's output: warnings and ptxas' resource usage (``-v``).
    """

    arch: str
    code: bytes
    names: dict[str, str]
    log: str


@functools.cache
def version() -> str | None:
    """NVRTC's version (``"13.0"``), or ``None`` if cuda-python or the NVRTC library is missing.

    Part of every NVRTC build's key, so a cache hit needs it; asking cuda.bindings costs ~0.08 s
    (it loads the driver bindings and searches for the library). It is remembered in the cache
    (:func:`answers.remembered`) with the library file it came from: while that file,
    cuda-bindings' version and the variables that steer the library search are unchanged, it is read from there.
    """
    found = answers.remembered("nvrtc", _probe_version, lambda seen: _memo_check(seen[1]))
    return found[0] if found else None


def _probe_version() -> tuple[str, str | None] | None:
    """Ask NVRTC for its version; also the path of the library that answered (``/proc/self/maps``)."""
    try:
        from cuda.bindings import nvrtc

        err, major, minor = nvrtc.nvrtcVersion()
    except Exception:  # ImportError, or cuda.pathfinder not finding libnvrtc
        return None
    if int(err) != 0:
        return None
    library = None
    try:
        with open("/proc/self/maps") as f:
            library = next((ln.split(None, 5)[-1].strip() for ln in f if "libnvrtc.so" in ln), None)
    except OSError:
        pass
    return f"{major}.{minor}", library


def _memo_check(library: str | None) -> list | None:
    """What must be unchanged for a remembered NVRTC version to hold; ``None`` if it cannot be told."""
    import importlib.util
    import os

    if not library:
        return None
    try:
        spec = importlib.util.find_spec("cuda.bindings.nvrtc")  # imports only the cuda.bindings package
        files = [os.stat(library), os.stat(spec.origin)]
    except (ImportError, ValueError, AttributeError, TypeError, OSError):
        return None
    steer = [os.environ.get(k, "") for k in ("CUDA_HOME", "CUDA_PATH", "LD_LIBRARY_PATH")]
    return [library, *[[st.st_size, st.st_mtime_ns, st.st_ino] for st in files], *steer]


def unavailable() -> str | None:
    """Why NVRTC cannot be used on this machine (``None`` if it can)."""
    import importlib.util

    # Looked up, not imported: a cache hit needs only NVRTC's version, and cuda.core takes ~0.2 s to import.
    try:
        found = importlib.util.find_spec("cuda.core") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return f"cuda-python is not installed (`pip install {_extra_spec()}`)"
    bindings = _bindings_version()
    if bindings is None:
        return f"cuda-bindings is not installed (`pip install {_extra_spec()}`)"
    torch_cuda = _torch_cuda_major()
    if torch_cuda and bindings.split(".")[0] != torch_cuda:
        return (f"cuda-bindings {bindings} is for CUDA {bindings.split('.')[0]} but torch is built for CUDA {torch_cuda} "
                f"(its driver may not load CUDA {bindings.split('.')[0]} code): `pip install {_extra_spec()}`")
    if version() is None:
        return "the NVRTC library was not found (`pip install nvidia-cuda-nvrtc`, or a CUDA toolkit)"
    if not (toolchain.cuda_home() / "include" / "cuda_runtime.h").is_file():
        return f"CUDA's headers were not found under {toolchain.cuda_home()}/include (set CUDA_HOME)"
    return None


@functools.cache
def _bindings_version() -> str | None:
    """cuda-bindings' installed version (``"12.9.7"``), read from its metadata once a process (nothing imported)."""
    from importlib import metadata

    try:
        return metadata.version("cuda-bindings")
    except metadata.PackageNotFoundError:
        return None


def _torch_cuda_major() -> str | None:
    """The CUDA major version torch was built with (``"12"``); ``None`` for a CPU build."""
    import torch  # already imported by jitlab's build path

    return torch.version.cuda.split(".")[0] if torch.version.cuda else None


def _extra_spec() -> str:
    """What to install for NVRTC: jitlab's extra for torch's CUDA major (``"jitlab[cu12]"``)."""
    major = _torch_cuda_major() or "13"
    return f"'jitlab[cu{major}]'  (or cuda-bindings=={major}.*)"


def unsuitable(plan) -> str | None:
    """Why a plan must be built with nvcc rather than NVRTC (``None``: NVRTC can take it).

    NVRTC compiles device code only: a kernel-only snippet of one ``.cu`` file whose exported
    functions are all kernels, including no host-only system header.
    """
    if plan.kind != "kernel":
        return "torch-style snippet (host code with torch)"
    if not plan.cuda or any(f.language == "cpp" for f in plan.files):
        return "C++ host code"
    cu = [f for f in plan.files if f.language == "cuda"]
    if len(cu) > 1:
        return f"{len(cu)} .cu files (NVRTC compiles one)"
    host = [fn.name for fn in plan.exported if fn.kind != "global"]
    if host:
        return f"host function {host[0]}() is called from Python (NVRTC compiles device code only)"
    for f in plan.files:
        for header in _SYSTEM_INCLUDE.findall(f.text):
            name = header.strip()
            if not (DEVICE_HEADER.match(name) or (SHIMS / name).is_file()):
                return f"includes <{name}>, a host header"
    if not plan.exported:
        return "no kernel to call"
    return None


def include_path(plan) -> list[str]:
    """Where NVRTC looks for headers: jitlab's stand-ins, the snippet's folders, CUDA's headers."""
    cuda = toolchain.cuda_home() / "include"
    folders = [str(SHIMS), *{str(f.path.parent): None for f in plan.files}, *plan.include_dirs, str(cuda)]
    if (cuda / "cccl").is_dir():  # CUDA 13 keeps CUB and libcu++ there
        folders.append(str(cuda / "cccl"))
    return list(dict.fromkeys(folders))


def options(plan, arch: str, defines: dict, debug: bool, pch: Path | None = None):
    """NVRTC's options for one arch: the same defines, line info and resource report as nvcc's; with ``pch``, the
    text before the user's code precompiled there for the next edit (:mod:`jitlab.jit.engines.nvrtc_pch`)."""
    from jitlab.jit import cudacore
    from jitlab.jit.engines import nvrtc_pch

    macros = [k if v is None else (k, str(v)) for k, v in defines.items()]
    if debug:
        macros.append(("JITLAB_DEBUG", "1"))
    made = cudacore.module().ProgramOptions
    fields = dict(name=plan.stem, arch=arch, std="c++17", include_path=include_path(plan), define_macro=macros or None,
                  undefine_macro=["NDEBUG"] if debug else None, debug=debug, lineinfo=not debug, ptxas_options=["-v"])
    return made(**nvrtc_pch.fields(pch, fields))


def source(plan, pch: bool = False) -> str:
    """The text NVRTC compiles: ``jitlab_nvrtc.h`` (``INFINITY`` and the like, which nvcc's implicit
    includes give), then the user's ``.cu`` after a ``#line`` directive naming it; with ``pch``, the end of the
    part NVRTC precompiles marked between them (:data:`nvrtc_pch.STOP`)."""
    from jitlab.jit.engines import nvrtc_pch  # with the compile: a cache hit needs none of it

    f = next(f for f in plan.files if f.language == "cuda")
    return f"#include <jitlab_nvrtc.h>\n{nvrtc_pch.STOP if pch else ''}{line_directive(f.path)}{f.text}"


def compile_cubins(plan, archs: list[str], defines: dict, debug: bool = False) -> list[Cubin]:
    """Compile the plan's ``.cu`` for each arch.

    Raises:
        NvrtcError: NVRTC rejected the code (its log names the user's file and line).
    """
    from jitlab.jit import cudacore
    from jitlab.jit.engines import nvrtc_pch

    core = cudacore.module()
    kernels = [fn.qualname for fn in plan.exported]
    out = []
    for arch in archs:
        log = io.StringIO()
        try:
            with nvrtc_pch.borrowed(version(), core.ProgramOptions, plan.stem) as pch:
                text = source(plan, pch is not None)
                obj = core.Program(text, "c++", options(plan, arch, defines, debug, pch)).compile(
                    "cubin", name_expressions=kernels, logs=log)
        except Exception as e:  # cuda.core raises NVRTCError with the log in its message
            raise NvrtcError(log_of(e, log.getvalue())) from None
        names = {k: (v.decode() if isinstance(v, bytes) else str(v)) for k, v in cudacore.symbol_mapping(obj).items()}
        out.append(Cubin(arch, bytes(obj.code), names, log.getvalue().replace("\x00", "").strip()))
    return out


def check_syntax(f, opts: Options, nvcc_next: bool) -> bool:
    """Compile one ``.cu`` file the parser found nothing in (no kernels named, for the oldest arch), so that a
    syntax error is NVRTC's message at the user's line (:func:`jitlab.jit.builder.compiler_first`).

    Args:
        f: The parsed file.
        opts: Build options (defines, include folders, ``arch``).
        nvcc_next: nvcc is asked next where NVRTC's error may be its own (:func:`only_nvrtc_fails`).

    Returns:
        Whether NVRTC compiled it (``False``: nvcc is to be asked).

    Raises:
        CompileError: NVRTC rejected the code.
    """
    arch = toolchain.normalize_arch(opts.arch[0]) if opts.arch else toolchain.oldest_arch()
    plan = KernelPlan(stem=f.path.stem, cuda=True, files=[f], include_dirs=[str(f.path.parent), *user_include_dirs(opts)],
                      exported=[], cpp_sources=[], cuda_sources=[])  # no kernels to name: a syntax check
    try:
        compile_cubins(plan, [arch], opts.defines, opts.debug)
    except NvrtcError as e:
        if nvcc_next and only_nvrtc_fails(e.log, [str(f.path)]):
            return False
        raise diagnostics.compile_error(f"{f.path} (NVRTC, {arch})", e.log, {str(f.path): f.text}) from None
    return True


def resource_usage(cubin: Path, arch: str) -> dict:
    """Per-kernel registers, stack, shared, local and constant memory read from a CUBIN with
    ``cuobjdump --dump-resource-usage`` (spills are not in it), keyed like ptxas' figures."""
    import subprocess

    tool = toolchain.find_cuda_tool("cuobjdump")
    if tool is None:
        return {}
    proc = subprocess.run([tool, "--dump-resource-usage", str(cubin)], capture_output=True, text=True)
    usage, current = {}, None
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*Function (\S+):", line)
        if m:
            current = m.group(1)
            continue
        m = re.search(r"REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+) CONSTANT\[0\]:(\d+)", line)
        if m and current:
            reg, stack, shared, local, const = map(int, m.groups())
            usage[current] = {arch: {"registers": reg, "shared": shared, "local": local, "constant": const,
                                     "stack": stack, "spill_stores": 0, "spill_loads": 0}}
    return usage


# NVRTC errors that nvcc would not give: headers NVRTC lacks, host code in JIT mode.
_NVRTC_ONLY = re.compile(r"cannot open source file|not allowed in JIT mode|explicitly marked as a __host__|"
                         r"__host__ function|host function")
_ERROR_AT = re.compile(r'^(.*?)\((\d+)\): (?:catastrophic )?error', re.MULTILINE)


def only_nvrtc_fails(log: str, user_files: list[str]) -> bool:
    """Whether NVRTC's errors may be NVRTC's own (nvcc might compile the code): an error about a
    missing header or host code, or one outside the user's files (in a header NVRTC reads differently)."""
    errors = [(m.group(1), m.group(0)) for m in _ERROR_AT.finditer(log)]
    if not errors or _NVRTC_ONLY.search(log):
        return True
    return any(path not in user_files for path, _ in errors)


class NvrtcError(Exception):
    """NVRTC could not compile a program; ``log`` is its full output."""

    def __init__(self, log: str):
        super().__init__(log.splitlines()[0] if log else "NVRTC failed")
        self.log = log


def log_of(e: Exception, log: str) -> str:
    text = str(e)
    if "compilation log:" in text:
        text = text.split("compilation log:", 1)[1]
    return (log + "\n" + text).replace("\x00", "").strip()


#: What a build records as its engine (``Build.engine``), and what its progress line says compiles it.
ENGINE = "nvrtc"
COMPILER = "NVRTC"


def key_parts(plan: KernelPlan, archs: list[str], opts: Options, parts: dict) -> dict:
    """The plan's key parts and NVRTC's version: an NVRTC build is keyed apart from nvcc's."""
    return {**parts, "engine": ENGINE, "nvrtc": version()}


def require_tools(plan: KernelPlan, opts: Options) -> None:
    """NVRTC needs no tool besides itself (:func:`unavailable` said it is there)."""


def make(plan: KernelPlan, name: str, folder: Path, archs: list[str], opts: Options) -> Manifest:
    """A kernel-only ``.cu`` compiled in process by NVRTC: one CUBIN per arch, the first one the artifact.

    Raises:
        NvrtcError: NVRTC rejected the code (the caller reports it, or hands the plan to nvcc).
    """
    cubins = compile_cubins(plan, archs, opts.defines, opts.debug)
    cu = next(f for f in plan.files if f.language == "cuda")
    read = deps.scanned_includes(cu.text, cu.path.parent, include_path(plan), opts.defines)
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
            for kernel, per_arch in resource_usage(folder / files[c.arch], c.arch).items():
                resources.setdefault(demangle(kernel), {}).update(per_arch)
    first = folder / files[archs[0]]
    return cache.made(first, cubins=files, kernels=cubins[0].names, resources=resources,
                      compile_only=opts.compile_only, nvrtc=version(), read=read)


def _nvcc_reads(plan, folder: Path, opts: Options) -> list[str]:
    """What an NVRTC build read, where a computed include names a macro jitlab cannot follow: nvcc's
    ``-M`` on the same text (a tenth of a second or so)."""
    nvcc = toolchain.nvcc_path()
    if not nvcc:
        return []
    src = folder / "nvrtc.cu"
    src.write_text(source(plan), encoding="utf-8", errors="surrogateescape")
    defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()]
    return deps.preprocessor_deps([nvcc, "-x", "cu", *(f"-I{d}" for d in include_path(plan)), *defines],
                                  src, folder)
