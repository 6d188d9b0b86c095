"""The playground's logic without widgets: one snippet file and its reference, and the steps a
person takes on it (save, build, check, bench, A/B), each returning a :class:`StepResult`.

Tests and scripts drive a :class:`Session` directly; :mod:`jitlab.notebook.panel` only shows what
it returns. ``NAME.ref.py`` (:mod:`jitlab.judge.refs`) supplies the inputs, reference and sizes for
Check, Bench and A/B. A ``.cu`` snippet runs on ``"cuda"``, a ``.cpp`` one on ``"cpu"``.
"""

from __future__ import annotations

import functools
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from jitlab import config, snippets
from jitlab.errors import CompileError, JitlabError, SnippetError
from jitlab.jit import api, emulator_run, emulator_support, toolchain
from jitlab.jit.sources import locate
from jitlab.judge import benchmark, checker, refs, results, roofline, timing
from jitlab.notebook.report import (
    ab_status,
    ab_table,
    bench_figure,
    bench_status,
    bench_table,
    compile_status,
    resources_html,
    verdict_status,
)

STEPS = ("save", "build", "check", "bench", "compare", "reload")



@dataclass
class StepResult:
    """What one step did, ready to show.

    Attributes:
        step: ``"save"``, ``"build"``, ``"check"``, ``"bench"`` or ``"compare"``.
        ok: Whether it succeeded (a FAIL verdict, a compile error or a missing reference is not ok).
        status: One line for the status bar ("built in 0.21 s", "PASS: …", "FAIL: …", "compile error …").
        log: Plain text: the compile error with file:line and caret, the verdict, the timings.
        html: Rich output (the checker's table, the bench table); empty when ``log`` says it all.
        seconds: Wall time of the step.
        png: The bench plot (PNG bytes), after Bench.
        value: The underlying object: Module, Verdict list, BenchResult list or ABVerdict.
        error_lines: Lines of the snippet a compile error points at (the editor marks them).
    """

    step: str
    ok: bool
    status: str
    log: str = ""
    html: str = ""
    seconds: float = 0.0
    png: bytes | None = None
    value: object = None
    error_lines: list[int] = field(default_factory=list)


def _normalized(text: str) -> str:
    """The text as :func:`jitlab.snippets.save` writes it (always newline-terminated)."""
    return text if text.endswith("\n") else text + "\n"


def first_line(e: BaseException) -> str:
    s = str(e)
    return s.splitlines()[0] if s else type(e).__name__


