"""The precompiled torch header sets host units compile on, and the names each set declares.

Torch's headers cost a host unit seconds even precompiled: GCC instantiates, in every unit, the
templates that the headers' inline functions use. Where a clang++ is found, host units compile with it on
clang's own sets instead (``clang-torch-…``, made with ``-fpch-instantiate-templates``: that work is done once,
in the set; :mod:`.clang`), and GCC's sets are made only for a unit clang refuses. There are four sets (:mod:`jitlab.jit.header_sets`
says what each holds and which a unit starts on), each made once per toolchain and flag set in
``$JITLAB_PCH_DIR`` and used with ``-include``.

A unit that fails on a smaller set is compiled again on a larger one (``casters`` → ``bind`` → ``full``,
``host`` → ``full``) only when the error names something that set declares and the smaller one may
lack (:func:`larger_set`): ``torch::nn`` is retried, a misspelt variable is reported at once. That
needs the names each set declares: the identifiers of its preprocessed text (``c++ -E -dD``, about 2 s), kept beside the precompiled headers::

    build_cache/pch/torch-host-9d1e.../jitlab_torch.h(.gch)   a precompiled set
    build_cache/pch/names-full-4b2c.../names.txt              the identifiers of a set, one per line

Both are cache entries written the way :mod:`jitlab.jit.cache` writes builds: under a lock, manifest
last, a corrupt one made again. A notebook starts making the sets a first build needs in the background
(:func:`prepare`, started by :mod:`jitlab.jit.prepare`) through the same entries: a build that needs a set
meanwhile waits on its lock, and an error there is kept and raised once, by the first build that needs the set.
"""

from __future__ import annotations

import contextvars
import re
import subprocess
import threading
import sys
import time
from pathlib import Path
from typing import Callable, NamedTuple, Protocol

from jitlab import config, progress
from jitlab.errors import ToolchainError
from jitlab.jit import cache, header_sets, processes, toolchain, torch_install
from jitlab.jit.engines import clang
from jitlab.jit.header_sets import NO_CUDA, larger, pch_text
from jitlab.jit.plan import Manifest


class Flags(Protocol):
    """What a header set depends on of a build's flags (:class:`jitlab.jit.plan.Flags` has them)."""

    cxx: tuple[str, ...]
    cuda_include: tuple[str, ...]
    cxx_user: tuple[str, ...]
    toolchain: tuple[tuple[str, str], ...]


#: The beginnings of a user's host flags that a precompiled header must be made with to be used
#: (``-Winvalid-pch``): ``-O3`` leaves ``__NO_INLINE__`` undefined, ``-ffast-math`` and ``-march=`` change
#: ``-m`` settings, ``-fopenmp`` defines ``_OPENMP``, ``-g`` the debug info, ``-std=`` the language. A set
#: is made for them (``-O3`` is one more set, once) rather than every unit parsing torch's headers again.
_SET_FLAGS = ("-O", "-f", "-m", "-g", "-std=", "-ansi")
#: ``-f`` options GCC takes a set made without (they change code generation, not what the headers declare;
#: each checked with ``-Winvalid-pch``): no set of their own. jitlab's ``-fno-gnu-unique`` (operator
#: libraries) is one. An ``-f`` option not listed gets a set: a needless set costs one make, a set GCC
#: refuses costs every unit a full parse of torch's headers.
_SET_HARMLESS = ("-fno-gnu-unique", "-fvisibility", "-fstrict-aliasing", "-fno-strict-aliasing", "-fdiagnostics-",
                 "-fsigned-char", "-fstack-protector",
                 "-fno-stack-protector", "-fomit-frame-pointer", "-fno-omit-frame-pointer", "-fwrapv", "-ffp-contract=",
                 "-funroll-loops", "-fno-unroll-loops", "-fno-trapping-math", "-fshort-enums", "-fcf-protection",
                 "-fno-common", "-fno-plt", "-fPIC", "-fmax-errors=", "-ftemplate-depth=",
                 "-fno-semantic-interposition", "-fdata-sections", "-ffunction-sections")
