"""Process and cache faults (issue 11), each reproduced as a user meets it, on the CPU with C++ snippets.

Scenarios:

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
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab import cache as jcache
from jitlab import isolate, jobs
from jitlab.errors import CacheError

from conftest import ROOT

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
    env = {**os.environ, "JITLAB_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
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
    """A correct snippet whose function sleeps 3 s: a check that is still running when Ctrl-C comes."""
    p = write("slow_add.cpp", """
        #include <cstdint>
        #include <unistd.h>
        void slow_add(float* c, const float* a, const float* b, int64_t n) {
            usleep(3000000);
            for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
        }
    """)
    ref_for(p, "slow_add")
    return p


@contextmanager
def ctrl_c_after(seconds: float):
    """Deliver SIGINT to the main thread after ``seconds`` (as Ctrl-C does, interrupting a blocking wait)."""
    main = threading.main_thread().ident
    timer = threading.Timer(seconds, signal.pthread_kill, (main, signal.SIGINT))
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def test_ctrl_c_during_a_check_does_not_hand_its_answer_to_the_next_check(worker, slow_snippet):
    """After an interrupted check, a segfaulting snippet is reported as crashed, not as the old pass."""
    assert worker.run(jobs.Job("check", str(ADD2)), 120).passed  # a warm worker, as in a notebook
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), ctrl_c_after(1.0):
        worker.run(jobs.Job("check", str(slow_snippet)), 120)
    assert time.monotonic() - t0 < 2.5  # raised at once, not when the job finished
    out = worker.run(jobs.Job("check", str(FAULTS / "segv_cpu.cpp")), 120)
    assert out.category == jobs.CRASH, out
    assert worker.run(jobs.Job("check", str(ADD2)), 120).passed


def test_a_stale_answer_in_the_pipe_is_skipped_by_its_job_id(worker):
    """An answer nobody collected (a job sent by a caller that gave up) is never taken for the next job's."""
    assert worker.run(jobs.Job("check", str(ADD2)), 120).passed
    jobs._write_frame(worker.proc.stdin, jobs.Job("check", str(ADD2), id=-1))  # answered with a pass
    out = worker.run(jobs.Job("check", str(FAULTS / "segv_cpu.cpp")), 120)
    assert out.category == jobs.CRASH, out


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
    env = {**os.environ, "JITLAB_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
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


def test_a_frozen_builder_makes_waiters_give_up_naming_its_pid(frozen_builder, cache, monkeypatch, capfd):
    """A waiter reports the holder's PID while it waits, then raises a CacheError naming PID, lock and fix."""
    p, child = frozen_builder
    monkeypatch.setenv("JITLAB_LOCK_TIMEOUT", "2")
    monkeypatch.setattr(jcache, "LOCK_REPORT_EVERY", 0.5)
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
        with jcache.build_lock("x"):
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
        with mounted(tmp_path / f"disk{size}", "-t", "tmpfs", "-o", f"size={size}", "tmpfs") as disk:
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
    manifest = json.loads((b.folder / jcache.MANIFEST).read_text())
    manifest.update(size=len(garbage), sha256=jcache.file_sha256(b.artifact))
    jcache.write_manifest(b.folder, {k: v for k, v in manifest.items() if k != "format"})


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
