"""Operator snippets in the process: register a build's operators, and take them back when it is edited.

An operator snippet (:mod:`jitlab.jit.ops`) is linked as a plain shared library, never a Python
extension module, and opened with ``ctypes`` (``RTLD_LOCAL``, so a later version never binds to this
one's symbols). ``jitlab_ops_register()`` registers its operators and returns an error as text; loading
an edited version first calls the old one's ``jitlab_ops_unregister()`` (its ``torch::Library`` objects
destroyed, so the dispatcher forgets every registration).

Another thread may be calling an operator while it is replaced (a training loop, a notebook's background
thread). ``torch.ops.myops.scale`` (an ``OpOverloadPacket``, an attribute of the ``_OpNamespace``) and
its overloads (``.default``, attributes of the packet, some in ``torch._ops.cached_ops``) call through
their ``_op``, which for jitlab's operators counts the call in flight (:class:`_Calls`): a replacement
waits until none is running and holds new ones until it is done, since the dispatcher's table is not
safe to change under a call. Afterwards the same objects are refreshed in place: a reference kept
anywhere (``f = torch.ops.myops.scale``) calls the new code, and one to an operator the new version
dropped raises an error saying so.

A caller that bypasses those objects (TorchScript, C++) is not counted, so the rest keeps it alive: a
replaced library is never closed (its code stays mapped for the rest of the process, one small mapping
per reload, and a call in flight finishes in the old kernel); the dispatcher's entry of every operator
a build defines is held by name (``jitlab_ops_hold``, ``c10::Dispatcher::registerName``), so it is never
freed between the old version's unregistration and the new one's registration; and both C calls run
with the GIL held (``PyDLL``), so no Python thread starts a call halfway through one.

A torch-style NVRTC build (:mod:`jitlab.jit.engines.nvrtc_torch`) links its library once: a kernel-body edit
is a new CUBIN for the same library, whose registration stays as it is (its Python-side registrations,
``register_fake`` and autograd, too); only its kernel slots are filled again (:mod:`jitlab.jit.slotted`),
while no call through ``torch.ops`` runs, so each call runs one version's kernels. A launch that bypasses
those objects reads each slot atomically, and the old CUBIN stays loaded for a kernel still running.
"""

from __future__ import annotations

import contextlib
import ctypes
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from jitlab.errors import SnippetError
from jitlab.jit import ops
from jitlab.jit.parse import SourceFile
from jitlab.jit.plan import Operator

_ERROR_SIZE = 8192


@dataclass
class Library:
    """A loaded operator build.

    Attributes:
        name: The build's name.
        path: Its shared library.
        lib: The ``ctypes`` handle.
        snippet: The snippet's files: a later build of the same files replaces it.
        owns: Namespaces it defines (``TORCH_LIBRARY``); a build defining one of them replaces it.
        defines: ``ns::op`` of every operator it defines (``m.def``).
        namespaces: Every namespace it registers in (whose ``torch.ops`` caches it touches).
    """

    name: str
    path: Path
    lib: ctypes.CDLL
    snippet: tuple[str, ...]
    owns: frozenset[str]
    defines: frozenset[str]
    namespaces: frozenset[str]


#: Build name → the loaded library, for every operator build loaded in this process.
active: dict[str, Library] = {}


