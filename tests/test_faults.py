"""The fault suite (issue 11): every fault a fault trial found, reproduced as a user meets it, on the
CPU, each asserting the right result or a jitlab error that names the fix. Three parts:

A. Process and cache faults.
   1. Ctrl-C while an isolated check runs: the check raises ``KeyboardInterrupt`` at once, and the next
      check (a segfaulting snippet) is reported as crashed, never with the interrupted job's late answer.
      A stale answer left in the worker's pipe is skipped by its job id.
   2. Several threads building and calling printing snippets at once (the playground builds on a
      background thread): every build succeeds, each call's printf reaches Python once, and afterwards
      fds 1 and 2 are the same files as before and a child process can still write to them.
   3. A builder frozen while it holds a build's lock (SIGSTOP): a waiter says which PID holds it and for
      how long it has waited, and gives up after ``JITLAB_LOCK_TIMEOUT`` with a ``CacheError`` naming the
      PID, the lock file and the fix; once the holder is gone the load works.
   4. A cache jitlab cannot write: a read-only folder (root: a read-only bind mount), a path that is a
      file, a full disk (root: small tmpfs mounts) each raise a ``CacheError`` naming the fix; a full
      disk leaves no half-written build behind, and the build works once there is room.
   5. A cached binary that cannot be loaded though its manifest hash matches (``invalid ELF header``): a
      new process rebuilds it once, with a warning, and gets the right result (a C++ snippet opened by
      ctypes; a torch-style one, imported, in a ``slow`` test).

B. Calls and arguments (two small C++ snippets, each built once into this module's own cache).

   1. autograd: a function writing into a tensor autograd needs. A tensor saved for backward and then
      written under ``no_grad`` (or through ``.detach()``) makes backward raise torch's "modified by an
      inplace operation"; one written while autograd records makes backward raise instead of giving a
      wrong gradient; a leaf that requires grad is refused (the fix: ``.detach()`` / ``torch.no_grad()``),
      but written under ``no_grad`` like an optimizer step; inputs (const pointers) keep their version.
   2. An empty tensor for a pointer (torch gives every 0-element tensor a NULL address) is refused,
      naming the parameter, instead of crashing the process (checked in a subprocess, so a regression
      cannot take the session down).
   3. C functions named ``lambda`` and ``None``, parameters named ``in``, ``from``, ``lambda`` and after
      the builtins the wrapper uses (``type``, ``isinstance``, ``getattr``) are callable.
   4. A C++ default argument that is a plain literal is honoured; one that is not (a macro) must be
      passed, and leaving it out says so.
   5. A string for a float is refused (no ``float("2.5")``), and so is a number that would overflow a
      float (1e40), a ``__half`` or a ``__nv_bfloat16``; ``float('inf')`` and ``nan`` pass.
   6. Integers out of their C type's range, grids and blocks beyond CUDA's limits and a negative
      ``shared_mem`` are refused with the parameter named, never masked (kernels: the real generated
      wrapper of a parsed ``.cu`` kernel over a recording launcher, as no GPU is here).
   7. A C++ exception in an isolated check is the category ``exception``, not ``mismatch``.

C. Sources, keys and saves.
   1. A header found through ``cflags=["-I…"]`` or ``-isystem`` is edited: the next load, in this
      process and in a new one, runs the new header (it is in the build key, recursively); a
      torch-style unit's object is recompiled too; torch's and CUDA's own folders are not hashed.
   2. ``static``, ``constexpr``, ``inline`` and anonymous-namespace helpers in a kernel-only snippet
      (``.cpp`` and ``.cu``) are internal: the snippet builds, only the real entry points are exported,
      and the error for an unmappable exported function gives advice that works.
   3. Awkward paths: a snippet in a folder named with ``"`` and ``\\`` builds and its errors name the
      right file and line; every generated ``#line`` is escaped; a cache folder, or a snippet folder,
      with ``$`` or ``:`` in its path builds (torch's ``build.ninja`` cannot name it directly).
   4. A UTF-8 byte-order mark: a ``.cpp`` with one builds and runs, a ``.cu`` with one compiles, and
      the user's file keeps its bytes.
   5. ``%%cpp``/``%%cuda`` saves: a symlinked snippet is refused and the file it points to untouched; the
      file keeps its mode (a new one gets the umask's); history entries saved within one second (or
      one clock tick) are listed in save order.

Tests that need root (a read-only bind mount, a small tmpfs) say so and are skipped without it; CI
runs as root.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import torch
from conftest import ROOT

import jitlab
from jitlab import snippets
from jitlab.errors import CacheError, CompileError, SnippetError
from jitlab.jit import builder, codegen, launch, parse
from jitlab.jit import cache as jcache
from jitlab.jit import locks
from jitlab.jit.flags import Options
from jitlab.jit.parse import line_directive, parse_file
from jitlab.jit.plan import Manifest
from jitlab.jit.sources import user_include_dirs
from jitlab.worker import isolate, jobs, proc

# ==================================================================================================
# A. Process and cache faults
# ==================================================================================================
FAULTS = ROOT / "tests" / "fixtures" / "faults"
ADD2 = ROOT / "kernels" / "add2_cpu.cpp"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: mounts a read-only bind mount or a tmpfs")

SCALE = "void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = %s * x[i]; }\n"


def scaled(m, n: int = 4) -> list[float]:
    """``m.scale`` applied to ``[0, 1, …, n-1]``."""
    y = torch.empty(n)
    m.scale(y, torch.arange(n, dtype=torch.float32), n)
    return y.tolist()


def ref_for(snippet: Path, function: str) -> None:
    """Put a ``NAME.ref.py`` beside a snippet: ``c = a + b`` computed by ``function``."""
    text = (FAULTS / "wrong_cpu.ref.py").read_text().replace("m.wrong_cpu", f"m.{function}")
    snippet.with_suffix(".ref.py").write_text(text.replace("SIZES = [1, 1000]", "SIZES = [1]"))


def run_in_child(code: str, cache: Path) -> subprocess.CompletedProcess:
    """Run Python code in a new process (its own dynamic loader state) on this test's cache."""
    env = {**os.environ, "JITLAB_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


# ---- 1. Ctrl-C during an isolated check ------------------------------------------------------------
@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """One worker for this module, with its own build cache."""
    w = isolate.Worker({"JITLAB_CACHE_DIR": str(tmp_path_factory.mktemp("faults_iso_cache"))})
    yield w
    w.stop()


@pytest.fixture
def slow_snippet(write) -> Path:
    """A correct snippet whose function sleeps 20 s: a check that is still running when Ctrl-C comes."""
    p = write("slow_add.cpp", """
        #include <cstdint>
        #include <unistd.h>
        void slow_add(float* c, const float* a, const float* b, int64_t n) {
            sleep(20);
            for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
        }
    """)
    ref_for(p, "slow_add")
    return p


@contextmanager
def ctrl_c_after(seconds: float):
    """Deliver SIGINT to the main thread after ``seconds`` (as Ctrl-C does, interrupting a blocking wait).

    Python's own handler is put in place for the while: a process started in the background (`cmd &`,
    some test runners' workers) inherits SIGINT ignored, and then no KeyboardInterrupt would come.
    """
    main = threading.main_thread().ident
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


@pytest.mark.slow
def test_ctrl_c_during_a_check_does_not_hand_its_answer_to_the_next_check(worker, slow_snippet):
    """After an interrupted check, a segfaulting snippet is reported as crashed, not as the old pass."""
    assert worker.run(jobs.Job("check", str(ADD2)), 120).passed  # a warm worker, as in a notebook
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), ctrl_c_after(1.0):
        worker.run(jobs.Job("check", str(slow_snippet)), 120)
    assert time.monotonic() - t0 < 10  # raised at once (~1 s), not when the job finished (20 s)
    out = worker.run(jobs.Job("check", str(FAULTS / "segv_cpu.cpp")), 120)
    assert out.category == jobs.CRASH, out
    assert worker.run(jobs.Job("check", str(ADD2)), 120).passed