#: Optimisation levels GCC takes one set for (the same macros): made with ``-O2``; ``-O0`` is the default's.
_LEVELS = {"-O0": None, "-O": "-O2", "-O1": "-O2", "-O2": "-O2", "-O3": "-O2", "-Og": "-O2"}


def set_flags(user) -> tuple[str, ...]:
    """The words of a user's host flags that a header set is made with (:data:`_SET_FLAGS`), in order; the
    last optimisation level only (it is the one GCC takes), as the set it shares (:data:`_LEVELS`)."""
    levels = [i for i, w in enumerate(user) if w.startswith("-O")]
    out = []
    for i, w in enumerate(user):
        if w.startswith("-O"):
            w = _LEVELS.get(w, w) if i == levels[-1] else None
        if w and w.startswith(_SET_FLAGS) and not w.startswith(_SET_HARMLESS):
            out.append(w)
    return tuple(out)


# GCC's -Winvalid-pch line when a macro defined before the header is a name the header uses.
_IGNORED = re.compile(r"\.gch: not used because [`‘'](\w+)[’'] is defined")


def ignored_note(logs: dict[str, str]) -> str:
    """A build note naming the macros that made GCC ignore the precompiled header (unit name → its log),
    with the cost and the fix; ``""`` when every unit used it."""
    units = [u for u, log in logs.items() if _IGNORED.search(log)]
    if not units:
        return ""
    macros = sorted({m for log in logs.values() for m in _IGNORED.findall(log)})
    return (f"{', '.join(units)} compiled without the precompiled torch header: the macro "
            f"{', '.join(f'`{m}`' for m in macros)} is also a name in torch's headers, so GCC ignores the header "
            f"and parses them all again (a host unit about 11 s instead of about 3 s); rename the macro "
            f"(e.g. `MY_{macros[0]}`)")


def precompiled_header(flags: Flags, cuda: bool, headers: str = "full", with_clang: bool = False) -> Path:
    """A precompiled header set for these host flags, made on first use (tens of seconds, once).

    The set is made with the user's words GCC requires it to share (:func:`set_flags`). If the compiler
    refuses those words, the set made without them is returned: GCC then reads its header text instead,
    and the unit's own compile names the word it refuses, as the build's error. ``with_clang``: clang's set
    (:mod:`.clang`), made with those words or not at all.

    Returns:
        GCC's set: the header to pass with ``-include`` (its ``.gch`` lies beside it). Clang's: the ``.pch``
        to pass with ``-include-pch``.

    Raises:
        ToolchainError: Clang could not make its set (GCC's is then the unit's).
    """
    user = set_flags(flags.cxx_user)
    if with_clang:
        return _precompiled(flags, cuda, headers, user, clang.path())
    if user:
        try:
            return _precompiled(flags, cuda, headers, user)
        except ToolchainError:
            pass
    return _precompiled(flags, cuda, headers, ())


def _precompiled(flags: Flags, cuda: bool, headers: str, user: tuple[str, ...], clang_: str | None = None) -> Path:
    text, cxx, name = _describe("torch", flags, cuda, headers, user, clang_)
    if name in _refused:
        raise _refused[name]

    def make(folder: Path) -> Path:
        header = folder / "jitlab_torch.h"
        header.write_text(text)
        progress.say(f"jitlab: precompiling torch's headers for host code ({headers}{', clang' if clang_ else ''}: "
                     f"once per toolchain, {'~1 min' if headers == 'full' else '~30 s'} on 2 cores) ...", file=sys.stdout)
        out = folder / ("jitlab_torch.h.pch" if clang_ else "jitlab_torch.h.gch")
        # clang: the templates the headers' inline functions use are instantiated here, once (clang.py)
        cmd = [clang_, "-fpch-instantiate-templates"] if clang_ else [toolchain.require_tool(toolchain.cxx_path(), "c++")]
        with progress.doing(f"precompiling torch's headers ({headers})"):
            run_tool([cmd[0], "-x", "c++-header", str(header), "-o", str(out), *cmd[1:], *cxx], folder,
                     "precompiling torch's headers")
        return out

    # Trusted by its size and stamp (inode, change time), not its hash: hashing 0.5-0.8 GB took ~0.5 s
    # per host unit, cache hits included. A set written to after it was made has another stamp; GCC
    # checks the compiler and flags a set was made with itself (-Winvalid-pch), and one it cannot use
    # is read as the header text beside it, which is hashed on every use: slower, never someone else's.
    # Clang refuses a set it cannot use: the unit goes to GCC.
    ends = processes.ends()
    try:
        made = made_once(name, make, content=False, companions=("jitlab_torch.h",))
    except ToolchainError as e:
        if clang_ and processes.ends() == ends:  # clang could not make it (a flag it refuses, a crash), and no
            _refused[name] = e                   # interrupt ended it: not tried again in this process
        raise
    return made if clang_ else made.with_name("jitlab_torch.h")


