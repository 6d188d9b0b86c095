"""Warm starts for workers: one process that has imported torch and jitlab, from which each worker is forked.

A worker started as ``python -m jitlab.worker.jobs --serve`` spends its first seconds importing torch (about
2 CPU-seconds on a laptop core, more on Colab's). A process that starts several (a tuner's pool, a check after
every crash or timeout, a test suite) starts a fork server once instead: it imports what a worker needs, never
touches CUDA, and forks a worker per request in milliseconds. The worker makes its own CUDA context after the
fork, as a worker started from scratch does.

The protocol (a private ``SOCK_SEQPACKET`` socket pair, one message each way per request): the caller sends
the worker's environment and folder with three file descriptors (the worker's stdin, its stdout, and a pipe
for its exit status) and gets the worker's pid back. The server is the worker's parent: it reaps it and writes
its return code (a Popen's: ``-N`` for signal N) to the status pipe. :class:`Forked` gives the caller what it
uses of a ``subprocess.Popen``. Without ``fork`` (not Linux) or with ``JITLAB_FORK_WORKERS=0``, workers start
as processes of their own, as before.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from jitlab import config
from jitlab.jit import processes
from jitlab.worker import jobs

#: Variables read when a Python process starts or imports torch: a worker forked from a server started
#: with other values would not be the process they describe, so each set of values gets its own server.
_STARTUP_PREFIXES = ("PYTHON", "LD_", "TORCH", "PYTORCH", "OMP_", "MKL_", "KMP_", "GOMP_")
_MESSAGE = 1 << 20


class Forked:
    """A worker forked by the server: the part of ``subprocess.Popen`` that :class:`~jitlab.worker.isolate.Worker`
    uses (``pid``, ``stdin``, ``stdout``, ``poll``, ``wait``, ``kill``, ``returncode``)."""

    def __init__(self, pid: int, stdin, stdout, status: int):
        self.pid, self.stdin, self.stdout, self.returncode = pid, stdin, stdout, None
        self._status = status  # the read end of the pipe the server writes the return code to

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self._read_status()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._status], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(f"worker {self.pid}", timeout)
            self._read_status()
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def _read_status(self) -> None:
        data = os.read(self._status, 8)
        os.close(self._status)
        # No word: the server died before the worker (killed from outside), and nothing can tell how the worker
        # ends any more. It is taken as ended; it leaves when its caller closes its stdin (Worker.stop).
        self.returncode = int.from_bytes(data, "little", signed=True) if len(data) == 8 else -signal.SIGKILL


class Server:
    """One fork server (``python -m jitlab.worker.forkserver FD``), for one set of start-up variables."""

    def __init__(self, env: dict):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock, self.lock = ours, threading.Lock()
        self.proc = subprocess.Popen([sys.executable, "-m", "jitlab.worker.forkserver", str(theirs.fileno())],
                                     pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        theirs.close()

    def ready(self, deadline: float) -> bool:
        """Whether the server said it is ready (torch imported) by ``deadline`` (a ``time.monotonic()`` value)."""
        left = max(0.0, deadline - time.monotonic())
        return bool(select.select([self.sock], [], [], left)[0]) and self.sock.recv(16) == b"ready"

    def fork(self, env: dict, cwd: str) -> Forked:
        """A new worker with ``env`` in ``cwd``; ``OSError`` when the server is gone."""
        to_child, stdin = os.pipe()
        stdout, from_child = os.pipe()
        status, status_w = os.pipe()
        try:
            with self.lock:
                socket.send_fds(self.sock, [pickle.dumps((env, cwd))], [to_child, from_child, status_w])
                answer = self.sock.recv(16)
            if len(answer) != 8:
                raise OSError("the fork server ended")
        except BaseException:
            for fd in (stdin, stdout, status):
                os.close(fd)
            raise
        finally:
            for fd in (to_child, from_child, status_w):
                os.close(fd)
        return Forked(int.from_bytes(answer, "little"), os.fdopen(stdin, "wb"), os.fdopen(stdout, "rb"), status)

    def stop(self) -> None:
        """End the server (its workers go on: each ends when its caller closes its stdin)."""
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


_servers: dict[tuple, Server] = {}
_servers_lock = threading.Lock()


def enabled() -> bool:
    """Whether workers are forked from a server (``JITLAB_FORK_WORKERS``, default on where ``fork`` exists)."""
    return hasattr(os, "fork") and hasattr(socket, "send_fds") and config.getenv("JITLAB_FORK_WORKERS", "1") != "0"


def start_worker(env: dict, deadline: float) -> Forked | None:
    """A worker (``jobs.serve``) forked with ``env`` in this folder, or None where no server can serve it (not
    enabled, or its server did not start by ``deadline``): the caller then starts the worker as a process."""
    if not enabled():
        return None
    key = (sys.executable, *sorted((k, v) for k, v in env.items() if k.startswith(_STARTUP_PREFIXES)))
    with _servers_lock:
        server = _servers.get(key)
        if server is None or server.proc.poll() is not None:
            server = _servers[key] = Server(env)
            if not server.ready(deadline):
                server.stop()
                return None
    try:
        return server.fork(env, os.getcwd())
    except OSError:
        with _servers_lock:
            if _servers.get(key) is server:
                del _servers[key]
        server.stop()
        return None


def _forget_servers() -> None:
    """In a child this process forks (not exec): the servers are the parent's; the child starts its own."""
    for server in _servers.values():
        server.sock.close()  # the child's copy: the parent's socket stays open
    _servers.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_servers)


@processes.at_end
def stop_all() -> None:
    """Stop every fork server of this process (at exit)."""
    for server in list(_servers.values()):
        server.stop()
    _servers.clear()


# ---- the server's side ----------------------------------------------------------------------------------

def _serve(sock: socket.socket) -> None:
    """Fork a worker per request until the caller closes its end; reap them and report how each ended."""
    jobs.warm_up(cuda=False)  # what every worker needs, imported once, here
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a child's end wakes the select below
    status: dict[int, int] = {}  # worker pid -> the write end of its status pipe
    sock.send(b"ready")
    while True:
        ready = select.select([sock, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(status)
        if sock in ready:
            msg, fds, _, _ = socket.recv_fds(sock, _MESSAGE, 3)
            if not msg:
                return
            pid = os.fork()
            if pid == 0:
                _become_worker(fds, *pickle.loads(msg))
            os.close(fds[0])
            os.close(fds[1])
            status[pid] = fds[2]
            sock.send(pid.to_bytes(8, "little"))


def _reap(status: dict[int, int]) -> None:
    for pid in list(status):
        done, how = os.waitpid(pid, os.WNOHANG)
        if done:
            fd = status.pop(pid)
            try:
                os.write(fd, os.waitstatus_to_exitcode(how).to_bytes(8, "little", signed=True))
            except OSError:  # the caller is gone
                pass
            os.close(fd)


def _become_worker(fds: list[int], env: dict, cwd: str) -> None:
    """In the forked child: take the pipes as stdin and stdout, the caller's environment and folder, and serve
    jobs as ``python -m jitlab.worker.jobs --serve`` does. Never returns."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        os.close(fds[2])
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 4096)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = [str(Path(__file__).with_name("jobs.py")), "--serve"]
        code = jobs.main(["--serve"])
        atexit._run_exitfuncs()
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def main(argv: list[str] | None = None) -> int:
    """``python -m jitlab.worker.forkserver FD``: serve fork requests on the socket ``FD``."""
    argv = sys.argv[1:] if argv is None else argv
    _serve(socket.socket(fileno=int(argv[0])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