@pytest.mark.slow
def test_a_stale_answer_in_the_pipe_is_skipped_by_its_job_id(worker):
    """An answer nobody collected (a job sent by a caller that gave up) is never taken for the next job's."""
    assert worker.run(jobs.Job("check", str(ADD2)), 120).passed
    proc.write_frame(worker.proc.stdin, jobs.Job("check", str(ADD2), id=-1))  # answered with a pass
    out = worker.run(jobs.Job("check", str(FAULTS / "segv_cpu.cpp")), 120)
    assert out.category == jobs.CRASH, out


TORCH_STYLE_CPP = """
    #include <torch/extension.h>
    torch::Tensor plus_one(torch::Tensor x) { return x + 1; }
"""


def _processes_naming(text: str) -> list[str]:
    """The command lines of this machine's processes that contain ``text``."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with suppress(OSError):
            line = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if text in line:
                found.append(line)
    return found


@pytest.mark.slow
def test_ctrl_c_during_a_torch_style_build_ends_its_compilers_at_once(cache, write):
    """Ctrl-C while a torch-style build's compilers run (each blocked reading a FIFO through -include): the
    build raises KeyboardInterrupt within 2 s, no compiler is left running, and no entry is published."""
    jitlab.build(write("warm_sets.cpp", TORCH_STYLE_CPP))  # the header sets made, so the compile starts at once
    stall = cache / "stall.fifo"
    os.mkfifo(stall)  # a compiler reading it waits until it is killed
    path = write("stalled_build.cpp", TORCH_STYLE_CPP)
    with pytest.raises(KeyboardInterrupt), ctrl_c_after(2.0):
        t0 = time.monotonic()
        jitlab.build(path, cflags=["-include", str(stall)])
    assert time.monotonic() - t0 < 2.0 + 2.0, "the interrupt waited for the compilers"
    deadline = time.monotonic() + 5  # killed at once; the kernel reaps them in microseconds
    while _processes_naming(str(stall)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes_naming(str(stall))
    assert not [m for m in cache.rglob(jcache.MANIFEST) if "stalled_build" in str(m)]


@pytest.mark.slow
def test_sigterm_of_a_batch_ends_the_compilers_making_torchs_headers(tmp_path):
    """``timeout`` (SIGTERM) of a ``jitlab check`` batch while torch's header sets are being made in the
    background: the command exits with 143 and leaves no compiler running (Python's default ending skipped the
    exit hook that ends them, and each kept compiling for tens of seconds)."""
    pch = tmp_path / "pch"
    env = {**os.environ, "JITLAB_CACHE_DIR": str(tmp_path / "cache"), "JITLAB_PCH_DIR": str(pch)}
    pair = ROOT / "tests" / "fixtures" / "kernelbench" / "cpu_scaled_relu"
    p = subprocess.Popen([sys.executable, "-m", "jitlab", "check", str(pair), "--device", "cpu", "--compile-only"],
                         env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not any("cc1plus" in line for line in _processes_naming(str(pch))) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _processes_naming(str(pch)), "no compiler started"
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 5
    while _processes_naming(str(pch)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _processes_naming(str(pch))


STUCK_IN_C = """
import ctypes, sys
from jitlab import cli
from jitlab.jit import processes
processes.at_end(lambda: open({ended!r}, "w").close())
spin = ctypes.CDLL({lib!r}).spin  # ctypes lets go of the GIL: the main thread never comes back to Python
cli.COMMANDS["clean"] = lambda args: print("spinning", flush=True) or spin()
sys.exit(cli.main(["clean"]))
"""


def test_sigterm_ends_a_command_whose_main_thread_never_comes_back_to_python(tmp_path):
    """A command whose main thread is inside a C call that never returns (Python's handler would never run):
    SIGTERM still ends it with 143 at once, after what jitlab started is ended (the wakeup pipe's thread)."""
    src = tmp_path / "spin.c"
    src.write_text("void spin(void) { for (volatile unsigned long i = 0;; ++i) {} }\n")
    lib = tmp_path / "libspin.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O0", str(src), "-o", str(lib)], check=True)
    ended = tmp_path / "ended"
    p = subprocess.Popen([sys.executable, "-c", STUCK_IN_C.format(ended=str(ended), lib=str(lib))], cwd=ROOT,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "spinning\n"
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        assert p.wait(20) == 128 + signal.SIGTERM
    finally:
        p.kill()
    assert ended.exists()


# ---- 2. Threads loading at once --------------------------------------------------------------------
def test_threads_building_and_printing_at_once_leave_fds_1_and_2_intact(cache, write, capfd):
    """Three threads build and call printing snippets together: all work, and stdout/stderr survive."""
    paths = [write(f"hello{i}.cpp", f"""
        #include <cstdio>
        int hello{i}(int n) {{ printf("hello from thread {i}, n=%d\\n", n); fflush(stdout); return n + {i}; }}
    """) for i in range(3)]
    before = [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)]
    results, errors = {}, []

    def build_and_call(i: int) -> None:
        try:
            m = jitlab.load(paths[i])
            results[i] = [getattr(m, f"hello{i}")(10 * i + k) for k in range(3)]
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {i}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=build_and_call, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not errors, errors
    assert results == {i: [11 * i + k for k in range(3)] for i in range(3)}
    assert [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (1, 2)] == before
    child = subprocess.run(["sh", "-c", "echo child-stdout-ok; echo child-stderr-ok >&2"])
    assert child.returncode == 0
    out, err = capfd.readouterr()
    assert "child-stdout-ok" in out and "child-stderr-ok" in err
    for i in range(3):  # every printf reached Python's stdout exactly once
        for k in range(3):
            assert out.count(f"hello from thread {i}, n={10 * i + k}\n") == 1, out


# ---- 3. A frozen builder ---------------------------------------------------------------------------
def held_by(lock: Path) -> int | None:
    """The PID a lock file names as its holder, or ``None``."""
    try:
        return json.loads(lock.read_text()).get("pid")
    except (OSError, ValueError):
        return None


