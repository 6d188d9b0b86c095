"""The playground: its widget-free Session, the ipywidgets panel and hot reload (CPU, real builds).

Every test builds the kernel-only C++ snippet ``add2_cpu.cpp`` (a fraction of a second) into a
fresh cache; nothing compiles torch headers.
"""

from __future__ import annotations

import os
import re
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab import snippets
from jitlab.judge.benchmark import BenchResult
from jitlab.judge.checker import Verdict
from jitlab.judge.timing import Timing
from jitlab.notebook.panel import Playground
from jitlab.notebook.report import bench_status, bench_table
from jitlab.notebook.session import Session
from jitlab.notebook.watch import Watcher

RIGHT = "c[i] = a[i] + b[i];"
WRONG = "c[i] = a[i] - b[i];"
BROKEN = "c[i] = a[i] - ;"


def until(pred, timeout: float = 60.0) -> bool:
    """Poll ``pred`` until it holds or ``timeout`` seconds pass (generous: 2 shared cores)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return bool(pred())


def editor_save(path: Path, text: str) -> None:
    """Save the way editors do: a temporary file in the same folder renamed over the original."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".edit-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@pytest.fixture
def add2(cache, kernel_copy) -> Path:
    """A copy of kernels/add2_cpu.cpp with its reference, and a fresh build cache."""
    kernel_copy("add2_cpu.ref.py")
    return kernel_copy("add2_cpu.cpp")


@pytest.fixture
def panel(add2):
    """A panel without the file watcher."""
    pg = Playground(add2, watch=False)
    yield pg
    pg.wait(120)
    pg.close()


@pytest.fixture
def watched(add2):
    """A panel watching its file."""
    pg = Playground(add2, watch=True)
    assert pg.watcher.ready.wait(30), "the watcher never started"
    yield pg
    pg.wait(120)
    pg.close()


def click(pg: Playground, name: str, timeout: float = 120.0) -> None:
    pg.buttons[name].click()
    assert pg.wait(timeout), f"{name} did not finish in {timeout} s"


# ---------------------------------------------------------------------- Session (no widgets)


def test_build_then_cache_hit(add2):
    """The first build compiles ("built in N s"), the second finds it in the cache."""
    s = Session(add2)
    first, second = s.build(), s.build()
    assert first.ok and first.status.startswith("built in ") and "add2_cpu" in first.status
    assert second.ok and second.status.startswith("cache hit")
    assert s.device == "cpu" and s.module is not None


@pytest.mark.slow
def test_check_survives_a_crashing_kernel(add2):
    """Check runs in a worker: a kernel that segfaults ends the worker, not this process."""
    s = Session(add2)
    bad = s.text.replace("c[i] = a[i] + b[i];", "c[i + (int64_t(1) << 40)] = a[i] + b[i];")
    assert bad != s.text
    s.save(bad)
    r = s.check()
    assert not r.ok and r.status.startswith("FAIL [crashed]") and "SIGSEGV" in r.status
    s.save(bad.replace("c[i + (int64_t(1) << 40)]", "c[i]"))
    assert s.check().ok  # a fresh worker; this process never noticed


def test_check_in_process_when_asked(add2):
    """Session(isolate=False) checks in this process, and the shipped add2 passes."""
    r = Session(add2, isolate=False).check()
    assert r.ok and r.status.startswith("PASS")


@pytest.mark.slow
def test_check_passes(add2):
    """The shipped kernel passes every size in the ref file."""
    r = Session(add2).check()
    assert r.ok and r.status.startswith("PASS") and "1000003" in r.status
    assert "PASS" in r.html and all(v.passed for v in r.value)


def test_wrong_kernel_fails_with_reasons(add2):
    """a - b instead of a + b: FAIL with the number of wrong elements and the got/expected table."""
    s = Session(add2)
    s.save(s.text.replace(RIGHT, WRONG))
    r = s.check()
    assert not r.ok and r.status.startswith("FAIL") and "elements differ" in r.status
    assert "<table>" in r.html and "expected" in r.html
    assert "FAIL" in r.log and "index" in r.log


