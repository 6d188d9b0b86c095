"""Subprocess plumbing: the environment a child jitlab runs in, pickle frames on a pipe, job files.

Used by the warm worker (:mod:`jitlab.worker.isolate` ↔ :mod:`jitlab.worker.jobs`), the tools that
run one job under themselves (compute-sanitizer, ncu) and the notebook runner.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Callable

from jitlab import config

#: The bytes in a frame's header: the pickle's length, little-endian.
HEADER = 8


def python_env(base: dict | None = None, **extra: str) -> dict:
    """``base`` (default: this process's environment) plus ``extra``, with this jitlab first on PYTHONPATH."""
    env = dict(os.environ if base is None else base, **extra)
    env["PYTHONPATH"] = os.pathsep.join([str(config.SOURCE_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def frame(obj) -> bytes:
    """``obj`` pickled, behind its length."""
    data = pickle.dumps(obj)
    return len(data).to_bytes(HEADER, "little") + data


def frame_size(header: bytes) -> int:
    """The length a frame's header announces."""
    return int.from_bytes(header, "little")


def write_frame(f, obj) -> None:
    """Write one frame to a binary file and flush it."""
    f.write(frame(obj))
    f.flush()


def read_frame(f):
    """The next frame's object from a binary file, or None at its end."""
    head = f.read(HEADER)
    if len(head) < HEADER:
        return None
    return pickle.loads(f.read(frame_size(head)))


def read_job_file(path: str | Path):
    """A job (or an outcome) from the pickle file a tool's child was handed."""
    return pickle.loads(Path(path).read_bytes())


def write_job_file(path: str | Path, obj) -> None:
    """Write a job (or an outcome) as a pickle file."""
    Path(path).write_bytes(pickle.dumps(obj))


def run_job_under(command: Callable[[str, str], list[str]], job, *, env: dict, timeout: float,
                  prefix: str) -> tuple[str, object, float]:
    """Run one job in a child started by ``command(job_file, result_file)`` (a tool wrapping
    ``python -m jitlab.worker.jobs JOB RESULT``).

    Returns:
        The child's stdout and stderr (with a note when it ran past ``timeout``), its outcome (None
        when it wrote none) and the seconds it ran.
    """
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        job_file, result_file = Path(tmp) / "job.pkl", Path(tmp) / "outcome.pkl"
        write_job_file(job_file, job)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(command(str(job_file), str(result_file)), capture_output=True, text=True,
                                  env=env, timeout=timeout)
            text = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as e:
            text = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            text += f"\njitlab: stopped after {timeout:g} s"
        seconds = time.perf_counter() - t0
        outcome = read_job_file(result_file) if result_file.is_file() else None
    return text, outcome, seconds
