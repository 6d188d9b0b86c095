"""Isolated checks on the CPU: C++ snippets with planted faults run in a worker process, and each
ends in the right category while this process goes on (GPU faults: tests/test_gpu.py)."""

from __future__ import annotations

import pytest
from conftest import ROOT

import jitlab
from jitlab import cli
from jitlab.errors import ArgumentError, SnippetError, ToolchainError
from jitlab.jit import builder, toolchain
from jitlab.jit.flags import Options, compile_flags
from jitlab.worker import isolate, jobs, sanitizer

FAULTS = ROOT / "tests" / "fixtures" / "faults"
ADD2 = ROOT / "kernels" / "add2_cpu.cpp"


@pytest.fixture(scope="module")
def worker(tmp_path_factory):
    """One warm worker for this module, with its own build cache."""
    w = isolate.Worker({"JITLAB_CACHE_DIR": str(tmp_path_factory.mktemp("iso_cache"))})
    yield w
    w.stop()


def _check(worker, path, timeout=60.0, **kw) -> jobs.Outcome:
    return worker.run(jobs.Job("check", str(path), **kw), timeout)


def test_passing_snippet_passes_with_its_verdict(worker):
    """add2_cpu.cpp checked in the worker passes, with a passing verdict, and its text says PASS."""
    out = _check(worker, ADD2)
    assert out.passed and out.category == jobs.PASS
    assert out.verdicts and out.verdicts[0].passed
    assert "PASS" in str(out)


def test_wrong_result_is_a_mismatch_with_the_checkers_reasons(worker):
    """A wrong C++ result is a mismatch: elements differ, at wrong_cpu/original size 1."""
    out = _check(worker, FAULTS / "wrong_cpu.cpp")
    assert out.category == jobs.MISMATCH
    assert "elements differ" in str(out)
    assert "wrong_cpu/original at size 1" in out.where


@pytest.mark.slow
def test_hang_times_out_and_the_next_check_still_works(worker):
    """A hanging snippet times out after 5 s and its worker is stopped; a fresh worker passes the next check."""
    out = _check(worker, FAULTS / "hang_cpu.cpp", timeout=5)
    assert out.category == jobs.TIMEOUT
    assert "5 s" in out.message
    assert worker.proc is None  # the stuck worker was stopped
    assert _check(worker, ADD2).passed  # a fresh worker takes over


def test_crash_is_reported_and_the_next_check_still_works(worker):
    """A segfaulting snippet is a crash naming SIGSEGV; the next check passes in a fresh worker."""
    out = _check(worker, FAULTS / "segv_cpu.cpp")
    assert out.category == jobs.CRASH
    assert "SIGSEGV" in out.message
    assert _check(worker, ADD2).passed


def test_compile_error_names_the_line(worker, write):
    """A compile error in the worker is category compile, naming broken.cpp:3 and the undefined name."""
    p = write("broken.cpp", """
        #include <cstdint>
        void broken(float* c, int64_t n) {
            c[0] = undefined_name;
        }
    """)
    (p.parent / "broken.ref.py").write_text((FAULTS / "wrong_cpu.ref.py").read_text())
    out = _check(worker, p)
    assert out.category == jobs.COMPILE
    assert "broken.cpp:3" in out.message and "undefined_name" in out.message


def test_undefined_symbol_is_a_link_error(worker, write):
    """A function declared but defined nowhere is a link error that names the missing symbol."""
    p = write("unlinked.cpp", """
        #include <cstdint>
        void helper_defined_nowhere(float* c);
        void unlinked(float* c, const float* a, const float* b, int64_t n) { helper_defined_nowhere(c); }
    """)
    (p.parent / "unlinked.ref.py").write_text((FAULTS / "wrong_cpu.ref.py").read_text().replace("wrong_cpu", "unlinked"))
    out = _check(worker, p)
    assert out.category == jobs.LINK, out
    assert "helper_defined_nowhere" in out.message


def test_printed_output_comes_back(worker, write):
    """What a snippet prints in the worker comes back in the outcome's output, and the check still passes."""
    p = write("chatty.cpp", """
        #include <cstdint>
        #include <cstdio>
        void chatty(float* c, const float* a, const float* b, int64_t n) {
            printf("chatty saw n=%lld\\n", (long long)n);
            for (int64_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
        }
    """)
    (p.parent / "chatty.ref.py").write_text((FAULTS / "wrong_cpu.ref.py").read_text().replace("wrong_cpu", "chatty"))
    out = _check(worker, p)
    assert out.passed
    assert "chatty saw n=1000" in out.output


def test_check_of_a_path_goes_through_a_worker(cache):
    """jitlab.check(path) runs in a worker that stays warm; isolate=False checks in process and passes too."""
    out = jitlab.check(ADD2, timeout=120)
    assert isinstance(out, jobs.Outcome) and out.passed
    assert isolate.worker().proc is not None  # warm for the next call
    assert jitlab.check(ADD2, isolate=False).passed


def test_check_without_a_reference_names_the_missing_file(write):
    """Checking a snippet that has no .ref.py is a SnippetError naming the missing lonely.ref.py."""
    p = write("lonely.cpp", "void lonely(float* c) { c[0] = 1; }\n")
    with pytest.raises(SnippetError, match=r"lonely\.ref\.py"):
        jitlab.check(p)