def activate(name: str, path: Path, files: list[SourceFile], operators: list[Operator],
             fill: Callable[[], object] | None = None) -> Library:
    """Make build ``name`` the one whose operators ``torch.ops`` runs (nothing to do when it already is).

    An earlier build of the same snippet is unloaded first, once no call through ``torch.ops`` is running
    (new ones wait for the new version); when the new one fails to register, the old one is loaded back,
    so the last working version keeps running. A build whose library is the one already registered (the
    torch-style NVRTC engine's after a kernel-body edit) keeps that registration: only ``fill`` runs.

    Args:
        name: The build's name.
        path: Its shared library.
        files: The snippet's files.
        operators: The operators it registers.
        fill: Points the library's kernel slots at this build's CUBIN (:func:`jitlab.jit.slotted.fill`),
            called while no call through ``torch.ops`` runs and before the library registers, so every
            call finds one version's kernels, all of them.

    Raises:
        SnippetError: A schema does not parse, a namespace belongs to something outside jitlab (torch's
            ``aten``, another extension) or to another snippet, or torch refused a registration; each
            names the fix.
        JitlabError: ``fill`` could not load the CUBIN (the registered version keeps running).
    """
    if name in active:
        return active[name]
    snippet = tuple(sorted(str(f.path) for f in files))
    kept = next((lib for lib in active.values() if lib.path == Path(path) and lib.snippet == snippet), None)
    if kept is not None:
        return _refilled(kept, name, fill)
    blocks = [b for f in files for b in ops.blocks(f)]
    _check_schemas(operators)
    new = Library(name, Path(path), None, snippet,
                  frozenset(b.namespace for b in blocks if b.macro in ("TORCH_LIBRARY", "STABLE_TORCH_LIBRARY")),
                  frozenset(f"{o.namespace}::{o.name}" for o in operators if o.schema),
                  frozenset(b.namespace for b in blocks))
    _check_not_taken(new, blocks)
    replaced = [lib for lib in active.values() if lib.snippet == new.snippet]
    _check_namespaces(new.owns.difference(*(lib.owns for lib in replaced)), blocks)  # before anything changes
    with _calls.replacing():
        if fill is not None:
            fill()  # the new library's own slots: the registered version's calls never read them
        stale = _cached(new.defines.union(*(lib.defines for lib in replaced)))  # never torch's own operators
        try:
            for lib in replaced:
                unload(lib)
            try:
                _open(new, blocks)
            except SnippetError:
                for lib in replaced:  # the last working version keeps running
                    _open(lib, [])
                raise
        finally:
            _refresh(stale)
    return new


def _refilled(lib: Library, name: str, fill: Callable[[], object] | None) -> Library:
    """The registered library, now build ``name``'s: its slots filled from that build's CUBIN while no call
    through ``torch.ops`` runs (a call sees the old kernels or the new ones, never a mix), nothing unloaded."""
    if fill is not None:
        with _calls.replacing():
            fill()
    active.pop(lib.name, None)
    lib.name = name
    active[name] = lib
    return lib


def unload(lib: Library) -> None:
    """Take a library's operators back from the dispatcher (``torch.ops`` caches are the caller's).

    The library stays open: a call in flight on another thread may still be running its code.
    """
    lib.lib.jitlab_ops_unregister()
    active.pop(lib.name, None)


def packet(op: Operator):
    """``torch.ops.<ns>.<op>``, or ``None`` when the dispatcher has no such operator; it and each of its
    overloads count their calls (:class:`_Calls`)."""
    found = getattr(getattr(torch.ops, op.namespace), op.name, None)
    if found is not None:
        for obj in (found, *(getattr(found, name, None) for name in found.overloads())):
            if obj is not None and not isinstance(vars(obj).get("_op"), _Counted):
                vars(obj)["_op"] = _Counted(vars(obj)["_op"])
    return found


class _Calls:
    """The calls in flight through jitlab's operators' ``torch.ops`` objects, and the replacement that waits
    for them: while one runs, no call starts (each waits, then runs the new version).

    A call's fast path takes no lock (an operator object is a hot path: a lock pair cost ~1 µs a call,
    76 % of an empty CPU op): it marks itself in flight, one ``list.append`` (atomic in CPython), and only
    then looks for a replacement. A replacement says so first and only then counts the calls in flight,
    under the condition, so one of the two always sees the other: either the replacement counts the call
    and waits for it, or the call sees the replacement, unmarks itself and waits for it to end.
    """

    def __init__(self):
        self._changed = threading.Condition()
        self._in_flight: list[None] = []  # one entry per call running; its length is what a replacement reads
        self._replacing = None  # the thread replacing a build

    def enter(self) -> None:
        self._in_flight.append(None)
        if self._replacing is not None and self._replacing != threading.get_ident():
            self.leave()
            with self._changed:
                while self._replacing not in (None, threading.get_ident()):
                    self._changed.wait()
                self._in_flight.append(None)  # under the condition: a replacement starting now counts it

    def leave(self) -> None:
        self._in_flight.pop()
        if self._replacing is not None:  # a replacement may be waiting for this call
            with self._changed:
                self._changed.notify_all()

    @contextlib.contextmanager
    def replacing(self):
        with self._changed:
            while self._replacing is not None:
                self._changed.wait()
            self._replacing = threading.get_ident()
            while self._in_flight:  # a thread's own call cannot be running here: a kernel never loads a build
                self._changed.wait()
        try:
            yield
        finally:
            with self._changed:
                self._replacing = None
                self._changed.notify_all()