#: Clang's sets that clang could not make in this process, and why.
_refused: dict[str, ToolchainError] = {}


def after_set(cuda: bool, headers: str) -> tuple[str, ...]:
    """The headers a host unit on this set includes right after it (:func:`jitlab.jit.header_sets.after_set`)."""
    return header_sets.after_set(headers, cuda, torch_install.cuda_version() is not None)


def entry_name(flags: Flags, cuda: bool, headers: str) -> str:
    """The cache entry of the set a build with these flags starts on: one name for one set (a CUDA and a C++
    snippet share ``casters`` and ``bind``, and every set with a CPU torch)."""
    return _describe("torch", flags, cuda, headers, (), clang.path())[2]


def is_made(flags: Flags, cuda: bool, headers: str) -> bool:
    """Whether the set a build with these flags starts on (no user flags of :func:`set_flags`) is made and usable."""
    return cache.lookup(entry_name(flags, cuda, headers), root=config.pch_dir(), content=False) is not None


def prepare(flags: Flags, cuda: bool, headers: str) -> None:
    """Make a set in the background, as a first build would, saying nothing: a build that needs it meanwhile
    waits on its entry's lock; an error is kept for the first build that needs the set (:func:`made_once`)."""
    in_background(_precompiled, flags, cuda, headers, (), clang.path())


def in_background(make: Callable, *args) -> None:
    """``make(*args)`` as background work, saying nothing: its :func:`made_once` entries keep an error for the
    first build that needs them instead of raising it here."""
    token = _background.set(True)
    try:
        with progress.quietly():
            make(*args)
    except Exception:  # noqa: BLE001 - kept by made_once for the build that needs the entry; nothing to show here
        pass
    finally:
        _background.reset(token)


def declared_names(flags: Flags, cuda: bool, headers: str) -> frozenset[str]:
    """Every identifier in a header set's preprocessed text, macros' names included (about 2 s, once)."""
    text, cxx, name = _describe("names", flags, cuda, headers)

    def make(folder: Path) -> Path:
        header = folder / "jitlab_torch.h"
        header.write_text(text)
        cmd = [toolchain.require_tool(toolchain.cxx_path(), "c++"), "-x", "c++", "-E", "-dD", str(header), *cxx]
        with progress.doing(f"reading the names torch's headers declare ({headers})"):
            out = run_tool(cmd, folder, "reading torch's headers")
        names = folder / "names.txt"
        code = _LITERALS.sub(" ", out)  # "model.py" names nothing
        names.write_text("\n".join(sorted(set(re.findall(r"[A-Za-z_]\w*", code)))) + "\n")
        return names

    return frozenset(made_once(name, make).read_text().split())


# String and character literals: the words in them are not names.
_LITERALS = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'')
# A compile error that a larger header set might fix: a name or member the smaller set does not declare.
_MISSING = re.compile(r"not declared|not a member of|has not been declared|does not name a|not a namespace|"
                      r"incomplete type|no matching function|is not a template|undeclared identifier|no member named|"
                      r"no type named|not a class")
# GCC's words for a template or class it does not know, which quote the next token, not the name
# (``struct F : torch::autograd::Function<F>`` on a set without autograd's headers).
_UNNAMED = re.compile(r"expected (?:template|class|type)-name before")
# GCC quotes with ‘…’ in a UTF-8 locale and '…' otherwise; clang with '…'.
_QUOTED = re.compile(r"[‘'`]([^’'`\n]+)[’']")
_ERROR = re.compile(r"\berror\b")
# Wordings for a name used as a scope (``X::``).
_AS_SCOPE = re.compile(r"has not been declared|is not a namespace|is not a class, namespace")