def test_check_of_a_callable_needs_reference_inputs_and_sizes():
    """Checking a callable needs reference, inputs and sizes; isolate=True is refused (it applies to snippet paths)."""
    with pytest.raises(ArgumentError, match="reference, inputs"):
        jitlab.check(lambda inp: inp)
    with pytest.raises(ArgumentError, match="apply to a snippet path"):
        jitlab.check(lambda inp: inp, lambda inp: inp, lambda *a: {}, sizes=[1], isolate=True)


def test_cli_check_exit_status_and_category(cache, capsys):
    """`jitlab check` exits 0 printing PASS for add2_cpu, and 1 printing FAIL [mismatch] for a wrong kernel."""
    assert cli.main(["check", str(ADD2)]) == 0
    assert "PASS" in capsys.readouterr().out
    assert cli.main(["check", str(FAULTS / "wrong_cpu.cpp")]) == 1
    assert "FAIL [mismatch]" in capsys.readouterr().out


def test_fault_categories_from_cuda_messages():
    """CUDA error messages map to the illegal-address, assert and launch categories; a result mismatch to none."""
    assert jobs.fault_category("CUDA error: an illegal memory access was encountered") == jobs.ILLEGAL
    assert jobs.fault_category("raised LaunchError: k<<<...>>> failed: cudaErrorLaunchFailure: unspecified launch failure") == jobs.ILLEGAL
    assert jobs.fault_category("torch.AcceleratorError: CUDA error: device-side assert triggered") == jobs.ASSERT
    assert jobs.fault_category("failed: cudaErrorInvalidConfiguration: invalid configuration argument") == jobs.LAUNCH
    assert jobs.fault_category("3 of 10 elements differ") is None


def test_device_assert_location_from_the_drivers_message():
    """The driver's device-assert line gives file:line, kernel, block, thread and the failed condition."""
    # The line the CUDA driver printed for tests/fixtures/faults/device_assert.cu on an H100.
    text = ("/work/main/tests/fixtures/faults/device_assert.cu:6: void device_assert(float *, const float *, int): "
            "block: [0,0,0], thread: [5,0,0] Assertion `x[i] >= 0.0f` failed.\n")
    where = jobs.assert_location(text)
    assert where.startswith("/work/main/tests/fixtures/faults/device_assert.cu:6 in device_assert")
    assert "block [0,0,0] thread [5,0,0]" in where and "`x[i] >= 0.0f`" in where


def test_debug_build_uses_G_and_keeps_asserts(write):
    """A debug build compiles with -G and -UNDEBUG instead of -lineinfo, and is a cache entry of its own."""
    p = write("k.cu", "__global__ void k(float* y) { y[0] = 1; }\n")
    plan, archs, _ = builder.prepare(p, Options(arch=["sm_90"]))
    _, normal = compile_flags(plan, archs, Options())
    _, debug = compile_flags(plan, archs, Options(debug=True))
    assert "-lineinfo" in normal and "-G" not in normal
    assert "-G" in debug and "-UNDEBUG" in debug and "-lineinfo" not in debug
    keys = {builder.prepare(p, Options(arch=["sm_90"], debug=d))[2]["debug"] for d in (False, True)}
    assert keys == {False, True}  # a debug build is its own cache entry


def test_sanitize_needs_a_known_tool_and_names_the_fix_when_missing(monkeypatch):
    """sanitize refuses an unknown tool naming the known ones; without compute-sanitizer it names the CUDA toolkit."""
    with pytest.raises(ArgumentError, match="memcheck, racecheck"):
        sanitizer.sanitize(FAULTS / "oob.cu", tool="leakcheck")
    monkeypatch.setattr(toolchain, "find_cuda_tool", lambda name: None)
    with pytest.raises(ToolchainError, match="compute-sanitizer not found.*CUDA toolkit"):
        sanitizer.command("memcheck", "job", "out")


def test_a_worker_stopped_while_it_warms_ends_its_warming_thread_quietly():
    """A pool that closes while a worker is still starting (a batch check interrupted in its first
    seconds): the warming thread ends without a traceback, and the worker can be started again."""
    import threading

    errors = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    w = isolate.Worker()
    try:
        t = threading.Thread(target=w.start)
        t.start()
        while w.proc is None and t.is_alive():
            pass
        w.stop()
        t.join(timeout=60)
        assert not t.is_alive() and errors == []
        w.start()
        assert w.proc is not None and w.proc.poll() is None
    finally:
        threading.excepthook = previous
        w.stop()


def test_a_worker_too_slow_to_start_is_the_jobs_crash_not_the_callers_error(monkeypatch):
    """A worker that is not ready within the start timeout (a machine too busy to import torch in time) is
    stopped, and the job's outcome says so; nothing is raised into a batch."""
    from jitlab.worker.pool import run_guarded

    monkeypatch.setattr(isolate, "_START_TIMEOUT", 0.01)
    monkeypatch.setenv("JITLAB_FORK_WORKERS", "0")  # one forked from a warm server may well be ready in time
    w = isolate.Worker()
    try:
        out = run_guarded(w, jobs.Job("check", "unused.cu"), timeout=5)
        assert out.category == jobs.CRASH and "did not start within 0.01 s" in out.message, out
        assert w.proc is None
    finally:
        w.stop()
