"""The tuner's results: one JSON line per point, appended as each point finishes.

A point is (kernel content, configuration, size, device model + driver). Each line is written with
one ``write`` on a file opened for appending, so a process killed mid-sweep (``kill -9``) leaves at
worst a torn last line: reading skips it, and the next append starts on a new line. Every line is
checked as it is read: one that is JSON but not a record of this store (``42``, ``null``, a median
that is text, NaN or not above zero) is skipped, and the store says once how many it skipped. Records are
per configuration, never per list of configurations, so a changed space keeps every old result and
a rerun skips the points it already has. The file is plain JSON lines: ``pandas.read_json(path,
lines=True)`` reads it.
"""

from __future__ import annotations

import json
import math
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from jitlab.judge import results
from jitlab.judge.space import config_key

#: What became of a point. Every status is final: a rerun does not try the point again.
OK = "ok"                # checked, then timed
WRONG = "wrong"          # checked and wrong: never timed
PRUNED = "pruned"        # the device cannot launch it (threads, shared memory, registers): never run
FAILED = "failed"        # did not compile, or raised
CRASHED = "crashed"      # the worker process died on it
TIMEOUT = "timeout"      # no answer within the point's timeout: the worker was stopped
BASELINE = "baseline"    # torch eager and torch.compile at this size (config None)
STATUSES = (OK, WRONG, PRUNED, FAILED, CRASHED, TIMEOUT, BASELINE)

#: A record's fields that hold text, and those that hold a number or None.
_TEXTS = ("kernel", "device", "status", "gpu", "host", "reason")
_NUMBERS = ("median_ms", "q25_ms", "q75_ms", "compile_ms", "throughput", "pct_roof", "seconds", "time")


@dataclass
class Record:
    """One point of a sweep.

    Attributes:
        kernel: The snippet's content hash (:func:`jitlab.judge.space.kernel_hash`).
        config: The ``#define`` values (None for a baseline record).
        size: The problem size.
        device: The device model and driver (``"NVIDIA H100 80GB HBM3, driver 580.65"``, ``"cpu"``).
        status: One of :data:`OK`, :data:`WRONG`, :data:`PRUNED`, :data:`FAILED`, :data:`CRASHED`,
            :data:`TIMEOUT`, :data:`BASELINE`.
        gpu: Which device of its machine measured it (the slot's name: ``"0"``, ``"1"``, ``"cpu"``).
        host: The machine that measured it.
        median_ms, q25_ms, q75_ms: The timing (OK records), or torch eager's (baseline records).
        compile_ms: ``torch.compile``'s median (baseline records, GPU only).
        throughput: GB/s or TFLOP/s; ``unit`` says which; ``pct_roof`` its % of the measured roof.
        reason: Why it was not timed (the checker's first reason, the compiler's, the limit it passes).
        seconds: Wall time the point took in its worker.
        time: When it was recorded (Unix time).
    """

    kernel: str
    config: dict | None
    size: object
    device: str
    status: str
    gpu: str = ""
    host: str = ""
    median_ms: float | None = None
    q25_ms: float | None = None
    q75_ms: float | None = None
    compile_ms: float | None = None
    throughput: float | None = None
    unit: str | None = None
    pct_roof: float | None = None
    reason: str = ""
    seconds: float = 0.0
    time: float = field(default_factory=time.time)

    @property
    def key(self) -> tuple:
        """What identifies the point: a rerun with the same key skips it."""
        return self.kernel, config_key(self.config), json.dumps(self.size), self.device

    def __str__(self) -> str:
        """One line: ``[0] size 4096 {"BLOCK": 256}: ok 0.0123 ms`` (or the reason it was not timed)."""
        what = f"{self.median_ms:.4g} ms" if self.median_ms is not None else (self.reason.splitlines() or [""])[0][:90]
        return f"[{self.gpu}] size {self.size} {config_key(self.config) if self.config else 'torch'}: {self.status} {what}"

    @classmethod
    def from_dict(cls, d) -> Record:
        """A record from its line's JSON (fields it does not know are left out).

        Raises:
            ValueError: It is not a record: not an object, a field missing or of another kind, a status not in
                :data:`STATUSES`, a number that is not finite, or a timed record whose median is not above zero.
        """
        if not isinstance(d, dict):
            raise ValueError(f"{json.dumps(d)[:40]} is not an object")
        missing = [k for k in ("kernel", "config", "size", "device", "status") if k not in d]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        for k in _TEXTS:
            if k in known and not isinstance(known[k], str):
                raise ValueError(f"{k}={known[k]!r} is not text")
        for k in _NUMBERS:
            if known.get(k) is not None and not _finite(known[k]):
                raise ValueError(f"{k}={known[k]!r} is not a finite number")
        if known["status"] not in STATUSES:
            raise ValueError(f"status {known['status']!r}")
        config = known["config"]
        if (config is None) != (known["status"] == BASELINE) or not (
                config is None or isinstance(config, dict) and all(isinstance(k, str) for k in config)):
            raise ValueError(f"config {config!r} for status {known['status']!r}")
        if known["status"] in (OK, BASELINE) and not (known.get("median_ms") or 0) > 0:
            raise ValueError(f"median_ms={known.get('median_ms')!r} is not above zero in a {known['status']!r} record")
        return cls(**known)


def _finite(x) -> bool:
    """A real number that is not NaN or infinite (``True`` is not a number here)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class Store:
    """An append-only JSON-lines file of :class:`Record`\\ s, safe to share between the threads of one sweep.

    Args:
        path: The file (made with its folder on the first append).

    Raises:
        ArgumentError: ``path`` is a folder (the message says to name a file in it).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        results.check_file(self.path, "tune.jsonl")
        self._lock = threading.Lock()
        self._told = False

    def records(self) -> list[Record]:
        """Every readable record, oldest first; a torn or foreign line is skipped, never an error.

        Foreign lines (JSON that is not a record, :meth:`Record.from_dict`) are counted, and the first read
        that finds any says how many in a warning; they stay in the file.
        """
        out, foreign = [], []
        for d in results.read_lines(self.path):
            try:
                out.append(Record.from_dict(d))
            except ValueError as e:
                foreign.append(str(e))
        if foreign and not self._told:
            self._told = True
            n = len(foreign)
            warnings.warn(f"jitlab: {self.path}: skipped {n} line{'s' if n != 1 else ''} that "
                          f"{'are' if n != 1 else 'is'} not a tuner record (the first: {foreign[0]}); "
                          f"{'they stay' if n != 1 else 'it stays'} in the file, never read as a result", stacklevel=2)
        return out

    def known(self, kernel: str) -> dict[tuple, Record]:
        """The latest record of each point of one kernel, by :attr:`Record.key`."""
        return {r.key: r for r in self.records() if r.kernel == kernel}

    def append(self, record: Record) -> None:
        """Add one record as one line (:func:`jitlab.judge.results.append_line`)."""
        with self._lock:
            results.append_line(self.path, asdict(record))
