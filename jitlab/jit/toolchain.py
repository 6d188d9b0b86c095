"""The build tools: find them, fingerprint them, and say how to fix what is missing.

Everything is checked before a build starts, so a missing ``ninja`` or a CUDA version mismatch is a
one-line error naming the fix rather than a page of compiler output.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import platform
import re
import shutil
import sys
from pathlib import Path

from jitlab.jit import answers, gpus, ninja_tool, torch_install
from jitlab.jit.answers import identity, run

from jitlab.errors import ToolchainError

#: Where torch looks for CUDA when neither the environment nor PATH names it.
DEFAULT_CUDA_HOME = "/usr/local/cuda"


#: Environment variables that change what the compilers read (include and library folders, flags).
COMPILER_ENV = ("CPATH", "CPLUS_INCLUDE_PATH", "C_INCLUDE_PATH", "LIBRARY_PATH", "NVCC_PREPEND_FLAGS",
                "NVCC_APPEND_FLAGS")
#: Environment variables the tool look-ups below depend on (each is remembered per their values).
_FINDING_ENV = ("CUDA_HOME", "CUDA_PATH", "PATH", "CXX")


def _asked(tool: str, *args: str) -> str:
    """What ``tool args`` prints, remembered across processes per the tool and :data:`COMPILER_ENV` (:func:`answers.asked`)."""
    return answers.asked(tool, args, COMPILER_ENV)


def _finding() -> tuple[str, ...]:
    return tuple(os.environ.get(v, "") for v in _FINDING_ENV)


def nvcc_path() -> str | None:
    """nvcc as torch finds it: ``$CUDA_HOME``/``$CUDA_PATH``, then ``PATH``, then ``/usr/local/cuda`` (read here:
    importing ``torch.utils.cpp_extension`` to ask it would cost a cache hit ~0.15 s)."""
    return _nvcc_path(_finding())


@functools.cache
def _nvcc_path(env: tuple[str, ...]) -> str | None:
    for home in env[:2]:
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    found = shutil.which("nvcc", path=env[2] or None)
    if found:
        return found
    default = Path(DEFAULT_CUDA_HOME) / "bin" / "nvcc"
    return str(default) if default.is_file() else None


def cuda_home() -> Path:
    """The CUDA toolkit folder: ``$CUDA_HOME``/``$CUDA_PATH``, nvcc's grandparent if it holds the
    headers (nvcc may be a wrapper script elsewhere on PATH), else ``/usr/local/cuda``."""
    return _cuda_home(_finding())


@functools.cache
def _cuda_home(env: tuple[str, ...]) -> Path:
    for home in env[:2]:
        if home and (Path(home) / "include" / "cuda_runtime.h").is_file():
            return Path(home)
    nvcc = nvcc_path()
    if nvcc:
        for cand in (Path(nvcc).parent.parent, Path(nvcc).resolve().parent.parent):
            if (cand / "include" / "cuda_runtime.h").is_file():
                return cand
    return Path(DEFAULT_CUDA_HOME)


def cuda_lib_dir() -> Path:
    """The toolkit's library folder (``lib64``, or ``lib``), where ``libcudart`` is."""
    home = cuda_home()
    return home / "lib64" if (home / "lib64").is_dir() or not (home / "lib").is_dir() else home / "lib"


def nvcc_version() -> str | None:
    """nvcc's release, e.g. ``"13.0.88"``; ``None`` without nvcc."""
    return _nvcc_version(nvcc_path())


@functools.cache
def _nvcc_version(nvcc: str | None) -> str | None:
    if not nvcc:
        return None
    m = re.search(r"V(\d+\.\d+\.\d+)", _asked(nvcc, "--version"))
    return m.group(1) if m else "unknown"


def require_tool(path: str | None, name: str) -> str:
    """``path``, the compiler found for ``name``, or a ToolchainError when there is none."""
    if not path:
        raise ToolchainError(f"{name} not found: run `jitlab` on a machine with the CUDA toolkit and a C++ compiler")
    return path


def cxx_path() -> str | None:
    """The host C++ compiler torch will use (``$CXX`` or ``c++``)."""
    return _cxx_path(_finding())


@functools.cache
def _cxx_path(env: tuple[str, ...]) -> str | None:
    return shutil.which(env[3] or "c++", path=env[2] or None)


