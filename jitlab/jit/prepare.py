"""One-time work a notebook starts in the background when it loads jitlab: torch's precompiled header sets.

The first torch-style build waits for the precompiled torch header set its host units start on (about
30 s on 2 cores, :mod:`jitlab.jit.engines.pch`), ``host``, and for jitlab's binder (~5 s,
:mod:`jitlab.jit.engines.binder`). ``%load_ext jitlab`` and the lessons' first cell call :func:`start`,
which makes the ones missing on background threads (CUDA's ``host`` and the binder side by side; the C++
``host`` after them, one thread alone), with the flags a plain ``jitlab.load`` uses, and says so in one
line; a learner's first torch-style cell then finds them made or waits only for what is left. Nothing
starts, and nothing is said, when every set is already made.

The threads make each set through the same cache entry a build does: a build that needs a set meanwhile
waits on its lock (and says so), never makes it twice; an error is kept and raised once, by the first
build that needs the set. The threads print nothing, their compilers are ended when the process exits,
and ``JITLAB_PREPARE_HEADERS=0`` turns it all off. A script's ``import jitlab`` starts nothing.

Other one-time work of a first build, measured (docs/benchmarks.md, "The first torch-style build"): with
the sets made, the first build of ``kernels/square_matrix.cu`` is its units' compiles (seconds: each is the
snippet's own code) and ~0.3 s of Python; the names the sets declare (``c++ -E``, ~2 s a set) are read only
when a unit fails on a smaller set, so they are not made ahead.
"""

from __future__ import annotations

import contextvars
import sys
import threading

from jitlab import config
from jitlab.jit import toolchain
from jitlab.jit.engines import binder, pch
from jitlab.jit.flags import default_host_flags

#: What :func:`start` says when it starts anything.
LINE = ("jitlab: preparing torch's headers in the background (~30 s on 2 cores; the first torch-style build "
        "waits for what is left; JITLAB_PREPARE_HEADERS=0 turns this off)")

_lock = threading.Lock()
_threads: list[threading.Thread] = []
_started = False
_ahead: set[tuple] = set()  # (folder, name) of the sets ahead() started: a second call starts them no more


#: jitlab's binder (:mod:`jitlab.jit.engines.binder`) among the sets: every torch-style build that binds its
#: functions itself through C-ABI entries needs it.
BINDER = (None, False, "binder")


def wanted() -> list[tuple[object, bool, str]]:
    """``(flags, cuda, headers)`` of each set a first plain torch-style build needs here, in the order to make
    them: CUDA's ``host`` where nvcc is found and jitlab's binder (:data:`BINDER`), then C++ snippets' ``host``
    (where it is not CUDA's: with a CUDA torch); each once. Every torch-style snippet of the lessons builds on
    these; ``casters``, ``bind`` and ``full`` (a module block with more than plain ``m.def`` lines, code that
    names pybind11) are made by the build that needs them."""
    if not toolchain.cxx_path():
        return []
    out = []
    if toolchain.nvcc_path():
        out.append((default_host_flags(True), True, "host"))
    cpp = default_host_flags(False)
    out += [BINDER, (cpp, False, "host")]
    names = [_name(w) for w in out]
    return [w for i, w in enumerate(out) if names[i] not in names[:i]]


def _name(w: tuple) -> str:
    return "binder" if w is BINDER else pch.entry_name(*w)


def missing(items=None) -> list[tuple[object, bool, str]]:
    """The sets of ``items`` (default: :func:`wanted`) not made yet."""
    return [w for w in (wanted() if items is None else items)
            if not (binder.is_made() if w is BINDER else pch.is_made(*w))]


def start(say=print) -> None:
    """Start making the missing sets in the background, once per process; ``say`` one line if anything starts.

    Silent, starting nothing, when every set is made, when ``JITLAB_PREPARE_HEADERS=0``, when this process
    already started, or when the toolchain cannot be read (a build says why itself). Never waits for a
    compiler: the sets' names need torch's install, read here when torch is imported already (the lessons
    import it first; ~0.1 s) and otherwise on a thread, which then says the line (in the cell that started
    it, in a notebook).
    """
    global _started
    with _lock:
        if _started or not config.prepare_headers():
            return
        _started = True
    if "torch" in sys.modules:
        _begin(say)
    else:  # importing torch takes seconds
        ctx = contextvars.copy_context()
        threading.Thread(target=ctx.run, args=(_begin, say), name="jitlab-prepare", daemon=True).start()


def _begin(say) -> None:
    """Start the missing sets on background threads, and say so; nothing when none is missing.

    CUDA's sets are made side by side (a first CUDA build needs both); the others (C++ snippets') after them, one
    thread alone, so that they do not take a core from CUDA's or from the build that waits for them.
    """
    try:
        todo = missing()
    except Exception:  # noqa: BLE001 - no torch or compiler to read: the first build reports it in its cell
        return
    if not todo:
        return
    with _lock:
        first = [_thread(f"jitlab-prepare-{w[2]}", [w], []) for w in todo if w[1] or w is BINDER]
        rest = [w for w in todo if not (w[1] or w is BINDER)]
        if rest:
            _thread("jitlab-prepare-later", rest, first)
    say(LINE)


def _thread(name: str, sets: list, after: list[threading.Thread]) -> threading.Thread:
    t = threading.Thread(target=_work, args=(sets, after), name=name, daemon=True)
    t.start()
    _threads.append(t)
    return t


def _work(sets: list, after: list[threading.Thread]) -> None:
    """Make ``sets`` in order, once the threads ``after`` have ended."""
    for t in after:
        t.join()
    for w in sets:
        make(w)


def make(w: tuple) -> None:
    """Make one item of :func:`wanted` as background work (a set, or the binder)."""
    binder.prepare() if w is BINDER else pch.prepare(*w)


def ahead(cuda: bool) -> None:
    """Start making, on background threads, the ``host`` set of a plain ``cuda`` (or C++) build and jitlab's
    binder, where missing and not started by an earlier call: for a batch (``jitlab check``) that is about to
    build many solutions, each of which waits for them. ``jitlab check`` calls it before importing torch (3-4 s,
    :mod:`jitlab.jit.torch_install`), the batch's grading again (a no-op then). Silent;
    ``JITLAB_PREPARE_HEADERS=0`` turns it off; an error is the first build's, as with :func:`start`."""
    if not config.prepare_headers() or not toolchain.cxx_path() or (cuda and not toolchain.nvcc_path()):
        return
    todo = missing([(default_host_flags(cuda), cuda, "host"), BINDER])
    where = config.pch_dir()
    with _lock:
        todo = [w for w in todo if (where, _name(w)) not in _ahead]
        _ahead.update((where, _name(w)) for w in todo)
    with _lock:
        for w in todo:
            _thread(f"jitlab-ahead-{w[2]}", [w], [])


def threads() -> list[threading.Thread]:
    """The threads making sets (empty before :func:`start`, or when it started none)."""
    with _lock:
        return list(_threads)


def wait(timeout: float | None = None) -> None:
    """Wait for the background threads (tests, benchmarks)."""
    for t in threads():
        t.join(timeout)
