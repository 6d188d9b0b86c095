"""The tuner's jobs, done inside a worker process (:mod:`jitlab.worker.jobs` dispatches to them):

- ``tune``: one configuration at one size: load its build (compiled beforehand, so a cache hit), check
  it against the reference, and only if it is right time it with :func:`jitlab.judge.timing.time_fn`;
- ``baseline``: torch eager and ``torch.compile`` of the reference at each size a device model still needs,
  in one job (one worker pays ``torch.compile``'s start-up).

Each returns ``(passed, reason, data)``; a compile error, a CUDA fault or an exception propagates to
the worker's categorization, and a crash or a hang is the worker's parent's to report.
"""

from __future__ import annotations

import os
import platform
import socket
import time

from jitlab.jit import api
from jitlab.judge import checker, refs, timing
from jitlab.judge.benchmark import BenchResult, input_dtype
from jitlab.judge.space import Space

ACTIONS = ("tune", "baseline")


def device_identity(cuda: bool, index: int = 0) -> dict:
    """A device as results are keyed by: ``{"device": model and driver, "arch": "sm_90" or None, "host"}``.

    Args:
        cuda: The snippet runs on a GPU: CUDA device ``index`` of this process; otherwise the CPU
            (a C++ snippet is timed on the CPU even on a GPU machine).
        index: Which of this process's visible CUDA devices.
    """
    import torch  # lazy: only a CUDA identity needs torch's device queries

    host = socket.gethostname()
    if cuda and torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(index)
        return {"device": f"{torch.cuda.get_device_name(index)}, driver {_driver_version()}",
                "arch": f"sm_{major}{minor}", "host": host}
    return {"device": f"cpu: {_cpu_model()}", "arch": None, "host": host}


def _driver_version() -> str:
    """The CUDA driver's version as ``"13.0"`` (cuDriverGetVersion), or ``"unknown"``."""
    try:
        from cuda.bindings import driver

        err, v = driver.cuDriverGetVersion()
        return f"{v // 1000}.{v % 1000 // 10}" if int(err) == 0 else "unknown"
    except Exception:  # noqa: BLE001 -- an identity must not fail a sweep
        return "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run(job) -> tuple[bool, str, dict]:
    """Do a tuner job (``job.action`` in :data:`ACTIONS`) in this process."""
    ref = refs.load(refs.path_for(job.path, job.ref))
    space = Space.from_ref(ref, **job.params.get("space", {}))
    version = ref.version(space.variant)
    if job.action == "baseline":
        return True, "", _baseline(ref, version, job)
    mod = api.load(job.path, **job.options)
    device = "cuda" if mod.build.plan.cuda else "cpu"
    config = job.options.get("defines", {})
    call = (lambda inp: space.run(mod, inp, config)) if space.run else (lambda inp: version.run(mod, inp))
    cases = _cases(ref, version)
    verdict = checker.check(call, cases.reference, cases.inputs, sizes=[job.size], seeds=ref.seeds, device=device,
                            tolerance_override=version.tolerance, name=f"{mod.build.plan.stem} {config}")
    if not verdict.passed:
        return False, "; ".join(verdict.reasons[:2]) or "wrong", {}
    inp = cases.inputs(job.size, 0, device)
    t = timing.time_fn(lambda: call(inp), device, rep_s=job.params.get("rep_s", 0.2))
    return True, "", _figures(ref, inp, device, t, verdict)


class Cases:
    """A reference's cases, made once per worker process: each (size, seed, device)'s inputs and the
    reference's output on them, handed out as copies.

    A sweep checks hundreds of configurations at the same few sizes; making a case each time (two
    4096 x 4096 ``randn`` on the CPU for the SGEMM tiles, then ``torch.matmul``) was most of a point's
    time, and two workers making them at once slowed each other. Copies, so that a kernel that writes
    its inputs spoils nothing. :meth:`reference` answers for the case :meth:`inputs` last gave, which is
    how :func:`jitlab.judge.checker.check` calls them.
    """

    def __init__(self, ref, version):
        self.ref, self.version = ref, version
        self._made: dict[tuple, tuple] = {}
        self._expected = None

    def inputs(self, size, seed, device):
        key = (size, seed, device)
        if key not in self._made:
            inp = self.version.inputs(size, seed, device)
            self._made[key] = (inp, self.ref.reference(checker.copy(inp)))
        inp, self._expected = self._made[key]
        return checker.copy(inp)

    def reference(self, inp):
        return checker.copy(self._expected)


#: The worker's cases, per reference file (path, mtime, length) and variant; the last two kept.
_CASES: dict[tuple, Cases] = {}


def _cases(ref, version) -> Cases:
    st = os.stat(ref.path)
    key = (str(ref.path), st.st_mtime_ns, st.st_size, version.name)
    if key not in _CASES:
        while len(_CASES) >= 2:
            _CASES.pop(next(iter(_CASES)))
        _CASES[key] = Cases(ref, version)
    return _CASES[key]


def _baseline(ref, version, job) -> dict:
    """torch eager (and ``torch.compile`` on a GPU) of the reference at each of ``job.sizes``:
    ``{"sizes": [[size, figures], ...]}``."""
    import torch  # lazy: as in device_identity

    device = "cuda" if torch.cuda.is_available() and not job.params.get("cpu") else "cpu"
    rep_s = job.params.get("rep_s", 0.2)
    out = []
    for size in job.sizes:
        t0 = time.perf_counter()
        inp = version.inputs(size, 0, device)
        eager = timing.time_fn(lambda: ref.reference(inp), device, rep_s=rep_s)
        data = _figures(ref, inp, device, eager, None)
        if device == "cuda" and job.params.get("compile", True):
            compiled = torch.compile(ref.reference)
            data["compile_ms"] = timing.time_fn(lambda: compiled(inp), device, rep_s=rep_s).median
        data["seconds"] = time.perf_counter() - t0
        out.append([size, data])
    return {"sizes": out}


def _figures(ref, inp: dict, device: str, t: timing.Timing, verdict) -> dict:
    """The timing's quartiles and the throughput against the measured roof (GPU) as a record's fields."""
    peak = None
    if device == "cuda":
        from jitlab.judge.peaks import peaks  # lazy: measures the GPU once per cache

        peak = peaks()
    result = BenchResult("", 0, verdict or checker.Verdict("", []), timing=t, peak=peak, dtype=input_dtype(inp),
                         bytes_moved=ref.bytes_moved(inp) if ref.bytes_moved else None,
                         flops=ref.flops(inp) if ref.flops else None)
    tp = result.throughput
    return {"median_ms": t.median, "q25_ms": t.q25, "q75_ms": t.q75, "throughput": tp.value if tp else None,
            "unit": tp.unit if tp else None, "pct_roof": tp.pct if tp else None, "pid": os.getpid()}
