"""The work an isolated process does: build a snippet, run its ``.ref.py`` check (or its workload), and say
what happened as an :class:`Outcome` with a failure category. Runs in a worker (``python -m jitlab.worker.jobs --serve``, see :mod:`jitlab.worker.isolate`) or once under a tool
(``compute-sanitizer`` / ``ncu … python -m jitlab.worker.jobs JOB RESULT``, see :mod:`jitlab.worker.sanitizer` and
:mod:`jitlab.worker.profiler`). Everything that crosses the process boundary is a plain, picklable object.
"""

from __future__ import annotations

import os
import re
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path

from jitlab.errors import SnippetError
from jitlab.jit import api, emulator_run, emulator_support
from jitlab.judge import checker, kernelbench, kernelbench_grade, refs
from jitlab.worker import proc, tunejob

#: Failure categories, in the order a run can meet them.
PASS = "pass"
COMPILE = "compile error"
LINK = "link/import error"
LAUNCH = "launch error"
ILLEGAL = "illegal address"
ASSERT = "device assert"
EXCEPTION = "exception"  # the candidate raised instead of returning: a C++ exception, a bad argument
MISMATCH = "mismatch"
TIMEOUT = "timeout"
CRASH = "crashed"
ERROR = "error"  # the reference file or the harness raised

#: A CUDA error that leaves the context unusable: the worker must not be reused after it.
STICKY = (ILLEGAL, ASSERT)

_CUDA_FAULTS = (
    (ASSERT, re.compile(r"device-side assert|cudaErrorAssert")),
    (ILLEGAL, re.compile(r"illegal memory access|cudaErrorIllegalAddress|unspecified launch failure|"
                         r"cudaErrorLaunchFailure|misaligned address|cudaErrorMisalignedAddress|"
                         r"illegal instruction|cudaErrorIllegalInstruction|out of bounds")),
    (LAUNCH, re.compile(r"cudaErrorInvalidConfiguration|cudaErrorInvalidValue|too many resources requested|"
                        r"cudaErrorLaunchOutOfResources|invalid configuration argument")),
)
_ASSERT_LINE = re.compile(r"^(?P<file>[^\n:]+):(?P<line>\d+): (?P<func>[^\n]*?): block: \[(?P<block>[\d,]+)\], "
                          r"thread: \[(?P<thread>[\d,]+)\] Assertion (?P<expr>[^\n]*) failed\.", re.M)


@dataclass
class Job:
    """One unit of isolated work on a snippet with a ``NAME.ref.py`` beside it.

    Attributes:
        action: ``"check"`` (build, then check every selected version against the reference) or
            ``"run"`` (build, then call the version ``repeat`` times at ``size`` without checking:
            the workload a profiler watches).
        path: The snippet (file or folder).
        ref: Its reference file; default: ``NAME.ref.py`` beside it.
        variant: One version (``"original"`` or a name in the ref's ``VARIANTS``); default: all
            (check) or ``"original"`` (run).
        sizes: Sizes to check (default: the ref's ``SIZES``, capped at ``max_size``).
        max_size: Skip sizes above this (sanitizers run kernels 10-100x slower).
        size: The size for ``"run"``.
        repeat: Calls of the version for ``"run"``.
        options: Build options for :func:`jitlab.load` (``arch``, ``defines``, ``debug`` …).
        log: A file the process's stdout and stderr go to while the job runs (device printf,
            assert messages); read by the parent even when the process dies.
        cache_dir: The parent's build cache, so a warm worker follows ``JITLAB_CACHE_DIR`` changes.
        params: The tuner's job parameters (``"tune"``, ``"baseline"``: see :mod:`jitlab.worker.tunejob`).
        id: Set by the worker's parent and repeated in the answer, so an answer is only taken for its job.
    """

    action: str
    path: str
    ref: str | None = None
    variant: str | None = None
    sizes: list[int] | None = None
    max_size: int | None = None
    size: int | None = None
    repeat: int = 2
    options: dict = field(default_factory=dict)
    log: str | None = None
    cache_dir: str | None = None
    params: dict = field(default_factory=dict)
    id: int = 0