def test_compile_error_names_file_and_line(add2):
    """A syntax error: the status names file:line, the log shows the source line and a caret."""
    s = Session(add2)
    s.save(s.text.replace(RIGHT, BROKEN))
    r = s.build()
    line = s.text.splitlines().index("        " + BROKEN) + 1
    assert not r.ok and f"compile error at add2_cpu.cpp:{line}" in r.status
    assert f"add2_cpu.cpp:{line}" in r.log and BROKEN in r.log and "^" in r.log
    assert s.check().status == r.status  # check builds first and stops at the error


def test_save_keeps_previous_version(add2):
    """Saving replaces the file atomically and keeps the old text in the history."""
    s = Session(add2)
    old = s.text
    r = s.save(old.replace(RIGHT, WRONG))
    assert r.ok and "kept in history" in r.status
    assert add2.read_text() == old.replace(RIGHT, WRONG)
    [kept] = snippets.history(add2)
    assert kept.read_text() == old
    assert s.versions() == [(s.versions()[0][0], kept)] and "(" in s.versions()[0][0]
    assert "unchanged" in s.save(add2.read_text()).status and len(snippets.history(add2)) == 1


def test_compare_gives_a_verdict(add2):
    """A/B of the current version against a history version says faster, same or slower."""
    s = Session(add2)
    s.save(s.text.replace(RIGHT, "c[i] = b[i] + a[i];"))
    [(label, old)] = s.versions()
    r = s.compare(old)
    assert r.ok, r.status
    assert re.search(rf"current is (faster than|the same as|slower than) {re.escape(label)}|machine busy \(", r.status)
    assert r.value.verdict in ("faster", "same", "slower", "busy") and r.value.a.samples and r.value.b.samples


def test_compare_never_times_a_wrong_version(add2):
    """An earlier wrong version is checked first and reported, not timed."""
    s = Session(add2)
    right = s.text
    s.save(right.replace(RIGHT, WRONG))
    s.save(right)
    label, old = s.versions()[0]  # newest first: the wrong one
    assert WRONG in old.read_text()
    r = s.compare(old)
    assert not r.ok and r.status.startswith(f"FAIL: not timed, {label} is wrong")
    assert r.value is None


def test_compare_without_history_says_so(add2):
    """No earlier version yet: the A/B step says how to get one."""
    r = Session(add2).compare(None)
    assert not r.ok and "no earlier version" in r.status


def test_missing_reference_names_the_file_and_format(add2):
    """Without NAME.ref.py, Check names the missing file and shows the smallest reference."""
    (add2.parent / "add2_cpu.ref.py").unlink()
    r = Session(add2).check()
    assert not r.ok and r.status.startswith("no reference: add2_cpu.ref.py is missing")
    assert "def inputs(size, seed, device)" in r.log and "def run(m, inp)" in r.log and "m.add2_cpu(" in r.log


def test_missing_reference_calls_a_function_the_snippet_has(tmp_path):
    """The template's run() calls the snippet's own kernel with its arguments, not a function named after the file."""
    p = tmp_path / "my_snippet.cpp"
    p.write_text("void scale(float* y, const float* x, float a, int n) { }\n")
    r = Session(p).check()
    assert "m.scale(y, inp['x'], 1.0, n)" in r.log and "m.my_snippet(" not in r.log


def test_bench_on_cpu_gives_table_and_plot(add2):
    """Bench of a C++ kernel on the CPU: checked, timed beside torch, a table and a PNG plot."""
    r = Session(add2).bench()
    assert r.ok and r.status.startswith("bench: original @ 1000003")
    assert re.search(r"\d× (faster|slower) than torch eager, 1 thread|no verdict", r.status), r.status
    assert "<table>" in r.html and "× faster than torch" in r.html and "throughput" in r.html
    assert r.png.startswith(b"\x89PNG")
    assert r.value[0].timing.device == "cpu" and r.value[0].torch_timing is not None


def test_bench_does_not_time_a_wrong_kernel(add2):
    """A wrong kernel is reported by Bench, without times or a plot."""
    s = Session(add2)
    s.save(s.text.replace(RIGHT, WRONG))
    r = s.bench()
    assert not r.ok and r.status.startswith("FAIL: not timed") and r.png is None
    assert r.value[0].timing is None


