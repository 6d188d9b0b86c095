"""KernelBench pairs: finding them, swapping a solution's load_inline, grading as KernelBench does, the
results file a rerun skips, the table; on the CPU with a C++-only pair, and on a GPU with a CUDA pair.

The pairs are ours (tests/fixtures/kernelbench/): per problem a right solution, a wrong one (its last
elements are never written) and one that does not compile.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
import torch

from conftest import FakeNvml
from jitlab.errors import ArgumentError
from jitlab.judge import gradebook, kernelbench, kernelbench_grade, kernelbench_pairs
from jitlab.judge.gradebook import Grade, Gradebook, Report
from jitlab.worker import grading

PAIRS = Path(__file__).resolve().parent / "fixtures" / "kernelbench"
CPU = PAIRS / "cpu_scaled_relu"
CUDA = PAIRS / "cuda_scaled_relu"


def test_a_pair_folder_gives_its_problem_with_each_solution_file():
    """A folder with problem.py pairs it with solution.py and each solution_*.py, named by the folder."""
    found = kernelbench_pairs.pairs([CPU])
    assert [p.name for p in found] == ["cpu_scaled_relu", "cpu_scaled_relu/solution_broken",
                                       "cpu_scaled_relu/solution_wrong"]
    assert {p.problem for p in found} == {CPU / "problem.py"}


def test_a_folder_of_pair_folders_gives_every_pair():
    """A folder whose sub-folders are pairs (the corpus layout) gives each sub-folder's pairs, in order."""
    found = kernelbench_pairs.pairs([PAIRS])
    assert [p.problem.parent.name for p in found] == ["cpu_scaled_relu"] * 3 + ["cuda_scaled_relu"] * 3


def test_a_problem_file_pairs_with_the_solution_files_after_it():
    """``problem.py sol_a.py sol_b.py`` grades both solutions against that problem."""
    found = kernelbench_pairs.pairs([CPU / "problem.py", CPU / "solution.py", CUDA / "problem.py", CUDA / "solution_wrong.py"])
    assert [(p.problem.parent.name, p.solution.name) for p in found] == [
        ("cpu_scaled_relu", "solution.py"), ("cuda_scaled_relu", "solution_wrong.py")]


def test_a_solution_with_no_problem_is_refused_with_the_fix():
    """A solution file named before any problem says to name the problem first."""
    with pytest.raises(ArgumentError, match="name the problem file first"):
        kernelbench_pairs.pairs([CPU / "solution.py"])


def test_check_takes_pairs_but_leaves_snippets_to_the_snippet_checker():
    """``.py`` files and folders of pairs are KernelBench's; kernel files and kernel folders are not."""
    assert kernelbench_pairs.recognizes([CPU / "problem.py"]) and kernelbench_pairs.recognizes([PAIRS])
    assert not kernelbench_pairs.recognizes(["kernels/saxpy.cu", "kernels"])


@pytest.mark.parametrize("style", [
    "from torch.utils.cpp_extension import load_inline\next = load_inline('x', 'src')",
    "import torch.utils.cpp_extension as cpp\next = cpp.load_inline('x', 'src')",
    "import torch.utils.cpp_extension\next = torch.utils.cpp_extension.load_inline('x', 'src')",
    "from torch.utils import cpp_extension\next = cpp_extension.load_inline(name='x', cpp_sources='src')",
])
def test_the_swap_reaches_every_import_style(tmp_path, style):
    """A solution gets the swapped load_inline however it imports it, and torch's is back afterwards."""
    import torch.utils.cpp_extension as ext

    torch_own = ext.load_inline
    sol = tmp_path / "solution.py"
    sol.write_text(style + "\n")
    with kernelbench.swapped(lambda *a, **k: "swapped"):
        mod = kernelbench.import_file(sol, "kernelbench_solution")
    assert mod.ext == "swapped"
    assert ext.load_inline is torch_own