@dataclass
class Outcome:
    """What an isolated run found.

    Attributes:
        category: :data:`PASS` or the failure category (compile error, link/import error, launch
            error, illegal address, device assert, exception, mismatch, timeout, crashed, error).
        message: One paragraph a learner can act on.
        where: Where it happened, when known: ``file:line`` of a device assert, the kernel and
            launch configuration of a fault, the first failing size of a mismatch.
        verdicts: The checker's verdicts (one per version checked), when it got that far.
        output: What the process printed (device printf, assert messages, sanitizer reports).
        seconds: Wall time of the run, process start-up excluded for a warm worker.
        build: ``"cache hit"`` or ``"built in N s"``.
        data: What a tuner job measured (:mod:`jitlab.worker.tunejob`).
    """

    category: str
    message: str = ""
    where: str = ""
    verdicts: list = field(default_factory=list)
    output: str = ""
    seconds: float = 0.0
    build: str = ""
    data: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.category == PASS

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        head = "PASS" if self.passed else f"FAIL [{self.category}]"
        lines = [f"{head}{f' ({self.build})' if self.build else ''}, {self.seconds:.2f} s"]
        if self.message:
            lines.append(self.message)
        if self.where:
            lines.append(f"where: {self.where}")
        for v in [] if self.passed else [v for v in self.verdicts if not v.passed]:  # each failure said once:
            lines += [ln for ln in str(v).splitlines() if ln.strip().removeprefix("- raised ") not in self.message]
        if self.passed:
            lines += [str(v) for v in self.verdicts]
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle) -> None:  # IPython's text display: the summary, not the dataclass
        p.text(str(self))

    def _repr_html_(self) -> str:
        import html

        color = "#1a7f37" if self.passed else "#cf222e"
        head = "PASS" if self.passed else f"FAIL · {self.category}"
        parts = [f"<div><b style='color:{color}'>{html.escape(head)}</b> "
                 f"<span>{html.escape(self.build)} · {self.seconds:.2f} s</span>"]
        if self.message:
            parts.append(f"<pre>{html.escape(self.message)}</pre>")
        if self.where:
            parts.append(f"<div>where: <code>{html.escape(self.where)}</code></div>")
        parts += [v._repr_html_() for v in self.verdicts if self.passed or not v.passed]
        return "".join(parts) + "</div>"


def fault_category(text: str) -> str | None:
    """The category of a CUDA error message, or ``None`` when it is not a CUDA fault."""
    for category, pattern in _CUDA_FAULTS:
        if pattern.search(text):
            return category
    return None


def assert_location(output: str) -> str:
    """``file:line (kernel), block [..] thread [..]: Assertion `expr` failed`` from device assert output."""
    m = _ASSERT_LINE.search(output)
    if not m:
        return ""
    func = m.group("func").split("(")[0].split()[-1]
    return (f"{m.group('file')}:{m.group('line')} in {func}, block [{m.group('block')}] thread "
            f"[{m.group('thread')}]: assertion {m.group('expr')} failed")


def run_job(job: Job) -> Outcome:
    """Do one job in this process and categorize what happened (never raises)."""
    t0 = time.perf_counter()
    if job.cache_dir:
        os.environ["JITLAB_CACHE_DIR"] = job.cache_dir
    try:
        out = _run(job)
    except BaseException as e:  # everything becomes a category; KeyboardInterrupt too, in a worker
        out = _categorize(e, job)
    out.seconds = time.perf_counter() - t0
    return out