def test_only_snippet_files(tmp_path):
    """A missing file or another extension is refused with the fix."""
    with pytest.raises(jitlab.SnippetError, match="existing"):
        Session(tmp_path / "nope.cu")
    (tmp_path / "x.py").write_text("")
    with pytest.raises(jitlab.SnippetError, match=r"\.cu/\.cpp"):
        Session(tmp_path / "x.py")


def test_cu_snippet_runs_on_cuda(tmp_path):
    """The device follows the extension: .cu on cuda, .cpp on cpu."""
    (tmp_path / "k.cu").write_text("__global__ void k() {}\n")
    (tmp_path / "k.cpp").write_text("void k() {}\n")
    assert Session(tmp_path / "k.cu").device == "cuda" and Session(tmp_path / "k.cpp").device == "cpu"


# ---------------------------------------------------------------------- the panel


def test_panel_dom_contract(panel):
    """Buttons Build/Check/Bench, and the DOM classes the browser test looks for."""
    names = [b.description for b in panel.buttons.values()]
    assert {"Build", "Check", "Bench"} <= set(names)
    assert "jitlab-playground" in panel.widget._dom_classes
    assert "jitlab-editor" in panel.editor._dom_classes
    assert "jitlab-status" in panel.status._dom_classes
    assert "jitlab-result" in panel.result._dom_classes
    assert panel.editor.value == panel.session.path.read_text()


def test_lazy_export_and_display(add2):
    """jitlab.playground(path) returns the panel, which displays as a widget (last line of a cell)."""
    assert "playground" in jitlab.__all__
    assert callable(jitlab.playground)
    pg = jitlab.playground(add2, watch=False)
    try:
        assert isinstance(pg, Playground)
        assert "application/vnd.jupyter.widget-view+json" in pg._repr_mimebundle_()
    finally:
        pg.close()


def test_build_button_updates_status(panel):
    """Build: "built in", then "cache hit"; the buttons come back enabled."""
    click(panel, "Build")
    assert panel.status.value.startswith("built in ")
    click(panel, "Build")
    assert panel.status.value.startswith("cache hit")
    assert not any(b.disabled for n, b in panel.buttons.items() if n != "A/B")


def test_check_button_shows_pass_and_table(panel):
    """Check: PASS in the status line, the checker's HTML in the output area."""
    click(panel, "Check")
    assert "PASS" in panel.status.value and "PASS" in panel.result.value


def test_edit_then_check_saves_and_fails(panel, add2):
    """Editing the text area then Check saves the text (old version to history) and shows FAIL."""
    old = add2.read_text()
    panel.editor.value = old.replace(RIGHT, WRONG)
    click(panel, "Check")
    assert "FAIL" in panel.status.value and "<table>" in panel.result.value
    assert add2.read_text() == old.replace(RIGHT, WRONG)
    assert [p.read_text() for p in snippets.history(add2)] == [old]
    assert [v for _, v in panel.versions.options] == [str(snippets.history(add2)[0])]


def test_compile_error_log_in_output(panel, add2):
    """A compile error: the status names it, the output shows file:line and the caret."""
    panel.editor.value = add2.read_text().replace(RIGHT, BROKEN)
    click(panel, "Build")
    assert "compile error at add2_cpu.cpp:" in panel.status.value
    assert re.search(r"add2_cpu\.cpp:\d+:\d+: error", panel.result.value) and "^" in panel.result.value


def _bench_row(torch_samples, load=0.2):
    """add2_cpu's row with torch's samples given: 1 ms ± 2 % for the kernel, timed with this load average."""
    mine = Timing([0.98, 1.0, 1.02, 1.0], device="cpu", load=load, cores=2, threads=1)
    return BenchResult("original", 1000003, Verdict("add2_cpu/original", []), mine,
                       Timing(torch_samples, device="cpu", load=load, cores=2, threads=1), bytes_moved=12_000_036)