def test_without_a_gpu_check_names_compile_only_and_device_cpu(jitlab_cli):
    """Grading CUDA pairs on a machine without a GPU stops at once, naming --compile-only and --device cpu."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    r = jitlab_cli("check", CUDA)
    assert r.returncode == 1
    assert "no CUDA GPU found" in r.stderr and "--compile-only" in r.stderr and "--device cpu" in r.stderr


def test_the_results_file_skips_a_torn_line(tmp_path):
    """A line cut short by a killed batch is skipped; the grades around it are read."""
    book = Gradebook(tmp_path / "grades.jsonl")
    book.append(Grade("k1", "a", "p.py", "a.py", "cpu", "pass"))
    with open(book.path, "a") as f:
        f.write('{"key": "k2", "pair": "b", "pro\n')
    book.append(Grade("k3", "c", "p.py", "c.py", "cpu", "mismatch", "1 of 5 trials disagree"))
    assert sorted(book.known()) == ["k1", "k3"]


def test_the_table_has_a_verdict_line_per_solution_then_the_counts():
    """Each solution gets one line (times and speedups, or the category and why), then the counts and speedups."""
    grades = [Grade("k1", "fast", "p.py", "fast.py", "gpu", "pass", build_s=5.0, ms=0.5, eager_ms=1.0, compile_ms=0.75),
              Grade("k2", "broken", "p.py", "broken.py", "gpu", "compile error",
                    "jitlab: load_inline 'x' failed to compile: 1 error\nsolution.py, line 12 (load_inline 'x' "
                    "cuda_sources[0], line 3): error: identifier \"n2\" is undefined\n    3 | ...")]
    lines = Report(grades, graded=2, seconds=12.0).table().splitlines()
    assert lines[0].split() == ["fast", "PASS", "0.5", "ms,", "2.00x", "eager,", "1.50x", "compile", "(build", "5.0", "s)"]
    assert "FAIL [compile error]  solution.py, line 12 (load_inline 'x' cuda_sources[0], line 3): error" in lines[1]
    assert lines[2] == "2 solutions graded in 12.0 s: 1 right, 1 compile error"
    assert lines[3] == "median speedup of the right ones: 2.00x over eager, 1.50x over compile"


# --- the whole flow on the CPU: a C++-only solution to a CPU problem ---------------------------------

@pytest.fixture(scope="module")
def cpu_graded(tmp_path_factory, shared_cache):
    """The CPU pairs graded once (shared build cache), with the results file they were kept in."""
    old = os.environ.get("JITLAB_CACHE_DIR")
    os.environ["JITLAB_CACHE_DIR"] = str(shared_cache)
    store = tmp_path_factory.mktemp("kb") / "grades.jsonl"
    try:
        report = grading.grade_many([CPU], device="cpu", store=store, build_threads=2)
        yield {g.pair: g for g in report.grades}, store
    finally:
        if old is None:
            os.environ.pop("JITLAB_CACHE_DIR", None)
        else:
            os.environ["JITLAB_CACHE_DIR"] = old


@pytest.mark.slow
def test_a_right_cpu_solution_passes_and_is_timed_against_eager(cpu_graded):
    """The right C++ solution passes KernelBench's trials and has its time and Model's eager time."""
    g = cpu_graded[0]["cpu_scaled_relu"]
    assert g.category == gradebook.PASS, g.message
    assert g.ms > 0 and g.eager_ms > 0 and g.compile_ms is None  # torch.compile is timed on a GPU only


@pytest.mark.slow
def test_a_wrong_solution_is_a_mismatch_with_the_checkers_reasons(cpu_graded):
    """The solution that skips the last element fails every trial, saying it was never written and where."""
    g = cpu_graded[0]["cpu_scaled_relu/solution_wrong"]
    assert g.category == "mismatch"
    assert g.message.startswith("5 of 5 trials disagree with Model (atol = rtol = 0.01)")
    assert "1 of 4773 output elements were never written" in g.message and "(36, 128)" in g.message
    assert g.where.startswith("ModelNew at size get_inputs(), seed ")


@pytest.mark.slow
def test_a_compile_error_is_reported_at_the_solutions_line(cpu_graded):
    """The solution that does not compile fails at its own file's line, inside the load_inline string."""
    g = cpu_graded[0]["cpu_scaled_relu/solution_broken"]
    assert g.category == "compile error"
    assert ("solution_broken.py, line 15 (load_inline 'kb_cpu_scaled_relu_broken' cpp_sources[0], line 9): "
            "error: ‘alpha_f’ was not declared") in gradebook.first_line(g.message)