def cxx_version() -> str:
    """First line of the C++ compiler's ``--version``."""
    return _cxx_version(cxx_path())


@functools.cache
def _cxx_version(cxx: str | None) -> str:
    return (_asked(cxx, "--version").splitlines() or [""])[0] if cxx else ""


def runtime_ldflags() -> list[str]:
    """Link inputs that keep the C++ runtime shared with the process: ``[]``, or the path of the
    ``libstdc++.so.6`` this process has loaded.

    A GCC installed without a shared ``libstdc++`` of its own (only ``libstdc++.a``, as some
    hand-built compilers under ``/opt`` have) links the static library into every extension: a
    second copy of the C++ runtime beside the one Python and torch loaded, whose locale ids are
    never set up, so the first integer written to an ostream (``TORCH_CHECK(c, "n=", n)``,
    ``c10::str``, ``std::ostringstream() << n``) segfaults. Naming the loaded library on the link
    line resolves the C++ runtime from it (the archive that g++ appends is then never read).
    """
    return list(_runtime_ldflags(cxx_path()))


@functools.cache
def _runtime_ldflags(cxx: str | None) -> tuple[str, ...]:
    if not cxx:
        return ()
    found = _asked(cxx, "-print-file-name=libstdc++.so").strip()
    if not (os.path.isabs(found) and os.path.exists(found)):
        found = run([cxx, "-print-file-name=libstdc++.so"]).strip()  # a remembered answer only ever says "found"
    if os.path.isabs(found) and os.path.exists(found):
        return ()  # the compiler links its shared libstdc++, as usual
    loaded = _loaded_library("libstdc++.so")
    if loaded is None:  # torch not imported yet: load the runtime as its import would, so keys are the same after it
        with contextlib.suppress(OSError):
            ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
        loaded = _loaded_library("libstdc++.so")
    if loaded is None:
        import warnings

        warnings.warn(f"jitlab: {cxx} has no shared libstdc++ and none is loaded here: extensions will carry "
                      f"their own copy of the C++ runtime, and writing an integer to an ostream in them may crash; "
                      f"set CXX to a compiler with a shared libstdc++ (e.g. the system's g++)", stacklevel=3)
        return ()
    return (loaded,)


def _loaded_library(stem: str) -> str | None:
    """The file of a shared library this process has mapped (``/proc/self/maps``), or ``None``."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if stem in os.path.basename(path) and os.path.isfile(path):
                    return path
    except OSError:
        pass
    return None


def fingerprint(cuda: bool) -> dict[str, str]:
    """Everything about the toolchain that changes a binary, for the build key: versions, each
    compiler's :func:`identity`, torch's install, and the :data:`COMPILER_ENV` variables set."""
    fp = {
        "torch": f"{torch_install.version()} {identity(torch_install.init_file())}",
        "python": f"{sys.implementation.cache_tag}-{platform.machine()}",
        "cxx": f"{cxx_version()} @ {identity(cxx_path())}",
        "env": " ".join(f"{v}={os.environ[v]}" for v in COMPILER_ENV if os.environ.get(v)),
        **({"cxx_runtime": " ".join(runtime_ldflags())} if runtime_ldflags() else {}),
        "abi": str(int(torch_install.cxx11_abi())),
    }
    if cuda:
        fp["nvcc"] = f"{nvcc_version() or 'none'} @ {identity(nvcc_path())} in {cuda_home()}"
        fp["torch_cuda"] = str(torch_install.cuda_version())
    return fp


def require_tools(cuda: bool, compile_only: bool = False, ninja: bool = True) -> None:
    """Check the tools a build needs, before it starts (raises ToolchainError naming the missing tool and how to
    install it). ``cuda``: the build has CUDA sources; ``compile_only``: it needs nvcc, but neither ninja nor a
    CUDA torch; ``ninja``: it runs torch's ``load_inline`` (split builds and NVRTC drive their compilers)."""
    if not cxx_path():
        raise ToolchainError(
            "no C++ compiler found (looked for $CXX, then `c++`): install one, e.g. "
            "`sudo apt-get install g++` or `conda install -c conda-forge gxx_linux-64`"
        )
    if ninja and not compile_only:
        ninja_tool.ensure_ninja()
    if not cuda:
        return
    if not nvcc_path():
        raise ToolchainError(
            "nvcc not found (looked in $CUDA_HOME/bin and on PATH): install the CUDA toolkit "
            "(`conda install -c nvidia cuda-nvcc`, or on Colab it is preinstalled) and set CUDA_HOME"
        )
    if compile_only:
        return
    torch_cuda = torch_install.cuda_version()
    if torch_cuda is None:
        raise ToolchainError(
            f"this torch ({torch_install.version()}) is a CPU build: it cannot run CUDA kernels. "
            "Install a CUDA build of torch, or compile only: `jitlab build --compile-only --arch sm_90 PATH`"
        )
    nv = nvcc_version() or ""
    if nv.split(".")[0] != torch_cuda.split(".")[0]:
        raise ToolchainError(
            f"nvcc is CUDA {nv} but torch was built with CUDA {torch_cuda}: the major versions must match. "
            f"Point CUDA_HOME at a CUDA {torch_cuda.split('.')[0]}.x toolkit, or install the torch build for CUDA {nv.split('.')[0]}"
        )