class Session:
    """One snippet file and its reference: the playground's logic, without widgets.

    Args:
        path: A ``.cu`` or ``.cpp`` snippet file; a relative one missing here is looked up from the
            project root (``kernels/x.cu`` from ``notebooks/``, :func:`jitlab.jit.sources.locate`).
        device: ``"cuda"`` or ``"cpu"``; default by extension (``.cu`` → cuda).
        compile_reference: Also time ``torch.compile`` of the reference in Bench (GPU only; the
            first compile takes tens of seconds).
        isolate: Check in a worker process (:func:`jitlab.worker.isolate.check_snippet`), so an illegal
            address, a device assert or an endless loop ends the worker, not the notebook.
        timeout: Seconds before an isolated check is stopped.

    Raises:
        SnippetError: The file is missing or is not a ``.cu``/``.cpp`` file.
    """

    def __init__(self, path: str | Path, *, device: str | None = None, compile_reference: bool = True,
                 isolate: bool = True, timeout: float = config.CHECK_TIMEOUT):
        self.path = Path(os.path.abspath(locate(path)))  # ".." folded, links kept (saves write through them)
        if self.path.suffix not in config.SOURCE_EXTS or not self.path.is_file():
            raise SnippetError(f"{path}: the playground edits one existing {'/'.join(config.SOURCE_EXTS)} file; "
                               f"create it first (e.g. with `%%cuda NAME` or `%%cpp NAME`)")
        self.name = self.path.stem
        self.device = device or ("cuda" if self.path.suffix in config.CUDA_EXTS else "cpu")
        self.compile_reference = compile_reference
        self.isolate, self.timeout = isolate, timeout
        self.text = self.read()  # what the panel last loaded or saved: its own saves are not "changes"
        self.module = None
        self.emulated = False  # a .cu snippet run on the CPU emulator (no GPU here): set by build()
        self._built, self._built_text = "", None  # "built in N s" / "cache hit", and the text it was for
        # How each build this session used came about: a later cache hit of a build it made itself
        # still reads "built in N s" after Check/Bench, so their status agrees with Build's.
        self._origins: dict[str, str] = {}

    # ------------------------------------------------------------------ the file

    def read(self) -> str:
        """The snippet's text on disk."""
        return self.path.read_text(encoding="utf-8", errors="surrogateescape")

    def is_edited(self, text: str) -> bool:
        """Whether ``text`` (the editor's) differs from what was last loaded or saved."""
        return _normalized(text) != self.text

    def save(self, text: str) -> StepResult:
        """Write ``text`` atomically; the replaced version goes to ``.history/NAME/``."""
        t0 = time.perf_counter()
        before, old = len(snippets.history(self.path)), self.text
        # Known before the write, so a watcher that fires during it sees its own save.
        self.text = _normalized(text)
        try:
            snippets.save(self.path, text)
        except BaseException:
            self.text = old
            raise
        kept = len(snippets.history(self.path)) > before
        status = f"saved {self.path.name}" + (" (previous version kept in history)" if kept else " (unchanged)")
        return StepResult("save", True, status, seconds=time.perf_counter() - t0)

    def versions(self) -> list[tuple[str, Path]]:
        """Earlier versions from the history, newest first, as ``(label, path)``."""
        return [(snippets.version_label(p), p) for p in reversed(snippets.history(self.path))]

    # ------------------------------------------------------------------ build

    def build(self) -> StepResult:
        """Build the snippet (or find it in the cache) and keep the module for the other steps."""

        t0 = time.perf_counter()
        self.emulated = self.device == "cuda" and not toolchain.gpu_available() and not emulator_support.cannot_run(self.path)
        if self.device == "cuda" and not toolchain.gpu_available() and not self.emulated:
            return self._compile_only(t0)
        try:
            m = api.load(self.path, device="cpu" if self.emulated else "cuda")
        except CompileError as e:
            self.module = None
            return self._compile_failed(e, t0)
        except JitlabError as e:
            self.module = None
            return StepResult("build", False, f"error: {first_line(e)}", log=str(e), seconds=time.perf_counter() - t0)
        self._built, self._built_text = build_state(m.build), self.text
        self._origins.setdefault(m.build.name, self._built)
        self.module = m
        status = f"{self._built}; functions: {', '.join(m.functions) or 'none'}"
        status += f" ({emulator_support.RUN_ON}: no CUDA GPU here)" if self.emulated else ""
        return StepResult("build", True, status, log=m.build.log, seconds=time.perf_counter() - t0, value=m)

    def _compile_failed(self, e: CompileError, t0: float) -> StepResult:
        """A compile error's status line, log and the lines of this snippet it points at."""
        lines = [d.line for d in e.diagnostics if d.severity != "warning" and d.line and d.path
                 and Path(d.path).resolve() == self.path.resolve()]
        return StepResult("build", False, compile_status(e), log=str(e), seconds=time.perf_counter() - t0, value=e,
                          error_lines=lines)

    @property
    def _origin(self) -> str:
        """How the current build came about: ``built in N s`` if this session made it, else ``cache hit``."""
        m = self.module
        return self._origins.get(m.build.name, self._built) if m is not None else self._built

    def _compile_only(self, t0: float) -> StepResult:
        """Without a GPU a ``.cu`` snippet can still be compiled (nvcc only) for the usual archs."""

        self.module = None
        archs = list(config.DEFAULT_ARCHS)
        try:
            b = api.build(self.path, compile_only=True, arch=archs)
        except CompileError as e:
            return self._compile_failed(e, t0)
        except JitlabError as e:
            return StepResult("build", False, f"error: {first_line(e)}", log=str(e), seconds=time.perf_counter() - t0)
        status = f"{build_state(b)} (compile-only for {', '.join(archs)}: no CUDA GPU here, nothing runs)"
        return StepResult("build", True, status, log=b.log, html=resources_html(b.resources, b.log),
                          seconds=time.perf_counter() - t0, value=b)

    # ------------------------------------------------------------------ reference

    @property
    def ref_path(self) -> Path:
        return self.path.parent / f"{self.name}.ref.py"

    @property
    def has_reference(self) -> bool:
        return self.ref_path.is_file()

    def reference(self):
        """The imported ``NAME.ref.py``.

        Raises:
            JitlabError: It is missing (naming the file and its format) or cannot be imported.
        """
        if not self.has_reference:
            raise JitlabError(missing_reference(self))
        try:
            return refs.load(self.ref_path)
        except SnippetError:
            raise
        except Exception as e:  # a broken ref file is the user's to fix: say which file and why
            raise JitlabError(f"{self.ref_path.name} could not be imported: {type(e).__name__}: {e}") from e

    def _ready(self, step: str) -> tuple[object, StepResult | None]:
        """Build, then load the reference: ``(ref, None)``, or ``(None, the result explaining why not)``."""
        t0 = time.perf_counter()
        if self.module is None or self._built_text != self.text:  # Build already ran for this text: reuse it
            built = self.build()
            if not built.ok:
                return None, StepResult(step, False, built.status, log=built.log, seconds=built.seconds,
                                        error_lines=built.error_lines)
        if self.module is None:
            return None, StepResult(step, False, f"cannot {step} {self.path.name}: no CUDA GPU here "
                                    f"(Build compile-checks it)", seconds=built.seconds)
        try:
            ref = self.reference()
        except JitlabError as e:
            return None, StepResult(step, False, f"no reference: {first_line(e)}", log=str(e),
                                    seconds=time.perf_counter() - t0)
        return ref, None

    # ------------------------------------------------------------------ check / bench / A/B

    def check(self) -> StepResult:
        """Build, then check every version in the ref file (``VARIANTS`` too) at its sizes and seeds:
        in a worker process unless ``isolate=False``."""

        t0 = time.perf_counter()
        ref, why = self._ready("check")
        if why:
            return why
        result = self._isolated_check(t0) if self.isolate else self._check_here(ref, t0)
        result.status += f"; {emulator_support.RUN_ON}" if self.emulated else ""
        return result

    def _check_here(self, ref, t0: float) -> StepResult:
        """Check every version in this process (a fault here takes the notebook with it)."""
        with emulator_run.checking(self.emulated):
            verdicts = [v for _, v in refs.check_each(self.module, ref, "cpu" if self.emulated else self.device,
                                                      name=self.name)]
        ok = all(v.passed for v in verdicts)
        return StepResult("check", ok, f"{verdict_status(verdicts)} ({self._origin})",
                          log="\n\n".join(map(str, verdicts)), html="".join(v._repr_html_() for v in verdicts),
                          seconds=time.perf_counter() - t0, value=verdicts)

    def _isolated_check(self, t0: float) -> StepResult:
        from jitlab.worker import jobs
        from jitlab.worker.isolate import check_snippet

        out = check_snippet(self.path, timeout=self.timeout, **({"device": "cpu"} if self.emulated else {}))
        if out.category in (jobs.PASS, jobs.MISMATCH) and out.verdicts:
            status = verdict_status(out.verdicts)
        else:
            first = out.message.strip().splitlines()[0] if out.message.strip() else ""
            status = f"FAIL [{out.category}]: {first}" + (f" at {out.where}" if out.where else "")
        return StepResult("check", out.passed, f"{status} ({self._origin})", log=str(out), html=out._repr_html_(),
                          seconds=time.perf_counter() - t0, value=out.verdicts)

    def bench(self) -> StepResult:
        """Build, then check and time every version at the ref's bench sizes beside torch; plot it."""
        t0 = time.perf_counter()
        ref, why = self._ready("bench")
        if why:
            return why
        if self.emulated:  # checked, never timed: an emulated kernel's time means nothing for a GPU
            c = self.check()
            return StepResult("bench", c.ok, f"{c.status}; {emulator_support.NO_TIMING}", log=c.log, html=c.html, value=c.value)
        rows = [self._bench_one(ref, version, size) for version, size in ref.bench_plan()]
        for r in rows:
            if r.timing:  # the same JSON history `jitlab run` keeps
                results.append(self.name, {**r.to_dict(), "build": self.module.build.name})
        ok = all(r.verdict.passed for r in rows)
        png = None
        if any(r.timing for r in rows):
            placed = ref.flops and ref.bytes_moved and any(r.peak for r in rows)
            png = (roofline.Chart(rows, title=f"{self.name}: roofline").png if placed
                   else bench_figure(rows, f"{self.name} ({self.device})"))
        return StepResult("bench", ok, f"{bench_status(rows)} ({self._origin})", log="\n".join(map(str, rows)),
                          html=bench_table(rows), seconds=time.perf_counter() - t0, png=png, value=rows)

    def _bench_one(self, ref: refs.Ref, version: refs.Version, size):
        return benchmark.bench(functools.partial(version.run, self.module), version.inputs, size,
                               reference=ref.reference, bytes_moved=ref.bytes_moved, flops=ref.flops, device=self.device,
                               compile_reference=self.compile_reference and self.device == "cuda",
                               tolerance_override=version.tolerance, name=version.label)

    def compare(self, old: str | Path | None) -> StepResult:
        """A/B: the current version (B) against an earlier one (A, a history file) with ``jitlab.ab``.

        Both are built (each build's module name carries its content key, so both stay loaded) and
        checked at the bench size first: a wrong version is never timed.
        """

        t0 = time.perf_counter()
        if old is None:
            return StepResult("compare", False, f"no earlier version of {self.path.name} yet: edit and save it first")
        old = Path(old)
        label = snippets.version_label(old)
        ref, why = self._ready("compare")
        if why:
            return why
        if self.emulated:
            return StepResult("compare", False, f"not compared: {emulator_support.NO_TIMING}", seconds=time.perf_counter() - t0)
        try:
            old_mod = self._load_version(old)
        except JitlabError as e:
            status = f"the earlier version {label} does not build: {first_line(e)}"
            return StepResult("compare", False, status, log=str(e), seconds=time.perf_counter() - t0)
        size = ref.ab_size()
        new_run, old_run = functools.partial(ref.run, self.module), functools.partial(ref.run, old_mod)
        wrong = self._wrong_versions(ref, size, [("current", new_run), (label, old_run)])
        if wrong:
            return StepResult("compare", False, f"FAIL: not timed, {wrong[0][0]} is wrong at size {size}: "
                              f"{wrong[0][1].reasons[0]}", log="\n\n".join(str(v) for _, v in wrong),
                              html="".join(v._repr_html_() for _, v in wrong), seconds=time.perf_counter() - t0)
        inp = ref.inputs(size, 0, self.device)
        v = timing.ab(lambda: old_run(inp), lambda: new_run(inp), device=self.device)
        return StepResult("compare", True, ab_status(v, label, size), log=f"A = {label}, B = current\n{v}",
                          html=ab_table(v, label, size), seconds=time.perf_counter() - t0, value=v)

    def _load_version(self, old: Path):
        """Build a history file under the snippet's own file name, so errors and modules read alike."""

        if not old.is_file():
            raise JitlabError(f"{old}: no such earlier version (see {snippets.history_dir(self.path)})")
        text = old.read_text(encoding="utf-8", errors="surrogateescape")
        # A content-addressed folder keeps the copy's path stable, so comparing again is a cache hit;
        # a dot folder is ignored by `jitlab clean`'s scan of build folders.
        folder = config.cache_dir() / ".versions" / hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        folder.mkdir(parents=True, exist_ok=True)
        copy = snippets.save(folder / self.path.name, text)
        inc = [f"-I{self.path.parent}"]  # the snippet's local headers stay where they are
        return api.load(copy, cflags=inc, cuda_cflags=inc)

    def _wrong_versions(self, ref, size: int, runs) -> list:

        verdicts = [(label, checker.check(run, ref.reference, ref.inputs, sizes=[size], seeds=[0], device=self.device,
                                          tolerance_override=ref.tolerance, name=label)) for label, run in runs]
        return [(label, v) for label, v in verdicts if not v.passed]