class Missing(NamedTuple):
    """A name a compile error says is missing."""

    qualifier: str  #: what it was looked up in (``torch::jit``), or ``""``
    name: str
    scope: bool  #: used as a scope (``py::object``: "‘py’ has not been declared")


def missing_names(log: str) -> list[Missing] | None:
    """Each name a compile error says is missing (GCC's and clang's wordings): ``[]`` when no error
    says so, ``None`` when one does but its name cannot be read."""
    found: list[Missing] = []
    for line in log.splitlines():
        line = line.split("; did you mean", 1)[0]  # a suggestion is a name the set has
        if _ERROR.search(line) and _UNNAMED.search(line):
            return None  # a type the set lacks, named only by the token after it: try the next set
        if not _ERROR.search(line) or not _MISSING.search(line):
            continue
        quoted = _QUOTED.findall(line)
        # The missing name follows these words (GCC: ‘class at::Tensor’ has no member named ‘numell’),
        # else it is the first quoted one (‘nn’ is not a member of ‘torch’).
        after = re.search(r"(?:named|for call to|incomplete type)\s*[‘'`]([^’'`\n]+)", line)
        missing = after.group(1) if after else quoted[0] if quoted else None
        if missing is None:
            return None
        *own, name = _unqualified(missing).split("::")
        others = [_unqualified(q) for q in quoted if q != missing]
        found.append(Missing("::".join(own) or (others[0] if others else ""), name, bool(_AS_SCOPE.search(line))))
    return found


def _unqualified(quoted: str) -> str:
    """``class torch::nn::Module`` → ``torch::nn::Module``; ``at::add(at::Tensor&)`` → ``at::add``."""
    return re.split(r"[(<\s]", re.sub(r"^(?:class|struct|union|enum|namespace)\s+", "", quoted.strip()), 1)[0]


def larger_set(log: str, flags: Flags, cuda: bool, small: str) -> str | None:
    """The set to compile a unit on again after it failed on ``small`` (:func:`header_sets.larger`), or None.

    Only names a larger set declares can be fixed by it, and of those: a name the small set does not
    declare (``THPVariable_Wrap``), a qualified one (``torch::jit::load``, ``std::ifstream`` that the
    small set only forward-declares), or one used as a scope (``py::object``). A name torch does not
    declare (a misspelt variable or member), or a plain name the small set has too (``n``), is the
    user's to fix: ``full`` would report it the same way, a minute later. When no missing name can be
    read from the errors, the next larger set is tried.
    """
    sets = larger(small, cuda)
    missing = missing_names(log)
    if not sets or missing == []:  # no error names anything missing: the name sets are not read
        return None
    if missing is None:
        return sets[0]
    own = declared_names(flags, cuda, small)
    for candidate in sets:
        names = declared_names(flags, cuda, candidate)
        if any(m.name in names and (m.name not in own or m.qualifier or m.scope) for m in missing):
            return candidate
    return None


def _describe(kind: str, flags: Flags, cuda: bool, headers: str, user: tuple[str, ...] = (),
              clang_: str | None = None) -> tuple[str, list[str], str]:
    """A set's text, host flags (``user``'s last, as a unit has them) and cache entry name
    (``<kind>-<headers>-<key>``; ``clang-<kind>-…`` for clang's set)."""
    cuda_torch = torch_install.cuda_version() is not None
    text = pch_text(headers, cuda, cuda_torch)
    # A set without CUDA's headers (every C++ snippet's, casters/bind for all, and every set with a CPU torch)
    # is one set for C++ and CUDA snippets (GCC does not check include folders), and does not depend on nvcc or
    # torch's CUDA build, even when the build's toolchain names them (a C++ source with with_cuda=True).
    with_cuda = cuda and cuda_torch and headers not in NO_CUDA
    cxx = [*flags.cxx, *(flags.cuda_include if with_cuda else ()), *user]
    tools = [t for t in flags.toolchain if with_cuda or t[0] not in ("nvcc", "torch_cuda")]
    if clang_:
        cxx, tools, kind = clang.words(cxx), [*tools, ("clang", clang.fingerprint(clang_))], f"clang-{kind}"
    key = cache.build_key({"format": config.FORMAT_VERSION, "pch": text, "flags": cxx, "toolchain": tools})
    return text, cxx, f"{kind}-{headers}-{key}"


