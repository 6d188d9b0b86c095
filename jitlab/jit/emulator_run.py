"""Running kernels on the CPU emulator: every access checked, the checked mode (jitlab.check's), lines named.

Every emulated kernel's typed call goes through :func:`wrap_kernel`. It tells the runtime the launch's
tensors (so an access past one is stopped before it happens and named: ``x[10]``, ``x[-1]``), the time
limit (``$JITLAB_EMULATOR_TIMEOUT``) and, within :func:`checking`, to run the race detector
(``simt/memory_checks.inc``). What the runtime reports carries code offsets, ``@[+0x1234]``; they are
turned into the user's ``file:line`` here (addr2line over the build's line tables).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import inspect
import os
import re
import shutil
import subprocess
from pathlib import Path

import torch

from jitlab import config
from jitlab.errors import LaunchError
from jitlab.jit.diagnostics import short_path
from jitlab.jit.engines import emulator
from jitlab.jit.launch import py_names
from jitlab.jit.parse import Function

_checking = [False]
#: The emulator's own headers: a line in them is never the user's (an inlined atomicAdd's caller is).
_SIMT = str(Path(__file__).parent / "engines" / "simt")
#: A code place in a runtime report: one offset, or candidates of which the first in the user's code counts.
_CODE = re.compile(r"@\[\+0x([0-9a-f]+(?:\|\+0x[0-9a-f]+)*)\]")
_U64S = ctypes.POINTER(ctypes.c_uint64)


@contextlib.contextmanager
def checking(on: bool = True):
    """Within this block every emulated launch is checked: each shared-memory and output access recorded.

    Two accesses by different threads to one place, one a write, with no ``__syncthreads()`` (or, within
    a warp, ``__syncwarp()``) between them raise :class:`jitlab.LaunchError` naming both threads, both
    lines and where the barrier belongs; so do two blocks updating one output element without an atomic,
    and a read of shared memory no thread of the block wrote. Each launch runs once, so ``__device__``
    state carries from launch to launch as on a GPU. Bounds are checked in every run, checked or not.
    """
    before = _checking[0]
    _checking[0] = on
    try:
        yield
    finally:
        _checking[0] = before


def configure(lib, workers: int = 0, check: bool = False, quiet: bool = False, timeout: float | None = None) -> None:
    """Set how the emulator in ``lib`` runs the next launches (``workers=0``: one per CPU this process may use;
    ``timeout``: seconds, default ``$JITLAB_EMULATOR_TIMEOUT``)."""
    _prepare(lib)
    lib.jitlab_simt_configure(workers, int(check), int(quiet),
                              config.emulator_timeout() if timeout is None else float(timeout))


def wrap_kernel(call, fn: Function, lib):
    """``call`` (a kernel's typed wrapper) with its tensors bounds-checked, races looked for within
    :func:`checking`, and the runtime's reports at the user's lines."""
    names = py_names(fn.params)
    pointers = [i for i, p in enumerate(fn.params) if p.pointer]
    signature = inspect.signature(call)

    @functools.wraps(call)
    def run(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        tensors = [(fn.params[i], bound.arguments.get(names[i])) for i in pointers]
        tell_regions(lib, [(p.name, t, not p.const) for p, t in tensors
                           if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel()])
        configure(lib, check=_checking[0])
        try:
            return call(*args, **kwargs)
        except LaunchError as e:
            raise LaunchError(at_lines(str(e), fn, lib)) from None
        finally:
            tell_regions(lib, [])

    return run


def tell_regions(lib, tensors: list) -> None:
    """Tell the runtime the next launch's tensors: ``(name, tensor, writable)`` each."""
    _prepare(lib)
    n = len(tensors)
    starts = (ctypes.c_uint64 * max(n, 1))(*[t.data_ptr() for _, t, _ in tensors])
    sizes = (ctypes.c_uint64 * max(n, 1))(*[t.numel() * t.element_size() for _, t, _ in tensors])
    items = (ctypes.c_uint64 * max(n, 1))(*[t.element_size() for _, t, _ in tensors])
    writable = (ctypes.c_int * max(n, 1))(*[int(w) for _, _, w in tensors])
    lib.jitlab_simt_regions(n, starts, sizes, items, writable, "\n".join(name for name, _, _ in tensors).encode())


def _prepare(lib) -> None:
    """Declare the runtime's C entry points (a 2^31-element tensor's size is no C ``int``) and tell it the
    snippet's ``__shared__`` arrays, once per library."""
    if getattr(lib, "_jitlab_prepared", False):
        return
    lib.jitlab_simt_configure.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_double]
    lib.jitlab_simt_configure.restype = None
    lib.jitlab_simt_regions.argtypes = [ctypes.c_int, _U64S, _U64S, _U64S, ctypes.POINTER(ctypes.c_int), ctypes.c_char_p]
    lib.jitlab_simt_regions.restype = None
    lib.jitlab_simt_shared_symbols.argtypes = [ctypes.c_int, _U64S, _U64S, ctypes.c_char_p]
    lib.jitlab_simt_shared_symbols.restype = None
    lib.jitlab_simt_in_turn.argtypes = [ctypes.c_int]
    lib.jitlab_simt_in_turn.restype = None
    lib.jitlab_simt_in_turn(int(emulator.runs_in_turn(Path(lib._name))))
    arrays = shared_arrays(lib._name)
    n = len(arrays)
    lib.jitlab_simt_shared_symbols(n, (ctypes.c_uint64 * max(n, 1))(*[a[1] for a in arrays]),
                                   (ctypes.c_uint64 * max(n, 1))(*[a[2] for a in arrays]),
                                   "\n".join(a[0] for a in arrays).encode())
    lib._jitlab_prepared = True


