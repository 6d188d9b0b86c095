"""Running kernels on the CPU emulator: bad addresses named, and the checked mode (jitlab.check's).

Every emulated kernel's typed call goes through :func:`wrap_kernel`. A bad address the runtime caught
(SIGSEGV in a GPU thread's fiber) is raised as a :class:`jitlab.LaunchError` naming the line. Within
:func:`checking` a launch runs twice, its threads in two orders (a race fails it), on copies of its
tensors whose last byte abuts an unmapped page (an access past the end names the tensor and index);
the first run also has the runtime watch the outputs for lost updates (``runtime.cpp``'s race detector).
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

import torch

from jitlab.errors import LaunchError
from jitlab.jit.launch import py_names
from jitlab.jit.parse import Function

_checking = [False]


@contextlib.contextmanager
def checking(on: bool = True):
    """Within this block every emulated launch is checked: run twice, and on guarded copies of its tensors.

    The first run starts each block's threads in order, the second in reverse (blocks too), from the
    same inputs. A kernel whose result depends on that order reads what another thread writes
    without a barrier between: the launch raises :class:`jitlab.LaunchError` naming the output and
    the first element that differs (floats compared with a tolerance: atomics add in another order).
    Each tensor runs from a copy whose last byte abuts an unmapped page, so an access past its end
    raises naming the tensor, the index and the line; in the first run each plain access to an output
    is compared with the element's last write and read, so a lost update (``out[0] += v`` from two
    blocks) raises naming the element, both threads and the line. The outputs are the first run's.
    """
    before = _checking[0]
    _checking[0] = on
    try:
        yield
    finally:
        _checking[0] = before


def configure(lib, workers: int = 0, reverse: bool = False, quiet: bool = False) -> None:
    """Set how the emulator in ``lib`` runs the next launches (``workers=0``: one per CPU this process may use)."""
    lib.jitlab_simt_configure(workers, int(reverse), int(quiet))


def wrap_kernel(call, fn: Function, lib):
    """``call`` (a kernel's typed wrapper) with bad addresses named, checked within :func:`checking`."""
    names = py_names(fn.params)
    pointers = [i for i, p in enumerate(fn.params) if p.pointer]
    signature = inspect.signature(call)

    @functools.wraps(call)
    def run(*args, **kwargs):
        if not _checking[0]:
            return _launch(call, fn, names, args, kwargs, {})
        bound = signature.bind(*args, **kwargs)
        guards: dict[int, _Guarded] = {}
        try:
            for i in pointers:
                t = bound.arguments.get(names[i])
                if _is_tensor(t) and t.is_contiguous() and t.numel() and t.device.type == "cpu":
                    guards[i] = _Guarded(t)
                    bound.arguments[names[i]] = guards[i].tensor
            outs = {i: g for i, g in guards.items() if not fn.params[i].const}
            start = {i: g.tensor.clone() for i, g in outs.items()}
            for g in outs.values():  # the first run also looks for lost updates on the outputs
                lib.jitlab_simt_watch(ctypes.c_void_p(g.start), g.tensor.numel() * g.tensor.element_size(),
                                      g.tensor.element_size())
            try:
                result = _launch(call, fn, names, bound.args, bound.kwargs, guards)
            finally:
                lib.jitlab_simt_unwatch()
            first = {i: g.tensor.clone() for i, g in outs.items()}
            if outs:
                _second_order(call, fn, names, bound, guards, outs, start, first, lib)
            for i, g in outs.items():
                g.original.copy_(first[i])
            return result
        finally:
            for g in guards.values():
                g.free()

    return run


def _second_order(call, fn, names, bound, guards, outs, start, first, lib) -> None:
    """Run the launch again from ``start`` with the threads in reverse; raise if an output differs."""
    for i, g in outs.items():
        g.tensor.copy_(start[i])
    configure(lib, reverse=True, quiet=True)
    try:
        _launch(call, fn, names, bound.args, bound.kwargs, guards)
    finally:
        configure(lib)
    for i, g in outs.items():
        problem = _differs(first[i], g.tensor)
        if problem:
            raise LaunchError(f"{fn.name}: a race ({fn.path}:{fn.line}): `{fn.params[i].name}` comes out different "
                              f"when the threads run in another order ({problem}); a thread reads what another "
                              f"writes without a __syncthreads() (or __syncwarp()) between them, or two threads "
                              f"write one element")


def _is_tensor(value) -> bool:
    return isinstance(value, torch.Tensor)


def _launch(call, fn: Function, names: list[str], args, kwargs, guards: dict):
    """``call(*args, **kwargs)``; a bad address it reports is raised again naming the tensor and the line."""
    try:
        return call(*args, **kwargs)
    except LaunchError as e:
        by_name = {fn.params[i].name: g for i, g in guards.items()}
        m = _BAD_ADDRESS.search(str(e))
        if m is not None:
            raise LaunchError(bad_address(fn, int(m["address"], 16), m["code"], int(m["offset"], 16), m["who"],
                                          by_name)) from None
        m = _RACE.search(str(e))
        if m is not None:
            raise LaunchError(lost_update(fn, int(m["address"], 16), m["code"], int(m["offset"], 16), m["kind"],
                                          m["other"], m["who"], by_name)) from None
        raise


_BAD_ADDRESS = re.compile(r"BadAddress: address=(?P<address>0x[0-9a-f]+|\(nil\)) code=(?P<code>.*)\+0x(?P<offset>[0-9a-f]+) "
                          r"\((?P<who>[^)]*\)[^)]*\))\)")


_RACE = re.compile(r"Race: address=(?P<address>0x[0-9a-f]+) code=(?P<code>.*)\+0x(?P<offset>[0-9a-f]+) "
                   r"kind=(?P<kind>[a-z-]+) other=(?P<other>thread \([^)]*\) of block \([^)]*\)) "
                   r"\((?P<who>[^)]*\)[^)]*\))\)")
_RACE_KINDS = {"write-after-write": ("writes", "wrote"), "read-after-write": ("reads", "wrote"),
               "write-after-read": ("writes", "read")}


def lost_update(fn: Function, address: int, code: str, offset: int, kind: str, other: str, who: str,
                guards: dict) -> str:
    """A race the runtime's access hooks found, for a person: the element, both threads, the line."""
    line = source_line(code, offset)
    does, did = _RACE_KINDS.get(kind, ("touches", "touched"))
    element = f"{address:#x}"
    for name, g in guards.items():
        if g.start <= address < g.start + g.tensor.numel() * g.tensor.element_size():
            element = f"`{name}[{(address - g.start) // g.tensor.element_size()}]`"
    return (f"{fn.name}: a race{f' at {line}' if line else ''}: {who} {does} {element}, which {other} {did}, and "
            f"nothing orders the two (another block, or no __syncthreads() between them): on a GPU one update can "
            f"overwrite the other; use an atomic (atomicAdd) or give each thread its own element")


def bad_address(fn: Function, address: int, code: str, offset: int, who: str, guards: dict) -> str:
    """What a bad address in a kernel was, for a person: which tensor it ran past, at which line."""
    line = source_line(code, offset)
    at = f" at {line}" if line else ""
    for name, g in guards.items():
        if g.guard <= address < g.guard + PAGE:
            index = (address - g.start) // g.tensor.element_size()
            return (f"{fn.name}: out-of-bounds access{at} ({who}): `{name}[{index}]`, but `{name}` has "
                    f"{g.tensor.numel()} elements; guard the access with the count (`if (i < n)`), or launch "
                    f"fewer threads")
    return (f"{fn.name}: a bad address {address:#x}{at} ({who}): past the end of a tensor, a wild pointer or a "
            f"stack overflow (large local arrays); jitlab.check(path, device='cpu') runs each tensor against an "
            f"unmapped page and names the tensor")


def source_line(library: str, offset: int) -> str:
    """``file:line`` of code ``offset`` in ``library`` (addr2line over the build's line tables), or ``""``."""
    tool = shutil.which("addr2line")
    if tool is None or not os.path.isfile(library):
        return ""
    proc = subprocess.run([tool, "-e", library, f"{offset:#x}"], capture_output=True, text=True)
    where = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
    where = re.sub(r" \(discriminator \d+\)$", "", where)
    return "" if where.startswith("??") or where.endswith(":0") or where.endswith(":?") else where


PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class _Guarded:
    """A copy of a CPU tensor whose memory ends (16-byte aligned) where an unmapped page begins."""

    def __init__(self, original):
        libc = _libc()
        self.original = original
        nbytes = original.numel() * original.element_size()
        span = -(-nbytes // 16) * 16
        self.size = -(-span // PAGE) * PAGE + PAGE
        self.base = libc.mmap(None, self.size, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
        if self.base in (None, ctypes.c_void_p(-1).value):
            raise MemoryError("could not map a guarded copy of a tensor")
        self.guard = self.base + self.size - PAGE
        libc.mprotect(ctypes.c_void_p(self.guard), PAGE, 0)
        self.start = self.guard - span
        raw = (ctypes.c_char * nbytes).from_address(self.start)
        self.tensor = torch.frombuffer(raw, dtype=original.dtype).view(original.shape)
        self.tensor.copy_(original)

    def free(self) -> None:
        del self.tensor
        _libc().munmap(self.base, self.size)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    return libc


def _differs(a, b) -> str:
    """How two outputs of the same launch differ (``""`` when they agree)."""
    if a.dtype.is_floating_point:
        same = torch.isclose(a.float(), b.float(), rtol=1e-4, atol=1e-5, equal_nan=True)
    else:
        same = a == b
    if bool(same.all()):
        return ""
    i = int((~same).flatten().nonzero()[0])
    return f"element {i}: {a.flatten()[i].item()!r} in thread order, {b.flatten()[i].item()!r} in reverse"