def test_bench_status_gives_no_verdict_on_noise_or_a_busy_machine():
    """The panel's bench status and table say 'no verdict' for overlapping timings and on a busy machine."""
    noisy = _bench_row([0.8, 1.0, 1.3, 1.1])
    assert "within noise of torch eager, 1 thread: no verdict" in bench_status([noisy])
    assert "within noise: no verdict" in bench_table([noisy]) and "12 GB/s" in bench_table([noisy])
    busy = _bench_row([2.0, 2.1, 1.9, 2.0], load=6.5)
    assert "machine busy: no verdict against torch eager, 1 thread (load 6.5 on 2 cores)" in bench_status([busy])
    assert "2.00× faster than torch eager, 1 thread" in bench_status([_bench_row([2.0, 2.1, 1.9, 2.0])])


def test_bench_button_shows_plot(panel):
    """Bench: timing table in the output, the plot shown; a later Check hides the plot again."""
    assert panel.plot.layout.display == "none"
    click(panel, "Bench")
    assert panel.status.value.startswith("bench: ") and "× faster than torch" in panel.result.value
    assert bytes(panel.plot.value).startswith(b"\x89PNG") and panel.plot.layout.display != "none"
    click(panel, "Check")
    assert panel.plot.layout.display == "none"


def test_ab_button_compares_with_chosen_version(panel, add2):
    """The dropdown lists the history; A/B prints faster / same / slower against the chosen one."""
    assert panel.buttons["A/B"].disabled  # nothing to compare with yet
    panel.editor.value = add2.read_text().replace(RIGHT, "c[i] = b[i] + a[i];")
    click(panel, "Save")
    assert len(panel.versions.options) == 1 and not panel.buttons["A/B"].disabled
    click(panel, "A/B")
    assert re.search(r"current is (faster than|the same as|slower than)|machine busy \(", panel.status.value), panel.status.value
    assert "<table>" in panel.result.value


def test_buttons_disabled_while_busy_and_timer_ticks(panel, monkeypatch):
    """While a step runs: buttons disabled, other clicks ignored, the elapsed time ticks."""
    gate = threading.Event()
    build = panel.session.build
    monkeypatch.setattr(panel.session, "build", lambda: (gate.wait(30), build())[1])
    panel.buttons["Build"].click()
    try:
        assert all(b.disabled for b in panel.buttons.values()) and panel.busy

        def elapsed():
            m = re.fullmatch(r"building… (\d+\.\d) s", panel.status.value)
            return float(m.group(1)) if m else -1.0

        assert until(lambda: elapsed() >= 0.3, 10), panel.status.value
        assert panel.run("check") is False and panel.status.value.startswith("building…")
    finally:
        gate.set()
    assert panel.wait(60)
    assert panel.status.value.startswith("built in ") and not panel.buttons["Build"].disabled


def test_worker_errors_are_shown(panel, monkeypatch):
    """An exception in the worker thread lands in the status line and the output, and frees the buttons."""

    def boom():
        raise RuntimeError("the checker broke")

    monkeypatch.setattr(panel.session, "check", boom)
    click(panel, "Check")
    assert panel.status.value == "error in check: RuntimeError: the checker broke"
    assert "Traceback" in panel.result.value and not panel.busy
    assert not panel.buttons["Check"].disabled


# ---------------------------------------------------------------------- hot reload


@pytest.mark.slow
def test_hot_reload_rebuilds_and_rechecks(watched, add2):
    """A save from another editor reloads the text, rebuilds and re-checks: FAIL, then PASS."""
    right = add2.read_text()
    editor_save(add2, right.replace(RIGHT, WRONG))
    assert until(lambda: not watched.busy and "FAIL" in watched.status.value), watched.status.value
    assert watched.editor.value == right.replace(RIGHT, WRONG) and watched.reloads == 1
    editor_save(add2, right)
    assert until(lambda: not watched.busy and "PASS" in watched.status.value), watched.status.value
    assert watched.editor.value == right and watched.reloads == 2
    assert watched.watcher.errors == []


@pytest.mark.slow
def test_own_saves_are_not_reloaded(watched, add2):
    """The panel's own save does not come back as a change on disk."""
    watched.editor.value = add2.read_text().replace(RIGHT, "c[i] = b[i] + a[i];")
    click(watched, "Build")
    time.sleep(2.5)  # longer than the watcher's event delay and its periodic comparison
    assert watched.reloads == 0 and watched.status.value.startswith("built in ")


