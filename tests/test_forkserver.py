"""Warm starts: check workers forked from one process that imported torch once (jitlab.worker.forkserver), each
with its caller's environment and folder, its end reported as a process's would be."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from conftest import ROOT

from jitlab.worker import forkserver, isolate, jobs

ADD2 = ROOT / "kernels" / "add2_cpu.cpp"


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.fixture
def workers():
    """Workers made by the test, stopped after it."""
    made = []

    def _make(env):
        w = isolate.Worker(env)
        made.append(w)
        return w

    yield _make
    for w in made:
        w.stop()


@pytest.mark.slow
def test_workers_with_other_caches_fork_from_one_server_and_each_builds_in_its_own(tmp_path, workers, monkeypatch):
    """Two workers with their own JITLAB_CACHE_DIR (and the second started from another folder) are children of
    one fork server; each passes a check and builds in its own cache, from its own folder."""
    monkeypatch.setenv("JITLAB_FORK_WORKERS", "1")
    a, b = workers({"JITLAB_CACHE_DIR": str(tmp_path / "a")}), workers({"JITLAB_CACHE_DIR": str(tmp_path / "b")})
    a.start()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    b.start()
    assert isinstance(a.proc, forkserver.Forked) and isinstance(b.proc, forkserver.Forked)
    assert _parent(a.proc.pid) == _parent(b.proc.pid) != os.getpid()
    assert Path(f"/proc/{b.proc.pid}/cwd").resolve() == (tmp_path / "elsewhere").resolve()
    for w, cache in ((a, "a"), (b, "b")):
        assert w.run(jobs.Job("check", str(ADD2)), 120).passed
        assert any((tmp_path / cache).rglob("*.so")), f"nothing built in {cache}"


@pytest.mark.slow
def test_a_killed_worker_is_reported_with_its_signal(workers, monkeypatch):
    """A forked worker that dies of SIGSEGV is reported as a Popen child would be: return code -11, the
    worker's message naming SIGSEGV; the next check gets a fresh worker that passes."""
    monkeypatch.setenv("JITLAB_FORK_WORKERS", "1")
    w = workers({})
    w.start()
    pid = w.proc.pid
    os.kill(pid, signal.SIGSEGV)
    assert w.proc.wait(timeout=30) == -signal.SIGSEGV
    assert isolate._how_it_ended(w.proc) == "was killed by SIGSEGV"
    assert w.run(jobs.Job("check", str(ADD2)), 120).passed
    assert w.proc.pid != pid


@pytest.mark.slow
def test_other_start_up_variables_get_their_own_server(workers, monkeypatch):
    """PYTHONPATH is read when Python starts: workers asking for another one come from another server."""
    monkeypatch.setenv("JITLAB_FORK_WORKERS", "1")
    a = workers({})
    a.start()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    b = workers({})
    b.start()
    assert _parent(a.proc.pid) != _parent(b.proc.pid)


@pytest.mark.slow
def test_a_dead_server_is_replaced(workers, monkeypatch):
    """A fork server killed from outside is noticed at the next start: a new one forks the worker."""
    monkeypatch.setenv("JITLAB_FORK_WORKERS", "1")
    a = workers({})
    a.start()
    server = _parent(a.proc.pid)
    os.kill(server, signal.SIGKILL)
    time.sleep(0.2)
    b = workers({})
    b.start()
    assert b.run(jobs.Job("check", str(ADD2)), 120).passed
    assert _parent(b.proc.pid) not in (server, os.getpid())


@pytest.mark.slow
def test_fork_workers_off_starts_processes_of_their_own(workers, monkeypatch):
    """JITLAB_FORK_WORKERS=0: the worker is this process's own child, started from scratch."""
    monkeypatch.setenv("JITLAB_FORK_WORKERS", "0")
    w = workers({})
    w.start()
    assert not isinstance(w.proc, forkserver.Forked)
    assert _parent(w.proc.pid) == os.getpid()


@pytest.mark.slow
def test_a_forked_child_of_the_caller_starts_its_own_server(workers, monkeypatch):
    """A process that forks after starting a worker: the child does not talk on its parent's socket (the
    two would read each other's answers); it starts a server of its own, and the parent's still serves."""
    monkeypatch.setenv("JITLAB_FORK_WORKERS", "1")
    first = workers({})
    first.start()
    server = _parent(first.proc.pid)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: a worker of its own, from a server that is not the parent's
        code = 1
        try:
            os.close(r)
            child = isolate.Worker({})
            child.start()
            code = 0 if isinstance(child.proc, forkserver.Forked) and _parent(child.proc.pid) != server else 2
            child.stop()
        finally:
            os.write(w, bytes([code]))
            os._exit(0)
    os.close(w)
    answer = os.read(r, 1)
    os.waitpid(pid, 0)
    assert answer == b"\x00"
    again = workers({})
    again.start()
    assert _parent(again.proc.pid) == server