@pytest.mark.slow
def test_a_rerun_grades_only_what_changed(cpu_graded, tmp_path, use_shared_cache):
    """With the same results file, unchanged pairs come from it and an edited solution is graded again."""
    store = tmp_path / "grades.jsonl"
    shutil.copy(cpu_graded[1], store)
    pair = tmp_path / "cpu_scaled_relu"
    shutil.copytree(CPU, pair)
    again = grading.grade_many([CPU], device="cpu", store=store)
    assert again.graded == 0 and [g.category for g in again.grades] == ["pass", "compile error", "mismatch"]
    edited = pair / "solution_wrong.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    mixed = grading.grade_many([CPU / "problem.py", CPU / "solution.py", CPU / "problem.py", edited],
                               device="cpu", store=store)
    assert mixed.graded == 1 and [g.category for g in mixed.grades] == ["pass", "mismatch"]


@pytest.mark.slow
@pytest.mark.parametrize("kept", ["inputs and outputs", "times only"])
def test_a_problems_reference_grades_its_solutions_as_a_full_grade_does(cpu_graded, tmp_path, use_shared_cache,
                                                                        monkeypatch, kept):
    """The problem's half of grading, made once and saved (Model's eager time; each trial's inputs and Model's
    outputs where they fit), gives each solution the verdict a full grade gives, with Model's saved time."""
    if kept == "times only":  # a problem too large to keep: each grade draws its inputs and runs Model itself
        monkeypatch.setattr(kernelbench_grade, "KEPT_BYTES", 0)
    saved = tmp_path / "reference.pt"
    times = kernelbench_grade.reference(CPU / "problem.py", saved, device="cpu", compile_ref=False)
    held = torch.load(saved, weights_only=True)
    assert held["eager_ms"] == times["eager_ms"] > 0 and len(held["seeds"]) == kernelbench.TRIALS
    assert ("outputs" in held) == (kept == "inputs and outputs")
    if "outputs" in held:
        assert len(held["inputs"]) == len(held["outputs"]) == kernelbench.TRIALS
        torch.manual_seed(held["seeds"][2])  # the third trial's inputs are get_inputs() under its seed
        assert all(torch.equal(a, b) for a, b in zip(held["inputs"][2], [torch.randn(37, 129), torch.randn(37, 129)]))
    for solution in ("solution.py", "solution_wrong.py"):
        full = kernelbench_grade.grade(CPU / "problem.py", CPU / solution, device="cpu", compile_ref=False)
        half = kernelbench_grade.grade(CPU / "problem.py", CPU / solution, device="cpu", compile_ref=False,
                                       reference=str(saved))
        assert half.verdict.passed == full.verdict.passed == (solution == "solution.py")
        assert [c.seed for c in half.verdict.cases] == [c.seed for c in full.verdict.cases] == held["seeds"]
        assert str(half.verdict) == str(full.verdict)
        if half.verdict.passed:
            assert half.data["eager_ms"] == held["eager_ms"] and half.data["ms"] > 0


@pytest.mark.slow
def test_a_reference_that_cannot_be_read_back_leaves_the_grade_whole(cpu_graded, tmp_path, use_shared_cache):
    """A reference torch cannot load (here: not a torch file at all) costs only time: the grade does both halves."""
    unreadable = tmp_path / "reference.pt"
    unreadable.write_bytes(b"not a torch file")
    g = kernelbench_grade.grade(CPU / "problem.py", CPU / "solution.py", device="cpu", compile_ref=False,
                                reference=str(unreadable))
    assert g.verdict.passed and g.data["eager_ms"] > 0 and g.data["ms"] > 0