def test_unsaved_edits_are_not_overwritten(watched, add2):
    """A change on disk while the editor holds unsaved edits keeps the edits and says so."""
    mine = add2.read_text().replace(RIGHT, "c[i] = b[i] + a[i];")
    watched.editor.value = mine
    editor_save(add2, add2.read_text().replace(RIGHT, WRONG))
    assert until(lambda: "changed on disk" in watched.status.value, 30), watched.status.value
    assert watched.editor.value == mine and watched.reloads == 0


@pytest.mark.slow
def test_stop_ends_the_watcher(watched, add2):
    """stop() ends the watcher thread; later changes are not picked up."""
    watched.stop()
    assert not watched.watcher.alive
    editor_save(add2, add2.read_text().replace(RIGHT, WRONG))
    time.sleep(1.5)
    assert watched.reloads == 0 and watched.editor.value != add2.read_text()


def test_reopening_stops_the_previous_watcher(add2):
    """Re-running the cell (a second playground for the file) stops the first panel's watcher."""
    first = jitlab.playground(add2)
    second = jitlab.playground(add2)
    try:
        assert first.watcher.ready.wait(30) and second.watcher.ready.wait(30)
        assert not first.watcher.alive and second.watcher.alive
    finally:
        first.close()
        second.close()
    assert not second.watcher.alive


def test_watcher_polling_catches_a_change(tmp_path):
    """With polling forced (odd file systems) an in-place write is reported once, with its text."""
    f = tmp_path / "k.cpp"
    f.write_text("void k() {}\n")
    seen = []
    w = Watcher(f, seen.append, known=lambda: "void k() {}\n", force_polling=True, timeout_ms=300).start()
    try:
        assert w.ready.wait(30)
        f.write_text("void k() { }\n")
        assert until(lambda: seen, 30)
        time.sleep(1.0)
        assert seen == ["void k() { }\n"]
    finally:
        w.stop()
    assert not w.alive


@pytest.mark.slow
def test_watcher_takes_the_text_before_an_own_save_for_no_change(tmp_path):
    """Mid-save (the caller already knows its new text, the file still holds the one it had), the watcher's
    periodic comparison reports nothing; the save's text is no change either; another writer's text is one."""
    f = tmp_path / "k.cpp"
    f.write_text("void k() {}\n")
    known = ["void k() {}\n"]
    seen = []
    w = Watcher(f, seen.append, known=lambda: known[0], force_polling=True, timeout_ms=200).start()
    try:
        known[0] = "void k() { return; }\n"  # the caller's own save begins: known first, then the write
        assert w.ready.wait(30)
        time.sleep(1.0)  # several periodic comparisons against the old text on disk
        assert seen == []
        f.write_text(known[0])
        time.sleep(1.0)
        assert seen == []
        f.write_text("void k() { k(); }\n")
        assert until(lambda: seen, 30)
        assert seen == ["void k() { k(); }\n"]
    finally:
        w.stop()


def test_build_log_sits_behind_a_toggle_folded_after_success():
    """A successful step's log is folded under "log"; a failed one's is open."""
    from jitlab.notebook.panel import log_html
    from jitlab.notebook.session import StepResult

    ok = log_html(StepResult("build", True, "built", log="[1/3] c++ -c ..."))
    bad = log_html(StepResult("build", False, "compile error", log="k.cpp:3:1: error: ..."))
    assert ok.startswith("<details><summary>log</summary>") and "[1/3] c++" in ok
    assert bad.startswith("<details open><summary>log</summary>") and "k.cpp:3:1: error" in bad
    assert log_html(StepResult("build", True, "built", log="  \n")) == ""


def test_check_after_build_reports_the_same_build(add2):
    """Build says "built in N s"; the Check after it (whose own build step is a cache hit of that very
    build) says the same, not "cache hit"."""
    s = Session(add2, isolate=False)
    built = s.build()
    assert built.status.startswith("built in ")
    assert s.build().status.startswith("cache hit")  # the panel's Check starts with a build step
    checked = s.check()
    assert checked.ok and f"({built.status.split(';')[0]})" in checked.status, (built.status, checked.status)