def gpu_available() -> bool:
    """Whether torch sees a CUDA GPU: ``torch.cuda.device_count() > 0``, asked once per ``CUDA_VISIBLE_DEVICES``.

    ``torch.cuda.is_available()`` initialises the CUDA driver on every call before CUDA is (0.05-0.18 s on
    an H100/H200 box: most of a new process's cache hit); ``device_count`` asks NVML (0.02 s) and the driver
    only where NVML cannot answer, and torch keeps its answer once CUDA is initialised. Before that, the
    answer is remembered across processes while the machine is unchanged (:mod:`jitlab.jit.gpus`).
    """
    import torch

    if torch.cuda.is_initialized():
        return torch.cuda.device_count() > 0
    return _gpus_seen(os.environ.get("CUDA_VISIBLE_DEVICES"))["count"] > 0


@functools.cache
def _gpus_seen(visible: str | None) -> dict:
    return gpus.seen()


def require_gpu(what: str) -> None:
    """Raise unless torch sees a CUDA GPU; ``what`` runs kernels (e.g. ``"compute-sanitizer"``).

    Raises:
        ToolchainError: Saying where it can run and what works here instead.
    """
    if not gpu_available():
        raise ToolchainError(
            f"no CUDA GPU found: {what} runs the kernels on a GPU, and torch sees none here: run it on a machine with one "
            f"(on Colab: Runtime > Change runtime type > T4 GPU). Here, `jitlab check` and `jitlab inspect` "
            f"compile the kernels and show their registers and occupancy")


def current_arch() -> str:
    """The current GPU's arch, e.g. ``"sm_90"``.

    Raises:
        ToolchainError: Without a GPU, naming the compile-only alternative.
    """
    if not gpu_available():
        raise ToolchainError(
            "no CUDA GPU found, so there is no arch to build for: name one for a compile-only build, "
            "e.g. `jitlab.build(path, compile_only=True, arch=['sm_75', 'sm_90'])` or "
            "`jitlab build --compile-only --arch sm_75,sm_90 PATH`"
        )
    import torch

    if torch.cuda.is_initialized():
        major, minor = torch.cuda.get_device_capability()
    else:  # NVML's answer first, remembered: the driver's cuInit is most of a new process's cache hit (jit/nvml.py)
        shared = _gpus_seen(os.environ.get("CUDA_VISIBLE_DEVICES"))["capability"]
        major, minor = shared or _driver_capability() or torch.cuda.get_device_capability()
    return f"sm_{major}{minor}"


@functools.cache
def _driver_capability() -> tuple[int, int] | None:
    """Device 0's compute capability from the CUDA driver, without creating a CUDA context.

    A cache hit needs the arch for its key; asking torch would initialize CUDA (a few hundred ms)
    before the user launches anything.
    """
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        dev, major, minor = ctypes.c_int(), ctypes.c_int(), ctypes.c_int()
        if cuda.cuInit(0) or cuda.cuDeviceGet(ctypes.byref(dev), 0):
            return None
        # CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75, _MINOR = 76
        if cuda.cuDeviceGetAttribute(ctypes.byref(major), 75, dev) or cuda.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev):
            return None
        return major.value, minor.value
    except OSError:
        return None


