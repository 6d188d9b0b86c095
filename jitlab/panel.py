"""``jitlab.playground(path)``: a notebook panel to edit, build, check, bench and A/B one snippet,
reloaded whenever its file changes on disk.

Three layers, each usable on its own (the widgets are the thin one):

* :class:`Session` — plain controller, no widgets: ``save``, ``build``, ``check``, ``bench``,
  ``compare`` each return a :class:`StepResult` (status line, ok flag, log/HTML, seconds). Tests and
  scripts call it directly.
* :class:`Watcher` — ``watchfiles`` in a daemon thread, calling back with the file's new text.
* :class:`Playground` — the ipywidgets panel: buttons run Session steps on one worker thread while
  the status line ticks the elapsed time; results are written to the widgets from that thread.

``kernels/NAME.ref.py`` (see :mod:`jitlab.runner`) supplies the inputs, reference and sizes for
Check, Bench and A/B. A ``.cu`` snippet runs on ``"cuda"``, a ``.cpp`` one on ``"cpu"``.
"""

from __future__ import annotations

import functools
import hashlib
import html
import io
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

from . import config, results, runner, snippets, toolchain
from .errors import CompileError, JitlabError, SnippetError

STEPS = ("save", "build", "check", "bench", "compare", "reload")
TICK_S = 0.1  # status refresh while a step runs: fast enough to look alive, cheap to sync


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
    """

    step: str
    ok: bool
    status: str
    log: str = ""
    html: str = ""
    seconds: float = 0.0
    png: bytes | None = None
    value: object = None


def _normalized(text: str) -> str:
    """The text as :func:`jitlab.snippets.save` writes it (always newline-terminated)."""
    return text if text.endswith("\n") else text + "\n"


def _first_line(e: BaseException) -> str:
    s = str(e)
    return s.splitlines()[0] if s else type(e).__name__


class Session:
    """One snippet file and its reference: the playground's logic, without widgets.

    Args:
        path: A ``.cu`` or ``.cpp`` snippet file.
        device: ``"cuda"`` or ``"cpu"``; default by extension (``.cu`` → cuda).
        compile_reference: Also time ``torch.compile`` of the reference in Bench (GPU only; the
            first compile takes tens of seconds).
        isolate: Check in a worker process (:func:`jitlab.isolate.check_snippet`), so an illegal
            address, a device assert or an endless loop ends the worker, not the notebook.
        timeout: Seconds before an isolated check is stopped.

    Raises:
        SnippetError: The file is missing or is not a ``.cu``/``.cpp`` file.
    """

    def __init__(self, path: str | Path, *, device: str | None = None, compile_reference: bool = True,
                 isolate: bool = True, timeout: float = 60.0):
        self.path = Path(path).absolute()
        if self.path.suffix not in config.SOURCE_EXTS or not self.path.is_file():
            raise SnippetError(f"{path}: the playground edits one existing {'/'.join(config.SOURCE_EXTS)} file; "
                               f"create it first (e.g. with `%%cuda NAME` or `%%cpp NAME`)")
        self.name = self.path.stem
        self.device = device or ("cuda" if self.path.suffix in config.CUDA_EXTS else "cpu")
        self.compile_reference = compile_reference
        self.isolate, self.timeout = isolate, timeout
        self.text = self.read()  # what the panel last loaded or saved: its own saves are not "changes"
        self.module = None
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
        return [(_version_label(p), p) for p in reversed(snippets.history(self.path))]

    # ------------------------------------------------------------------ build

    def build(self) -> StepResult:
        """Build the snippet (or find it in the cache) and keep the module for the other steps."""
        import jitlab

        t0 = time.perf_counter()
        if self.device == "cuda" and not toolchain.gpu_available():
            return self._compile_only(t0)
        try:
            m = jitlab.load(self.path)
        except CompileError as e:
            self.module = None
            return StepResult("build", False, compile_status(e), log=str(e), seconds=time.perf_counter() - t0)
        except JitlabError as e:
            self.module = None
            return StepResult("build", False, f"error: {_first_line(e)}", log=str(e), seconds=time.perf_counter() - t0)
        self._built, self._built_text = _build_state(m.build), self.text
        self._origins.setdefault(m.build.name, self._built)
        self.module = m
        status = f"{self._built}; functions: {', '.join(m.functions) or 'none'}"
        return StepResult("build", True, status, log=m.build.log, seconds=time.perf_counter() - t0, value=m)

    @property
    def _origin(self) -> str:
        """How the current build came about: ``built in N s`` if this session made it, else ``cache hit``."""
        m = self.module
        return self._origins.get(m.build.name, self._built) if m is not None else self._built

    def _compile_only(self, t0: float) -> StepResult:
        """Without a GPU a ``.cu`` snippet can still be compiled (nvcc only) for the usual archs."""
        import jitlab

        self.module = None
        archs = list(runner.DEFAULT_ARCHS)
        try:
            b = jitlab.build(self.path, compile_only=True, arch=archs)
        except CompileError as e:
            return StepResult("build", False, compile_status(e), log=str(e), seconds=time.perf_counter() - t0)
        except JitlabError as e:
            return StepResult("build", False, f"error: {_first_line(e)}", log=str(e), seconds=time.perf_counter() - t0)
        status = f"{_build_state(b)} (compile-only for {', '.join(archs)}: no CUDA GPU here, nothing runs)"
        return StepResult("build", True, status, log=b.log, seconds=time.perf_counter() - t0, value=b)

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
        kernel = runner.find_kernels(self.path)[0]
        try:
            return runner.load_reference(kernel.ref)
        except Exception as e:  # a broken ref file is the user's to fix: say which file and why
            raise JitlabError(f"{kernel.ref.name} could not be imported: {type(e).__name__}: {e}") from e

    def _ready(self, step: str) -> tuple[object, StepResult | None]:
        """Build, then load the reference: ``(ref, None)``, or ``(None, the result explaining why not)``."""
        t0 = time.perf_counter()
        if self.module is None or self._built_text != self.text:  # Build already ran for this text: reuse it
            built = self.build()
            if not built.ok:
                return None, StepResult(step, False, built.status, log=built.log, seconds=built.seconds)
        if self.module is None:
            return None, StepResult(step, False, f"cannot {step} {self.path.name}: no CUDA GPU here "
                                    f"(Build compile-checks it)", seconds=built.seconds)
        try:
            ref = self.reference()
        except JitlabError as e:
            return None, StepResult(step, False, f"no reference: {_first_line(e)}", log=str(e),
                                    seconds=time.perf_counter() - t0)
        return ref, None

    # ------------------------------------------------------------------ check / bench / A/B

    def check(self) -> StepResult:
        """Build, then check every version in the ref file (``VARIANTS`` too) at its sizes and seeds:
        in a worker process unless ``isolate=False``."""
        import jitlab

        t0 = time.perf_counter()
        ref, why = self._ready("check")
        if why:
            return why
        if self.isolate:
            return self._isolated_check(t0)
        verdicts = [
            jitlab.check(functools.partial(fn, self.module), ref.reference, ref.inputs, sizes=sizes,
                         seeds=getattr(ref, "SEEDS", [0]), device=self.device,
                         tolerance_override=getattr(ref, "TOLERANCE", None), name=f"{self.name}/{vname}")
            for vname, fn, sizes in runner.variants(ref)
        ]
        ok = all(v.passed for v in verdicts)
        return StepResult("check", ok, f"{_verdict_status(verdicts)} ({self._origin})",
                          log="\n\n".join(map(str, verdicts)), html="".join(v._repr_html_() for v in verdicts),
                          seconds=time.perf_counter() - t0, value=verdicts)

    def _isolated_check(self, t0: float) -> StepResult:
        from . import jobs
        from .isolate import check_snippet

        out = check_snippet(self.path, timeout=self.timeout)
        if out.category in (jobs.PASS, jobs.MISMATCH) and out.verdicts:
            status = _verdict_status(out.verdicts)
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
        rows = [self._bench_one(ref, vname, fn, size) for vname, fn, size in _bench_plan(ref)]
        for r in rows:
            if r.timing:  # the same JSON history `jitlab run` keeps
                results.append(self.name, {**r.to_dict(), "build": self.module.build.name})
        ok = all(r.verdict.passed for r in rows)
        png = bench_figure(rows, f"{self.name} ({self.device})") if any(r.timing for r in rows) else None
        return StepResult("bench", ok, f"{_bench_status(rows)} ({self._origin})", log="\n".join(map(str, rows)),
                          html=bench_table(rows), seconds=time.perf_counter() - t0, png=png, value=rows)

    def _bench_one(self, ref, vname: str, fn, size: int):
        import jitlab

        return jitlab.bench(functools.partial(fn, self.module), ref.inputs, size, reference=ref.reference,
                            bytes_moved=getattr(ref, "bytes_moved", None), flops=getattr(ref, "flops", None),
                            device=self.device, compile_reference=self.compile_reference and self.device == "cuda",
                            tolerance_override=getattr(ref, "TOLERANCE", None), name=vname)

    def compare(self, old: str | Path | None) -> StepResult:
        """A/B: the current version (B) against an earlier one (A, a history file) with ``jitlab.ab``.

        Both are built (each build's module name carries its content key, so both stay loaded) and
        checked at the bench size first: a wrong version is never timed.
        """
        import jitlab

        t0 = time.perf_counter()
        if old is None:
            return StepResult("compare", False, f"no earlier version of {self.path.name} yet: edit and save it first")
        old = Path(old)
        label = _version_label(old)
        ref, why = self._ready("compare")
        if why:
            return why
        try:
            old_mod = self._load_version(old)
        except JitlabError as e:
            status = f"the earlier version {label} does not build: {_first_line(e)}"
            return StepResult("compare", False, status, log=str(e), seconds=time.perf_counter() - t0)
        size = _ab_size(ref)
        new_run, old_run = functools.partial(ref.run, self.module), functools.partial(ref.run, old_mod)
        wrong = self._wrong_versions(ref, size, [("current", new_run), (label, old_run)])
        if wrong:
            return StepResult("compare", False, f"FAIL: not timed, {wrong[0][0]} is wrong at size {size}: "
                              f"{wrong[0][1].reasons[0]}", log="\n\n".join(str(v) for _, v in wrong),
                              html="".join(v._repr_html_() for _, v in wrong), seconds=time.perf_counter() - t0)
        inp = ref.inputs(size, 0, self.device)
        v = jitlab.ab(lambda: old_run(inp), lambda: new_run(inp), device=self.device)
        return StepResult("compare", True, ab_status(v, label, size), log=f"A = {label}, B = current\n{v}",
                          html=ab_table(v, label, size), seconds=time.perf_counter() - t0, value=v)

    def _load_version(self, old: Path):
        """Build a history file under the snippet's own file name, so errors and modules read alike."""
        import jitlab

        if not old.is_file():
            raise JitlabError(f"{old}: no such earlier version (see {snippets.history_dir(self.path)})")
        text = old.read_text(encoding="utf-8", errors="surrogateescape")
        # A content-addressed folder keeps the copy's path stable, so comparing again is a cache hit;
        # a dot folder is ignored by `jitlab clean`'s scan of build folders.
        folder = config.cache_dir() / ".versions" / hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        folder.mkdir(parents=True, exist_ok=True)
        copy = snippets.save(folder / self.path.name, text)
        inc = [f"-I{self.path.parent}"]  # the snippet's local headers stay where they are
        return jitlab.load(copy, cflags=inc, cuda_cflags=inc)

    def _wrong_versions(self, ref, size: int, runs) -> list:
        import jitlab

        tol = getattr(ref, "TOLERANCE", None)
        verdicts = [(label, jitlab.check(run, ref.reference, ref.inputs, sizes=[size], seeds=[0], device=self.device,
                                         tolerance_override=tol, name=label)) for label, run in runs]
        return [(label, v) for label, v in verdicts if not v.passed]


# ---------------------------------------------------------------------- texts and tables


def compile_status(e: CompileError) -> str:
    """One line naming the first compile error at the user's file:line."""
    d = next((d for d in e.diagnostics if d.severity != "warning"), None)
    if d is None:
        return f"compile error: {e.summary}"
    col = f":{d.column}" if d.column else ""
    return f"compile error at {Path(d.path).name}:{d.line}{col}: {d.message}"


def _build_state(b) -> str:
    return "cache hit" if b.cached else f"built in {b.seconds:.2f} s"


def missing_reference(s: Session) -> str:
    """The error for a snippet without ``NAME.ref.py``: which file, and the smallest one that works."""
    call = (f"m.{s.name}(y, inp['x'], n, grid=(n + 255) // 256, block=256)" if s.device == "cuda"
            else f"m.{s.name}(y, inp['x'], n)")
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


def _version_label(p: Path) -> str:
    """A history entry's save time and hash (:func:`jitlab.snippets.version_label`, which names the entries)."""
    return snippets.version_label(p)


def _verdict_status(verdicts) -> str:
    failed = [v for v in verdicts if not v.passed]
    if failed:
        v = failed[0]
        f = v.first_failure
        return f"FAIL: {v.name} at size {f.size}, seed {f.seed}: {v.reasons[0]}"
    cases = sum(len(v.cases) for v in verdicts)
    sizes = sorted({c.size for v in verdicts for c in v.cases})
    versions = f"{len(verdicts)} versions, " if len(verdicts) > 1 else ""
    return f"PASS: {versions}{cases} cases, sizes {', '.join(map(str, sizes))}"


def _bench_plan(ref) -> list[tuple[str, object, int]]:
    """``(version, run, size)`` to time: the ref's ``BENCH_SIZES`` (else its largest size), as ``jitlab run``."""
    plan = []
    for vname, fn, sizes in runner.variants(ref):
        limit = getattr(ref, "ORIGINAL_MAX_SIZE", None) if vname == "original" else None
        bench_sizes = [s for s in getattr(ref, "BENCH_SIZES", [max(sizes)]) if limit is None or s <= limit]
        plan += [(vname, fn, size) for size in bench_sizes or [max(sizes)]]
    return plan


def _ab_size(ref) -> int:
    """The size A/B times the original version at: its largest bench size."""
    limit = getattr(ref, "ORIGINAL_MAX_SIZE", None)
    sizes = [s for s in getattr(ref, "BENCH_SIZES", [max(ref.SIZES)]) if limit is None or s <= limit]
    return max(sizes or ref.SIZES)


def _bench_status(rows) -> str:
    from .benchmark import compared

    wrong = [r for r in rows if not r.verdict.passed]
    if wrong:
        return f"FAIL: not timed, {wrong[0].name} is wrong at size {wrong[0].size}: {wrong[0].verdict.reasons[0]}"
    best = min(rows, key=lambda r: r.timing.median)
    parts = [f"bench: {best.name} @ {best.size}: {_ms(best.timing.median)}"]
    if best.gbps:
        parts.append(f"{best.gbps:.1f} GB/s")
    if best.vs_torch:
        parts.append(compared(best.vs_torch, "torch"))
    return ", ".join(parts)


def _ms(ms: float) -> str:
    return f"{ms * 1000:.1f} µs" if ms < 1 else f"{ms:.3f} ms"


def _fmt(x, spec: str) -> str:
    return format(x, spec) if x is not None else ""


def bench_table(rows) -> str:
    """The bench results as an HTML table; a wrong version shows its verdict instead of times.

    The ratio columns read "× faster than": ``1.64×``, or below 1 ``0.31× (3.23× slower)``.
    """
    from .benchmark import times_faster

    head = ["version", "size", "time (median)", "IQR", "GB/s", "% peak", "torch", "× faster than torch",
            "× faster than torch.compile"]
    body = []
    for r in rows:
        if not r.timing:
            body.append(f"<tr><td>{html.escape(r.name)}</td><td>{r.size}</td><td colspan='{len(head) - 2}'>"
                        f"not timed: {html.escape('; '.join(r.verdict.reasons))}</td></tr>")
            continue
        cells = [html.escape(r.name), str(r.size), _ms(r.timing.median), _ms(r.timing.iqr), _fmt(r.gbps, ".1f"),
                 _fmt(r.pct_peak, ".0f"), _ms(r.torch_timing.median) if r.torch_timing else "",
                 times_faster(r.vs_torch), times_faster(r.vs_compile)]
        body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    return ("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(body) + "</table>")


def bench_figure(rows, title: str) -> bytes:
    """A bar chart of each timed version beside torch (GB/s when every row has a byte count); PNG bytes.

    Uses ``matplotlib.figure.Figure`` directly: pyplot is not thread-safe and would switch the
    notebook's backend.
    """
    from matplotlib.figure import Figure

    timed = [r for r in rows if r.timing]
    bw = all(r.gbps for r in timed)
    bars = [(f"{r.name} @ {r.size}", r.gbps if bw else r.timing.median, "tab:blue") for r in timed]
    by_size = {r.size: r for r in timed}  # torch is timed beside every row; one bar per size is enough
    for size, r in by_size.items():
        if r.torch_timing:
            bars.append((f"torch @ {size}", r.torch_gbps if bw else r.torch_timing.median, "0.45"))
        if r.compiled_timing:
            gb = r.bytes_moved / (r.compiled_timing.median * 1e-3) / 1e9 if bw else r.compiled_timing.median
            bars.append((f"torch.compile @ {size}", gb, "0.7"))
    fig = Figure(figsize=(6.5, 1.2 + 0.4 * len(bars)))
    ax = fig.subplots()
    ax.barh([b[0] for b in bars], [b[1] for b in bars], color=[b[2] for b in bars])
    ax.invert_yaxis()
    peak = (timed[0].peak or {}).get("copy_gbps") if timed else None
    if bw and peak:
        ax.axvline(peak, color="red", linestyle=":", label=f"measured copy peak {peak:.0f} GB/s")
        ax.legend(fontsize=8)
    ax.set_xlabel("GB/s (higher is better)" if bw else "median time, ms (lower is better)")
    ax.set_title(title)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def ab_status(v, label: str, size: int) -> str:
    """One line: the current version is faster / the same / slower than the earlier one."""
    if v.verdict == "same":
        return f"A/B @ {size}: current is the same as {label} ({v.speedup:.2f}x, inside the noise)"
    return f"A/B @ {size}: current is {v.verdict} than {label} ({v.speedup:.2f}x)"


def ab_table(v, label: str, size: int) -> str:
    rows = [(f"A: {label}", v.a), ("B: current", v.b)]
    body = "".join(f"<tr><td>{html.escape(n)}</td><td>{_ms(t.median)}</td><td>{_ms(t.iqr)}</td><td>{len(t.samples)}</td></tr>"
                   for n, t in rows)
    return (f"<div><b>{html.escape(ab_status(v, label, size))}</b><table><tr><th>version</th><th>median</th>"
            f"<th>IQR</th><th>samples</th></tr>{body}</table></div>")


# ---------------------------------------------------------------------- watching the file


class Watcher:
    """Calls ``on_change(text)`` from a daemon thread when the file's text on disk changes.

    Editors save by writing a temporary file and renaming it; watching the folder (filtered to the
    file) sees both that and in-place writes. Besides the events, the text is compared every
    ``timeout_ms``, so a change made before the watch was set up is not missed.

    Args:
        path: The file.
        on_change: Called with the new text; exceptions are kept in ``errors``, the watch goes on.
        known: Returns the text the caller already has (its own saves): equal text is no change.
        force_polling: ``watchfiles``' polling instead of inotify (network or odd file systems);
            ``None`` lets watchfiles decide (``WATCHFILES_FORCE_POLLING`` also works).
        poll_delay_ms: Polling interval when polling.
        timeout_ms: The periodic comparison's interval.
    """

    def __init__(self, path: str | Path, on_change, *, known=lambda: None, force_polling: bool | None = None,
                 poll_delay_ms: int = 100, timeout_ms: int = 1000):
        self.path = Path(path).absolute()
        self.on_change, self.known = on_change, known
        self.force_polling, self.poll_delay_ms, self.timeout_ms = force_polling, poll_delay_ms, timeout_ms
        self.ready = threading.Event()  # set once the watch is set up (its first wake-up)
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._seen: str | None = None  # the last text reported, so an unchanged file is reported once

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> Watcher:
        if not self.alive:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=f"jitlab-watch-{self.path.name}", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching; waits up to ``timeout`` seconds for the thread to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _is_ours(self, change, path: str) -> bool:
        # Only the folder's direct children are reported (recursive=False); comparing names is
        # immune to symlinked folders being reported by their other spelling.
        return Path(path).name == self.path.name

    def _run(self) -> None:
        import watchfiles

        try:
            for _ in watchfiles.watch(self.path.parent, watch_filter=self._is_ours, stop_event=self._stop,
                                      rust_timeout=self.timeout_ms, yield_on_timeout=True, step=50,
                                      force_polling=self.force_polling, poll_delay_ms=self.poll_delay_ms,
                                      recursive=False):
                self.ready.set()
                self._compare()
        except Exception as e:  # e.g. the folder was deleted: keep the reason, end the watch
            self.errors.append(e)
        finally:
            self.ready.set()

    def _compare(self) -> None:
        text = self._settled_text()
        if text is None:  # between an editor's delete and rename, or deleted: wait for the next change
            return
        if text == self.known() or text == self._seen:
            self._seen = text
            return
        self._seen = text
        try:
            self.on_change(text)
        except Exception as e:  # a failing callback must not end the watch; the error is kept
            self.errors.append(e)

    def _settled_text(self, pause: float = 0.05, tries: int = 20) -> str | None:
        """The file's text once two reads ``pause`` apart agree: a writer that truncates and then
        writes (``Path.write_text``, many editors) is not caught half-way, as an empty file."""
        last = None
        for _ in range(tries):
            try:
                text = self.path.read_text(encoding="utf-8", errors="surrogateescape")
            except OSError:
                return None
            if text == last:
                return text
            last = text
            time.sleep(pause)
        return last


# ---------------------------------------------------------------------- the panel

EDITOR_CSS = """<style>
.jitlab-editor textarea { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace;
  font-size: 13px; line-height: 1.35; white-space: pre; tab-size: 4; }
.jitlab-status { font-family: ui-monospace, Menlo, Consolas, monospace; }
/* A long status (a FAIL with its reason) wraps instead of being clipped at the panel's edge. */
.widget-label.jitlab-status { white-space: pre-wrap; overflow-wrap: anywhere; overflow: visible;
  text-overflow: clip; height: auto; line-height: 1.4; }
.jitlab-result pre { font-size: 12px; max-height: 30em; overflow: auto; }
.jitlab-result table { border-collapse: collapse; font-size: 12px; }
.jitlab-result td, .jitlab-result th { padding: 2px 8px; border-bottom: 1px solid #ddd; text-align: right; }
</style>"""


class Playground:
    """The panel: editor, Save/Build/Check/Bench buttons, history A/B, status line, output and plot.

    Steps run one at a time on a worker thread (buttons disabled meanwhile, the status line ticking
    the elapsed time); errors in a step are shown, never lost. With ``watch=True`` a change of the
    file on disk reloads the editor, rebuilds and re-checks (the panel's own saves are ignored).

    Args:
        path: A ``.cu`` or ``.cpp`` snippet file.
        watch: Hot reload on changes made in another editor.
        device: ``"cuda"`` or ``"cpu"``; default by extension.
        force_polling: Passed to :class:`Watcher`.
        compile_reference: Passed to :class:`Session`.

    DOM classes: ``jitlab-playground`` (the panel), ``jitlab-editor``, ``jitlab-status``,
    ``jitlab-result`` (compile log / checker table / bench table), ``jitlab-plot``.
    """

    def __init__(self, path: str | Path, *, watch: bool = True, device: str | None = None,
                 force_polling: bool | None = None, compile_reference: bool = True):
        self.session = Session(path, device=device, compile_reference=compile_reference)
        self.last: StepResult | None = None
        self.reloads = 0  # hot reloads started (for tests and curious users)
        self._lock = threading.Lock()
        self._busy = False
        self._pending: str | None = None
        self._worker: threading.Thread | None = None
        self._make_widgets()
        self.watcher = None
        if watch:
            self.watcher = Watcher(self.session.path, self._on_disk_change, known=lambda: self.session.text,
                                   force_polling=force_polling).start()

    # ------------------------------------------------------------------ widgets

    def _make_widgets(self) -> None:
        import ipywidgets as w

        s = self.session
        rows = min(max(s.text.count("\n") + 2, 12), 40)
        self.editor = w.Textarea(value=s.text, rows=rows, layout=w.Layout(width="100%"))
        self.editor.add_class("jitlab-editor")
        self.buttons = {name: w.Button(description=name, tooltip=tip) for name, tip in (
            ("Save", "save the editor's text (the previous version goes to the history)"),
            ("Build", "save, then build"), ("Check", "save, build, check against the torch reference"),
            ("Bench", "save, build, check, then time beside torch"))}
        self.versions = w.Dropdown(description="A/B vs", layout=w.Layout(width="24em"))
        self.buttons["A/B"] = w.Button(description="A/B", tooltip="time the current version against the chosen one")
        for name, step in (("Save", "save"), ("Build", "build"), ("Check", "check"), ("Bench", "bench"), ("A/B", "compare")):
            self.buttons[name].on_click(lambda _b, step=step: self.run(step))
        self.status = w.Label(value=f"{s.path.name}: ready ({s.device})", layout=w.Layout(width="100%"))
        self.status.add_class("jitlab-status")
        self.result = w.HTML(value="")
        self.result.add_class("jitlab-result")
        self.plot = w.Image(format="png", layout=w.Layout(display="none"))
        self.plot.add_class("jitlab-plot")
        title = w.HTML(f"{EDITOR_CSS}<b>{html.escape(s.path.name)}</b> <code>{html.escape(str(s.path))}</code>")
        bar = w.HBox([*(self.buttons[n] for n in ("Save", "Build", "Check", "Bench")), self.versions, self.buttons["A/B"]])
        self.widget = w.VBox([title, self.editor, bar, self.status, self.result, self.plot])
        self.widget.add_class("jitlab-playground")
        self._widgets = [self.widget, title, self.editor, bar, *self.buttons.values(), self.versions, self.status,
                         self.result, self.plot]
        self._refresh_versions()

    def _refresh_versions(self) -> None:
        options = [(label, str(p)) for label, p in self.session.versions()]
        if [o[1] for o in options] != [o[1] for o in self.versions.options]:
            chosen = self.versions.value
            self.versions.options = options
            # Keep the user's choice; otherwise the newest version (ipywidgets leaves no selection).
            keep = [v for _, v in options if v == chosen]
            self.versions.value = keep[0] if keep else (options[0][1] if options else None)
        self.buttons["A/B"].disabled = self._busy or not options

    def _set_busy(self, busy: bool) -> None:
        self._busy = busy
        for b in self.buttons.values():
            b.disabled = busy
        self.versions.disabled = busy
        if not busy:
            self._refresh_versions()

    def _repr_mimebundle_(self, **kwargs):
        """``jitlab.playground(path)`` as a cell's last line shows the panel."""
        return self.widget._repr_mimebundle_(**kwargs)

    # ------------------------------------------------------------------ running steps

    @property
    def busy(self) -> bool:
        return self._busy

    def run(self, step: str) -> bool:
        """Start ``step`` on the worker thread; returns ``False`` (and does nothing) while busy.

        Steps: ``"save"``, ``"build"``, ``"check"``, ``"bench"``, ``"compare"`` (against the dropdown's
        version) and ``"reload"`` (rebuild and re-check after a change on disk).
        """
        if step not in STEPS:
            raise ValueError(f"unknown step {step!r}; one of {', '.join(STEPS)}")
        with self._lock:
            if self._busy:
                return False
            self._start(step)
        return True

    def _start(self, step: str) -> None:
        """Start the worker; the caller holds the lock."""
        self._set_busy(True)
        self._worker = threading.Thread(target=self._work, args=(step,), name=f"jitlab-playground-{step}", daemon=True)
        self._worker.start()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the running step (and a queued reload); returns ``True`` once idle."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            worker = self._worker
            if worker is None or not worker.is_alive():
                return not self._busy
            worker.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if deadline is not None and time.monotonic() >= deadline:
                return not self._busy

    def _work(self, step: str) -> None:
        """The worker: run the step, then any reload queued meanwhile, then re-enable the buttons."""
        while step:
            self._show(self._run_step(step))
            with self._lock:
                step, self._pending = self._pending, None
                if step is None:
                    self._set_busy(False)

    def _run_step(self, step: str) -> StepResult:
        ticker = _Ticker(self._set_status)
        result = None
        try:
            for phase, fn in self._phases(step):
                ticker.phase = phase
                result = fn()
                if not result.ok:
                    break
        except Exception as e:  # shown in the panel: a thread's exception would otherwise vanish
            result = StepResult(step, False, f"error in {step}: {type(e).__name__}: {_first_line(e)}",
                                log=traceback.format_exc())
        finally:
            ticker.stop()
        return result

    def _phases(self, step: str) -> list:
        """``(status while running, call)`` for each part of a step, saving the editor's edits first."""
        s = self.session
        text = self.editor.value
        save = [("saving…", lambda: s.save(text))] if step == "save" or (step != "reload" and s.is_edited(text)) else []
        if step == "reload":
            return [("building…", s.build)] + ([("checking…", s.check)] if s.has_reference else [])
        version = self.versions.value
        work = {"save": [], "build": [("building…", s.build)], "check": [("building…", s.build), ("checking…", s.check)],
                "bench": [("building…", s.build), ("checking and timing…", s.bench)],
                "compare": [("building…", s.build), ("A/B timing…", lambda: s.compare(version))]}[step]
        return save + work

    def _set_status(self, text: str) -> None:
        self.status.value = text

    def _show(self, r: StepResult) -> None:
        self.last = r
        self.status.value = r.status
        self.result.value = r.html or _log_html(r)
        if r.png:
            self.plot.value = r.png
        self.plot.layout.display = None if r.png else "none"

    # ------------------------------------------------------------------ hot reload

    def _on_disk_change(self, text: str) -> None:
        """Called by the watcher thread with the file's new text."""
        if self.session.is_edited(self.editor.value):
            # Never overwrite unsaved edits: Build saves them, and the disk version goes to history.
            self.status.value = (f"{self.session.path.name} changed on disk; the editor has unsaved edits, kept "
                                 f"(Build saves them, the disk version goes to the history)")
            return
        self.session.text = text
        self.editor.value = text
        self.reloads += 1
        with self._lock:
            if self._busy:
                self._pending = "reload"  # run after the current step, by the same worker
            else:
                self._start("reload")

    def stop(self) -> None:
        """Stop watching the file (the panel keeps working)."""
        if self.watcher is not None:
            self.watcher.stop()

    def close(self) -> None:
        """Stop watching and close the widgets."""
        self.stop()
        for w in self._widgets:
            w.close()


def _log_html(r: StepResult) -> str:
    """A step's log under a "log" toggle: folded after a success (the status line says it all), open
    after a failure (the compiler's message is what to read)."""
    if not r.log.strip():
        return ""
    return (f"<details{'' if r.ok else ' open'}><summary>log</summary>"
            f"<pre>{html.escape(r.log)}</pre></details>")


class _Ticker:
    """Refreshes the status line with the current phase and its elapsed time until stopped."""

    def __init__(self, show, interval: float = TICK_S):
        self._show, self._interval = show, interval
        self._phase, self._t0 = "", time.perf_counter()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jitlab-ticker", daemon=True)
        self._thread.start()

    @property
    def phase(self) -> str:
        return self._phase

    @phase.setter
    def phase(self, text: str) -> None:
        self._phase, self._t0 = text, time.perf_counter()
        self._show(f"{text} 0.0 s")

    def _run(self) -> None:
        while not self._done.wait(self._interval):
            if self._phase:
                self._show(f"{self._phase} {time.perf_counter() - self._t0:.1f} s")

    def stop(self) -> None:
        """Stop ticking; returns once the last tick is written, so the final status is not overwritten."""
        self._done.set()
        self._thread.join()


def playground(path: str | Path, *, watch: bool = True, device: str | None = None,
               force_polling: bool | None = None, compile_reference: bool = True) -> Playground:
    """Open the playground panel for one snippet (shown when it is a cell's last line).

    Args:
        path: A ``.cu`` or ``.cpp`` snippet file, e.g. ``"kernels/saxpy.cu"``.
        watch: Reload, rebuild and re-check when the file changes on disk.
        device: ``"cuda"`` or ``"cpu"``; default by extension.
        force_polling: Poll the file instead of inotify (odd file systems).
        compile_reference: Also time ``torch.compile`` of the reference in Bench (GPU only).

    Returns:
        The :class:`Playground`; ``.session`` is its widget-free controller, ``.close()`` ends it.
        Opening a file's panel again (re-running the cell) stops the previous panel's watcher, so
        one change is not built twice.
    """
    key = Path(path).absolute()
    old = _open.pop(key, None)
    if old is not None:
        old.stop()
    _open[key] = pg = Playground(path, watch=watch, device=device, force_polling=force_polling,
                                 compile_reference=compile_reference)
    return pg


_open: dict[Path, Playground] = {}  # the latest panel per file, from playground()