def test_a_path_from_notebooks_finds_the_projects_kernels(tmp_path, monkeypatch, ip):
    """From notebooks/, `kernels/k.cpp` is the project's ../kernels/k.cpp for the playground, load's
    sources and a %%cpp cell's folder; a file that exists nowhere is still refused."""
    from jitlab.jit.sources import collect_sources

    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "k.cpp").write_text("void k(float* y) { y[0] = 1; }\n")
    (tmp_path / "notebooks").mkdir()
    monkeypatch.chdir(tmp_path / "notebooks")
    assert Session("kernels/k.cpp").path == tmp_path / "kernels" / "k.cpp"
    assert collect_sources("kernels/k.cpp") == [tmp_path / "kernels" / "k.cpp"]
    with pytest.raises(jitlab.SnippetError, match="create it first"):
        Session("kernels/nope.cpp")
    ip.run_cell_magic("cpp", "k2", "void k2(float* y) { y[0] = 2; }")
    assert (tmp_path / "kernels" / "k2.cpp").is_file() and not (tmp_path / "notebooks" / "kernels").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_build_without_a_gpu_shows_each_kernels_resources(tmp_path, cache):
    """Build on a .cu the CPU emulator cannot run (inline PTX), without a GPU, compiles for
    config.DEFAULT_ARCHS and shows registers and shared memory per kernel and arch, open, above the folded log."""
    from jitlab import config

    (tmp_path / "k.cu").write_text("__global__ void k(float* y) { __shared__ float s[32]; s[threadIdx.x] = y[0]; "
                                   "asm volatile(\"\"); y[threadIdx.x] = s[31 - threadIdx.x]; }\n")  # no emulator
    r = Session(tmp_path / "k.cu").build()
    assert r.ok and "compile-only" in r.status
    assert all(re.search(rf"k \[{arch}\]: \d+ registers, 128 B shared", r.html) for arch in config.DEFAULT_ARCHS), r.html
    assert r.html.index('class="jitlab-resources"') < r.html.index("<details>")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path: Build uses the CPU emulator")
def test_without_a_gpu_build_of_an_unparsable_kernel_is_the_compilers_error_at_its_line(tmp_path, cache):
    """Build on lesson 00's planted mistake (no `;` after printf) shows the emulator's compiler's error at the
    statement's line, not "no __global__ kernel found"."""
    p = tmp_path / "hello_threads.cu"
    p.write_text((Path(__file__).parent / "fixtures" / "planted" / "hello_threads.cu").read_text())
    r = Session(p).build()
    assert not r.ok and r.status.startswith("compile error at hello_threads.cu:7:"), r.status
    assert "no __global__" not in r.status + (r.log or "")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_without_a_gpu_the_panel_runs_a_kernel_on_the_cpu_emulator(tmp_path, cache):
    """Build, Check and Bench on a kernel-only .cu without a GPU use the CPU emulator and say so; Bench
    checks but never times (the status says why), and A/B compares nothing."""
    (tmp_path / "neg.cu").write_text("__global__ void neg(float* y, int n) {\n"
                                     "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] = -y[i];\n}\n")
    (tmp_path / "neg.ref.py").write_text(
        "import torch\nSIZES = [1, 1000]\n"
        "def inputs(size, seed, device):\n    return {'y': torch.randn(size, device=device)}\n"
        "def reference(inp):\n    return -inp['y']\n"
        "def run(k, inp):\n    y = inp['y'].clone()\n    k.neg(y, y.numel(), grid=(y.numel() + 255) // 256, block=256)\n"
        "    return y\n")
    s = Session(tmp_path / "neg.cu", isolate=False)
    built, checked, bench = s.build(), s.check(), s.bench()
    assert built.ok and "run on the CPU emulator" in built.status
    assert checked.ok and "PASS" in checked.status and "run on the CPU emulator" in checked.status
    assert bench.ok and "no timing" in bench.status and bench.png is None
    assert not s.compare(tmp_path / "neg.cu").ok
