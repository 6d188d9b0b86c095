"""``jitlab profile``: a snippet's workload under Nsight Compute, scoped to the snippet's own kernels.

ncu runs ``python -m jitlab.worker.jobs`` on a "run" job (the version called a few times at one size, no
checking) with ``--kernel-name`` matching only the snippet's ``__global__`` functions, so torch's
own kernels (input generation, copies) are not profiled. Reported per kernel: duration, DRAM
throughput as % of peak, achieved and theoretical occupancy, and the top warp stall reasons.
When the GPU's performance counters are not available to this user, the report says so and why.
"""

from __future__ import annotations

import csv
import io
import sys
from dataclasses import dataclass, field

from jitlab.jit import api, toolchain
from jitlab.jit.sources import is_program
from jitlab.judge import refs
from jitlab.worker import proc
from jitlab.worker import execute
from jitlab.worker.jobs import Job

#: ncu metric → our field (``gpu__time_duration`` is in ns).
METRICS = {
    "gpu__time_duration.sum": "duration_ns",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy",
    "sm__maximum_warps_per_active_cycle_pct": "theoretical_occupancy",
    "launch__registers_per_thread": "registers",
    "launch__grid_size": "grid",
    "launch__block_size": "block",
}
_STALL = "smsp__average_warps_issue_stalled_"
_STALL_SUFFIX = "_per_issue_active.ratio"
#: Kernel launches of a program that ncu profiles (each is replayed, so a long program is cut short).
PROGRAM_LAUNCHES = 50
_NO_COUNTERS = ("ERR_NVGPUCTRPERM", "does not have permission to access NVIDIA GPU Performance Counters")


@dataclass
class KernelProfile:
    """One kernel launch as ncu measured it (the last profiled launch of that kernel)."""

    kernel: str
    duration_ns: float = 0.0
    dram_pct: float = 0.0
    sm_pct: float = 0.0
    achieved_occupancy: float = 0.0
    theoretical_occupancy: float = 0.0
    registers: int = 0
    grid: int = 0
    block: int = 0
    stalls: list[tuple[str, float]] = field(default_factory=list)  # (reason, warps stalled per issue), top first

    def __str__(self) -> str:
        stalls = ", ".join(f"{r} {v:.2f}" for r, v in self.stalls[:3]) or "none reported"
        return (f"{self.kernel}: {self.duration_ns / 1e3:.1f} us, DRAM {self.dram_pct:.0f}% of peak, SM {self.sm_pct:.0f}%, "
                f"occupancy {self.achieved_occupancy:.0f}% achieved / {self.theoretical_occupancy:.0f}% theoretical "
                f"(grid {self.grid} x block {self.block}, {self.registers} registers)\n"
                f"    top stalls (warps per issued instruction): {stalls}")


@dataclass
class Profile:
    """The result of :func:`profile`.

    Attributes:
        kernels: One entry per profiled kernel.
        available: ``False`` when ncu could not read the counters (``reason`` says why).
        reason: Why nothing was measured.
        output: ncu's output, for anything the parse missed.
        note: What the report must say about how it was measured (a second run), if anything.
    """

    kernels: list[KernelProfile]
    available: bool = True
    reason: str = ""
    output: str = ""
    note: str = ""

    def __str__(self) -> str:
        if not self.available:
            return f"profile not available: {self.reason}"
        body = "\n".join(str(k) for k in self.kernels) or "ncu profiled no kernel of the snippet (see .output)"
        return f"{body}\n({self.note})" if self.note else body

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(str(self))}</pre>"


def kernel_names(path) -> list[str]:
    """The ``__global__`` functions of a snippet, as ncu names them (``--kernel-name-base function``)."""
    from jitlab.jit.parse import parse_file
    from jitlab.jit.sources import collect_sources

    return sorted({fn.name for p in collect_sources(path) for fn in parse_file(p).functions if fn.kind == "global"})


def command(names: list[str], job_file: str, result_file: str, launches: int) -> list[str]:
    """The ncu command line that profiles the named kernels in one job."""
    return tool_command(names, [sys.executable, "-m", "jitlab.worker.jobs", job_file, result_file], launches)


def tool_command(names: list[str], target: list[str], launches: int) -> list[str]:
    """ncu profiling the named kernels of a command line (a job's Python, or a program and its arguments)."""
    exe = toolchain.require_cuda_tool("ncu", "install Nsight Compute (part of the CUDA toolkit) or set CUDA_HOME")
    metrics = ",".join([*METRICS, f"regex:^{_STALL}.*{_STALL_SUFFIX.replace('.', '[.]')}$"])
    return [exe, "--kernel-name-base", "function", "--kernel-name", f"regex:^({'|'.join(names)})$",
            "--launch-count", str(launches), "--csv", "--page", "raw", "--metrics", metrics, *target]