_calls = _Calls()


class _Counted:
    """An operator object's ``_op``: the call counted in flight; ``op`` is what runs (torch's, refreshed
    in place on a reload, or one that says the operator is gone)."""

    __slots__ = ("op",)

    def __init__(self, op):
        self.op = op

    def __call__(self, *args, **kwargs):
        _calls.enter()
        try:
            return self.op(*args, **kwargs)
        finally:
            _calls.leave()


def _open(lib: Library, blocks: list[ops.Block]) -> None:
    handle = ctypes.PyDLL(str(lib.path))  # RTLD_LOCAL; calls keep the GIL; never closed (see the module's doc)
    _hold(handle, blocks)
    error = ctypes.create_string_buffer(_ERROR_SIZE)
    if handle.jitlab_ops_register(error, ctypes.c_ulong(_ERROR_SIZE)) != 0:
        message = error.value.decode(errors="replace").split("\nException raised from")[0].strip()
        at = [f"{Path(b.path).name}:{line}" for b in blocks for schema, line in b.defs
              if "<--- HERE" in message and schema in message]  # a schema torch's parser rejected
        at = at or [f"{name}:{line}" for name, line in sorted({(Path(b.path).name, b.line) for b in blocks})]
        where = ", ".join(at) or lib.path.name
        raise SnippetError(f"registering the operators of {where} failed: {message}\n  fix the registration "
                           f"(the m.def schema, or the m.impl kernel's signature to match it) and load again")
    lib.lib = handle
    active[lib.name] = lib


#: ``ns::op.overload`` of every operator whose dispatcher entry is held for the rest of the process.
_held: set[str] = set()


def _hold(handle, blocks: list[ops.Block]) -> None:
    """Hold the dispatcher entries of the operators (each overload) a library defines, so a reload never frees one."""
    names = {f"{b.namespace}::{schema.split('(')[0].split('::')[-1].strip()}"
             for b in blocks if b.defines for schema, _ in b.defs}
    for qualified in sorted(names - _held):
        name, _, overload = qualified.partition(".")
        handle.jitlab_ops_hold(name.encode(), overload.encode())
        _held.add(qualified)


def _check_not_taken(new: Library, blocks: list[ops.Block]) -> None:
    """Refuse a namespace or operator another loaded snippet defines (loading it would unload the other)."""
    for lib in active.values():
        if lib.snippet == new.snippet:
            continue
        taken = sorted(lib.owns & new.owns) or sorted(lib.defines & new.defines)
        if taken:
            ns = taken[0].split("::")[0]
            b = next((b for b in blocks if b.namespace == ns and b.defines), blocks[0])
            other = ", ".join(lib.snippet)
            raise SnippetError(f"{b.path}:{b.line}: {b.macro}({ns}, m): `{taken[0]}` is already defined by "
                               f"another loaded snippet, {other}; give this snippet a namespace of its own "
                               f"(e.g. {b.macro}({ns}2, m)), or declare the shared namespace with "
                               f"TORCH_LIBRARY_FRAGMENT({ns}, m) in both and define each operator once")


