"""KernelBench's format: a problem file and the solutions to it, loaded and graded as KernelBench grades them.

A **problem** is a Python file with ``class Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``;
a **solution** has ``class ModelNew`` and builds its kernels with ``torch.utils.cpp_extension.load_inline``
when it is imported. A **pair** is one of each (:mod:`jitlab.judge.kernelbench_pairs` finds them on disk;
``scripts/kernelbench-corpus`` lays the public leaderboard out as pair folders).

Grading one solution as KernelBench does is :mod:`jitlab.judge.kernelbench_grade`.

The solution runs with its ``load_inline`` swapped for another function for as long as it is imported
(:func:`swapped`): jitlab's (:func:`jitlab.jit.torch_compat.load_inline`), torch's own, or a compile-only
build (:func:`compile_pair`, which needs no GPU and leaves the later import a cache hit). The swap patches
``torch.utils.cpp_extension.load_inline``, so every import style of the solution gets it.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import inspect
import sys
import threading
import time
import types
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from jitlab.errors import ArgumentError, CompileError
from jitlab.jit import origins, torch_compat
from jitlab.judge.kernelbench_pairs import Pair

#: KernelBench's fp32 tolerance (v0 and v0.1): ``torch.allclose(out, ref, atol=1e-2, rtol=1e-2)``.
TOLERANCE = 1e-2
#: Correctness trials and the seed they are drawn from (KernelBench's eval scripts' defaults).
TRIALS = 5
SEED = 42
#: The job actions a worker runs (:mod:`jitlab.worker.jobs`): grade one solution; make a problem's reference.
ACTION = "kernelbench"
REFERENCE = "kernelbench-reference"
#: How the solution's ``load_inline`` is provided.
LOADERS = ("jitlab", "torch")


# --- importing a solution with its load_inline swapped ------------------------------------------------

_torch_load_inline = None
_swaps = 0
_swap_lock = threading.Lock()
_here = threading.local()


def _dispatch(*args, **kwargs):
    """What ``torch.utils.cpp_extension.load_inline`` is while a swap is active: this thread's choice, or torch's."""
    return getattr(_here, "load_inline", None) or _torch_load_inline


def _patched(*args, **kwargs):
    return _dispatch()(*args, **kwargs)


@contextlib.contextmanager
def swapped(load_inline):
    """``torch.utils.cpp_extension.load_inline`` is ``load_inline`` in this thread while active (other
    threads get their own swap, or torch's); torch's is put back when the last swap ends."""
    global _torch_load_inline, _swaps
    import torch.utils.cpp_extension as ext

    with _swap_lock:
        if _swaps == 0:
            _torch_load_inline = ext.load_inline
            ext.load_inline = _patched
        _swaps += 1
    before, _here.load_inline = getattr(_here, "load_inline", None), load_inline
    try:
        yield
    finally:
        _here.load_inline = before
        with _swap_lock:
            _swaps -= 1
            if _swaps == 0:
                ext.load_inline = _torch_load_inline


def import_file(path: Path, name: str) -> types.ModuleType:
    """Run a Python file as a fresh module named ``name`` (its tracebacks and compile errors name the file's lines)."""
    mod = types.ModuleType(name)
    mod.__file__ = str(path)
    sys.modules[name] = mod  # dataclasses and pickling look a module up by name
    exec(compile(path.read_text(), str(path), "exec"), mod.__dict__)
    return mod


@dataclass
class Builds:
    """The ``load_inline`` calls an import made: ``(name, seconds, cached)`` each."""

    calls: list[tuple[str, float, bool | None]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(s for _, s, _ in self.calls)

    @property
    def cached(self) -> bool:
        return bool(self.calls) and all(c for _, _, c in self.calls)

    def timed(self, load_inline):
        """``load_inline`` that records each call's name, seconds and whether jitlab found it cached."""
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            mod = load_inline(*args, **kwargs)
            name = args[0] if args else kwargs.get("name", "")
            self.calls.append((name, time.perf_counter() - t0, getattr(getattr(mod, "build", None), "cached", None)))
            return mod
        return call


def import_solution(path: Path, loader: str = "jitlab") -> tuple[types.ModuleType, Builds]:
    """Import a solution with ``loader``'s ``load_inline`` (``"jitlab"`` or ``"torch"``): its module and builds.

    Raises:
        CompileError: From jitlab's ``load_inline``, at the solution's line.
        Exception: Whatever the import raises (torch's build errors, a syntax error, …).
    """
    if loader not in LOADERS:
        raise ArgumentError(f"loader={loader!r}: one of {', '.join(LOADERS)}")
    import torch.utils.cpp_extension as ext

    builds = Builds()
    original = _torch_load_inline if _swaps else ext.load_inline
    with swapped(builds.timed(torch_compat.load_inline if loader == "jitlab" else original)), \
            torch_compat.names_of(owner(path)):
        return import_file(path, "kernelbench_solution"), builds


def owner(solution: Path) -> str:
    """The solution's own set of ``load_inline`` names (:func:`jitlab.jit.torch_compat.names_of`): solutions
    that name their extensions alike build in parallel, and its import finds what its compile phase built."""
    return "kb" + hashlib.sha256(str(Path(solution).resolve()).encode()).hexdigest()[:10]


# --- the compile phase: build without loading ----------------------------------------------------------

class _Stub:
    """What a compile-only ``load_inline`` returns: any attribute, any call, so the rest of the file runs."""

    def __getattr__(self, name):
        return _Stub()

    def __call__(self, *args, **kwargs):
        return _Stub()


@dataclass
class Compiled:
    """A solution's compile phase: ``error`` is the first compile error (at the solution's line), or ``""``."""

    seconds: float = 0.0
    calls: int = 0
    cached: bool = False
    error: str = ""


def compile_pair(pair: Pair, *, arch=None, compile_only: bool = False) -> Compiled:
    """Build every ``load_inline`` of a solution without loading it (the import's later build is a cache hit).

    Runs the solution's file with ``load_inline`` swapped for one that starts
    :func:`jitlab.jit.torch_compat.build_inline` on a thread and returns a stub at once, so a solution's
    several calls build side by side; the first compile error, in the calls' order, is the solution's. An
    error other than a compile error (a name the file lacks, a torch API it calls at import) is left for the
    grading to report.

    Args:
        arch: Archs for a compile-only build (default ``sm_90``); ``None`` builds for this machine's GPU.
        compile_only: Compile CUDA without linking or loading (no GPU needed); C++-only calls build whole.
    """
    out = Compiled()
    signature = inspect.signature(torch_compat.load_inline)
    started: list[Future] = []
    t0 = time.perf_counter()

    def build(a: dict, caller: str | None):
        cuda = bool(a.get("cuda_sources"))
        return torch_compat.build_inline(
            a["name"], a["cpp_sources"], a.get("cuda_sources"), a.get("functions"), caller=caller,
            compile_only=compile_only and cuda, arch=(arch or ["sm_90"]) if compile_only and cuda else None,
            **{k: a[k] for k in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths",
                                 "with_pytorch_error_handling", "no_implicit_headers") if k in a},
            **({"python_module": a["is_python_module"]} if "is_python_module" in a else {}))

    def build_call(*args, **kwargs):
        a = signature.bind(*args, **kwargs).arguments
        # The solution's names (a context variable) and the file of the call (this thread's) go along.
        started.append(pool.submit(contextvars.copy_context().run, build, a, origins.caller_file()))
        return _Stub()

    with ThreadPoolExecutor(4, thread_name_prefix="jitlab-kernelbench-calls") as pool, swapped(build_call), \
            torch_compat.names_of(owner(pair.solution)):
        try:
            import_file(pair.solution, "kernelbench_solution")
        except Exception:  # noqa: BLE001 -- not a build's failure: the grading reports it with its category
            pass
    for f in started:
        try:
            b = f.result()
        except CompileError as e:
            out.error = out.error or str(e)
            continue
        except Exception:  # noqa: BLE001 -- as above: the grading reports it
            continue
        out.calls += 1
        out.cached = b.cached if out.calls == 1 else out.cached and b.cached
    out.seconds = time.perf_counter() - t0
    return out
