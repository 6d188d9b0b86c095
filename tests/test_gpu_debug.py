"""GPU suite for inspecting and debugging (marker `gpu`): planted faults found by compute-sanitizer
at the snippet's line, isolated runs that survive faults and hangs, Nsight Compute figures.

The planted faults are in tests/fixtures/faults/ (its README lists each bug and its line).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import jitlab
from jitlab.worker import isolate, jobs, profiler

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
FAULTS = ROOT / "tests" / "fixtures" / "faults"
ADD2 = ROOT / "kernels" / "add2.cu"


@pytest.fixture(autouse=True)
def gpu_cache(shared_cache, monkeypatch):
    if not os.environ.get("JITLAB_CACHE_DIR"):
        monkeypatch.setenv("JITLAB_CACHE_DIR", str(shared_cache))


def test_memcheck_reports_the_out_of_bounds_write_at_its_line():
    """memcheck finds oob.cu's out-of-bounds write at line 6, in kernel oob, thread (232,0,0) of block (3,0,0)."""
    report = jitlab.sanitize(FAULTS / "oob.cu", tool="memcheck")
    writes = [f for f in report.findings if "write" in f.kind]
    assert writes, report.output[-3000:]
    f = writes[0]
    assert Path(f.file).name == "oob.cu" and f.line == 6, str(f)
    assert f.kernel == "oob"
    assert f.thread == "232,0,0" and f.block == "3,0,0"  # thread n = 1000 = 3 * 256 + 232
    assert "y[i] = 2.0f" in f.source
    assert not report.clean


def test_memcheck_is_clean_for_a_correct_kernel():
    """memcheck finds nothing in add2 (original) at sizes 1, 1025 and 100003."""
    report = jitlab.sanitize(ADD2, tool="memcheck", variant="original", sizes=[1, 1025, 100_003])
    assert report.clean, str(report) + report.output[-2000:]


def test_racecheck_reports_the_shared_memory_race_at_its_lines():
    """racecheck reports race.cu's shared-memory race at line 8 or 9, with those lines in its details."""
    report = jitlab.sanitize(FAULTS / "race.cu", tool="racecheck")
    assert report.findings, report.output[-3000:]
    f = report.findings[0]
    assert Path(f.file).name == "race.cu" and f.line in (8, 9), str(f)
    assert "Race" in f.kind
    assert any("race.cu:8" in d or "race.cu:9" in d for d in f.details), str(f)


def test_infinite_loop_times_out_and_the_parent_goes_on():
    """A spinning kernel times out; a fresh worker then passes add2, and this process's CUDA context still works."""
    out = jitlab.check(FAULTS / "spin.cu", timeout=10)
    assert out.category == jobs.TIMEOUT, out
    good = jitlab.check(ADD2, variant="original")
    assert good.passed, good  # a fresh worker, same parent process
    import torch

    torch.zeros(1, device="cuda").add_(1)  # and this process's own CUDA context is fine
    torch.cuda.synchronize()


def test_wild_pointer_is_an_illegal_address_in_the_named_kernel():
    """A wild pointer is an illegal address in kernel wild, suggesting `jitlab sanitize`; add2 passes after it."""
    out = jitlab.check(FAULTS / "wild.cu")
    assert out.category == jobs.ILLEGAL, out
    assert "wild" in out.where and "jitlab sanitize" in out.message
    assert jitlab.check(ADD2, variant="original").passed


def test_device_assert_is_reported_at_its_line():
    """A device assert is reported at device_assert.cu:6, thread [5,0,0], with the assertion's own output."""
    out = jitlab.check(FAULTS / "device_assert.cu")
    assert out.category == jobs.ASSERT, out
    assert "device_assert.cu:6" in out.where and "thread [5,0,0]" in out.where, out.where
    assert "Assertion" in out.output


def test_debug_build_runs_and_checks():
    """A debug build of add2 passes its isolated check, and a debug load compiles with -G."""
    out = jitlab.check(ADD2, variant="original", debug=True, timeout=300)
    assert out.passed, out
    m = jitlab.load(ADD2, debug=True)
    assert "-G" in m.build.log


def test_ncu_reports_figures_for_add2():
    """ncu measures add2_kernel: duration, DRAM %, occupancy and top stalls, all shown in the report."""
    prof = jitlab.profile(ADD2, size=1 << 24)
    if not prof.available:  # counters locked on this machine: the report must say why
        assert "ERR_NVGPUCTRPERM" in prof.reason or "ncu failed" in prof.reason, prof.reason
        pytest.fail(f"ncu ran but measured nothing: {prof.reason}")  # the lent H100 allows counters
    names = {k.kernel for k in prof.kernels}
    assert "add2_kernel" in names, prof.output[-2000:]
    k = next(k for k in prof.kernels if k.kernel == "add2_kernel")
    assert k.duration_ns > 0 and 0 < k.dram_pct <= 100
    assert 0 < k.achieved_occupancy <= 100 and k.theoretical_occupancy > 0
    assert k.stalls and k.stalls[0][1] > 0
    assert "add2_kernel" in str(prof) and "top stalls" in str(prof)


def test_profile_names_the_kernel_choices():
    """Profiling a kernel the snippet lacks is a SnippetError that names its kernels (add2_kernel)."""
    with pytest.raises(jitlab.SnippetError, match="add2_kernel"):
        jitlab.profile(ADD2, kernel="nope")


def test_isolated_check_is_fast_when_warm():
    """A repeated isolated check on a warm worker passes as a cache hit (its time is printed)."""
    isolate.worker()  # started by earlier tests or now
    jitlab.check(ADD2, variant="original")
    out = jitlab.check(ADD2, variant="original")
    assert out.passed and out.build == "cache hit"
    print(f"warm isolated check of add2 (original): {out.seconds:.3f} s")
    assert profiler.kernel_names(ADD2)  # the names ncu filters on