@pytest.fixture
def frozen_builder(cache, write):
    """A child process that started building scale.cpp and was stopped (SIGSTOP) holding its lock."""
    p = write("scale.cpp", SCALE % "2.0f")
    code = f"import jitlab; jitlab.load({str(p)!r})"
    env = {**os.environ, "JITLAB_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    child = subprocess.Popen([sys.executable, "-c", code], env=env, start_new_session=True,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not any(held_by(f) == child.pid for f in cache.glob("*.lock")):
            assert child.poll() is None and time.monotonic() < deadline, "the child never took the lock"
            time.sleep(0.005)
        os.kill(child.pid, signal.SIGSTOP)
        yield p, child
    finally:
        with suppress(ProcessLookupError):  # the test may have ended it already
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()


@pytest.mark.slow
def test_a_frozen_builder_makes_waiters_give_up_naming_its_pid(frozen_builder, cache, monkeypatch, capfd):
    """A waiter reports the holder's PID while it waits, then raises a CacheError naming PID, lock and fix."""
    p, child = frozen_builder
    monkeypatch.setenv("JITLAB_LOCK_TIMEOUT", "2")
    monkeypatch.setattr(locks, "LOCK_REPORT_EVERY", 0.5)
    t0 = time.monotonic()
    with pytest.raises(CacheError) as ei:
        jitlab.load(p)
    waited = time.monotonic() - t0
    assert 2 <= waited < 10
    msg = str(ei.value)
    lock = next(f for f in cache.glob("*.lock") if held_by(f) == child.pid)
    assert f"PID {child.pid}" in msg and str(lock) in msg
    assert "is stopped" in msg and f"kill -CONT {child.pid}" in msg and f"kill -9 {child.pid}" in msg
    waits = [ln for ln in capfd.readouterr().err.splitlines() if f"PID {child.pid}" in ln]
    assert len(waits) >= 3, waits  # said at once, then every LOCK_REPORT_EVERY seconds
    assert "waited 0 s" in waits[0] and "waited 0 s" not in waits[-1], waits
    os.killpg(child.pid, signal.SIGKILL)  # the fix the message names
    child.wait()
    assert scaled(jitlab.load(p)) == [0, 2, 4, 6]


def test_lock_timeout_must_be_a_number(cache, write, monkeypatch):
    """A JITLAB_LOCK_TIMEOUT that is not a number says what to write instead."""
    monkeypatch.setenv("JITLAB_LOCK_TIMEOUT", "ten minutes")
    with pytest.raises(CacheError, match=r"JITLAB_LOCK_TIMEOUT='ten minutes'.*seconds"):
        with locks.build_lock("x"):
            pass


# ---- 4. A cache jitlab cannot write ----------------------------------------------------------------
@contextmanager
def mounted(target: Path, *args: str, then: tuple[str, ...] = ()):
    """``mount ARGS TARGET`` (then ``mount THEN TARGET``, a remount) for the body, unmounted after."""
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", *args, str(target)], check=True)
    try:
        if then:
            subprocess.run(["mount", *then, str(target)], check=True)
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=True)


@needs_root
def test_read_only_cache_names_the_fix_and_still_serves_its_builds(cache, write):
    """A read-only cache folder: finished builds still load; a new one is a CacheError naming the fix."""
    p = write("scale.cpp", SCALE % "2.0f")
    jitlab.load(p)
    with mounted(cache, "--bind", str(cache), then=("-o", "remount,ro,bind")):
        assert jitlab.load(p).build.cached
        p.write_text(SCALE % "3.0f")
        with pytest.raises(CacheError) as ei:
            jitlab.load(p)
    msg = str(ei.value)
    assert "read-only" in msg and str(cache) in msg
    assert "JITLAB_CACHE_DIR" in msg and "writable folder" in msg


def test_cache_path_that_is_a_file_names_the_fix(tmp_path, write, monkeypatch):
    """JITLAB_CACHE_DIR naming a file (or a folder under a file) is a CacheError saying so."""
    p = write("scale.cpp", SCALE % "2.0f")
    f = tmp_path / "not_a_folder"
    f.write_text("my notes\n")
    for where in (f, f / "cache"):
        monkeypatch.setenv("JITLAB_CACHE_DIR", str(where))
        with pytest.raises(CacheError) as ei:
            jitlab.load(p)
        msg = str(ei.value)
        assert f"{f} is a file" in msg and "JITLAB_CACHE_DIR" in msg, msg
    assert f.read_text() == "my notes\n"  # never touched


@needs_root
def test_full_disk_names_the_fix_and_the_build_works_once_there_is_room(tmp_path, write, monkeypatch):
    """Disks too small for a build fail with a CacheError naming the fix (wherever the write fails),
    leave no half-written build, and the same cache works once the disk has room."""
    p = write("scale.cpp", SCALE % "2.0f")
    failures = []
    # 8k: no room for the sources; 28k: the link fails ("ld returned 1"); 36k: the log cannot be written.
    # (Where a build stops depends on the toolchain's output sizes; each one must fail well or work.)
    for size in ("8k", "28k", "36k"):
        with mounted(tmp_path / f"disk{size}", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs") as disk:
            monkeypatch.setenv("JITLAB_CACHE_DIR", str(disk))
            try:
                assert scaled(jitlab.load(p)) == [0, 2, 4, 6]
                continue
            except CacheError as e:
                failures.append(str(e))
                assert "free disk space" in str(e) and str(disk) in str(e) and "JITLAB_CACHE_DIR" in str(e), e
            assert not [d for d in disk.iterdir() if d.is_dir()], "a half-written build was left behind"
            if size == "36k":  # the fix the message names: room on that disk
                subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)
                assert scaled(jitlab.load(p)) == [0, 2, 4, 6]
    assert len(failures) >= 2, failures  # the sizes above make most of them fail


# ---- 5. A cached binary that cannot be loaded ------------------------------------------------------
def break_binary(b: jitlab.Build) -> None:
    """Replace a build's binary by garbage and record the garbage's size and hash in its manifest."""
    garbage = b"this is not a shared object\n" * 100
    # A new file in its place (os.replace): this process may still map the old one (load_inline
    # dlopens what it builds), and truncating a mapped file would crash it at exit (SIGBUS).
    tmp = b.artifact.with_name(b.artifact.name + ".tmp")
    tmp.write_bytes(garbage)
    os.replace(tmp, b.artifact)
    manifest = Manifest.from_record(json.loads((b.folder / jcache.MANIFEST).read_text()))
    jcache.write_manifest(b.folder, dataclasses.replace(manifest, size=len(garbage), sha256=jcache.file_sha256(b.artifact)))


@pytest.mark.slow
def test_cached_binary_that_cannot_be_loaded_is_rebuilt_once(cache, write):
    """A .so that fails to load although its manifest hash matches is rebuilt once, not failed forever."""
    p = write("scale.cpp", SCALE % "2.0f")
    break_binary(jitlab.build(p))
    code = (f"import jitlab, torch; m = jitlab.load({str(p)!r}); y = torch.empty(3); "
            f"m.scale(y, torch.ones(3), 3); print(m.build.cached, y.tolist())")
    first = run_in_child(code, cache)
    assert first.returncode == 0, first.stderr
    assert first.stdout.split(None, 1) == ["False", "[2.0, 2.0, 2.0]\n"]
    assert "invalid ELF header" in first.stderr and "rebuilding" in first.stderr
    second = run_in_child(code, cache)
    assert second.returncode == 0 and second.stdout.startswith("True"), second.stderr


@pytest.mark.slow
def test_torch_style_binary_that_cannot_be_imported_is_rebuilt_once(cache, kernel_copy):
    """The same for a torch-style build, which is imported (ImportError) rather than opened by ctypes."""
    p = kernel_copy("hello_cpp.cpp")
    break_binary(jitlab.build(p))
    code = f"import jitlab; m = jitlab.load({str(p)!r}); print(m.build.cached, m.hello())"
    first = run_in_child(code, cache)
    assert first.returncode == 0, first.stderr
    assert first.stdout == "False Hello World!\n"
    assert "invalid ELF header" in first.stderr and "rebuilding" in first.stderr


# ==================================================================================================
# B. Calls and arguments
# ==================================================================================================
SNIPPET = """\
#include <cstdint>
#include <stdexcept>

// Writes 1 into y[0, n): an output.
void fill_ones(float* y, int n) { for (int i = 0; i < n; ++i) y[i] = 1.0f; }
// Sums x[0, n): an input only.
float total(const float* x, int n) { float s = 0; for (int i = 0; i < n; ++i) s += x[i]; return s; }

// Defaults: plain literals are honoured, a macro must be passed.
#define STEP 7
int add(int a, int b = 3) { return a + b; }
double mix(double a, float b = -1.5f, unsigned c = 0x10u, bool negate = false) {
    double r = a + b + c;
    return negate ? -r : r;
}
int step(int a, int s = STEP) { return a + s; }

float same_float(float x) { return x; }
double same_double(double x) { return x; }
int same_int(int x) { return x; }

void must_be_positive(int n) { if (n <= 0) throw std::invalid_argument("n must be positive"); }
"""

