"""``jitlab.playground(path)``: the notebook panel over a :class:`~jitlab.notebook.session.Session`:
an editor, Save/Build/Check/Bench/A/B buttons, a status line, the output and the plot.

Buttons run session steps on one worker thread while the status line ticks the elapsed time;
results are written to the widgets from that thread. A :class:`~jitlab.notebook.watch.Watcher`
reloads the panel when the file changes on disk.
"""

from __future__ import annotations

import html
import os
import threading
import time
import traceback
from pathlib import Path

from jitlab.jit.sources import locate
from jitlab.notebook.editor import Editor
from jitlab.notebook.session import STEPS, Session, StepResult, first_line
from jitlab.notebook.watch import Watcher

TICK_S = 0.1  # status refresh while a step runs: fast enough to look alive, cheap to sync


EDITOR_CSS = """<style>
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

    The editor is CodeMirror (:class:`~jitlab.notebook.editor.Editor`): Ctrl/Cmd-S saves, Shift-Enter
    builds and checks, and a compile error's lines are marked.

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
        self.editor = Editor(s.text, language="cuda" if s.device == "cuda" else "cpp", height=f"{rows * 1.35 + 0.5:.1f}em")
        self.editor.add_class("jitlab-editor")
        self.editor.on_save(lambda _e: self.run("save"))
        # Shift-Enter: what a notebook user expects of it, run the code: build, and check when there is a reference.
        self.editor.on_build(lambda _e: self.run("check" if self.session.has_reference else "build"))
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
        own = getattr(self.widget, "_repr_mimebundle_", None)
        if own is not None:  # ipywidgets 8
            return own(**kwargs)
        # ipywidgets 7 (Colab's 7.7.1) displays through _ipython_display_: the bundle that one publishes
        return {"text/plain": repr(self.widget)[:110],
                "application/vnd.jupyter.widget-view+json": {"version_major": 2, "version_minor": 0,
                                                             "model_id": self.widget.model_id}}

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
            result = StepResult(step, False, f"error in {step}: {type(e).__name__}: {first_line(e)}",
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
        self.result.value = r.html or log_html(r)
        if r.step != "save":  # a build or check says where the errors are now (none: the marks go)
            self.editor.error_lines = r.error_lines
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


def log_html(r: StepResult) -> str:
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
    key = Path(os.path.abspath(locate(path)))
    old = _open.pop(key, None)
    if old is not None:
        old.stop()
    _open[key] = pg = Playground(path, watch=watch, device=device, force_polling=force_polling,
                                 compile_reference=compile_reference)
    return pg


_open: dict[Path, Playground] = {}  # the latest panel per file, from playground()
