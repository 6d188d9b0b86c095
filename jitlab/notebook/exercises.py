"""Exercises the playground checks: starting code a learner fixes, a reference, a hint, a solution.

An exercise ``NAME`` is three files in ``kernels/exercises/``:

* ``NAME.cu``: the **starting code**. It compiles, and it is wrong or unfinished on purpose (a TODO
  says where). The lesson's ``%%cuda NAME --exercise`` cell holds the same text and saves over it.
* ``NAME.ref.py``: the reference, in the ``.ref.py`` protocol of :mod:`jitlab.judge.runner` (``SIZES``
  with awkward sizes, ``inputs``, ``reference``, ``run``, optionally ``SEEDS`` and ``TOLERANCE``),
  plus ``TITLE``, ``LESSON`` (the notebook), ``ORDER`` (its place in the lesson), ``NUDGE`` (a question
  that points at the mistake, shown at the first failing check) and ``HINT`` (the fix, shown from the
  second on).
* ``solutions/NAME.cu``: a reference solution, shown by :func:`solution` on request only.

``jitlab run`` looks for ``kernels/*.ref.py`` only (not in subfolders), so exercises stay out of
the demo. Usage::

    jitlab.notebook.exercises.list()                  # name, lesson, title
    jitlab.notebook.exercises.check("vadd_bounds")    # PASS, or FAIL with the checker's reasons and the hint
    jitlab.notebook.exercises.solution("vadd_bounds") # when stuck
"""

from __future__ import annotations

import builtins
import collections
import difflib
import html
from dataclasses import dataclass
from pathlib import Path

from jitlab import config
from jitlab.errors import CompileError, JitlabError, SnippetError
from jitlab.jit import api, emulator_support, toolchain
from jitlab.judge import refs
from jitlab.notebook.text import fold
from jitlab.worker import isolate, jobs

#: Where exercises live, relative to the repository root.
EXERCISES = Path("kernels") / "exercises"
#: Failing checks of each exercise in this process: the first gets the nudge, the next the hint.
_failed: collections.Counter[str] = collections.Counter()
#: The arch a machine without a GPU compile-checks for: Colab's T4.
COMPILE_ARCH = "sm_75"
#: CUDA errors after which the process's CUDA context is unusable.


@dataclass(frozen=True)
class Exercise:
    """One exercise.

    Attributes:
        name: The exercise's name (its files' stem and the ``%%cuda`` cell's name).
        title: What to do, in a few words.
        lesson: The notebook it belongs to, e.g. ``"01_vector_add"``.
        hint: The fix, in words: shown when a check fails again.
        path: The starting code.
        ref: The ``.ref.py`` reference.
        solution: The reference solution.
        order: Its place in the lesson (the ref's ``ORDER``).
        nudge: A question pointing at the mistake without the fix: shown when a check first fails.
    """

    name: str
    title: str
    lesson: str
    hint: str
    path: Path
    ref: Path
    solution: Path
    order: int = 0
    nudge: str = ""


def exercises_dir() -> Path:
    """``kernels/exercises`` under the current directory, else the one in jitlab's checkout."""
    here = Path.cwd() / EXERCISES
    if here.is_dir():
        return here
    return config.SOURCE_ROOT / EXERCISES


def _read(ref: Path) -> Exercise:
    mod = refs.load(ref)
    name = ref.name[: -len(".ref.py")]
    src = next((ref.parent / f"{name}{e}" for e in config.SOURCE_EXTS if (ref.parent / f"{name}{e}").is_file()),
               ref.parent / f"{name}.cu")
    return Exercise(name, getattr(mod, "TITLE", name), getattr(mod, "LESSON", ""), getattr(mod, "HINT", ""),
                    src, ref, ref.parent / "solutions" / src.name, getattr(mod, "ORDER", 0), getattr(mod, "NUDGE", ""))


def all_exercises() -> dict[str, Exercise]:
    """Every exercise, by name, in lesson order."""
    found = [_read(ref) for ref in sorted(exercises_dir().glob("*.ref.py"))]
    return {e.name: e for e in sorted(found, key=lambda e: (e.lesson, e.order, e.name))}