def normalize_arch(arch: str) -> str:
    """``"sm_90"``, ``"90"``, ``"9.0"``, ``"sm_90a"`` → ``"sm_90"``/``"sm_90a"``; ``"compute_90"`` is kept (PTX).

    Raises:
        ToolchainError: For a string that names no arch.
    """
    a = arch.strip().lower()
    m = re.fullmatch(r"(sm_|compute_)?(\d+)\.?(\d*)([af]?)", a)
    if not m or len(m.group(2) + m.group(3)) < 2:
        raise ToolchainError(f"arch {arch!r} is not an arch name: use the form sm_75, sm_90 or sm_90a")
    prefix = m.group(1) or "sm_"
    digits = m.group(2) + m.group(3)
    return f"{prefix}{digits}{m.group(4)}"


@functools.cache
def nvcc_archs() -> tuple[str, ...]:
    """The ``sm_XY`` archs the installed nvcc builds for (``nvcc --list-gpu-code``); empty without nvcc."""
    nvcc = nvcc_path()
    return tuple(a for a in _asked(nvcc, "--list-gpu-code").split() if a.startswith("sm_")) if nvcc else ()


def check_archs(archs: list[str]) -> None:
    """Refuse an arch older than the installed nvcc builds for, before nvcc says only ``Unsupported gpu architecture``.

    Raises:
        ToolchainError: Naming the oldest arch this nvcc builds for and what to do.
    """
    known = nvcc_archs()
    if not known:
        return
    oldest = oldest_arch()
    for a in archs:
        if _arch_number(a) < _arch_number(oldest):
            raise ToolchainError(
                f"{a}: nvcc {nvcc_version()} builds for {oldest} and newer (CUDA 13 dropped Maxwell, Pascal and "
                f"Volta, sm_50 to sm_72); build for {oldest} or later, or use a CUDA 12 toolkit for that GPU")


def oldest_arch() -> str:
    """The oldest ``sm_XY`` the installed nvcc builds for (``sm_75`` when unknown)."""
    return min(nvcc_archs() or ("sm_75",), key=_arch_number)


def _arch_number(arch: str) -> int:
    return int(re.sub(r"\D", "", arch.split("_", 1)[1]) or 0)


def gencode_flags(archs: list[str]) -> list[str]:
    """nvcc ``-gencode`` flags: SASS for each ``sm_XY``, PTX for each ``compute_XY``."""
    flags = []
    for a in archs:
        kind, num = a.split("_", 1)
        compute = "compute_" + num
        code = a if kind == "sm" else compute
        flags.append(f"-gencode=arch={compute},code={code}")
    return flags


def find_cuda_tool(name: str) -> str | None:
    """A CUDA binary (``cuobjdump``, ``nvdisasm``, ``compute-sanitizer``, ``ncu``): ``$CUDA_HOME``/``$CUDA_PATH``/bin, ``PATH``, nvcc's
    folder, ``/usr/local/cuda/bin``, then the NVIDIA pip wheels (``nvidia/*/bin``, e.g. ``nvidia/cu13/bin``)."""
    for home in (os.environ.get(e) for e in ("CUDA_HOME", "CUDA_PATH")):
        if home and (Path(home) / "bin" / name).is_file():
            return str(Path(home) / "bin" / name)
    found = shutil.which(name)
    if found:
        return found
    dirs = []
    nvcc = nvcc_path()
    if nvcc:
        dirs.append(Path(nvcc).parent)
    dirs.append(Path(DEFAULT_CUDA_HOME) / "bin")
    try:
        import nvidia  # the namespace package the NVIDIA wheels install into

        for root in getattr(nvidia, "__path__", []):
            dirs += sorted(Path(root).glob("*/bin"))
    except ImportError:
        pass
    for d in dirs:
        if (d / name).is_file() and os.access(d / name, os.X_OK):
            return str(d / name)
    return None


def require_cuda_tool(name: str, fix: str) -> str:
    """:func:`find_cuda_tool`, or a :class:`ToolchainError` that says where it looked and ``fix``."""
    found = find_cuda_tool(name)
    if not found:
        raise ToolchainError(f"{name} not found (looked in $CUDA_HOME/bin, on PATH, next to nvcc, in "
                             f"{DEFAULT_CUDA_HOME}/bin and in the NVIDIA pip wheels): {fix}")
    return found