# Names Python cannot take as they are: a snippet of its own, so a failure here cannot hide the others.
NAMES = """\
// Python keywords as the function's and the parameters' names.
int lambda(int in, int from) { return in - from; }
int None(int lambda, int lambda_) { return 10 * lambda + lambda_; }
// The builtins the generated wrapper uses, as parameter names.
int shadow(int type, int isinstance, int getattr) { return 100 * type + 10 * isinstance + getattr; }
"""

# A reference for the isolated check of scenario 7: the original version throws a C++ exception,
# "wrong" returns a wrong result (a mismatch), "right" passes.
REFERENCE = """\
import torch

SIZES = [1, 4]


def inputs(size, seed, device):
    return {"x": torch.ones(size)}


def reference(inp):
    return inp["x"] * 2


def run(m, inp):
    m.must_be_positive(0)
    return inp["x"] * 2


VARIANTS = {"wrong": lambda m, inp: inp["x"] * 3, "right": lambda m, inp: inp["x"] * 2}
"""

KERNELS = """\
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__global__ void count(int n) { }
__global__ void scale16(__half a, __nv_bfloat16 b, int n) { }
"""


@pytest.fixture(scope="module")
def calls_cache(tmp_path_factory):
    """A fresh JITLAB_CACHE_DIR for this module (the function-scoped ``calls_cache`` of conftest, module-wide)."""
    mp = pytest.MonkeyPatch()
    d = tmp_path_factory.mktemp("faults_calls_cache")
    mp.setenv("JITLAB_CACHE_DIR", str(d))
    yield d
    mp.undo()


@pytest.fixture(scope="module")
def snippet(calls_cache, tmp_path_factory):
    """The snippet file, with its ``.ref.py`` beside it."""
    d = tmp_path_factory.mktemp("faults_calls")
    (d / "faults_calls.ref.py").write_text(REFERENCE)
    p = d / "faults_calls.cpp"
    p.write_text(SNIPPET)
    return p


@pytest.fixture(scope="module")
def m(snippet):
    """The snippet, built once for the module."""
    return jitlab.load(snippet)


@pytest.fixture(scope="module")
def names(calls_cache, tmp_path_factory):
    """The snippet of awkward names, built once for the module."""
    p = tmp_path_factory.mktemp("faults_names") / "faults_names.cpp"
    p.write_text(NAMES)
    return jitlab.load(p)


class Recorder:
    """A stand-in for a kernel's launcher with the shim's convention: records each launch, returns success."""

    def __init__(self):
        self.launches: list[tuple] = []

    def __call__(self, *args):
        self.launches.append(args)
        return 0


@pytest.fixture
def kernels(tmp_path, monkeypatch):
    """name → (typed call, recorder) for the kernels of a parsed ``.cu`` snippet, with no GPU needed."""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)  # CPU torch: the wrapper's device query
    monkeypatch.setattr(launch, "_raw_stream_fn", lambda: (lambda dev: 0))
    p = tmp_path / "k.cu"
    p.write_text(KERNELS)
    out = {}
    for fn in parse.parse_file(p).functions:
        rec = Recorder()
        out[fn.name] = (launch.Callable(fn, None, "cuda", False, launcher=rec), rec)
    return out


# ---- 1. autograd ------------------------------------------------------------------------------
def test_write_into_a_saved_tensor_under_no_grad_makes_backward_raise(m):
    """exp saves its output; writing it afterwards bumps its version, so backward raises as torch's in-place ops make it."""
    x = torch.rand(4, requires_grad=True)
    y = x.exp()
    with torch.no_grad():
        m.fill_ones(y, 4)
    assert y.tolist() == [1.0] * 4
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


def test_write_through_detach_makes_backward_raise(m):
    """`.detach()` shares the version counter: the saved tensor's backward still notices the write."""
    x = torch.rand(4, requires_grad=True)
    y = x.exp()
    m.fill_ones(y.detach(), 4)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()


@pytest.mark.parametrize("op", [torch.exp, lambda x: x * 2], ids=["exp (saves its output)", "mul (saves nothing)"])
def test_write_while_autograd_records_makes_backward_raise(m, op):
    """The call writes, and a backward through the write raises instead of returning a wrong gradient."""
    x = torch.rand(4, requires_grad=True)
    y = op(x)
    m.fill_ones(y, 3)
    assert y[:3].tolist() == [1.0] * 3
    with pytest.raises(RuntimeError, match=r"argument 1 `y` \(float\*\) was written in place .*no_grad"):
        y.sum().backward()
    assert x.grad is None


def test_leaf_requiring_grad_is_refused_with_the_fix(m):
    """As torch's in-place ops refuse it; the message names `.detach()` and `torch.no_grad()`."""
    w = torch.zeros(4, requires_grad=True)
    with pytest.raises(jitlab.ArgumentError, match=r"`y` .*leaf tensor that requires grad.*\.detach\(\).*torch\.no_grad\(\)"):
        m.fill_ones(w, 4)
    assert w.tolist() == [0.0] * 4


def test_view_of_a_leaf_requiring_grad_is_refused_with_the_fix(m):
    """Torch's own refusal for a view of such a leaf, as a jitlab error with the fix."""
    w = torch.zeros(4, requires_grad=True)
    with pytest.raises(jitlab.ArgumentError, match=r"`y` .*view of a leaf Variable.*\.detach\(\)"):
        m.fill_ones(w[:2], 2)


def test_leaf_is_written_under_no_grad_like_an_optimizer_step(m):
    """Under no_grad a parameter may be updated in place; its version goes up."""
    w = torch.zeros(4, requires_grad=True)
    before = w._version
    with torch.no_grad():
        m.fill_ones(w, 4)
    assert w.tolist() == [1.0] * 4 and w._version > before


def test_inputs_keep_their_version(m):
    """Only non-const pointers count as written: reading a saved tensor leaves backward intact."""
    x = torch.rand(4, requires_grad=True)
    y = x.exp()
    before = y._version
    assert m.total(y.detach(), 4) == pytest.approx(float(y.detach().sum()))
    assert y._version == before
    y.sum().backward()
    assert torch.allclose(x.grad, x.detach().exp())