def get(name: str) -> Exercise:
    """The exercise called ``name``.

    Raises:
        SnippetError: No such exercise; names the closest ones.
    """
    known = all_exercises()
    if name in known:
        return known[name]
    close = difflib.get_close_matches(name, known, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"exercises: {', '.join(known) or 'none found'}"
    raise SnippetError(f"no exercise {name!r} in {exercises_dir()}: {hint}")


class Catalog(builtins.list):
    """The exercises :func:`list` returns: a list of :class:`Exercise` that prints as a table."""

    def __str__(self) -> str:
        if not self:
            return "no exercises found"
        lw, w = (max(len(x) for x in (head, *col)) + 2 for head, col in
                 (("lesson", [e.lesson for e in self]), ("exercise", [e.name for e in self])))
        lines = [f"{'lesson':<{lw}}{'exercise':<{w}}what to do"]
        lines += [f"{e.lesson:<{lw}}{e.name:<{w}}{e.title}" for e in self]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def list(lesson: str | None = None) -> Catalog:  # noqa: A001 - jitlab.notebook.exercises.list() reads best
    """Every exercise (or one lesson's), with its lesson and title; prints as a table.

    Args:
        lesson: Only this notebook's exercises, e.g. ``"03_reduction"``.
    """
    return Catalog(e for e in all_exercises().values() if lesson is None or e.lesson == lesson)


@dataclass
class Result:
    """The outcome of :func:`check` or :func:`compile`; ``bool(result)`` is whether it passed.

    Attributes:
        exercise: The exercise.
        path: The file that was checked.
        status: ``"pass"``, ``"fail"``, ``"compile error"``, ``"error"`` (a tool or launch problem),
            ``"needs a GPU"`` (compile-checked only) or ``"compiled"`` (:func:`compile`).
        verdict: The checker's :class:`jitlab.judge.checker.Verdict` when the kernel ran.
        error: The compile (or other jitlab) error, if any.
        intro: A line shown before the verdict or error, if any.
        note: A line shown after them, if any.
        module: The loaded module, when it was built.
        error_text: How to show ``error`` instead of ``str(error)`` (the cell magic uses the cell's
            line numbers).
        attempt: Which failing check of this exercise in this process it is (1: the first, which
            shows the nudge; later ones show the hint).
    """

    exercise: Exercise
    path: Path
    status: str
    verdict: object = None
    error: Exception | None = None
    intro: str = ""
    note: str = ""
    module: object = None
    error_text: str = ""
    attempt: int = 1

    @property
    def passed(self) -> bool:
        return self.status in ("pass", "compiled")

    def __bool__(self) -> bool:
        return self.passed

    def headline(self) -> str:
        mark = {"pass": "✅ PASS", "compiled": "✅ COMPILES", "needs a GPU": "⚠️ NEEDS A GPU"}.get(
            self.status, f"❌ {self.status.upper()}")
        e = self.exercise
        return f"{mark} · {e.name}: {e.title} (lesson {e.lesson})"

    def _parts(self) -> list[tuple[str, str]]:
        """``(kind, text)`` pieces of the body: kind is "verdict", "hint" or "text"."""
        parts = [("text", self.intro)] if self.intro else []
        if self.verdict is not None:
            parts.append(("verdict", str(self.verdict)))
        if self.error is not None:
            parts.append(("text", self.error_text or str(self.error)))
        if self.note:
            parts.append(("text", self.note))
        if self.status == "fail":
            e = self.exercise
            if e.nudge and self.attempt == 1:
                parts.append(("hint", f"Hint: {e.nudge}"))
                parts.append(("hint", "Check again after your next change for a closer hint."))
            else:
                if e.hint:
                    parts.append(("hint", f"Hint: {e.hint}"))
                parts.append(("hint", f'Stuck? jitlab.notebook.exercises.solution("{e.name}") shows a solution.'))
        return parts

    def body(self) -> str:
        return "\n".join(text for _, text in self._parts())

    def __str__(self) -> str:
        body = self.body()
        return self.headline() + ("\n" + body if body else "")

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(fold(str(self)))

    def _repr_html_(self) -> str:
        color = "#1a7f37" if self.passed else "#9a6700" if self.status == "needs a GPU" else "#cf222e"
        out = [f"<div><b style='color:{color}'>{html.escape(self.headline())}</b>"]
        for kind, text in self._parts():
            if kind == "verdict" and hasattr(self.verdict, "_repr_html_"):
                out.append(self.verdict._repr_html_())  # the checker's table of wrong elements
            elif kind == "hint":
                out.append(f"<p>{html.escape(text)}</p>")
            else:
                out.append(f"<pre>{html.escape(fold(text))}</pre>")
        return "".join(out) + "</div>"


def _candidate(ex: Exercise, path) -> Path:
    p = Path(path) if path is not None else ex.path
    if not p.is_file():
        raise SnippetError(f"{p}: no such file (the starting code of {ex.name!r} is {ex.path})")
    return p


def check(name: str, path=None, device: str | None = None, timeout: float = config.CHECK_TIMEOUT) -> Result:
    """Build the learner's version of an exercise and check it against the reference.

    Never raises for a wrong kernel, a compile error or a missing GPU: the result says what
    happened. Without a GPU a CUDA exercise runs on the CPU emulator (the result says "run on the CPU
    emulator"); one using what the emulator does not run (tensor cores) is compile-checked for sm_75
    instead, and says so.

    Args:
        name: The exercise, e.g. ``"vadd_bounds"``.
        path: The file to check; default ``kernels/exercises/NAME.cu``.
        device: ``"cuda"`` or ``"cpu"`` (a ``.cu`` file on the CPU emulator); default: ``"cuda"`` for a
            ``.cu`` file where there is a GPU, ``"cpu"`` otherwise.
        timeout: Seconds before a kernel that never finishes is stopped (the check runs in a
            worker process, see :func:`jitlab.worker.isolate.check_snippet`).

    Returns:
        The :class:`Result`; it prints as PASS, or FAIL with the checker's reasons and the hint.

    Raises:
        SnippetError: No such exercise, or no such file.
    """

    ex = get(name)
    src = _candidate(ex, path)
    cuda = src.suffix in config.CUDA_EXTS
    device = device or ("cuda" if cuda and toolchain.gpu_available() else "cpu")
    emulated = cuda and device == "cpu"
    why_not = emulated and emulator_support.cannot_run(src)
    if (device == "cuda" and not toolchain.gpu_available()) or why_not:
        r = compile(name, src)
        why = ("checking runs the kernel, and torch sees no CUDA GPU here (on Colab: Runtime > Change runtime "
               "type > T4 GPU)" + (f"; {why_not}." if why_not else "."))
        if r.status == "compiled":
            return Result(ex, src, "needs a GPU", intro=f"{why}\nCompiled for {COMPILE_ARCH} instead: {r.note}")
        return Result(ex, src, r.status, error=r.error, intro=f"{why}\nCompiled for {COMPILE_ARCH} instead:")
    try:
        mod = api.load(src, device="cpu" if emulated else "cuda")
    except CompileError as e:
        return Result(ex, src, "compile error", error=e)
    except JitlabError as e:
        return Result(ex, src, "error", error=e)
    # The check runs in a worker process: an illegal address, a device assert or an endless loop in
    # a learner's kernel ends the worker, never the notebook (the build above is a cache hit there).
    out = isolate.check(src, ref=ex.ref, timeout=timeout, **({"device": "cpu"} if emulated else {}))
    verdict = next((v for v in out.verdicts if not v.passed), out.verdicts[0] if out.verdicts else None)
    ran = f"{emulator_support.RUN_ON} ({emulator_support.NO_TIMING})" if emulated else ""
    if out.passed:
        return Result(ex, src, "pass", verdict=verdict, module=mod, note=ran)
    message = out.message.strip().removeprefix(f"{emulator_support.RUN_ON}: ")
    intro = "" if out.category == jobs.MISMATCH else (
        f"{out.category}: {message}" + (f"\nwhere: {out.where}" if out.where else ""))
    _failed[ex.name] += 1
    return Result(ex, src, "fail", verdict=verdict, intro=intro, module=mod, note=ran, attempt=_failed[ex.name])


def compile(name: str, path=None, arch=(COMPILE_ARCH,)) -> Result:  # noqa: A001 - mirrors jitlab.build
    """Compile an exercise without running it (no GPU needed): reports compile errors.

    Args:
        name: The exercise.
        path: The file to compile; default ``kernels/exercises/NAME.cu``.
        arch: Archs to compile for (default sm_75, Colab's T4).

    Returns:
        A :class:`Result` with status ``"compiled"`` (and each kernel's registers) or ``"compile error"``.
    """

    ex = get(name)
    src = _candidate(ex, path)
    try:
        b = api.build(src, compile_only=True, arch=[arch] if isinstance(arch, str) else [*arch])
    except CompileError as e:
        return Result(ex, src, "compile error", error=e)
    except JitlabError as e:
        return Result(ex, src, "error", error=e)
    return Result(ex, src, "compiled", note=f"it compiles ({b.registers or 'no kernels'}).")


def solution(name: str) -> None:
    """Print the reference solution of an exercise (for when you are stuck)."""
    ex = get(name)
    print(f"# {ex.solution}: a solution of {name!r} ({ex.title})\n")
    print(ex.solution.read_text(encoding="utf-8"))
