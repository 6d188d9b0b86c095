"""The binder: one library per toolchain that makes Python functions of torch-style snippets' C-ABI entries.

A torch-style snippet's host units end with an ``extern "C"`` entry per exported function
(:mod:`jitlab.jit.cabi`), so its module links no pybind11 code. This library (``binder.cpp``, pybind11 and
torch's casters) is compiled once per toolchain, like a header set, beside the sets::

    build_cache/pch/jitlab-binder-<key>/jitlab_binder.so      ($JITLAB_PCH_DIR; ~5 CPU-s to make, once)

and imported once per process; :func:`module_of` loads a build's library (``ctypes``, no ``PyInit``) and
makes each entry a Python function with the function's parameter names, literal defaults and pybind11's
signature in its docstring.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
import threading
import types
from pathlib import Path

from jitlab import config, progress
from jitlab.jit import cabi, cache, pycode, toolchain, torch_install
from jitlab.jit.engines import pch
from jitlab.jit.flags import default_host_flags
from jitlab.jit.parse import Function
from jitlab.jit.plan import Bound

NAME = "jitlab_binder"
SOURCE = Path(__file__).with_name("binder.cpp")


def library() -> Path:
    """The binder for this toolchain, compiled on first use (a few seconds, once; :func:`pch.made_once`)."""
    name, text, cmd = _describe()

    def make(folder: Path) -> Path:
        src, so = folder / "binder.cpp", folder / f"{NAME}.so"
        src.write_text(text)
        with progress.doing("compiling jitlab's binder (once per toolchain)"):
            # -x none after the source: a library named on the line (the C++ runtime, toolchain.runtime_ldflags)
            # is linked, not read as C++.
            pch.run_tool([toolchain.require_tool(toolchain.cxx_path(), "c++"), "-shared", "-o", str(so), "-x", "c++",
                          str(src), "-x", "none", *cmd], folder, "compiling jitlab's binder")
        return so

    return pch.made_once(name, make)


def is_made() -> bool:
    """Whether this toolchain's binder is made and usable."""
    return cache.lookup(_describe()[0], root=config.pch_dir()) is not None


def prepare() -> None:
    """Make the binder in the background, as a first build would (:func:`pch.in_background`)."""
    pch.in_background(library)


def _describe() -> tuple[str, str, list[str]]:
    """The binder's cache entry name, source text and compiler flags (libraries included)."""
    flags = default_host_flags(False)
    text = (cabi.types_macro() + f"#define JITLAB_VOID {cabi.VOID}\n#define JITLAB_MAX_ARGS {cabi.MAX_PARAMS}\n"
            + SOURCE.read_text())
    cmd = [*flags.cxx, "-O1", f"-L{torch_install.lib_dir()}", "-lc10", "-ltorch_cpu", "-ltorch",
           "-ltorch_python", *toolchain.runtime_ldflags()]
    key = cache.build_key({"format": config.FORMAT_VERSION, "binder": text, "flags": cmd, "toolchain": flags.toolchain})
    return f"jitlab-binder-{key}", text, cmd


_lock = threading.Lock()
_imported: list[types.ModuleType] = []


def module() -> types.ModuleType:
    """The binder, imported once a process (one toolchain a process: its first binder serves every build)."""
    with _lock:
        if not _imported:
            spec = importlib.util.spec_from_file_location(NAME, library())
            binder = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(binder)
            _imported.append(binder)
        return _imported[0]


def module_of(name: str, path: Path, fns: list[Function], bound: dict[str, Bound] | None = None) -> types.ModuleType:
    """A module named ``name`` of the functions ``fns`` whose entries the library at ``path`` holds, each under the
    name, with the docstring (after its signature, as pybind11 writes it) and the error handling ``bound`` gives
    it (default: its own name, its name as docstring, torch's error handling).

    A function whose entry is not in the library (its ``#if`` left it out of this build) is not in the module.

    Raises:
        OSError: The dynamic loader refused the library.
    """
    import torch  # lazy: the functions' annotations name torch.Tensor

    lib = ctypes.CDLL(str(path))
    make = module().function
    py = types.ModuleType(name, f"jitlab module {name}: the functions of {path.name}, through their C-ABI entries")
    py.__file__, py._library = str(path), lib
    for fn in fns:
        symbol = getattr(lib, cabi.entry_name(fn), None)
        if symbol is None:
            continue
        how = (bound or {}).get(fn.name) or Bound(fn.name, fn.name)
        signature = cabi.signature(fn)
        text, values = cabi.python_source(fn)
        entry = make(ctypes.cast(symbol, ctypes.c_void_p).value, [cabi.param_code(p) for p in fn.params],
                     cabi.result_code(fn), how.name, signature, how.torch_errors)
        namespace = {"torch": torch, "_entry": entry, **values}
        exec(pycode.compiled(text, f"<jitlab entry {fn.name}>"), namespace)  # noqa: S102 - jitlab's own text
        function = namespace["_function"]
        function.__name__ = function.__qualname__ = how.name
        function.__module__ = name
        function.__doc__ = f"{how.name}{signature}\n" + (f"\n{how.doc}\n" if how.doc else "")  # as pybind11 writes it
        setattr(py, how.name, function)
    sys.modules[name] = py
    return py
