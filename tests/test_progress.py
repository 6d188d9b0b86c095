"""Progress on long steps (builds, `jitlab run`) and ratio columns that say which way is faster. No GPU."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

import jitlab
from jitlab import progress
from jitlab.jit import plan
from jitlab.jit.engines import objects
from jitlab.judge import benchmark, runner
from jitlab.judge.timing import Timing
from jitlab.notebook import report
from jitlab.worker import isolate, jobs

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"

SCALE = """
void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = 2.0f * x[i]; }
"""


def progress_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "jitlab-progress"]


# ---- the step: silent when quick, a line, a live line, a line -------------------------------------
def test_a_step_past_the_threshold_prints_a_start_and_an_end_line(capsys):
    """A step that outlasts its threshold says what it does, what runs now, and how long it took."""
    with progress.Step("building demo.cpp (c++)", "built demo.cpp", after=0.05):
        with progress.doing("compiling demo.host.cpp"):
            time.sleep(0.4)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "jitlab: building demo.cpp (c++) … (compiling demo.host.cpp)", err
    assert err[-1].startswith("jitlab: built demo.cpp in ") and err[-1].endswith(" s"), err


def test_a_quick_step_prints_nothing_and_leaves_no_thread(capsys):
    """A step that ends within its threshold prints nothing, and its timer thread is gone."""
    with progress.Step("building quick.cpp (c++)", "built quick.cpp", after=5):
        time.sleep(0.01)
    assert capsys.readouterr() == ("", "")
    assert progress_threads() == []


def test_a_failing_step_says_it_stopped_and_leaves_no_thread(capsys):
    """An error inside a shown step ends it with a 'stopped' line; the error passes through."""
    with pytest.raises(RuntimeError, match="compiler died"):
        with progress.Step("building bad.cpp (c++)", "built bad.cpp", after=0):
            time.sleep(0.1)
            raise RuntimeError("compiler died")
    err = capsys.readouterr().err
    assert "jitlab: building bad.cpp (c++) stopped after" in err and "(RuntimeError)" in err
    assert "built bad.cpp" not in err
    assert progress_threads() == []


def test_steps_off_the_main_thread_stay_silent(capsys):
    """A step on another thread (the playground's build thread) prints nothing."""
    def work():
        with progress.Step("building t.cpp (c++)", "built t.cpp", after=0):
            time.sleep(0.2)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("raw, expected", [("", progress.DEFAULT_AFTER), ("0", 0.0), ("3.5", 3.5), ("off", None)])
def test_threshold_comes_from_the_environment(monkeypatch, raw, expected):
    """JITLAB_PROGRESS_AFTER: seconds, 0 for every step, off for none; default 2."""
    monkeypatch.setenv("JITLAB_PROGRESS_AFTER", raw)
    assert progress.threshold() == expected


def test_a_bad_threshold_warns_and_uses_the_default(monkeypatch):
    """A threshold that is not a number warns, naming the fix, and falls back to the default."""
    monkeypatch.setenv("JITLAB_PROGRESS_AFTER", "soon")
    with pytest.warns(UserWarning, match="JITLAB_PROGRESS_AFTER='soon'.*off"):
        assert progress.threshold() == progress.DEFAULT_AFTER


# ---- builds ---------------------------------------------------------------------------------------
def test_a_build_past_the_threshold_prints_start_and_end_then_a_cache_hit_prints_nothing(cache, write, capsys,
                                                                                         monkeypatch):
    """jitlab.load: 'building …' and 'built … in X s' on stderr past the threshold; a cache hit is silent."""
    p = write("scale.cpp", SCALE)
    monkeypatch.setenv("JITLAB_PROGRESS_AFTER", "0")
    assert not jitlab.load(p).build.cached
    err = capsys.readouterr().err
    assert re.search(r"^jitlab: building \S*scale\.cpp \(c\+\+\) …$", err, re.M), err
    assert re.search(r"^jitlab: built \S*scale\.cpp in \d+\.\d s$", err, re.M), err
    assert jitlab.load(p).build.cached
    assert capsys.readouterr() == ("", "")


@pytest.mark.slow
def test_progress_stays_out_of_the_build_log(cache, write):
    """With stderr a real pipe, the lines reach it, not the build's captured compiler log."""
    p = write("scale.cpp", SCALE)
    env = {**os.environ, "JITLAB_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])), "JITLAB_PROGRESS_AFTER": "0"}
    out = subprocess.run([sys.executable, "-c", f"import jitlab; print(jitlab.load({str(p)!r}).build.folder)"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert re.search(r"^jitlab: building \S*scale\.cpp \(c\+\+\) …$", out.stderr, re.M), out.stderr
    assert re.search(r"^jitlab: built \S*scale\.cpp in \d+\.\d s$", out.stderr, re.M), out.stderr
    log = (Path(out.stdout.strip()) / "build.log").read_text()
    assert "jitlab: build" not in log


def test_units_name_themselves_in_the_step_from_the_compile_threads(cache, capsys, monkeypatch):
    """objects.compile_all: a unit compiling on a pool thread shows up in the build's progress."""
    real = objects._run_compiler

    def slow_compiler(*args, **kwargs):
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(objects, "_run_compiler", slow_compiler)
    unit = plan.Unit(name="tiny.cpp", compiler="cxx", text="int tiny() { return 1; }\n")
    flags = plan.Flags(includes=(), cxx=("-fPIC",), cuda_include=(), cxx_user=(), nvcc=(), nvcc_torch=(), ld=(),
                          toolchain=())
    with progress.Step("building tiny.cpp (c++)", "built tiny.cpp", after=0.1):
        objs = objects.compile_all([unit], flags, "tiny", {})
    assert objs[0].path.is_file()
    err = capsys.readouterr().err
    assert "jitlab: building tiny.cpp (c++) … (compiling tiny.cpp)" in err, err


def test_a_worker_process_shows_no_progress(tmp_path):
    """An isolated check's build prints no progress: what a worker prints is reported as the kernel's output."""
    w = isolate.Worker({"JITLAB_CACHE_DIR": str(tmp_path / "cache"), "JITLAB_PROGRESS_AFTER": "0"})
    try:
        out = w.run(jobs.Job("check", str(KERNELS / "add2_cpu.cpp")), 300)
    finally:
        w.stop()
    assert out.passed, str(out)
    assert "jitlab: build" not in out.output, out.output


# ---- jitlab run -----------------------------------------------------------------------------------
SLOW_REF = """
import time
import torch

SIZES = [4]


def inputs(size, seed, device):
    return {"a": torch.ones(size), "b": torch.ones(size)}


def reference(inp):
    time.sleep(3)  # the kernel after add2_cpu takes a while: add2_cpu's row must be out by then
    return inp["a"] + inp["b"]


def run(m, inp):
    c = torch.empty_like(inp["a"])
    m.add2_cpu(c, inp["a"], inp["b"], c.numel())
    return c
"""


@pytest.mark.slow
def test_run_prints_each_row_as_it_is_measured(tmp_path):
    """`jitlab run`: the header, then add2_cpu's row seconds before the slow kernel after it finishes."""
    root = tmp_path / "kernels"
    root.mkdir()
    shutil.copy(KERNELS / "add2_cpu.cpp", root)
    shutil.copy(KERNELS / "add2_cpu.ref.py", root)
    shutil.copy(KERNELS / "add2_cpu.cpp", root / "zz_slow.cpp")
    (root / "zz_slow.ref.py").write_text(SLOW_REF)
    env = {**os.environ, "JITLAB_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen([sys.executable, "-m", "jitlab", "run", str(root), "--no-bench", "--max-size", "200"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen = [(time.monotonic(), line.rstrip("\n")) for line in proc.stdout]
    assert proc.wait(timeout=300) == 0, seen
    when = {line.split()[0]: t for t, line in seen if line.split()}
    lines = [line for _, line in seen]
    header = next(i for i, line in enumerate(lines) if line.startswith("kernel "))
    first = next(i for i, line in enumerate(lines) if line.startswith("add2_cpu "))
    assert header < first and "× faster than torch" in lines[header]
    assert when["zz_slow"] - when["add2_cpu"] >= 2.5, seen  # printed when measured, not with the whole table
    assert "2 passed, 0 failed" in lines[-1] or "2 passed, 0 failed" in "\n".join(lines)


# ---- ratio columns say which way is faster --------------------------------------------------------
def _t(ms: float) -> Timing:
    """Samples around ``ms`` (±10 %, quartiles ±2.5 %) taken on an idle machine."""
    return Timing([ms * f for f in (0.9, 1.0, 1.1, 1.0)], device="cpu", load=0.1, cores=2, threads=1)


@pytest.mark.parametrize("kernel_ms, torch_ms, cell", [(1.0, 1.64, "1.64× (1.56–1.72)"),
                                                       (1.0, 0.31, "0.31× (0.29–0.33; 3.23× slower)"),
                                                       (1.0, 1.01, "within noise: no verdict (0.96–1.06×)")])
def test_ratio_cells_read_as_times_faster(kernel_ms, torch_ms, cell):
    """A ratio cell: the factor and its quartile range, how many times slower below 1, no verdict in the noise."""
    assert benchmark.Comparison.of(_t(kernel_ms), _t(torch_ms), "torch eager").cell() == cell


def test_bench_result_says_faster_or_slower_in_words():
    """BenchResult's text says 'faster than torch eager, 1 thread' or 'slower than torch.compile'."""
    r = benchmark.BenchResult("k", 8, SimpleNamespace(passed=True), timing=_t(1.0), torch_timing=_t(2.0),
                              compiled_timing=_t(0.5))
    text = str(r)
    assert "2.00× faster than torch eager, 1 thread" in text and "2.00× slower than torch.compile" in text


def test_run_and_panel_headers_say_faster(capsys):
    """`jitlab run`'s table and the playground's bench table head their ratio columns '× faster than …'."""
    res = benchmark.BenchResult("original", 8, SimpleNamespace(passed=True), timing=_t(2.0), torch_timing=_t(1.0))
    runner.print_table([{"kernel": "k", "variant": "original", "status": "ok", "size": 8, "result": res}])
    head, row = capsys.readouterr().out.splitlines()
    assert "× faster than torch" in head and "× faster than compile" in head
    assert "0.50× (0.48–0.53; 2.00× slower)" in row
    html = report.bench_table([res])
    assert "<th>× faster than torch</th>" in html and "<th>× faster than torch.compile</th>" in html
    assert "0.50× (0.48–0.53; 2.00× slower)" in html
