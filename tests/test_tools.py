"""Reading the tools' own output: compute-sanitizer reports and Nsight Compute CSV.

The fixtures in tests/fixtures/tools/ are real output, recorded on the lent H100 (compute-sanitizer
2025.3.1, ncu with CUDA 13.0) while tests/test_gpu_debug.py ran the planted faults in
tests/fixtures/faults/. The GPU suite runs the tools themselves.
"""

from __future__ import annotations

from pathlib import Path

from jitlab.worker import profiler, sanitizer

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "tests" / "fixtures" / "tools"
FAULTS = ROOT / "tests" / "fixtures" / "faults"


def test_memcheck_finding_at_the_snippets_line():
    """Recorded memcheck output gives one finding: the out-of-bounds write at oob.cu:6, with thread and block."""
    text = (TOOLS / "memcheck_oob.txt").read_text()
    findings, summary = sanitizer.parse(text, "memcheck", [FAULTS / "oob.cu"])
    assert summary == "ERROR SUMMARY: 5 errors"
    assert len(findings) == 1  # the API errors that follow the fault are consequences, not findings
    f = findings[0]
    assert f.kind == "Invalid __global__ write of size 4 bytes"
    assert Path(f.file) == FAULTS / "oob.cu" and f.line == 6
    assert f.kernel == "oob" and f.thread == "232,0,0" and f.block == "3,0,0"
    assert "y[i] = 2.0f" in f.source
    assert any("1 bytes after the nearest allocation" in d for d in f.details)
    assert str(f).startswith(f"{FAULTS / 'oob.cu'}:6 in oob, thread (232,0,0) block (3,0,0)")


def test_repeated_reports_from_one_line_are_counted_once():
    """The same fault reported by three threads at one line is one finding, counted x3."""
    one = (
        "========= Invalid __global__ write of size 4 bytes\n"
        "=========     at k(float *)+0x40 in k.cu:3\n"
        "=========     by thread ({t},0,0) in block (0,0,0)\n"
        "========= \n"
    )
    findings, _ = sanitizer.parse("".join(one.format(t=t) for t in range(3)))
    assert len(findings) == 1 and findings[0].count == 3 and findings[0].thread == "0,0,0"
    assert "(x3, other threads)" in str(findings[0])


def test_racecheck_summary_names_both_lines():
    """Recorded racecheck output gives one race at race.cu:8, naming the write at line 8 and the read at line 9."""
    text = (TOOLS / "racecheck_race.txt").read_text()
    findings, summary = sanitizer.parse(text, "racecheck", [FAULTS / "race.cu"])
    assert summary.startswith("RACECHECK SUMMARY: 1 hazard")
    (f,) = findings
    assert f.kind == "Race reported between Write access and Read access"
    assert Path(f.file) == FAULTS / "race.cu" and f.line == 8 and f.kernel == "race"
    assert f.details == [f"Write access at {FAULTS / 'race.cu'}:8", f"Read access at {FAULTS / 'race.cu'}:9", "8192 hazards"]


def test_clean_run_has_no_findings():
    """A clean compute-sanitizer run has no findings and a summary of 0 errors."""
    findings, summary = sanitizer.parse("========= COMPUTE-SANITIZER\ndone\n========= ERROR SUMMARY: 0 errors\n")
    assert findings == [] and summary == "ERROR SUMMARY: 0 errors"


def test_ncu_csv_gives_the_kernels_figures():
    """Recorded ncu CSV gives add2_kernel's duration, DRAM %, occupancy, launch figures and stalls, largest first."""
    kernels = profiler.parse((TOOLS / "ncu_add2.csv.txt").read_text())
    assert [k.kernel for k in kernels] == ["add2_kernel"]
    k = kernels[0]
    assert 10_000 < k.duration_ns < 1_000_000
    assert 0 < k.dram_pct <= 100 and 0 < k.achieved_occupancy <= 100
    assert k.theoretical_occupancy == 100 and k.block == 1024 and k.registers > 0
    assert k.stalls[0][0] == "long_scoreboard"  # a streaming kernel waits on memory
    assert all(a[1] >= b[1] for a, b in zip(k.stalls, k.stalls[1:]))
    assert "long_scoreboard" in str(k)


def test_ncu_without_counters_is_reported_not_raised():
    """ncu's no-permission error parses to no kernels rather than raising, and is recognised as counters locked."""
    text = "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters"
    assert profiler.parse(text) == []
    assert any(s in text for s in profiler._NO_COUNTERS)


def test_profile_command_is_scoped_to_the_snippets_kernels():
    """ncu's kernel filter names the snippet's __global__ kernels (add2_kernel), not its host launchers."""
    names = profiler.kernel_names(ROOT / "kernels" / "add2.cu")
    assert "add2_kernel" in names and "launch_add2" not in names  # host launchers are not kernels


def _profile(*stalls):
    """A Profile of one kernel per entry: its stall list (empty: ncu read no warp states)."""
    return profiler.Profile([profiler.KernelProfile(f"k{i}", duration_ns=1.0, stalls=list(s)) for i, s in enumerate(stalls)])


def test_a_profile_without_stall_reasons_is_measured_once_more_and_says_so():
    """ncu runs again when a kernel came back without stall reasons; the report says it is the second run."""
    runs = iter([_profile([]), _profile([("long_scoreboard", 3.0)])])
    prof = profiler.measured_twice_if_partial(lambda: next(runs))
    assert prof.kernels[0].stalls and "second run" in prof.note and "second run" in str(prof)


def test_a_complete_profile_is_measured_once():
    """A profile with stall reasons for every kernel is not measured again."""
    calls = []
    prof = profiler.measured_twice_if_partial(lambda: calls.append(1) or _profile([("wait", 1.0)]))
    assert len(calls) == 1 and prof.note == ""


def test_stall_reasons_missing_twice_are_reported_as_such():
    """Twice without stall reasons: the first profile, with a note naming a shared GPU."""
    prof = profiler.measured_twice_if_partial(lambda: _profile([]))
    assert "twice" in prof.note and "shared" in prof.note