_TLS_SYMBOL = re.compile(r"^\s*\d+:\s+([0-9a-f]+)\s+(\d+)\s+TLS\s+\w+\s+\w+\s+\d+\s+(.+)$")


def shared_arrays(library: str) -> list[tuple[str, int, int]]:
    """The ``__shared__`` arrays of an emulated library: ``(name, offset in its TLS block, bytes)`` from its
    symbol table (``__shared__`` is ``static thread_local`` there); ``[]`` without readelf."""
    tool = shutil.which("readelf")
    if tool is None or not os.path.isfile(library):
        return []
    out = subprocess.run([tool, "-sW", "-C", library], capture_output=True, text=True).stdout
    arrays = {}
    for line in out.splitlines():
        m = _TLS_SYMBOL.match(line)
        if m is None or "jitlab_simt::" in m[3] or int(m[2]) == 0:
            continue
        name = m[3].rsplit("::", 1)[-1]
        arrays[int(m[1], 16)] = (name, int(m[1], 16), int(m[2]))
    return sorted(arrays.values(), key=lambda a: a[1])


def at_lines(text: str, fn: Function, lib) -> str:
    """The runtime's report with each code offset replaced by the user's ``file:line``; a time limit or
    Ctrl-C that caught no thread names the kernel."""
    places = [[int(o, 16) for o in m.split("|+0x")] for m in _CODE.findall(text)]
    lines = source_lines(lib._name, sorted({o for p in places for o in p}))
    unit = Path(lib._name).parent / "emulated.cpp"

    def line(m) -> str:
        found = next((lines[o] for o in (int(x, 16) for x in m[1].split("|+0x")) if o in lines), "an unknown line")
        # the unit's own name for a line of the user's file (its #line directives keep the numbers)
        found = found.replace(f"{unit}:", f"{fn.path}:") if found.startswith(str(unit)) else found
        path, colon, number = found.rpartition(":")
        return f"{short_path(path)}:{number}" if colon and number.isdigit() else found  # relative to the cwd

    text = _CODE.sub(line, text)
    if re.search(r"\b(TimeLimit|Interrupted)\b", text) and f":{fn.line}" not in text:
        text += f" (the kernel `{fn.name}` is at {short_path(str(fn.path))}:{fn.line})"
    return text


def source_lines(library: str, offsets: list[int]) -> dict[int, str]:
    """``file:line`` of each code offset in ``library``: the innermost frame in the user's code (an inlined
    header function's caller; never the emulator's files or the system's headers), from one addr2line call;
    ``{}`` without addr2line."""
    tool = shutil.which("addr2line")
    if tool is None or not offsets or not os.path.isfile(library):
        return {}
    proc = subprocess.run([tool, "-a", "-i", "-e", library, *(f"{o:#x}" for o in offsets)], capture_output=True,
                          text=True)
    found: dict[int, str] = {}
    current = None
    for line in proc.stdout.splitlines():
        if line.startswith("0x"):
            current = int(line, 16)
            continue
        where = re.sub(r" \(discriminator \d+\)$", "", line.strip())
        if current is None or current in found or where.startswith("??") or where.endswith((":0", ":?")):
            continue
        if not where.startswith((_SIMT, "/usr/")):  # the emulator's code and the C++ library are never the user's
            found[current] = where
    return found


def source_line(library: str, offset: int) -> str:
    """``file:line`` of code ``offset`` in ``library``, or ``""``."""
    return source_lines(library, [offset]).get(offset, "")