def _run(job: Job) -> Outcome:
    if job.action in tunejob.ACTIONS:
        passed, reason, data = tunejob.run(job)
        return Outcome(PASS if passed else MISMATCH, reason, data=data)
    if job.action == kernelbench.ACTION:  # a KernelBench solution: job.path, its problem: job.ref
        graded = kernelbench_grade.grade(job.ref, job.path, **job.params)
        out = replace(_judged(job, [graded.verdict], graded.build), data=graded.data)
        return replace(out, message=kernelbench_grade.mismatch_message(graded.verdict)) if out.category == MISMATCH else out
    if job.action == kernelbench.REFERENCE:  # a KernelBench problem's half of grading, saved to job.path
        return Outcome(PASS, "reference made", data=kernelbench_grade.reference(job.ref, job.path, **job.params))
    ref_path = refs.path_for(job.path, job.ref)
    t0 = time.perf_counter()
    mod = api.load(job.path, **job.options)
    build = "cache hit" if mod.build.cached else f"built in {time.perf_counter() - t0:.2f} s"
    ref = refs.load(ref_path)
    emulated = mod.build.engine == emulator_support.ENGINE
    device = "cuda" if mod.build.plan.cuda and not emulated else "cpu"
    try:
        chosen = ref.versions if job.action == "check" and job.variant is None else [ref.version(job.variant or "original")]
    except SnippetError as e:
        return Outcome(ERROR, str(e), build=build)
    if job.action == "run":
        version = chosen[0]
        size = job.size or max(version.sizes)
        inp = version.inputs(size, 0, device)
        for _ in range(job.repeat):
            version.run(mod, inp)
        checker.synchronize(device)
        return Outcome(PASS, f"ran {version.name} {job.repeat}x at size {size}", build=build)
    out = _check(job, mod, ref, device, chosen, build, emulated)
    if emulated:  # the verdict says where it ran, and why it has no timing
        out.message = f"{emulator_support.RUN_ON}: {out.message}" if out.message else f"{emulator_support.RUN_ON} ({emulator_support.NO_TIMING})"
    return out


def _check(job: Job, mod, ref, device: str, chosen: list, build: str, emulated: bool) -> Outcome:
    """Check each chosen version against the reference; the CPU emulator checks each launch for races and bounds."""
    verdicts, fault = [], None
    with emulator_run.checking(emulated):
        for _, v in refs.check_each(mod, ref, device, name=Path(job.path).stem, versions=chosen, sizes=job.sizes,
                                    max_size=job.max_size):
            verdicts.append(v)
            fault = None if emulated else fault_category(" ".join(v.reasons))
            if fault:  # the context is gone: later versions would fail for the same reason
                break
    if not fault:
        checker.synchronize(device)
    return _judged(job, verdicts, build, emulated)


def _judged(job: Job, verdicts: list, build: str, emulated: bool = False) -> Outcome:
    """The outcome of checked verdicts: a CUDA fault, a version that raised, a mismatch, or a pass."""
    faults = [] if emulated else [(f, v) for v in verdicts if (f := fault_category(" ".join(v.reasons)))]
    if faults:
        fault, v = faults[0]
        return Outcome(fault, _fault_message(fault, " ".join(v.reasons)), _fault_where(fault, job), verdicts, build=build)
    failed = [v for v in verdicts if not v.passed]
    raised = _raised(failed)
    if raised:
        return _raised_outcome(*raised, len(verdicts), verdicts, build)
    if failed:
        f = failed[0].first_failure
        return Outcome(MISMATCH, f"{len(failed)} of {len(verdicts)} versions disagree with the reference",
                       f"{failed[0].name} at size {f.size}, seed {f.seed}", verdicts, build=build)
    return Outcome(PASS, "", "", verdicts, build=build)


def _raised(verdicts: list) -> tuple | None:
    """The first ``(verdict, case)`` whose candidate raised instead of returning, if any."""
    for v in verdicts:
        for case in v.cases:
            if case.raised:
                return v, case
    return None


def _raised_outcome(verdict, case, total: int, verdicts: list, build: str) -> Outcome:
    """A check where a version raised: :data:`EXCEPTION`, or :data:`LAUNCH` for a failed kernel launch."""
    what = case.reasons[0].removeprefix("raised ")
    where = f"{verdict.name} at size {case.size}, seed {case.seed}"
    if case.raised == "LaunchError" and "C++ exception" not in what:
        return Outcome(LAUNCH, what, where, verdicts, build=build)
    n = sum(any(c.raised for c in v.cases) for v in verdicts)
    return Outcome(EXCEPTION, f"{n} of {total} versions raised instead of returning a result: {what}",
                   where, verdicts, build=build)


