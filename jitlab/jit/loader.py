"""Load a build into Python: ctypes for kernel-only builds, import for torch-style ones.

Every build has its own module name (it carries the key), so loading an edited snippet never hands
back a stale module; loading the same build twice in a process returns the same object.
"""

from __future__ import annotations

import ctypes
import difflib
import functools
import importlib.util
import sys

from jitlab import config, output
from jitlab.errors import ArgumentError, JitlabError
from jitlab.jit import builder as build_mod
from jitlab.jit import cache, emulator_run, emulator_support, macros, oplib, slotted
from jitlab.jit.engines import binder
from jitlab.jit.flags import Options
from jitlab.jit.launch import Callable
from jitlab.jit.plan import Build, TorchPlan

_loaded: dict[str, "Module"] = {}


class Module:
    """A loaded snippet: its functions as attributes, plus what was built.

    The module is callable too when that is unambiguous: ``saxpy(...)`` calls ``saxpy.saxpy(...)``
    when the snippet has one function, or one named like the snippet (``%%cuda saxpy`` binds
    ``saxpy``); otherwise calling it raises an error naming the functions to call as attributes.
    The forward adds about a microsecond to each call (one more Python call passing ``*args`` and
    ``**kwargs`` on), so a launch-bound loop calls the attribute.

    A function named like one of the module's own attributes (``build``, ``functions``, ``fn``) keeps
    the module working: ``m.build`` stays the build and the function is ``m["build"]`` or ``m.fn("build")``
    (every function is reachable so; :attr:`shadowed` lists these).

    Attributes:
        build: The :class:`jitlab.jit.plan.Build` (name, folder, cached, seconds, resources).
        functions: Names callable from Python.
    """

    _target = None  # what calling the module calls, found at the first call (the functions are fixed at load)

    def __init__(self, build: Build):
        self.build = build
        self.functions: list[str] = []
        self._fns: dict[str, object] = {}

    def __getitem__(self, name: str):
        """The snippet's function ``name``, also one the module's own attributes shadow (``m["build"]``)."""
        try:
            return self._fns[name]
        except KeyError:
            raise KeyError(self._missing(name)) from None

    def __contains__(self, name: str) -> bool:
        return name in self._fns

    __iter__ = None  # items are looked up by name: `for f in m` is a TypeError, not m[0]'s KeyError

    def fn(self, name: str):
        """The snippet's function ``name`` (``m.fn("build")`` is ``m["build"]``)."""
        return self[name]

    @property
    def shadowed(self) -> list[str]:
        """The functions the module's own attributes shadow: reach them as ``m["name"]``."""
        return [n for n in self.functions if n in OWN_NAMES]

    def _bind(self, name: str, fn) -> None:
        """Make ``fn`` the function ``name``: an item always, an attribute unless the module's own has the name."""
        self._fns[name] = fn
        if name not in OWN_NAMES:
            setattr(self, name, fn)
        if name not in self.functions:
            self.functions.append(name)

    def __call__(self, *args, **kwargs):
        """Call the snippet's one function, or the one named like the snippet.

        Raises:
            ArgumentError: The snippet has several functions and none is named like it, or none.
        """
        return (self._target or self._find_target())(*args, **kwargs)

    def _find_target(self):
        name = self._call_target()
        if name is None:
            raise ArgumentError(self._not_callable())
        self._target = self._fns[name]
        return self._target

    def _call_target(self) -> str | None:
        """The name of the function that calling the module calls, or ``None`` when that would be a guess."""
        if len(self.functions) == 1:
            return self.functions[0]
        return self.build.plan.stem if self.build.plan.stem in self.functions else None

    def _not_callable(self) -> str:
        stem = self.build.plan.stem
        if not self.functions:
            skipped = "; ".join(f"{n}: {why}" for n, why in self.build.plan.skipped)
            return f"`{stem}` has no function callable from Python" + (f" ({skipped})" if skipped else "")
        calls = ", ".join(f"{stem}.{n}(...)" for n in self.functions)
        return (f"`{stem}` has {len(self.functions)} functions and none is called {stem}, so `{stem}(...)` "
                f"would be a guess: call one as an attribute, {calls}")

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(self._missing(name))

    def _missing(self, name: str) -> str:
        """Why ``name`` is not a function of the snippet, with the closest one or the ones there are."""
        known = self.__dict__.get("functions", [])
        skipped = dict(self.build.plan.skipped) if "build" in self.__dict__ else {}
        where = ", ".join(str(f.path.name) for f in self.build.plan.files) if "build" in self.__dict__ else "snippet"
        if name in skipped:
            return f"`{name}` in {where} is not callable from Python: {skipped[name]}"
        hint = difflib.get_close_matches(name, known, n=1, cutoff=0.5)
        msg = f"{where} has no kernel or function `{name}`"
        msg += f"; did you mean `{hint[0]}`?" if hint else f"; it has: {', '.join(known) or 'nothing callable'}"
        return msg + (macros.hint(self.build.plan.files) if "build" in self.__dict__ and not hint else "")

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self.functions))

    def __repr__(self) -> str:
        b = self.build
        state = "cache hit" if b.cached else f"built in {b.seconds:.2f} s"
        lines = [f"<jitlab module {b.name} ({b.plan.kind}, {b.engine}, {state}, {b.folder})"]
        ops = b.plan.ops if isinstance(b.plan, TorchPlan) else []
        lines += [f"  ops: {op.describe()}" for op in ops]
        for n in [] if ops else self.functions:
            doc = (getattr(self._fns[n], "__doc__", None) or n).strip()
            lines.append(f"  {doc.splitlines()[0] if doc else n}")  # the signature (pybind11's first line)
        for n in self.shadowed:
            lines.append(f"  ({n}: the module's own .{n} takes the name; call it as [{n!r}](...) or .fn({n!r})(...))")
        for n, why in b.plan.skipped:
            lines.append(f"  ({n}: {why})")
        for note in b.notes:
            lines.append(f"  ({note})")
        return "\n".join(lines) + ">"


