"""The compilers a process runs: at most MAX_JOBS at once, however many builds wait side by side."""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading
import time

import pytest

from jitlab.jit import processes
from jitlab.worker.pool import BUILDS_PER_THREAD, LocalPool

# A stand-in compiler: prints when it started and ended (seconds since the epoch), holding its slot between.
SPAN = [sys.executable, "-c", "import time; a = time.time(); time.sleep(0.4); print(a, time.time())"]


def _spans(count: int) -> list[tuple[float, float]]:
    out: list = [None] * count

    def one(i: int) -> None:
        out[i] = tuple(map(float, processes.run(SPAN).stdout.split()))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(out)


def _overlaps(spans) -> int:
    return sum(1 for (_, end), (start, _) in zip(spans, spans[1:]) if start < end)


def test_compilers_run_at_most_max_jobs_at_once(monkeypatch):
    """With one slot, three compilers started together run one after another; with three, side by side."""
    monkeypatch.setattr(processes, "_slots", threading.BoundedSemaphore(1))
    assert _overlaps(_spans(3)) == 0
    monkeypatch.setattr(processes, "_slots", threading.BoundedSemaphore(3))
    assert _overlaps(_spans(3)) == 2


@pytest.mark.slow
def test_a_command_may_limit_the_compilers_while_it_runs(monkeypatch):
    """`jitlab check -j 1` runs one compiler at a time while it runs, then the process's limit is back."""
    monkeypatch.setattr(processes, "_slots", threading.BoundedSemaphore(3))
    with processes.limited(1):
        assert _overlaps(_spans(3)) == 0
    assert _overlaps(_spans(3)) == 2
    with processes.limited(None):
        assert _overlaps(_spans(3)) == 2


@pytest.mark.parametrize("value, expected", [("3", 3), ("0", None), ("many", None), ("", None)])
def test_max_jobs_is_read_as_torch_reads_it(monkeypatch, value, expected):
    """MAX_JOBS (torch's variable) sets the slots; a value that is not a positive count means the cores."""
    monkeypatch.setenv("MAX_JOBS", value)
    assert processes._jobs() == (expected or len(os.sched_getaffinity(0)))


def test_an_interrupt_starts_none_of_the_compilers_waiting_for_a_slot(monkeypatch, tmp_path):
    """end_all kills the running compiler, and one waiting for its slot is never started."""
    monkeypatch.setattr(processes, "_slots", threading.BoundedSemaphore(1))
    marker = tmp_path / "started"
    results = {}

    def run(name, cmd):
        results[name] = processes.run(cmd)

    first = threading.Thread(target=run, args=("first", [sys.executable, "-c", "import time; time.sleep(30)"]))
    first.start()
    while not processes._running:
        time.sleep(0.01)
    waiting = threading.Thread(target=run, args=("waiting", [sys.executable, "-c", f"open({str(marker)!r}, 'w')"]))
    waiting.start()
    time.sleep(0.2)
    processes.end_all()
    first.join(10)
    waiting.join(10)
    assert results["first"].returncode == -9
    assert results["waiting"].returncode == -9 and "interrupted" in results["waiting"].stderr
    assert not marker.exists()


def test_end_everything_ends_the_compilers_and_what_at_end_names(monkeypatch):
    """What a SIGTERM runs: the running compilers are killed and each registered stopper runs, even after one
    before it raised; registering also hooks the stopper to the process's exit."""
    monkeypatch.setattr(processes, "_endings", [])
    monkeypatch.setattr(processes, "_closed", False)  # end_everything closes this worker's process for good
    kept = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    result = {}
    compiling = threading.Thread(target=lambda: result.update(run=processes.run([sys.executable, "-c",
                                                                                 "import time; time.sleep(60)"])))
    compiling.start()
    while not processes._running:
        time.sleep(0.01)

    def broken():
        raise RuntimeError("a stopper that fails")

    for stop in (broken, lambda: processes.kill(kept)):
        assert processes.at_end(stop) is stop
        atexit.unregister(stop)
    processes.end_everything()
    compiling.join(10)
    assert result["run"].returncode == -9
    assert kept.wait(10) == -9


def test_a_compiler_being_started_when_everything_ends_is_ended_and_none_starts_after(monkeypatch):
    """A SIGTERM's ending waits for a compiler another thread is starting (its fork and exec take a while under
    load), so that compiler is killed too rather than left running after jitlab exits; after the ending, a build
    thread's next compiler is not started at all."""
    monkeypatch.setattr(processes, "_closed", False)
    monkeypatch.setattr(processes, "_endings", [])
    real_popen, entered = subprocess.Popen, threading.Event()

    def slow_popen(*args, **kwargs):  # a start caught between its lock and its process
        entered.set()
        time.sleep(0.5)
        return real_popen(*args, **kwargs)

    monkeypatch.setattr(subprocess, "Popen", slow_popen)
    result = {}
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    compiling = threading.Thread(target=lambda: result.update(run=processes.run(sleeper)))
    compiling.start()
    assert entered.wait(10)
    processes.end_everything()
    compiling.join(10)
    assert not compiling.is_alive() and result["run"].returncode == -9
    after = processes.run(sleeper)
    assert after.returncode == -9 and "not started" in after.stderr


def test_builds_that_wait_for_one_another_all_run_at_once():
    """BUILDS_PER_THREAD builds on one build thread are in flight together (a build waiting for a header set
    another makes holds no core): each waits here until all have started."""
    count = BUILDS_PER_THREAD
    met = threading.Barrier(count, timeout=10)

    def build(i):
        met.wait()
        return i * 2

    assert dict(LocalPool([], build_threads=1).builds(build, range(count))) == {i: i * 2 for i in range(count)}