def _check_schemas(operators: list[Operator]) -> None:
    """Parse every ``m.def`` schema with torch's own parser, before anything is unloaded."""
    for op in operators:
        if "(" not in op.schema:
            continue
        try:
            torch._C.parse_schema(f"{op.namespace}::{op.schema}")
        except RuntimeError as e:
            why = str(e).strip().splitlines()[0]
            raise SnippetError(f"{op.path}:{op.line}: the schema \"{op.schema}\" does not parse: {why}\n  a schema "
                               f"reads like \"scale(Tensor x, float a) -> Tensor\" (types: Tensor, Tensor(a!) for "
                               f"one it writes, int, float, bool, Scalar, int[], Tensor? ...)") from None


def _check_namespaces(owned: frozenset[str], blocks: list[ops.Block]) -> None:
    """Refuse a ``TORCH_LIBRARY`` namespace that something other than a jitlab build defines."""
    for ns in sorted(owned):
        try:
            probe = torch._C._dispatch_library("DEF", ns, "", "jitlab namespace check", 0)
        except RuntimeError as e:
            at = re.search(r"Previous registration of TORCH_LIBRARY was registered at (\S+?);", str(e))
            owner = f"registered at {at.group(1)}" if at else "registered"
            owner = "torch's own" if at and "/aten/" in at.group(1) else owner
            b = next(b for b in blocks if b.namespace == ns and b.defines)
            raise SnippetError(f"{b.path}:{b.line}: {b.macro}({ns}, m): the namespace `{ns}` is already {owner}; "
                               f"give your operators a namespace of your own, e.g. {b.macro}(myops, m)") from None
        del probe  # destroying the probe gives the namespace back


def _cached(defined) -> list[tuple]:
    """The cached packets of the operators ``defined`` (``ns::op``) and their overloads:
    ``(namespace, name, packet, overloads)``."""
    stale = []
    for ns, _, name in sorted(q.partition("::") for q in defined):
        space = torch.ops.__dict__.get(ns)
        old = space.__dict__.get(name) if space is not None and name in space._dir else None
        if isinstance(old, torch._ops.OpOverloadPacket):
            overloads = {k: v for k, v in vars(old).items() if isinstance(v, torch._ops.OpOverload)}
            stale.append((space, name, old, overloads))
    return stale


def _refresh(stale: list[tuple]) -> None:
    """Point each cached packet and overload at what is registered now (the same Python objects)."""
    for space, name, old, overloads in stale:
        torch._ops.cached_ops.difference_update(overloads.values())
        space._dir.remove(name)
        try:
            fresh = type(space).__getattr__(space, name)  # a new packet from the dispatcher (torch caches it)
        except AttributeError:
            fresh = None
        if fresh is None:
            space.__dict__.pop(name, None)
            _retire(old, overloads.values())
            continue
        _become(old, fresh)
        setattr(space, name, old)
        for overload, stale_overload in overloads.items():
            current = getattr(old, overload, None)
            if current is None:
                _retire(None, [stale_overload])
            else:
                _become(stale_overload, current)
                setattr(old, overload, stale_overload)


def _become(old, fresh) -> None:
    """Give ``old`` the state of ``fresh`` (its call counter kept, running the fresh operator), never passing
    through an empty state another thread could see."""
    state = dict(vars(fresh))
    counted = vars(old).get("_op")
    if isinstance(counted, _Counted):
        counted.op = state["_op"]
        state["_op"] = counted
    vars(old).update(state)
    for key in [k for k in vars(old) if k not in state]:
        del vars(old)[key]


def _retire(old, overloads) -> None:
    """Make calls through objects of an operator that is gone raise instead of reaching freed memory."""
    for obj in [o for o in (old, *overloads) if o is not None]:
        qualname = getattr(obj, "_qualified_op_name", None) or str(getattr(obj, "_name", "an operator"))

        def gone(*args, _name=qualname, **kwargs):
            raise RuntimeError(f"{_name} is no longer registered: the snippet that defined it was loaded again "
                               f"without it; use the module the new load returned")

        if isinstance(vars(obj).get("_op"), _Counted):
            vars(obj)["_op"].op = gone
        else:
            vars(obj)["_op"] = gone