# ---- 2. empty tensors -------------------------------------------------------------------------
@pytest.mark.slow
def test_empty_tensor_for_a_pointer_is_refused_not_a_segfault(snippet, calls_cache):
    """torch.empty(0) has a NULL address: a C++ call writing 4 elements into it crashed the process."""
    script = textwrap.dedent(f"""
        import torch, jitlab
        m = jitlab.load({str(snippet)!r})
        try:
            m.fill_ones(torch.empty(0), 4)
        except jitlab.ArgumentError as e:
            print(e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"the call crashed the process (exit {r.returncode}): {r.stderr[-2000:]}"
    assert "fill_ones(): argument 1 `y` (float*) got an empty tensor (shape (0,))" in r.stdout
    assert "NULL pointer" in r.stdout and "skip the call" in r.stdout


def test_zero_element_slice_is_refused_too(m):
    """torch gives every 0-element tensor a NULL address, a slice of real memory included: refused even for n = 0."""
    base = torch.zeros(4)
    assert base[4:].data_ptr() == 0
    with pytest.raises(jitlab.ArgumentError, match=r"`y` \(float\*\) got an empty tensor \(shape \(0,\)\)"):
        m.fill_ones(base[4:], 0)


# ---- 3. names -----------------------------------------------------------------------------------
def test_functions_named_after_python_keywords_are_callable(names):
    """`lambda` and `None` are attributes reached with getattr; their docstrings say so."""
    assert getattr(names, "lambda")(5, 3) == 2
    assert getattr(names, "None")(1, 2) == 12
    assert getattr(names, "lambda").__name__ == "lambda"
    assert "module['lambda'](...)" in getattr(names, "lambda").__doc__ and names["lambda"](1, 2) == getattr(names, "lambda")(1, 2)


def test_parameters_named_after_keywords_take_a_trailing_underscore(names):
    """`in`, `from`, `lambda` are passed positionally or as `in_`, `from_`, `lambda_` (and `lambda_` as `lambda__`)."""
    assert getattr(names, "lambda")(in_=5, from_=3) == 2
    assert getattr(names, "None")(lambda_=1, lambda__=2) == 12
    with pytest.raises(TypeError, match="'from_'"):
        getattr(names, "lambda")(5)


def test_parameters_named_after_the_wrappers_builtins(names):
    """`type`, `isinstance` and `getattr` as parameter names shadow nothing the wrapper uses."""
    assert names.shadow(1, 2, 3) == 123


# ---- 4. default arguments -----------------------------------------------------------------------
def test_literal_defaults_are_honoured(m):
    """`int b = 3`, `float b = -1.5f`, `unsigned c = 0x10u`, `bool negate = false`."""
    assert m.add(1) == 4
    assert m.add(1, 5) == 6
    assert m.mix(1.0) == 15.5
    assert m.mix(1.0, negate=True) == -15.5
    assert m.mix(1.0, 0.5, 2) == 3.5
    assert "b: int = 3" in m.add.__doc__


def test_default_that_is_not_a_literal_must_be_passed(m):
    """`int s = STEP` (a macro): leaving it out names the parameter and the fix; passing it works."""
    with pytest.raises(jitlab.ArgumentError, match=r"argument 2 `s` \(int\) was left out.*`STEP`.*pass the argument explicitly"):
        m.step(1)
    assert m.step(1, 7) == 8


def test_parser_keeps_the_default_as_written(tmp_path):
    """Param.default holds the C++ text; parameters without one have None."""
    p = tmp_path / "d.cpp"
    p.write_text("int f(int a, const float* x, float b = -1.5f, int c = N) { return a; }\n")
    (fn,) = parse.parse_file(p).functions
    assert [q.default for q in fn.params] == [None, None, "-1.5f", "N"]
    assert [q.name for q in fn.params] == ["a", "x", "b", "c"]


# ---- 5. floats ----------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["same_float", "same_double"])
def test_string_for_a_float_is_refused(m, name):
    """"2.5" is not a number, even though float("2.5") would parse it."""
    with pytest.raises(jitlab.ArgumentError, match=r"argument 1 `x` \((float|double)\) takes a float, got str '2.5'"):
        getattr(m, name)("2.5")


@pytest.mark.parametrize("value", [1e40, -1e39, 2**200])
def test_float_overflow_is_refused(m, value):
    """A finite number beyond float32's range would arrive as inf."""
    with pytest.raises(jitlab.ArgumentError, match=r"`x` \(float\) got .*too large for a float .*3\.4028235e\+38.*double"):
        m.same_float(value)


def test_float_edge_values_pass(m):
    """FLT_MAX, explicit infinities, NaN and doubles beyond float32 pass unchanged."""
    assert m.same_float(3.4028234663852886e38) == 3.4028234663852886e38
    assert m.same_float(float("inf")) == math.inf and m.same_float(-math.inf) == -math.inf
    assert math.isnan(m.same_float(float("nan")))
    assert m.same_double(1e300) == 1e300
    assert m.same_float(2) == 2.0


def test_half_and_bfloat16_overflow_are_refused(kernels):
    """__half holds up to 65504, __nv_bfloat16 up to about 3.39e38; inf passes as inf's bits."""
    call, rec = kernels["scale16"]
    with pytest.raises(jitlab.ArgumentError, match=r"`a` \(__half\) got 1000000.0, too large for a __half \(at most ±65504\)"):
        call(1e6, 1.0, 4, grid=1, block=32)
    with pytest.raises(jitlab.ArgumentError, match=r"`b` \(__nv_bfloat16\) got .*too large for a __nv_bfloat16"):
        call(1.0, 3.4e38, 4, grid=1, block=32)
    call(math.inf, -math.inf, 4, grid=1, block=32)
    assert rec.launches[-1][8:] == (0x7C00, 0xFF80, 4)


# ---- 6. ranges and launch limits --------------------------------------------------------------
def test_integer_out_of_its_c_range_is_refused(m):
    """2**40 for an int, -1 for an unsigned: refused with the range, never masked."""
    with pytest.raises(jitlab.ArgumentError, match=r"argument 1 `x` \(int\) must be in \[-2147483648, 2147483647\], got 1099511627776"):
        m.same_int(2**40)
    with pytest.raises(jitlab.ArgumentError, match=r"argument 3 `c` \(unsigned\) must be in \[0, 4294967295\], got -1"):
        m.mix(1.0, 0.5, -1)


@pytest.mark.parametrize("config, message", [
    (dict(grid=2**40, block=256), r"grid=1099511627776: grid.x = 1099511627776 is more than CUDA allows \(2147483647\); .*grid-stride"),
    (dict(grid=2**31, block=256), r"grid.x = 2147483648 is more than CUDA allows"),
    (dict(grid=(1, 65536), block=256), r"grid.y = 65536 is more than CUDA allows \(65535\); put the long dimension in grid x"),
    (dict(grid=(1, 1, 70000), block=256), r"grid.z = 70000 is more than CUDA allows \(65535\)"),
    (dict(grid=1, block=1025), r"block.x = 1025 is more than CUDA allows \(1024\)"),
    (dict(grid=1, block=(1, 1, 65)), r"block.z = 65 is more than CUDA allows \(64\)"),
    (dict(grid=1, block=(32, 32, 2)), r"2048 threads per block \(32 x 32 x 2\), CUDA allows at most 1024"),
    (dict(grid=1, block=256, shared_mem=-1), r"shared_mem=-1: give the dynamic shared memory per block in bytes"),
    (dict(grid=1, block=256, shared_mem=2**32), r"shared_mem=4294967296"),
    (dict(grid=0, block=256), r"grid=0: give a positive int"),
])
def test_launch_configuration_beyond_cuda_limits_is_refused(kernels, config, message):
    """Each limit is checked before the launch; nothing reaches the launcher."""
    call, rec = kernels["count"]
    with pytest.raises(jitlab.ArgumentError, match=r"count\(\): .*" + message):
        call(4, **config)
    assert rec.launches == []


def test_launch_configuration_at_cuda_limits_passes(kernels):
    """The largest legal grid and block reach the launcher unchanged, tuples checked once and remembered."""
    call, rec = kernels["count"]
    for _ in range(2):
        call(4, grid=(2**31 - 1, 65535, 65535), block=(1024, 1, 1))
        call(4, grid=(8, 8), block=(16, 16, 4), shared_mem=2**32 - 1)
    assert rec.launches[0][:7] == (2**31 - 1, 65535, 65535, 1024, 1, 1, 0)
    assert rec.launches[1][:7] == (8, 8, 1, 16, 16, 4, 2**32 - 1)
    assert rec.launches[2:] == rec.launches[:2]


def test_kernel_integer_argument_out_of_range_is_refused(kernels):
    """A kernel's int parameter given 2**40 is refused, not masked to 0."""
    call, rec = kernels["count"]
    with pytest.raises(jitlab.ArgumentError, match=r"count\(\): argument 1 `n` \(int\) must be in"):
        call(2**40, grid=1, block=1)
    assert rec.launches == []


# ---- 7. check categories ----------------------------------------------------------------------
def _check(snippet, calls_cache, variant):
    return jobs.run_job(jobs.Job("check", str(snippet), variant=variant, cache_dir=str(calls_cache)))


def test_cpp_exception_in_a_check_is_category_exception(m, snippet, calls_cache):
    """The original version throws std::invalid_argument: `exception`, with the C++ message and where."""
    out = _check(snippet, calls_cache, "original")
    assert out.category == jobs.EXCEPTION == "exception"
    assert "must_be_positive() raised a C++ exception: n must be positive" in out.message
    assert out.where == "faults_calls/original at size 1, seed 0"
    assert "FAIL [exception]" in str(out)


def test_wrong_result_is_still_a_mismatch_and_right_one_passes(m, snippet, calls_cache):
    """The new category takes nothing from the others."""
    assert _check(snippet, calls_cache, "wrong").category == jobs.MISMATCH
    assert _check(snippet, calls_cache, "right").category == jobs.PASS


def test_cpp_exception_outside_a_check_is_category_exception(m, snippet, calls_cache):
    """A `run` job (the profiler's workload) that throws is `exception` too."""
    out = jobs.run_job(jobs.Job("run", str(snippet), variant="original", size=1, repeat=1, cache_dir=str(calls_cache)))
    assert out.category == jobs.EXCEPTION
    assert "n must be positive" in out.message


# ==================================================================================================
# C. Sources, keys and saves
# ==================================================================================================
SCALE_WITH_HEADER = """
#include {include}
void scale(float* y, const float* x, int n) {{
    for (int i = 0; i < n; ++i) y[i] = FACTOR * x[i];
}}
"""


def first(m) -> float:
    """``m.scale`` applied to ones: the factor the build was compiled with."""
    y = torch.empty(3)
    m.scale(y, torch.ones(3), 3)
    return y[0].item()


def header_folder(tmp_path: Path, factor: str) -> Path:
    """A folder outside the snippet's, holding cfg.h, which includes factor.h (the value)."""
    inc = tmp_path / "include"
    inc.mkdir(exist_ok=True)
    (inc / "cfg.h").write_text('#pragma once\n#include "factor.h"\n')
    (inc / "factor.h").write_text(f"#define FACTOR {factor}\n")
    return inc


# ---- 1. headers found through the user's include flags -------------------------------------------

@pytest.mark.parametrize("include,flags", [
    ('"cfg.h"', lambda d: ["-I" + str(d)]),
    ("<cfg.h>", lambda d: ["-isystem", str(d)]),
], ids=["-I", "-isystem"])
@pytest.mark.slow
def test_edited_header_in_a_flag_include_folder_is_rebuilt(cache, write, tmp_path, include, flags):
    """Editing a header reached through -I / -isystem gives the new result here and in a new process."""
    inc = header_folder(tmp_path, "2.0f")
    p = write("k.cpp", SCALE_WITH_HEADER.format(include=include))
    assert first(jitlab.load(p, cflags=flags(inc))) == 2.0
    (inc / "factor.h").write_text("#define FACTOR 7.0f\n")  # nested: cfg.h includes it
    code = f"import jitlab, torch; m = jitlab.load({str(p)!r}, cflags={flags(inc)!r}); " \
           f"y = torch.empty(1); m.scale(y, torch.ones(1), 1); print('RESULT', y.item())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert "RESULT 7.0" in out.stdout, out.stdout + out.stderr
    m = jitlab.load(p, cflags=flags(inc))
    assert first(m) == 7.0 and m.build.cached  # the other process built it under the same key


def test_flag_include_headers_are_in_each_units_object_key(write, tmp_path):
    """A torch-style unit carries the hashes of the headers it includes, so its cached object is not reused."""
    inc = header_folder(tmp_path, "2")
    p = write("t.cpp", "#include <torch/extension.h>\n#include \"cfg.h\"\n"
                       "torch::Tensor scale(torch::Tensor x) { return x * FACTOR; }\n")
    opts = Options(cflags=["-I" + str(inc)])
    before, _, parts_before = builder.prepare(p, opts)
    (inc / "factor.h").write_text("#define FACTOR 5\n")
    after, _, parts_after = builder.prepare(p, opts)
    [unit_before] = [u for u in before.units if u.source == str(p.resolve())]
    [unit_after] = [u for u in after.units if u.source == str(p.resolve())]
    assert str((inc / "factor.h").resolve()) in dict(unit_after.deps)
    assert unit_before.deps != unit_after.deps
    assert parts_before["headers"] != parts_after["headers"]
    assert [u.name for u in after.units] == ["t.cpp"] and after.entries  # scale's entry ends the one unit


@pytest.mark.slow
def test_torch_style_header_edit_recompiles_its_unit(cache, write, tmp_path):
    """End to end: a torch-style .cpp whose header (via -I) changes runs the new header."""
    inc = header_folder(tmp_path, "2")
    p = write("t.cpp", "#include <torch/extension.h>\n#include \"cfg.h\"\n"
                       "torch::Tensor scale(torch::Tensor x) { return x * FACTOR; }\n")
    assert jitlab.load(p, cflags=["-I" + str(inc)]).scale(torch.ones(2)).tolist() == [2, 2]
    (inc / "factor.h").write_text("#define FACTOR 5\n")
    m = jitlab.load(p, cflags=["-I" + str(inc)])
    assert m.scale(torch.ones(2)).tolist() == [5, 5]
    assert {u["name"]: u["cached"] for u in m.build.manifest.units} == {"t.cpp": False}


def test_toolchain_include_folders_are_not_user_folders(tmp_path):
    """torch's and CUDA's include folders passed as flags are the toolchain's (its fingerprint covers them)."""
    from torch.utils import cpp_extension

    from jitlab.jit import toolchain

    mine = tmp_path / "mine"
    flags = [*(f"-I{d}" for d in cpp_extension.include_paths("cpu")),
             "-isystem", str(toolchain.cuda_home() / "include"), f"-I{mine}", "-I/usr/include"]
    assert user_include_dirs(Options(cflags=flags, cuda_cflags=[f"--include-path={mine}"])) \
        == [str(mine.resolve())]


# ---- 2. internal helpers in kernel-only snippets -------------------------------------------------

HELPERS_CPP = """
#include <cstddef>
struct Pair { float a, b; };
static float twice(const Pair& p) { return 2 * p.a; }
constexpr float one() { return 1.0f; }
inline Pair make(float v) { return {v, v}; }
namespace { float add_one(float& v) { return v + one(); } }
void scale(float* y, const float* x, int n) {
    for (int i = 0; i < n; ++i) { float v = twice(make(x[i])); y[i] = add_one(v); }
}
"""


def test_cpp_internal_helpers_build_and_are_not_exported(cache, write):
    """static / constexpr / inline / anonymous-namespace helpers with unmappable types are internal."""
    m = jitlab.load(write("helpers.cpp", HELPERS_CPP))
    assert m.functions == ["scale"]
    assert first(m) == 3.0
    with pytest.raises(AttributeError, match="drop `static` to call it from Python"):
        m.twice
    reasons = dict(m.build.plan.skipped)
    assert set(reasons) == {"twice", "one", "make", "add_one"}
    assert "anonymous namespace" in reasons["add_one"] and "`constexpr`" in reasons["one"]


HELPERS_CU = """
static int blocks_for(int n) { return (n + 255) / 256; }
constexpr int block_size() { return 256; }
__host__ __device__ inline float twice(float v) { return 2.0f * v; }
__host__ __device__ __forceinline__ float thrice(float v) { return 3.0f * v; }
namespace { __global__ void hidden(float* y) {} }
__global__ void scale(float* y, const float* x, int n) {
    int i = blockIdx.x * block_size() + threadIdx.x;
    if (i < n) y[i] = thrice(twice(x[i]));
}
"""


@pytest.mark.slow
def test_cu_internal_helpers_parse_as_internal_and_compile(cache, write):
    """The .cu's helpers are internal (parse), and nvcc compiles the snippet with only `scale` exported."""
    p = write("helpers.cu", HELPERS_CU)
    internal = {fn.name: fn.internal for fn in parse_file(p).functions}
    assert internal == {"blocks_for": "static", "block_size": "constexpr", "twice": "inline", "thrice": "inline",
                        "hidden": "anonymous namespace", "scale": ""}
    b = jitlab.build(p, compile_only=True, arch="sm_90", engine="nvcc")
    assert [fn.name for fn in b.plan.exported] == ["scale"]
    assert b.artifact.is_file() and "scale" in b.resources


def test_an_unmappable_helper_is_left_out_with_why(cache, write):
    """A helper taking a reference is left out of the module with the reason; the rest builds and runs."""
    src = "float norm(const float& v) { return v; }\n" \
          "void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = norm(x[i]); }\n"
    m = jitlab.load(write("advice.cpp", src))
    assert "cannot pass from Python" in dict(m.build.plan.skipped)["norm"] and "norm:" in repr(m)
    with pytest.raises(AttributeError, match="not callable from Python"):
        m.norm
    assert first(m) == 1.0


def test_torch_style_anonymous_namespace_function_is_not_bound(write):
    """A torch-style helper in an anonymous namespace is not bound (the binding unit could not link it)."""
    p = write("t.cpp", """
        #include <torch/extension.h>
        namespace { torch::Tensor helper(torch::Tensor x) { return x; } }
        constexpr int kTwo = 2;
        torch::Tensor op(torch::Tensor x) { return helper(x) * kTwo; }
    """)
    plan = codegen.plan([parse_file(p)], "t")
    assert [fn.name for fn in plan.exported] == ["op"] and "anonymous namespace" in dict(plan.skipped)["helper"]


# ---- 3. awkward paths ----------------------------------------------------------------------------

def test_line_directive_escapes_backslash_and_quote():
    r"""A path with " and \ is written as a valid C string literal."""
    assert line_directive('/a/we"ird\\dir/k.cu') == '#line 1 "/a/we\\"ird\\\\dir/k.cu"\n'


_LINE = re.compile(r'^#line \d+ "((?:[^"\\]|\\.)*)"$', re.MULTILINE)


def test_every_generated_line_directive_is_escaped(tmp_path):
    """Kernel-only sources and torch-style units (split .cu included) name the file as it is on disk."""
    folder = tmp_path / 'we"ird\\dir'
    folder.mkdir()
    k = folder / "k.cpp"
    k.write_text("void k(float* y) {}\n")
    t = tmp_path / "back\\slash" / "t.cu"  # a CUDA file's path cannot hold a quote (see below)
    t.parent.mkdir()
    t.write_text("#include <torch/extension.h>\n__global__ void k(float* y) {}\n"
                 "torch::Tensor op(torch::Tensor x) { k<<<1, 1>>>(x.data_ptr<float>()); return x; }\n")
    texts = [*codegen.plan([parse_file(k)], "k").cpp_sources,
             *(u.text for u in codegen.plan([parse_file(t)], "t").units)]
    names = {re.sub(r"\\(.)", r"\1", m) for text in texts for m in _LINE.findall(text)}
    assert {str(k), str(t)} <= names
    assert all(text.count("#line") == len(_LINE.findall(text)) for text in texts)


@pytest.fixture
def odd_folder(tmp_path) -> Path:
    d = tmp_path / 'we"ird\\dir'
    d.mkdir()
    return d


def test_snippet_in_a_folder_with_quote_and_backslash_builds(cache, odd_folder):
    """A .cpp (with a local header) in such a folder builds and runs."""
    (odd_folder / "f.h").write_text("#define FACTOR 4.0f\n")
    p = odd_folder / "k.cpp"
    p.write_text(SCALE_WITH_HEADER.format(include='"f.h"'))
    assert first(jitlab.load(p)) == 4.0


def test_snippet_in_a_folder_with_a_newline_in_its_name_builds(cache, tmp_path):
    """A .cpp with a local header in a folder whose name holds a newline (which ends a line of ninja's build
    file) builds and runs, its folder reached through a link."""
    folder = tmp_path / "line\nbreak"
    folder.mkdir()
    (folder / "f.h").write_text("#define FACTOR 3.0f\n")
    p = folder / "k.cpp"
    p.write_text(SCALE_WITH_HEADER.format(include='"f.h"'))
    assert first(jitlab.load(p)) == 3.0


def test_errors_in_such_a_folder_name_the_users_file(cache, odd_folder):
    """A compile error (in the snippet, then in its header) is a CompileError at the right file and line."""
    p = odd_folder / "bad.cpp"
    p.write_text("void scale(float* y, const float* x, int n) {\n  y[0] = undefined_name;\n}\n")
    with pytest.raises(CompileError) as e:
        jitlab.load(p)
    assert (e.value.diagnostics[0].path, e.value.diagnostics[0].line) == (str(p), 2)
    (odd_folder / "h.h").write_text("int oops = ;\n")
    p.write_text('#include "h.h"\nvoid scale(float* y, const float* x, int n) { y[0] = x[0]; }\n')
    with pytest.raises(CompileError) as e:
        jitlab.load(p)
    assert (e.value.diagnostics[0].path, e.value.diagnostics[0].line) == (str(odd_folder / "h.h"), 1)


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["nvcc", "auto"])
def test_cu_in_a_folder_with_a_backslash_compiles_and_errors_name_it(cache, tmp_path, engine):
    """nvcc and NVRTC (auto) compile a .cu there, and report its error at its own path and line."""
    (tmp_path / "back\\slash").mkdir()
    p = tmp_path / "back\\slash" / "k.cu"
    p.write_text("__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    assert jitlab.build(p, compile_only=True, arch="sm_90", engine=engine).artifact.is_file()
    p.write_text("__global__ void k(float* y) {\n  y[threadIdx.x] = undefined_name;\n}\n")
    with pytest.raises(CompileError) as e:
        jitlab.build(p, compile_only=True, arch="sm_90", engine=engine)
    assert (e.value.diagnostics[0].path, e.value.diagnostics[0].line) == (str(p), 2)


def test_cu_in_a_folder_with_a_quote_is_refused_with_the_fix(cache, odd_folder):
    """nvcc and ptxas cannot take a quote in a CUDA file's path: a SnippetError says so, not a CompileError."""
    p = odd_folder / "k.cu"
    p.write_text("__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    with pytest.raises(SnippetError, match="rename the folder or file without it"):
        jitlab.build(p, compile_only=True, arch="sm_90", engine="nvcc")


def test_backtick_in_a_cu_folder_runs_nothing(cache, tmp_path, monkeypatch):
    """nvcc runs its steps through a shell: a `.cu` (with a local header) in a folder whose name holds
    `` `touch MARK` `` compiles as nvcc, and nothing runs the command."""
    monkeypatch.chdir(tmp_path)  # where the command would make MARK
    d = tmp_path / "a`touch MARK`b"
    d.mkdir()
    (d / "four.h").write_text("#define FOUR 4.0f\n")
    p = d / "k.cu"
    p.write_text('#include "four.h"\n__global__ void k(float* y) { y[threadIdx.x] = FOUR; }\n')
    b = jitlab.build(p, compile_only=True, arch="sm_90", engine="nvcc")
    assert b.artifact.is_file() and not list(tmp_path.rglob("MARK"))
    assert str(d / "four.h") in (b.folder / "cuda.d").read_text().replace("\\ ", " ")


def test_backtick_in_a_cache_folder_is_refused_with_the_fix(write, tmp_path, monkeypatch):
    """A cache folder whose path holds a backtick is refused for nvcc, naming JITLAB_CACHE_DIR; nothing runs."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(tmp_path / "c`touch MARK`"))
    p = write("k.cu", "__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    with pytest.raises(jitlab.ToolchainError, match="backtick.*set JITLAB_CACHE_DIR"):
        jitlab.build(p, compile_only=True, arch="sm_90", engine="nvcc")
    assert not list(tmp_path.rglob("MARK"))


@pytest.mark.parametrize("char", ["$", ":"])
def test_cache_folder_with_ninja_special_characters_builds(write, tmp_path, monkeypatch, char):
    """torch's build.ninja cannot name such a folder; the build still works, and the cache stays there."""
    root = tmp_path / f"ca{char}che"
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(root))
    p = write("k.cpp", "void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = 2 * x[i]; }\n")
    m = jitlab.load(p)
    assert first(m) == 2.0 and m.build.folder.parent == root and m.build.artifact.is_file()


def test_snippet_folder_with_a_dollar_builds(cache, tmp_path):
    """The snippet's own folder (an include path in build.ninja) may hold a `$` too."""
    d = tmp_path / "a$HOME"
    d.mkdir()
    (d / "f.h").write_text("#define FACTOR 6.0f\n")
    p = d / "k.cpp"
    p.write_text(SCALE_WITH_HEADER.format(include='"f.h"'))
    assert first(jitlab.load(p)) == 6.0


# ---- 4. a UTF-8 byte-order mark -------------------------------------------------------------------

BOM = b"\xef\xbb\xbf"


def test_cpp_with_a_byte_order_mark_builds_and_runs(cache, tmp_path):
    """A .cpp saved with a BOM builds and runs; the file keeps its bytes."""
    p = tmp_path / "bom.cpp"
    data = BOM + b"void scale(float* y, const float* x, int n) { for (int i = 0; i < n; ++i) y[i] = 3 * x[i]; }\n"
    p.write_bytes(data)
    assert first(jitlab.load(p)) == 3.0
    assert p.read_bytes() == data


@pytest.mark.parametrize("engine", ["nvcc", "auto"])
def test_cu_with_a_byte_order_mark_compiles(cache, tmp_path, engine):
    """A .cu saved with a BOM compiles (nvcc, and NVRTC through auto)."""
    p = tmp_path / "bom.cu"
    p.write_bytes(BOM + b"__global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n")
    b = jitlab.build(p, compile_only=True, arch="sm_90", engine=engine)
    assert b.artifact.is_file() and p.read_bytes().startswith(BOM)


# ---- 5. %%cpp / %%cuda saves ----------------------------------------------------------------------

KERNEL = "__global__ void k(float* y) {{ y[threadIdx.x] = {}; }}\n"


def cuda_cell(ip, text: str) -> None:
    """Run a `%%cuda k` cell that saves kernels/k.cu and compile-checks it (no GPU needed)."""
    ip.run_cell_magic("cuda", "k --compile-only --arch sm_90", text)


def test_save_refuses_a_symlinked_snippet(ip, tmp_path):
    """A `%%cuda NAME` whose kernels/NAME.cu is a link to a file outside is refused, naming the link and the
    fix; the file it points to keeps its text and mode, the link stays, and nothing goes to the history."""
    real = tmp_path / "elsewhere" / "k.cu"
    real.parent.mkdir()
    real.write_text(KERNEL.format("1.0f"))
    real.chmod(0o600)
    link = tmp_path / "kernels" / "k.cu"
    link.parent.mkdir()
    link.symlink_to(real)
    with pytest.raises(jitlab.SnippetError, match=rf"(?s)kernels/k.cu is a symbolic link to {real}.*never writes through.*--dir"):
        cuda_cell(ip, KERNEL.format("2.0f"))
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == KERNEL.format("1.0f") and real.stat().st_mode & 0o777 == 0o600
    assert snippets.history(link) == [] and sorted(x.name for x in link.parent.iterdir()) == ["k.cu"]


def test_save_keeps_the_files_mode(ip, tmp_path):
    """Saving over a 0664 snippet leaves it 0664 (not mkstemp's 0600)."""
    p = tmp_path / "kernels" / "k.cu"
    p.parent.mkdir()
    p.write_text(KERNEL.format("1.0f"))
    p.chmod(0o664)
    cuda_cell(ip, KERNEL.format("2.0f"))
    assert p.read_text() == KERNEL.format("2.0f")
    assert stat.S_IMODE(p.stat().st_mode) == 0o664


def test_new_snippet_and_history_get_the_umask_mode(ip, tmp_path):
    """A new snippet (and a history entry) gets 0666 less the umask, as any new file would."""
    old = os.umask(0o027)
    try:
        cuda_cell(ip, KERNEL.format("1.0f"))
        cuda_cell(ip, KERNEL.format("2.0f"))
    finally:
        os.umask(old)
    p = tmp_path / "kernels" / "k.cu"
    assert stat.S_IMODE(p.stat().st_mode) == 0o640
    [entry] = snippets.history(p)
    assert stat.S_IMODE(entry.stat().st_mode) == 0o640


def _texts_in_falling_hash_order(n: int) -> list[str]:
    """n kernels whose history names would sort, by hash, in the reverse of their save order."""
    import hashlib

    out, last = [], "g"
    for i in range(10_000):
        text = KERNEL.format(f"{i}.0f")
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        if digest < last:
            out.append(text)
            last = digest
            if len(out) == n:
                return out
    raise AssertionError("no such texts")


def test_history_saved_within_one_second_is_in_save_order(ip, tmp_path):
    """%%cuda cells run in quick succession (one second) are listed oldest first, whatever their hashes."""
    texts = _texts_in_falling_hash_order(4)
    ip.run_cell_magic("cuda", "warm --compile-only --arch sm_90", KERNEL.format("0.0f"))  # imports, toolchain
    for text in texts:
        cuda_cell(ip, text)
    p = tmp_path / "kernels" / "k.cu"
    assert [e.read_text() for e in snippets.history(p)] == texts[:-1]
    assert p.read_text() == texts[-1]


def test_history_order_survives_a_coarse_clock(tmp_path, monkeypatch):
    """Saves in one clock tick (or after the clock went back) still get later names, in order."""
    ticks = iter([2_000_000_000_000_000_000, 2_000_000_000_000_000_000, 1_999_000_000_000_000_000])
    monkeypatch.setattr(snippets.time, "time_ns", lambda: next(ticks))
    texts = _texts_in_falling_hash_order(4)
    p = tmp_path / "k.cpp"
    for text in texts:
        snippets.save(p, text)
    entries = snippets.history(p)
    assert [e.read_text() for e in entries] == texts[:-1]
    assert sorted(e.name for e in entries) == [e.name for e in entries]


def test_history_labels_show_the_save_time():
    """The playground's labels read both the new names and the older whole-second ones."""
    assert snippets.version_label(Path("20240102-134501-123456789-abcd1234.cu")) == "2024-01-02 13:45:01.123 (abcd1234)"
    assert snippets.version_label(Path("20240102-134501-abcd1234.cu")) == "2024-01-02 13:45:01 (abcd1234)"