#: The module's own attribute names; a snippet function with one of these is reached as ``m["name"]``.
OWN_NAMES = frozenset(dir(Module)) | {"build", "functions", "extension", "_fns"}


def load(b: Build) -> Module:
    """Load a finished build (memoized per module name).

    Raises:
        JitlabError: For a compile-only build, which has no loadable binary.
    """
    if b.compile_only:
        raise JitlabError(f"{b.name} was built compile-only (no GPU); it can be inspected but not called")
    if b.plan.kind == "program":
        raise JitlabError(f"{b.name} is a program (it has main): run it with jitlab.run_program, not load")
    if isinstance(b.plan, TorchPlan) and b.plan.ops:
        return _bind_ops(b)
    if b.engine == "nvrtc-torch":
        return _load_slotted(b)
    mod = _loaded.get(b.name)
    if mod is not None:
        mod.build = b
        return mod
    mod = Module(b)
    if b.plan.kind == "kernel":
        _bind_kernel_only(mod, b)
    else:
        _bind_torch(mod, b)
    _loaded[b.name] = mod
    return mod


def _bind_ops(b: Build) -> Module:
    """An operator snippet: its library made the one ``torch.ops`` runs (an earlier version unloaded), and
    each operator an attribute (``m.scale`` is ``torch.ops.myops.scale``).

    A torch-style NVRTC build's library is the module entry's (:func:`_load_slotted`): after a kernel-body
    edit it is the library already registered, which keeps its registration and takes the new CUBIN's
    kernels in its slots (:func:`oplib.activate`'s ``fill``)."""
    mod = _loaded.get(b.name) or Module(b)
    mod.build = b
    if b.engine == "nvrtc-torch":
        library, cubin = config.cache_dir() / b.manifest.library, (b.folder / _cubin_for_this_gpu(b)).read_bytes()
        oplib.activate(b.name, library, b.plan.files, b.plan.ops,
                       fill=functools.partial(slotted.fill, library, cubin, b.manifest.kernels or {}))
    else:
        oplib.activate(b.name, b.artifact, b.plan.files, b.plan.ops)
    mod.functions, mod._fns = [], {}
    for op in b.plan.ops:
        packet = oplib.packet(op)
        if packet is not None and op.name not in mod.functions:
            mod._bind(op.name, packet)
    _loaded[b.name] = mod
    return mod


def _bind_kernel_only(mod: Module, b: Build) -> None:
    if b.engine == "nvrtc":
        return _bind_nvrtc(mod, b)
    lib = ctypes.CDLL(str(b.artifact))
    if b.plan.cuda:
        for sym in ("jitlab_error_name", "jitlab_error_string"):
            getattr(lib, sym).restype = ctypes.c_char_p
            getattr(lib, sym).argtypes = [ctypes.c_int]
    emulated = b.engine == emulator_support.ENGINE
    for fn in b.plan.exported:
        in_cuda = fn.path.endswith(".cu")
        prints = fn.name in b.plan.printing
        call = Callable(fn, lib, "cuda" if in_cuda and not emulated else "cpu", prints,
                        "jitlab_last_exception" if in_cuda else "jitlab_cpp_last_exception")
        if emulated and fn.kind == "global":
            call.wrap(functools.partial(emulator_run.wrap_kernel, fn=fn, lib=lib))
        _attach(mod, call)