@pytest.mark.slow
def test_a_lane_waiting_for_builds_makes_the_problems_reference(tmp_path, use_shared_cache, monkeypatch):
    """While the solutions still build, the idle lane makes the problem's reference; the grades are what they are
    without it, and the batch's folder of references is gone at the end."""
    outcomes, compile_pair, finished = [], grading._compile, grading.Ahead.finished

    def slow_build(item, **kw):  # builds that take a while, as a cold batch's do
        time.sleep(2)
        return compile_pair(item, **kw)

    monkeypatch.setattr(grading, "_compile", slow_build)
    monkeypatch.setattr(grading.Ahead, "finished", lambda self, job, out: (outcomes.append(out.category),
                                                                         finished(self, job, out)))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    report = grading.grade_many([CPU], device="cpu", store=tmp_path / "grades.jsonl", build_threads=2)
    assert outcomes == ["pass"]  # one problem, one reference, made while its three solutions built
    assert {g.pair: g.category for g in report.grades} == {
        "cpu_scaled_relu": "pass", "cpu_scaled_relu/solution_broken": "compile error",
        "cpu_scaled_relu/solution_wrong": "mismatch"}
    assert report.grades[0].eager_ms > 0
    assert not list(tmp_path.glob("jitlab-kernelbench-*"))


@pytest.mark.slow
def test_the_compile_phase_leaves_the_import_a_cache_hit(cache):
    """A solution built by the compile phase imports without building again (the same build key)."""
    pair = kernelbench_pairs.pairs([CPU])[0]
    built = kernelbench.compile_pair(pair)
    assert not built.error and built.calls == 1
    _, builds = kernelbench.import_solution(pair.solution, "jitlab")
    assert builds.cached


def test_a_solutions_load_inline_calls_build_side_by_side_and_its_first_error_is_its_own(tmp_path, monkeypatch):
    """The compile phase starts each load_inline call of a solution without waiting for the one before (two
    calls meet inside their builds), and of two failing calls reports the first one's error, from its thread."""
    from jitlab.errors import CompileError
    from jitlab.jit import torch_compat

    solution = tmp_path / "solution.py"
    solution.write_text("from torch.utils.cpp_extension import load_inline\n"
                        "a = load_inline('first', '')\nb = load_inline('second', '')\nclass ModelNew: pass\n")
    pair = kernelbench_pairs.Pair(CPU / "problem.py", solution, "two_calls")
    met = threading.Barrier(2, timeout=10)
    callers = []

    def both_at_once(name, *args, caller=None, **kw):  # a build that ends only once the other has begun
        callers.append(caller)
        met.wait()
        return type("Built", (), {"cached": False})()

    monkeypatch.setattr(torch_compat, "build_inline", both_at_once)
    built = kernelbench.compile_pair(pair)
    assert (built.calls, built.error) == (2, "") and callers == [str(solution)] * 2

    def failing(name, *args, caller=None, **kw):
        time.sleep(0.3 if name == "first" else 0)  # the second fails first
        raise CompileError(f"{name} failed")

    monkeypatch.setattr(torch_compat, "build_inline", failing)
    assert kernelbench.compile_pair(pair).error.startswith("first failed")


@pytest.mark.slow
def test_check_prints_the_grades_as_json(cpu_graded, jitlab_cli, use_shared_cache, tmp_path):
    """``jitlab check PAIRS --device cpu --json`` prints every grade and the counts, and fails when one fails."""
    r = jitlab_cli("check", CPU, "--device", "cpu", "--no-time", "--json", "--store", tmp_path / "g.jsonl")
    assert r.returncode == 1, r.stderr
    report = json.loads(r.stdout)
    assert report["counts"] == {"pass": 1, "compile error": 1, "mismatch": 1}
    assert [g["pair"] for g in report["grades"]] == ["cpu_scaled_relu", "cpu_scaled_relu/solution_broken",
                                                     "cpu_scaled_relu/solution_wrong"]