def build_state(b) -> str:
    return "cache hit" if b.cached else f"built in {b.seconds:.2f} s"


def example_call(path: Path, device: str) -> str:
    """A call of the snippet's first kernel (else host function) as a ``run(m, inp)`` writes it: written
    pointers get ``y``, read ones ``inp['x']``, integers ``n``, other numbers ``1.0``."""
    from jitlab.jit.parse import parse_file
    from jitlab.jit.sources import collect_sources

    try:
        fns = [fn for f in collect_sources(path) for fn in parse_file(f).functions if not fn.internal]
    except JitlabError:
        fns = []
    fn = next((f for f in fns if f.kind == "global"), None) or next((f for f in fns if f.name != "main"), None)
    if fn is None:
        return "...                                # call your snippet's function here"
    args = ["y" if p.pointer and not p.const else "inp['x']" if p.pointer else
            "n" if any(w in p.base for w in ("int", "long", "size_t", "short")) else "1.0" for p in fn.params]
    launch = ", grid=(n + 255) // 256, block=256" if fn.kind == "global" and device == "cuda" else ""
    return f"m.{fn.name}({', '.join(args)}{launch})"


def missing_reference(s: Session) -> str:
    """The error for a snippet without ``NAME.ref.py``: which file, and the smallest one that works."""
    call = example_call(s.path, s.device)
    return f"""{s.ref_path.name} is missing: Check, Bench and A/B compare {s.path.name} with the torch \
reference in {s.ref_path}. The smallest one:

    import torch

    SIZES = [1, 127, 128, 129, 100_000]        # awkward sizes included

    def inputs(size, seed, device):            # one case's inputs, as a dict
        g = torch.Generator().manual_seed(seed)
        return {{"x": torch.rand(size, generator=g).to(device)}}

    def reference(inp):                        # what the kernel must compute, in torch
        return inp["x"] * 2

    def run(m, inp):                           # call your snippet (m: the built module)
        y, n = torch.empty_like(inp["x"]), inp["x"].numel()
        {call}
        return y

Optional: SEEDS, TOLERANCE = {{"rtol": ..., "atol": ...}}, VARIANTS (faster versions), BENCH_SIZES,
bytes_moved(inp), flops(inp). The kernels/*.ref.py files are worked examples."""