def made_once(name: str, make: Callable[[Path], Path], content: bool = True, companions=()) -> Path:
    """The artifact of the entry ``name`` in the pch folder: ``make(folder)`` writes it on a miss, under
    the entry's lock, and the manifest is written last. ``content``: check its hash on every use, not
    only its size and stamp. ``companions``: names of small files ``make`` writes beside it, hashed on
    every use (the header text GCC would read if the precompiled header were spoiled)."""

    background = _background.get()

    def made(target: str, folder: Path) -> Manifest:
        if not background and name in _kept:  # the set failed in the background: this build shows why, once
            error = _kept.pop(name)
            (folder / "build.log").write_text(f"{error}\n")  # the folder is emptied for this try: the log it names
            progress.say(f"jitlab: making {name} in the background failed; the next build tries again", file=sys.stdout)
            raise error
        t0 = time.perf_counter()
        try:
            artifact = make(folder)
        except Exception as e:
            if background:  # under the entry's lock: a build waiting on it finds the error
                _kept[name] = e
            raise
        return cache.made(artifact, stamp=cache.stamp_of(artifact), seconds=round(time.perf_counter() - t0, 2),
                          companions={c: cache.file_sha256(folder / c) for c in companions})

    def waiting():
        progress.say(f"jitlab: waiting for {name}, which another build is making ...", file=sys.stdout)

    if not background and name in _preparing:
        progress.say(f"jitlab: waiting for torch's precompiled headers ({name}), started in the background "
                     f"{time.monotonic() - _preparing[name]:.0f} s ago ...", file=sys.stdout)
    if background:
        _preparing[name] = time.monotonic()
    try:
        entry = cache.find_or_make(name, made, root=config.pch_dir(), content=content, on_wait=waiting)
    finally:
        if background:
            _preparing.pop(name, None)
    return entry.folder / entry.manifest.artifact


#: Whether this context makes sets in the background (:func:`prepare`).
_background: contextvars.ContextVar[bool] = contextvars.ContextVar("jitlab_pch_background", default=False)
#: Entry name → the error making it in the background raised, for the first build that needs it.
_kept: dict[str, Exception] = {}
#: Entry name → when the background started making it (``time.monotonic()``), while it does.
_preparing: dict[str, float] = {}


def run_tool(cmd: list[str], folder: Path, what: str) -> str:
    """Run the host compiler for a set; its command and output go to the entry's build.log."""
    with _starting:  # started and listed as one step: stop_background never runs between the two
        proc = processes.start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if proc is not None and _background.get():
            _compilers.add(proc)
    if proc is None:
        raise ToolchainError(f"jitlab: {what} not started: jitlab is ending")
    try:
        with processes.ended_on_interrupt(proc):  # Ctrl-C: the compiler ends too (its entry is made again)
            out, err = proc.communicate()
    finally:
        _compilers.discard(proc)
    (folder / "build.log").write_text(" ".join(cmd) + "\n" + err)
    if proc.returncode != 0:
        raise ToolchainError(f"jitlab: {what} failed (log: {folder / 'build.log'}):\n{err[-2000:]}")
    return out


#: The compilers making sets in the background now.
_compilers: set[subprocess.Popen] = set()
#: Held while a compiler starts and is listed. Reentrant: processes.end_everything may call stop_background from a
#: signal handler that interrupted this very thread inside the block (its compiler is then killed as a process).
_starting = threading.RLock()


@processes.at_end
def stop_background() -> None:
    """End the compilers making sets in the background (at exit: a kernel that shuts down leaves no
    compiler running; their entries, with no manifest, are made again by the next build): each compiler's
    process group, so that ``cc1plus`` goes with the ``g++`` that started it."""
    with _starting:
        running = list(_compilers)
    for proc in running:
        processes.kill(proc)