def profile(path, *, variant: str | None = None, size: int | None = None, kernel: str | None = None,
            repeat: int = 2, timeout: float = 600.0, args=(), stdin=None, **options) -> Profile:
    """Profile a snippet's kernels with Nsight Compute while its ``.ref.py`` workload runs (or a program runs).

    A program (a file with ``int main``) runs as it is, with ``args`` and ``stdin``; the first
    :data:`PROGRAM_LAUNCHES` launches of its kernels are profiled.

    Args:
        path: The snippet; its ``NAME.ref.py`` supplies the inputs and how to call it.
        variant: The version to run (default ``"original"``).
        size: The input size (default: the ref's largest ``BENCH_SIZES`` entry, at most 2^24).
        kernel: Profile only this kernel (default: every ``__global__`` function of the snippet).
        repeat: How many times the version is called; the last launch of each kernel is kept.
        timeout: Seconds before ncu is stopped.
        args: A program's command-line arguments.
        stdin: Text or bytes for a program's standard input.
        **options: Build options for :func:`jitlab.load`.

    Returns:
        A :class:`Profile`; ``available`` is ``False`` (with the reason) when the counters cannot be read.

    Raises:
        ToolchainError: ncu not found. SnippetError: No ``NAME.ref.py``, or no kernel of that name.
    """
    from jitlab.errors import SnippetError

    toolchain.require_gpu("Nsight Compute (ncu)")
    whole = is_program(path)
    ref = None if whole else refs.load(refs.path_for(path))
    names = kernel_names(path)
    if kernel:
        if kernel not in names:
            raise SnippetError(f"{path}: no __global__ kernel {kernel!r} (kernels: {', '.join(names) or 'none'})")
        names = [kernel]
    if not names:
        raise SnippetError(f"{path}: no __global__ kernel to profile")
    if whole:
        b = execute.build_program(path, **options)

        def measure() -> Profile:
            run = execute.stream(tool_command(names, [str(b.artifact), *execute.program_args(args)], PROGRAM_LAUNCHES),
                                stdin=stdin, timeout=timeout, echo=False)
            return _profile_of(run.stdout + run.stderr, None if run.ok else f"the program {run.status}")
    else:
        if size is None:
            size = min(max(ref.bench_sizes or ref.sizes), 1 << 24)
        api.build(path, **options)  # compile errors surface here, not inside ncu's process
        job = Job("run", str(path), variant=variant, size=size, repeat=repeat, options=options)
        launches = repeat * len(names) * 4

        def measure() -> Profile:
            text, outcome, _ = proc.run_job_under(
                lambda job_file, result_file: command(names, job_file, result_file, launches),
                job, env=proc.python_env(), timeout=timeout, prefix="jitlab-profile-")
            failed = None if outcome is None or outcome.passed else f"the workload failed: [{outcome.category}] {outcome.message}"
            return _profile_of(text, failed)
    return measured_twice_if_partial(measure)


def measured_twice_if_partial(measure) -> Profile:
    """``measure()``, and once more if a kernel came back without stall reasons: ncu sometimes reads no
    warp-state counters while other processes share the GPU. The report says it measured twice."""
    prof = measure()
    if prof.available and prof.kernels and any(not k.stalls for k in prof.kernels):
        again = measure()
        if again.available and all(k.stalls for k in again.kernels):
            again.note = ("the first ncu run reported no stall reasons (another process on the GPU?); "
                          "this is the second run")
            return again
        prof.note = "ncu reported no stall reasons twice: the GPU may be shared with other processes"
    return prof


def _profile_of(text: str, failed: str | None) -> Profile:
    """The profile in ncu's output; ``failed``: why the workload did not finish, if it did not."""
    if any(s in text for s in _NO_COUNTERS):
        return Profile([], False, "this user may not read the GPU's performance counters (ERR_NVGPUCTRPERM). "
                       "On your own machine: run as root, or set the driver option "
                       "`NVreg_RestrictProfilingToAdminUsers=0`; hosted notebooks (Colab) usually do not allow it.",
                       text)
    if failed:
        return Profile([], False, failed, text)
    kernels = parse(text)
    if not kernels and "==ERROR==" in text:
        err = next(ln for ln in text.splitlines() if "==ERROR==" in ln)
        return Profile([], False, f"ncu failed: {err.strip()}", text)
    return Profile(kernels, True, "", text)


def parse(text: str) -> list[KernelProfile]:
    """Per-kernel figures from ``ncu --csv --page raw`` output (the last launch of each kernel wins)."""
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    if len(lines) < 2:
        return []
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    header, data = rows[0], [r for r in rows[1:] if r and r[0].isdigit()]  # skip the units row
    found: dict[str, KernelProfile] = {}
    for r in data:
        rec = dict(zip(header, r))
        name = rec.get("Kernel Name", "?").split("(")[0]
        k = KernelProfile(name)
        for metric, attr in METRICS.items():
            if metric in rec:
                v = _number(rec[metric])
                setattr(k, attr, int(v) if attr in ("registers", "grid", "block") else v)
        stalls = [(m[len(_STALL):-len(_STALL_SUFFIX)], _number(v)) for m, v in rec.items()
                  if m.startswith(_STALL) and m.endswith(_STALL_SUFFIX)]
        k.stalls = sorted((s for s in stalls if s[1] > 0 and s[0] != "selected"), key=lambda s: -s[1])
        found[name] = k
    return list(found.values())


def _number(s: str) -> float:
    try:
        return float(s.replace(",", ""))
    except ValueError:
        return 0.0
