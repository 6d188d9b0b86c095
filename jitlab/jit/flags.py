"""What a user sets, and the compiler flags it becomes.

:class:`Options` is everything a user can set that changes the binary. ``compile_flags`` turns it into
the host and nvcc flags ``load_inline`` is given; ``nvcc_command`` is nvcc with exactly those flags
(compile-only builds, ``jitlab inspect``'s PTX); ``object_flags`` splits them by compiler for the
object cache's torch-style units (precompiled header first, the user's flags after). Nothing here
compiles: these are command lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from jitlab.errors import SnippetError
from jitlab.jit import shellwords, toolchain, torch_install
from jitlab.jit.plan import Flags, KernelPlan, Plan, TorchPlan


@dataclass
class Options:
    """Everything a user can set that changes the binary.

    Attributes:
        mode: ``"auto"``, ``"kernel"`` or ``"torch"``; ``"program"`` for a whole program (``int main``),
            built as nvcc builds it (:mod:`jitlab.jit.engines.program`; its kernels by NVRTC where they can be,
            :mod:`jitlab.jit.engines.nvrtc_program`) and run by :mod:`jitlab.worker.execute`.
        arch: Archs to build for (``["sm_90"]``); default: the current GPU.
        defines: Preprocessor macros (``{"BLOCK": 256}``).
        cflags: Extra host compiler flags.
        cuda_cflags: Extra nvcc flags.
        ldflags: Extra linker flags.
        compile_only: Compile CUDA to an object without linking or loading (machines without a GPU).
        debug: A debug build: device code with ``-G`` (no optimization, full debug info), host code
            with ``-g -O0``, and ``assert`` on even if a flag defines ``NDEBUG``.
        engine: ``"auto"``, ``"nvrtc"`` or ``"nvcc"`` (see :func:`jitlab.jit.builder.choose_engine`).
        device: ``"auto"`` (a GPU, or the CPU emulator for a kernel-only ``.cu`` on a machine without one:
            :func:`jitlab.jit.builder.on_emulator`), ``"cuda"``, or ``"cpu"`` for a kernel-only ``.cu`` run by
            the CPU emulator (:mod:`jitlab.jit.engines.emulator`).
        with_cuda: C++ sources without CUDA ones are compiled with CUDA's headers and linked with
            its libraries (torch's ``with_cuda=True``); CUDA sources always are.

    A relative path in an include flag of ``cflags``/``cuda_cflags`` (``-Iinclude``, ``-isystem vendor``,
    ``-include pre.h``) is made absolute against the working directory when the options are made (the
    call's), since the compilers run in the build folder; the key holds the absolute path.
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
    device: str = "auto"
    with_cuda: bool = False

    def __post_init__(self):
        self.cflags, self.cuda_cflags = absolute_paths(self.cflags), absolute_paths(self.cuda_cflags)


#: Flags whose value is a path (folder or, for ``-include``, a header), joined (``-Idir``, ``-isystem=dir``) or not.
_PATH_FLAGS = ("-isystem", "-iquote", "-idirafter", "-include", "--include-path", "--system-include", "--pre-include",
               "-I")


def absolute_paths(flags: list[str]) -> list[str]:
    """``flags`` with the relative path of each include flag (:data:`_PATH_FLAGS`) made absolute against the
    working directory; ``~`` expanded, anything else unchanged."""
    out: list[str] = []
    for flag in flags:
        prev = out[-1] if out else ""
        if prev in _PATH_FLAGS and not flag.startswith("-"):  # `-I dir`: the path is this argument
            out.append(str(Path(flag).expanduser().absolute()))
            continue
        prefix = next((p for p in _PATH_FLAGS if flag.startswith(p) and flag != p), None)
        rest = flag[len(prefix):] if prefix else ""
        eq = "=" if rest.startswith("=") else ""
        path = rest[len(eq):]
        out.append(f"{prefix}{eq}{Path(path).expanduser().absolute()}" if prefix and path else flag)
    return out


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def defines_from(items) -> dict[str, str | None]:
    """``-D`` arguments as written on a command or magic line (``NAME`` or ``NAME=VALUE``) → a defines dict."""
    return dict(d.split("=", 1) if "=" in d else (d, None) for d in items or ())


def normalize_defines(defines) -> dict[str, str | None]:
    """The user's macros as the compilers get them: names checked, ``True``/``False`` as ``1``/``0``.

    ``{"USE_FAST": True}`` would otherwise compile ``-DUSE_FAST=True``, which ``#if`` reads as 0.

    Raises:
        SnippetError: A name that is not a C identifier, or a value with a line break (neither can be
            passed to a compiler as one macro).
    """
    out: dict[str, str | None] = {}
    for name, value in dict(defines or {}).items():
        if not isinstance(name, str) or not _IDENTIFIER.match(name):
            raise SnippetError(f"define {name!r}: a macro name is a C identifier (letters, digits, `_`, "
                               f"not starting with a digit), e.g. defines={{'BLOCK': 256}}")
        if isinstance(value, bool):
            value = int(value)
        if value is not None and ("\n" in str(value) or "\r" in str(value)):
            raise SnippetError(f"define {name}={value!r}: a macro's value is one line; put longer code in the "
                               f"snippet or a header")
        out[name] = None if value is None else str(value)
    return out


#: What ``Options.engine`` may be.
ENGINES = ("auto", "nvrtc", "nvcc")


def compile_flags(plan: Plan, archs: list[str], opts: Options) -> tuple[list[str], list[str]]:
    """The build's host and nvcc flags, ``(cflags, cuda_cflags)``, as ``load_inline`` is given them."""
    defines = [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in opts.defines.items()]
    # Optimize kernel-only C++ (a tiny unit, it is the kernel); torch-style units keep load_inline's
    # defaults, so they build no slower than plain load_inline. nvcc optimizes device code by default.
    cflags = [*(["-O2"] if plan.kind == "kernel" else []), *defines, *opts.cflags]
    # -lineinfo maps every SASS instruction to the snippet's line (through codegen's #line
    # directives) at no run-time cost, so compute-sanitizer, ncu and `jitlab inspect` name the
    # user's file and line without a second build. -G implies it.
    cuda = [*arch_flags(archs, opts), "--resource-usage", "-G" if opts.debug else "-lineinfo",
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


def arch_flags(archs: list[str], opts: Options) -> list[str]:
    """nvcc's ``-gencode`` flags for ``archs``, or none when the user's nvcc flags choose the architectures
    (``-arch=sm_80``, ``-gencode ...``): theirs stand alone, as torch leaves them."""
    return [] if shellwords.names_arch(opts.cuda_cflags) else toolchain.gencode_flags(archs)


def nvcc_command(plan: KernelPlan | TorchPlan, name: str, archs: list[str], opts: Options, what: list[str]) -> list[str]:
    """nvcc with the flags load_inline would use for the plan's CUDA unit.

    Args:
        name: The module name (``-DTORCH_EXTENSION_NAME``).
        what: The input and what to make, e.g. ``["-c", "cuda.cu", "-o", "cuda.o"]`` or
            ``["-ptx", "cuda.cu", "-o", "cuda.ptx"]``.
    """

    includes = [f"-I{d}" for d in plan.include_dirs]
    if plan.device_needs_torch:
        includes += _torch_includes("-isystem=")
    return [toolchain.nvcc_path(), *what, f"-DTORCH_EXTENSION_NAME={name}", *includes, *_nvcc_flags(plan, archs, opts)]


def _torch_defines() -> list[str]:
    return ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-D_GLIBCXX_USE_CXX11_ABI={toolchain.fingerprint(False)['abi']}"]


def torch_include_flags(cuda: bool) -> list[str]:
    """torch's include folders as system includes, spelled for nvcc (``cuda``) or the host compiler."""
    return _torch_includes("-isystem=" if cuda else "-isystem")


def _torch_includes(prefix: str) -> list[str]:
    return [f"{prefix}{d}" for d in torch_install.include_paths() + [_python_include()]]


def _nvcc_flags(plan: Plan, archs: list[str], opts: Options) -> list[str]:
    """nvcc flags without inputs, outputs or include folders: load_inline's, then the build's."""
    from torch.utils import cpp_extension

    _, cuda_cflags = compile_flags(plan, archs, opts)
    return [*_torch_defines(), *cpp_extension.COMMON_NVCC_FLAGS, "--compiler-options", "-fPIC", *cuda_cflags,
            "-std=c++20"]


def object_flags(plan: TorchPlan, archs: list[str], opts: Options) -> Flags:
    """The flags of a torch-style build's units: the ones ``load_inline`` would use, split by compiler."""
    cflags, _ = compile_flags(plan, archs, opts)
    user = [f"-I{d}" for d in plan.include_dirs]
    cuda = plan.cuda or opts.with_cuda  # CUDA's headers and libraries
    debug = ["-g", "-O0", "-UNDEBUG"] if opts.debug else []
    cxx, cuda_include = _host_flags(cuda, debug)
    # An operator snippet is unloaded on reload: GCC's STB_GNU_UNIQUE symbols (static locals of inline
    # functions) would make the dynamic loader keep it for ever.
    unique = ["-fno-gnu-unique"] if plan.ops else []
    user_cflags = [f for f in cflags if f not in debug] + unique
    lib = torch_install.lib_dir()
    ld = [f"-L{lib}", "-lc10", *(["-lc10_cuda"] if cuda else []), "-ltorch_cpu",
          *(["-ltorch_cuda"] if cuda else []), "-ltorch", "-ltorch_python"]
    if cuda:
        ld += [f"-L{toolchain.cuda_lib_dir()}", "-lcudart"]
    nvcc = [*_nvcc_flags(plan, archs, opts), *(f"-Xcompiler={f}" for f in unique)] if plan.cuda else []
    return Flags(includes=tuple(user), cxx=tuple(cxx), cuda_include=tuple(cuda_include),
                         cxx_user=tuple(user_cflags), nvcc=tuple(nvcc), nvcc_torch=tuple(_torch_includes("-isystem=")),
                         ld=(*ld, *toolchain.runtime_ldflags(), *opts.ldflags), toolchain=tuple(sorted(toolchain.fingerprint(plan.cuda).items())))


def _host_flags(cuda: bool, debug: list[str]) -> tuple[list[str], list[str]]:
    """Every host unit's base flags and CUDA's include folder (for CUDA snippets), ``(cxx, cuda_include)``.

    The precompiled header is made with the base flags (a debug build gets its own); the user's
    defines and cflags come after. GCC checks that they leave the header valid and, if not, reads
    the headers themselves (slow, never wrong; -Winvalid-pch says so in the log).
    """
    cxx = [*_torch_includes("-isystem"), *_torch_defines(), "-fPIC", "-std=c++20", "-pipe", *debug]
    return cxx, ([f"-isystem{toolchain.cuda_home() / 'include'}"] if cuda else [])


def default_host_flags(cuda: bool) -> Flags:
    """The host flags of a plain torch-style build (``jitlab.load(path)``: no user flags, no debug), which the
    precompiled torch header sets a first build needs are made with (:mod:`jitlab.jit.prepare`); only the
    host fields are filled."""
    cxx, cuda_include = _host_flags(cuda, [])
    return Flags(includes=(), cxx=tuple(cxx), cuda_include=tuple(cuda_include), cxx_user=(), nvcc=(), nvcc_torch=(),
                 ld=(), toolchain=tuple(sorted(toolchain.fingerprint(cuda).items())))


def _python_include() -> str:
    import sysconfig

    return sysconfig.get_path("include")