@pytest.mark.slow
def test_compile_only_builds_cuda_solutions_without_a_gpu(use_shared_cache, tmp_path):
    """``compile_only`` builds each CUDA solution for sm_90 (no GPU needed) and reports the broken one at its line."""
    report = grading.grade_many([CUDA], compile_only=True, arch="sm_90", store=tmp_path / "g.jsonl")
    by = {g.pair: g for g in report.grades}
    assert [by[n].category for n in ("cuda_scaled_relu", "cuda_scaled_relu/solution_wrong")] == ["built", "built"]
    broken = by["cuda_scaled_relu/solution_broken"]
    assert broken.category == "compile error"
    assert "solution_broken.py, line 11 (load_inline 'kb_cuda_scaled_relu_broken' cuda_sources[0], line 5): error: " \
           "identifier \"alpha_f\" is undefined" in gradebook.first_line(broken.message)
    assert not (tmp_path / "g.jsonl").exists()  # built is not graded: nothing is kept for a rerun to skip


# --- on a GPU -------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.slow
def test_three_cuda_pairs_are_graded_right_wrong_and_not_compiling(use_shared_cache, tmp_path):
    """On a GPU: the right solution passes and is timed against eager and compiled; the wrong one is a
    mismatch naming the elements never written; the broken one a compile error at its line."""
    report = grading.grade_many([CUDA], store=tmp_path / "grades.jsonl")
    by = {g.pair: g for g in report.grades}
    right, wrong, broken = (by[n] for n in ("cuda_scaled_relu", "cuda_scaled_relu/solution_wrong",
                                            "cuda_scaled_relu/solution_broken"))
    assert right.category == "pass", right.message
    assert right.ms > 0 and right.eager_ms > 0 and right.compile_ms > 0
    assert wrong.category == "mismatch" and "output elements were never written" in wrong.message
    assert broken.category == "compile error"
    assert "solution_broken.py, line 11 (load_inline 'kb_cuda_scaled_relu_broken' cuda_sources[0], line 5)" \
        in gradebook.first_line(broken.message)
    assert "3 solutions graded" in report.table() and "1 right, 1 compile error, 1 mismatch" in report.table()


def test_grading_lanes_follow_the_cores_and_the_smallest_gpus_memory(monkeypatch):
    """One lane per 2 cores, at most 8, and at most one per 9 GiB of the smallest GPU (as NVML says, no CUDA
    context made); where NVML cannot say (no driver), the cores alone decide."""
    import ctypes

    from jitlab.worker import grading

    assert [grading.lanes_for(c, gib) for c, gib in [(2, None), (16, None), (64, None), (16, 79.6), (16, 139.8),
                                                      (16, 39.4), (16, 14.6), (8, 23.5), (1, 4.0)]] == [1, 8, 8, 8, 8, 4, 1, 2, 1]
    fake = FakeNvml()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake if name == "libnvidia-ml.so.1" else None)
    assert grading.smallest_gpu_gib() == pytest.approx(24 * 10**9 / 2**30) and fake.shut

    def missing(name):
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", missing)
    assert grading.smallest_gpu_gib() is None


def test_the_device_code_scan_records_a_solutions_calls_and_compiles_its_kernels(tmp_path):
    """benchmarks/kernelbench_device_code.py: a solution's load_inline calls are recorded without building, and
    a right solution's device unit (split as jitlab splits it) is NVRTC's at once; a module function the solution
    names at import is there, unbuilt."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("kb_device_code", PAIRS.parents[2] / "benchmarks" / "kernelbench_device_code.py")
    scan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scan)
    calls, error = scan.calls_of(CUDA / "solution.py")
    assert error == "" and [c["name"] for c in calls] == ["kb_cuda_scaled_relu"]
    assert calls[0]["functions"] == ["scaled_relu_add"] and calls[0]["extra_cuda_cflags"] == ["-O3"]
    assert scan.scan(calls[0], "sm_90", tmp_path) == ("nvrtc", "")
    with pytest.raises(RuntimeError, match="not built"):
        scan._Unbuilt().scaled_relu_add()