def _bind_nvrtc(mod: Module, b: Build) -> None:
    """The kernels of an NVRTC build: its CUBIN for this GPU loaded through the driver, each kernel
    behind the same typed wrapper as an nvcc build's."""
    from jitlab.jit import cubin

    name = _cubin_for_this_gpu(b)
    code = (b.folder / name).read_bytes()
    kernels = functools.cache(lambda: cubin.load(code, b.manifest.kernels))  # at the first launch
    for fn in b.plan.exported:
        _attach(mod, Callable(fn, None, "cuda", fn.name in b.plan.printing,
                              launcher=cubin.launcher(lambda q=fn.qualname: kernels()[q], fn)))


def _cubin_for_this_gpu(b: Build) -> str:
    """The file name of the build's CUBIN that runs on this GPU (:func:`slotted.runnable_cubin`)."""
    from jitlab.jit.toolchain import current_arch

    arch = current_arch()
    fit = slotted.runnable_cubin(list(b.manifest.cubins), arch)
    if fit is None:
        raise JitlabError(f"{b.name} was built for {', '.join(b.manifest.cubins)}, which cannot run on this GPU "
                          f"({arch}); load it without arch= (and TORCH_CUDA_ARCH_LIST unset) to build for this GPU")
    return b.manifest.cubins[fit]


def _attach(mod: Module, call: Callable) -> None:
    """Put a typed call on the module: the bare wrapper (fastest) unless its output is forwarded."""
    attr = call if call.capture_output else call._call
    if attr is not call:
        attr.__doc__ = call.describe()
        attr.jitlab = call
    mod._bind(call.fn.name, attr)


def _load_slotted(b: Build) -> Module:
    """A torch-style NVRTC build: one module object per linked module (a kernel edit keeps it), whose
    slots take this build's CUBIN for this GPU (:mod:`jitlab.jit.slotted`)."""
    name = _cubin_for_this_gpu(b)
    library = config.cache_dir() / b.manifest.library
    mod = _loaded.get(b.manifest.module)
    if mod is None:
        mod = Module(b)
        _bind_torch(mod, b, b.manifest.module, library)
        _loaded[b.manifest.module] = mod
    mod.build = b
    slotted.fill(library, (b.folder / name).read_bytes(), b.manifest.kernels or {})
    _loaded[b.name] = mod
    return mod


def _bind_torch(mod: Module, b: Build, name: str | None = None, library=None) -> None:
    """The module ``name`` (default the build's) of the library (default the build's artifact), imported once a
    process: a pybind11 extension, or the functions' C-ABI entries made a module (:func:`binder.module_of`)."""
    name, library = name or b.name, library or b.artifact
    py = sys.modules.get(name) or (binder.module_of(name, library, b.plan.exported, b.plan.bound) if b.plan.entries
                                   else _import_extension(name, library))
    names = [n for n in dir(py) if not n.startswith("_")]
    for n in names:
        fn = getattr(py, n)
        if n in b.plan.printing and callable(fn):
            fn = _forwarding_output(fn, sync=b.plan.cuda)
        mod._bind(n, fn)
    mod.extension = py


def _import_extension(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    py = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(py)
    sys.modules[name] = py
    return py


def _forwarding_output(fn, sync: bool):
    @functools.wraps(fn)
    def call(*args, **kwargs):
        with output.forward_c_output(sync=sync):
            return fn(*args, **kwargs)

    return call


#: What loading a binary raises when the dynamic loader refuses it: ``ctypes`` (kernel-only builds)
#: an ``OSError``, an import (torch-style builds) an ``ImportError``.
_UNLOADABLE = (OSError, ImportError)


def load_or_rebuild(paths, opts: Options) -> Module:
    """Build (or find) and load; a cached binary that fails to load is rebuilt once with a warning.

    A binary can match its manifest's hash and still not load (``invalid ELF header``: a build that
    wrote it wrong, a library it needs that changed): like a corrupt entry, it is rebuilt, not
    reported for ever (``rebuild_once``, :func:`jitlab.jit.cache.find_or_make`).

    Raises:
        ToolchainError: A binary built just now cannot be loaded (with the dynamic loader's reason).
    """
    return build_mod.build(paths, opts, use=_loaded_build, rebuild_once=True)


def _loaded_build(b: Build) -> Module:
    """The build loaded, or :class:`cache.Unusable` when the dynamic loader refuses it."""
    try:
        return load(b)
    except _UNLOADABLE as e:
        raise cache.Unusable(f"jitlab: {b.name} was built but could not be loaded: {e}. A missing symbol or library "
                             f"comes from the snippet (a function declared but never defined, a library it needs "
                             f"missing from ldflags=); anything else: delete {b.folder} and load again",
                             f"could not be loaded ({e})") from e