def _categorize(e: BaseException, job: Job) -> Outcome:
    from jitlab.errors import CacheError, CompileError, LaunchError, SnippetError, ToolchainError

    text = f"{type(e).__name__}: {e}"
    if isinstance(e, CompileError):
        return Outcome(COMPILE, str(e))
    if isinstance(e, (ImportError, OSError)) or (isinstance(e, ToolchainError) and "could not be loaded" in str(e)):
        return Outcome(LINK, text)
    fault = fault_category(text)
    if fault:
        return Outcome(fault, _fault_message(fault, text), _fault_where(fault, job))
    if isinstance(e, LaunchError):
        return Outcome(EXCEPTION if "raised a C++ exception" in str(e) else LAUNCH, str(e))
    if isinstance(e, (SnippetError, ToolchainError, CacheError)):
        return Outcome(ERROR, str(e))
    return Outcome(ERROR, "".join(traceback.format_exception_only(type(e), e)).strip() + "\n" +
                   "".join(traceback.format_tb(e.__traceback__)[-3:]))


def _fault_message(category: str, text: str) -> str:
    first = text.strip().splitlines()[0] if text.strip() else category
    if category == ASSERT:
        return f"a device-side assert failed: {first}"
    return (f"{first}\nThe kernel touched memory it does not own. `jitlab sanitize PATH` (compute-sanitizer "
            f"memcheck) names the line, thread and block.")


def _fault_where(category: str, job: Job) -> str:
    if category == ASSERT and job.log:
        sys.stdout.flush()
        where = assert_location(Path(job.log).read_text(errors="replace")) if Path(job.log).is_file() else ""
        if where:
            return where
    from jitlab.jit import launch

    last = launch.last_launch[0]
    if last and len(last) > 6:
        return f"{last[6]}<<<grid=({last[0]}, {last[1]}, {last[2]}), block=({last[3]}, {last[4]}, {last[5]})>>> (the last kernel launched)"
    return ""


# --- process plumbing ------------------------------------------------------------------------------

class _Redirect:
    """Point file descriptors 1 and 2 at a log file for the duration of a job."""

    def __init__(self, log: str | None):
        self.log = log

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        if not self.log:
            return self
        self.saved = (os.dup(1), os.dup(2))
        fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        return self

    def __exit__(self, *exc):
        from jitlab.output import flush_c

        sys.stdout.flush()
        sys.stderr.flush()
        flush_c()
        if self.log:
            os.dup2(self.saved[0], 1)
            os.dup2(self.saved[1], 2)
            os.close(self.saved[0])
            os.close(self.saved[1])


def serve() -> None:
    """Worker loop: read :class:`Job` frames on stdin, answer ``(job.id, Outcome)`` frames on the original stdout.

    The protocol gets its own copy of stdout, so what kernels print never mixes with it.
    """
    proto = os.fdopen(os.dup(1), "wb")
    requests = os.fdopen(os.dup(0), "rb")
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)  # between jobs, stray output goes nowhere instead of into the protocol
    warm_up()
    proc.write_frame(proto, "ready")
    while True:
        job = proc.read_frame(requests)
        if job is None:
            return
        with _Redirect(job.log):
            out = run_job(job)
        proc.write_frame(proto, (job.id, out))
        if out.category in STICKY:
            return  # the CUDA context is unusable; the parent starts a fresh worker


def warm_up(cuda: bool = True) -> None:
    """Import torch and jitlab and create the CUDA context now, so the first job pays none of it; ``cuda=False``: a
    fork server's imports (:mod:`jitlab.worker.forkserver`), whose workers each make their context after the fork."""
    import torch

    from jitlab.judge import checker, runner  # noqa: F401

    if cuda and torch.cuda.is_available():
        torch.zeros(1, device="cuda")


def main(argv: list[str] | None = None) -> int:
    """``python -m jitlab.worker.jobs --serve`` (a worker) or ``python -m jitlab.worker.jobs JOB RESULT`` (one job,
    under a tool such as compute-sanitizer or ncu: the job and its outcome are pickle files)."""
    argv = sys.argv[1:] if argv is None else argv
    if argv == ["--serve"]:
        serve()
        return 0
    if len(argv) != 2:
        print("usage: python -m jitlab.worker.jobs --serve | JOB_FILE RESULT_FILE", file=sys.stderr)
        return 2
    out = run_job(proc.read_job_file(argv[0]))
    proc.write_job_file(argv[1], out)
    return 0 if out.passed else 1


if __name__ == "__main__":
    # Run the imported module's main, not this copy's: pickled Outcomes must name `jitlab.worker.jobs`.
    from jitlab.worker.jobs import main as _main

    sys.exit(_main())
