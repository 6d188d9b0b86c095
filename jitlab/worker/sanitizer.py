"""``jitlab sanitize``: a snippet's check under compute-sanitizer, each finding at the snippet's line.

The check runs in a fresh process under ``compute-sanitizer --tool memcheck|racecheck|initcheck|
synccheck``. Builds carry ``-lineinfo`` and codegen's ``#line`` directives, so the tool reports the
user's file and line, never the generated one. torch's caching allocator is switched off in that
process (``PYTORCH_NO_CUDA_MEMORY_CACHING=1``): every tensor is its own allocation, so a write one
element past the end is out of bounds for the tool too, instead of landing in a cached neighbour.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from jitlab.errors import ArgumentError
from jitlab.jit import api, toolchain
from jitlab.jit.sources import is_program
from jitlab.judge import refs
from jitlab.worker import proc
from jitlab.worker import execute
from jitlab.worker.jobs import PASS, Job, Outcome

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
#: Sizes above this are skipped: tools slow kernels down 10-100x.
MAX_SIZE = 1 << 22
_PREFIX = re.compile(r"^========= ?")
_LOCATION = re.compile(r"(?P<file>(?:/|\.{0,2}/)?[^\s:()]+\.(?:cu|cuh|cpp|cc|cxx|h|hpp)):(?P<line>\d+)")
_KERNEL = re.compile(r"(?:at|access at)\s+(?:0x[0-9a-f]+ in )?(?:\S+?:\d+:)?(?P<kernel>[A-Za-z_]\w*)(?:<[^(]*>)?\(")
_THREAD = re.compile(r"by thread \((?P<thread>[\d, ]+)\) in block \((?P<block>[\d, ]+)\)")
_NOISE = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY", "Target application returned",
          "Error: process didn't terminate", "Program hit")


@dataclass
class Finding:
    """One report of the tool.

    Attributes:
        kind: The tool's headline, e.g. ``Invalid __global__ write of size 4 bytes`` or
            ``Error: Race reported between Write access … and Read access …``.
        kernel: The kernel it happened in.
        file: The snippet file (absolute path as compiled).
        line: The line in that file.
        thread: ``threadIdx`` as ``x,y,z``, when the tool names one.
        block: ``blockIdx`` as ``x,y,z``.
        details: The tool's further lines (address, allocation, the other access of a race).
        source: The text of ``file:line``.
        count: How many reports of the same kind came from the same line (threads differ).
    """

    kind: str
    kernel: str = ""
    file: str = ""
    line: int = 0
    thread: str = ""
    block: str = ""
    details: list[str] = field(default_factory=list)
    source: str = ""
    count: int = 1

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.file else "(no line info)"

    def __str__(self) -> str:
        who = f", thread ({self.thread}) block ({self.block})" if self.thread else ""
        more = f" (x{self.count}, other threads)" if self.count > 1 else ""
        out = [f"{self.location} in {self.kernel or '?'}{who}: {self.kind}{more}"]
        if self.source:
            out.append(f"    {self.source.strip()}")
        out += [f"    {d}" for d in self.details]
        return "\n".join(out)


@dataclass
class Report:
    """What compute-sanitizer found while the snippet's check ran.

    Attributes:
        tool: ``memcheck``, ``racecheck``, ``initcheck`` or ``synccheck``.
        findings: The tool's reports, at the snippet's file and line.
        summary: The tool's summary line (``ERROR SUMMARY: 1 error``).
        outcome: The check's own outcome in that process (``None`` if it died first).
        output: Everything the process printed.
        seconds: Wall time.
    """

    tool: str
    findings: list[Finding]
    summary: str
    outcome: Outcome | None
    output: str
    seconds: float

    @property
    def clean(self) -> bool:
        """No finding and a passing check."""
        return not self.findings and self.outcome is not None and self.outcome.passed

    def __bool__(self) -> bool:
        return self.clean

    def __str__(self) -> str:
        n = len(self.findings)
        head = f"{self.tool}: {'clean' if not n else f'{n} finding' + ('s' if n != 1 else '')}"
        lines = [f"{head} ({self.summary or 'no summary'}, {self.seconds:.1f} s)"]
        lines += [str(f) for f in self.findings]
        if self.outcome is None and self.findings:
            lines.append("the process ended at the fault, as it should: a CUDA error stops it (all output: .output)")
        elif self.outcome is None:
            lines.append("the check did not finish under the tool (all output: .output)")
        elif not self.outcome.passed:
            lines.append(f"the check itself: FAIL [{self.outcome.category}] {self.outcome.message.splitlines()[0] if self.outcome.message else ''}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        return f"<pre>{html.escape(str(self))}</pre>"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def parse(text: str, tool: str = "memcheck", sources=()) -> tuple[list[Finding], str]:
    """Findings and the summary line from compute-sanitizer's text output.

    Args:
        text: The tool's output.
        tool: The tool that wrote it.
        sources: The snippet's files: the tool names a file by its base name only, and this
            turns it back into the path (and reads the line's text).
    """
    records: list[list[str]] = []
    summary = ""
    for raw in text.splitlines():
        if not _PREFIX.match(raw):
            continue
        body = _PREFIX.sub("", raw)
        if "SUMMARY" in body:
            summary = body.strip()
        if not body.strip():
            continue
        if body[0] != " ":
            records.append([body.strip()])
        elif records:
            records[-1].append(body.strip())
    by_place: dict[tuple, Finding] = {}
    for rec in records:
        if rec[0].startswith(_NOISE):
            continue
        f = _finding(rec, {Path(p).name: Path(p) for p in sources})
        key = (f.kind, f.file, f.line, f.kernel)
        if key in by_place:
            by_place[key].count += 1
        else:
            by_place[key] = f
    return list(by_place.values()), summary


def _finding(rec: list[str], sources: dict[str, Path]) -> Finding:
    f = Finding(kind=rec[0])
    text = "\n".join(rec)
    loc = _LOCATION.search(text)
    if loc:
        f.file, f.line = loc.group("file"), int(loc.group("line"))
        if f.file in sources:
            f.file = str(sources[f.file])
        f.source = _source_line(f.file, f.line)
    k = _KERNEL.search(text)
    if k:
        f.kernel = k.group("kernel")
    t = _THREAD.search(text)
    if t:
        f.thread, f.block = t.group("thread").replace(" ", ""), t.group("block").replace(" ", "")
    f.details = [ln for ln in rec[1:] if not ln.startswith(("at ", "by thread", "Device Frame", "Saved host backtrace"))]
    if rec[0].startswith("Error: Race"):
        accesses = re.findall(r"(\w+) access at .*?(?: in (\S+:\d+))?(?=\s+and |\s*\[|$)", text.replace("\n", " "))
        f.kind = "Race reported between " + " and ".join(f"{a} access" for a, _ in accesses)
        f.details = [f"{a} access at {_full(loc, sources)}" for a, loc in accesses if loc]
        hazards = re.search(r"\[(\d+) hazards?\]", text)
        if hazards:
            f.details.append(f"{hazards.group(1)} hazards")
    return f


def _full(loc: str, sources: dict[str, Path]) -> str:
    name, _, line = loc.rpartition(":")
    return f"{sources[name]}:{line}" if name in sources else loc


def _source_line(file: str, line: int) -> str:
    try:
        lines = Path(file).read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return lines[line - 1] if 0 < line <= len(lines) else ""


def command(tool: str, job_file: str, result_file: str) -> list[str]:
    """The compute-sanitizer command line that runs one job file."""
    return tool_command(tool, [sys.executable, "-m", "jitlab.worker.jobs", job_file, result_file])


def tool_command(tool: str, target: list[str]) -> list[str]:
    """compute-sanitizer running ``tool`` on a command line (a job's Python, or a program and its arguments)."""
    exe = toolchain.require_cuda_tool("compute-sanitizer", "install the CUDA toolkit (it ships compute-sanitizer) "
                                      "or set CUDA_HOME")
    per_tool = {"memcheck": ["--leak-check", "no"]}.get(tool, [])  # racecheck's default report: one line per race
    # API errors are left out: cuda-python probes driver entry points with cuGetProcAddress, and the
    # failed probes (dozens) would fill the print limit before the kernel's own findings.
    return [exe, "--tool", tool, "--print-limit", "20", "--show-backtrace", "device", "--report-api-errors", "no",
            *per_tool, *target]


def sanitize(path, tool: str = "memcheck", *, job: Job | None = None, variant: str | None = None, sizes=None,
             timeout: float = 600.0, args=(), stdin=None, **options) -> Report:
    """Run a snippet's check (or a program) under compute-sanitizer and report each finding at the snippet's line.

    A program (a file with ``int main``) runs as it is, with ``args`` and ``stdin``; its exit status is the
    report's outcome. Any other snippet runs its ``NAME.ref.py`` check.

    Args:
        path: The snippet; its ``NAME.ref.py`` supplies inputs and the reference.
        tool: ``memcheck`` (out-of-bounds and misaligned accesses), ``racecheck`` (shared-memory
            races), ``initcheck`` (reads of uninitialized device memory) or ``synccheck``
            (``__syncthreads`` in divergent code).
        job: The job to run (default: check every version at sizes up to :data:`MAX_SIZE`).
        variant: Check one version only.
        sizes: Sizes to check.
        timeout: Seconds before the process is stopped.
        args: A program's command-line arguments.
        stdin: Text or bytes for a program's standard input.
        **options: Build options for :func:`jitlab.load`.

    Returns:
        A :class:`Report`; ``bool(report)`` is whether it is clean.

    Raises:
        ArgumentError: An unknown tool. ToolchainError: compute-sanitizer not found.
        SnippetError: No ``NAME.ref.py`` beside the snippet.
    """
    if tool not in TOOLS:
        raise ArgumentError(f"unknown sanitizer tool {tool!r}: use one of {', '.join(TOOLS)}")
    toolchain.require_gpu("compute-sanitizer")
    if job is None and is_program(path):
        return _sanitize_program(path, tool, args, stdin, timeout, options)
    refs.path_for(path, job.ref if job else None)  # a missing reference is an error now, not in the child
    job = job or Job("check", str(path), variant=variant, sizes=list(sizes) if sizes else None, options=options)
    if job.sizes is None and job.max_size is None:
        job.max_size = MAX_SIZE
    _build_first(job)
    env = proc.python_env(PYTORCH_NO_CUDA_MEMORY_CACHING="1", CUDA_LAUNCH_BLOCKING="1")
    text, outcome, seconds = proc.run_job_under(lambda job_file, result_file: command(tool, job_file, result_file),
                                                job, env=env, timeout=timeout, prefix="jitlab-sanitize-")
    from jitlab.jit.sources import collect_sources

    findings, summary = parse(text, tool, collect_sources(path))
    return Report(tool, findings, summary, outcome, text, seconds)


def _sanitize_program(path, tool: str, args, stdin, timeout: float, options: dict) -> Report:
    """A program under the tool: its exit status is the outcome, each finding at its file and line."""
    b = execute.build_program(path, **options)
    run = execute.stream(tool_command(tool, [str(b.artifact), *execute.program_args(args)]), stdin=stdin, timeout=timeout, echo=False)
    text = run.stdout + run.stderr
    findings, summary = parse(text, tool, [f.path for f in b.plan.files])
    category = PASS if run.ok else "timeout" if run.timed_out else "crashed" if (run.returncode or 0) < 0 else "error"
    outcome = Outcome(category, "" if run.ok else f"{path} {run.status}", output=text, seconds=run.seconds,
                      build="cache hit" if b.cached else f"built in {b.seconds:.2f} s")
    return Report(tool, findings, summary, outcome, text, run.seconds)


def _build_first(job: Job) -> None:
    """Build here, so compile errors surface as they do everywhere else and the tool's process only loads."""

    api.build(job.path, **job.options)
