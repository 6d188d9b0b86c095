"""The checker's reasons, on deliberately wrong C++ kernels (CPU), and its tolerance table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.judge.checker import TOLERANCES, check, tolerance

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SIZES = [1, 31, 127, 128, 129, 1001]


@pytest.fixture(scope="module")
def wrong(tmp_path_factory):
    import os

    old = os.environ.get("JITLAB_CACHE_DIR")
    os.environ["JITLAB_CACHE_DIR"] = str(tmp_path_factory.mktemp("cache"))
    try:
        yield jitlab.load(FIXTURES / "wrong.cpp")
    finally:
        if old is None:
            os.environ.pop("JITLAB_CACHE_DIR", None)
        else:
            os.environ["JITLAB_CACHE_DIR"] = old


def scale_inputs(size, seed, device):
    g = torch.Generator().manual_seed(seed)
    return {"x": torch.randn(size, generator=g)}


def scale_ref(inp):
    return 2 * inp["x"]


def runner(fn):
    def run(inp):
        y = torch.empty_like(inp["x"])
        fn(y, inp["x"], inp["x"].numel())
        return y
    return run


def verdict(m, name, sizes=SIZES):
    return check(runner(getattr(m, name)), scale_ref, scale_inputs, sizes=sizes, seeds=[0, 1], device="cpu", name=name)


def test_correct_kernel_passes(wrong):
    """The right kernel passes every size and seed."""
    v = verdict(wrong, "scale_ok")
    assert v.passed and len(v.cases) == len(SIZES) * 2 and "PASS" in str(v)


def test_off_by_one_is_an_unwritten_element(wrong):
    """Missing the last element: reported as never written, at the last index."""
    v = verdict(wrong, "scale_off_by_one")
    assert not v.passed
    f = v.first_failure
    assert f.size == 1 and "1 of 1 output elements were never written" in f.reasons[0]
    big = next(c for c in v.cases if c.size == 129)
    assert big.mismatches[0].index == (128,)


def test_unwritten_tail(wrong):
    """A vectorized loop without its scalar tail leaves n % 4 elements unwritten."""
    v = verdict(wrong, "scale_unwritten_tail")
    case = next(c for c in v.cases if c.size == 31)
    assert "3 of 31 output elements were never written" in case.reasons[0]
    assert [m.index for m in case.mismatches] == [(28,), (29,), (30,)]
    assert next(c for c in v.cases if c.size == 128).ok  # multiples of 4 are fine


def test_modified_input(wrong):
    """A kernel that clobbers its input is reported even though its output is right."""
    v = verdict(wrong, "scale_modifies_input")
    assert any("modified its input `x`" in r for r in v.reasons)


def test_wrong_values_report_counts_errors_and_indices(wrong):
    """Numeric mismatches: how many, max abs/rel error, first indices with got/expected."""
    v = verdict(wrong, "scale_wrong_value", sizes=[1001])
    f = v.first_failure
    assert "10 of 1001 elements differ" in f.reasons[0] and "max abs error 0.5" in f.reasons[0]
    m = f.mismatches[0]
    assert m.index == (7,) and m.got == pytest.approx(m.expected + 0.5)


def test_nan_disagreement_is_reported(wrong):
    """NaN where torch has a number is never hidden."""
    v = verdict(wrong, "scale_nan", sizes=[1001])
    assert not v.passed and v.first_failure.wrong > 0


def test_missing_bounds_check_writes_past_n(wrong):
    """Scaling a prefix without the bounds check changes elements past n."""
    def inputs(size, seed, device):
        return {"buf": torch.randn(size + 8, generator=torch.Generator().manual_seed(seed)), "n": size}

    def ref(inp):
        y = inp["buf"].clone()
        y[: inp["n"]] *= 2
        return y

    def run(fn):
        def go(inp):
            y = inp["buf"].clone()
            fn(y, inp["n"], y.numel())
            return y
        return go

    assert check(run(wrong.prefix_ok), ref, inputs, sizes=[5, 129], device="cpu").passed
    v = check(run(wrong.prefix_no_bounds_check), ref, inputs, sizes=[5, 129], device="cpu")
    assert "8 of 13 elements differ" in v.reasons[0]
    assert [m.index for m in v.first_failure.mismatches][:2] == [(5,), (6,)]


def test_integers_compare_exactly(wrong):
    """An int64 result must match exactly; the count differs by design here."""
    def run(fn):
        def go(inp):
            out = torch.empty(1, dtype=torch.int64)
            fn(out, inp["x"], inp["x"].numel())
            return out
        return go

    def ref(inp):
        return (inp["x"] > 0).sum().reshape(1)

    assert check(run(wrong.count_ok), ref, scale_inputs, sizes=[1000], device="cpu").passed
    v = check(run(wrong.count_wrong), ref, scale_inputs, sizes=[1000], device="cpu")
    assert "integers compare exactly" in v.reasons[0]


def test_shape_and_dtype_mismatch():
    """Wrong shape or dtype is said before any value is compared."""
    v = check(lambda inp: inp["x"].reshape(1, -1) * 2, scale_ref, scale_inputs, sizes=[8], device="cpu")
    assert v.reasons == ["shape (1, 8), expected (8,)"]
    v = check(lambda inp: (inp["x"] * 2).double(), scale_ref, scale_inputs, sizes=[8], device="cpu")
    assert v.reasons == ["dtype float64, expected float32"]


def test_a_raising_kernel_is_a_verdict():
    """An exception in the candidate fails the case instead of escaping."""
    def boom(inp):
        raise RuntimeError("device-side assert")
    v = check(boom, scale_ref, scale_inputs, sizes=[4], device="cpu")
    assert v.reasons == ["raised RuntimeError: device-side assert"]


def test_html_rendering_has_a_table(wrong):
    """In a notebook the verdict renders as a small table of wrong elements."""
    html = verdict(wrong, "scale_off_by_one")._repr_html_()
    assert "FAIL" in html and "<table>" in html and "<th>got</th>" in html


def test_tolerance_table_and_overrides():
    """One table per dtype; a kernel can override it; tf32 is looser than float32."""
    assert tolerance(torch.float32) == TOLERANCES["float32"]
    assert tolerance(torch.float16) == TOLERANCES["float16"]
    assert tolerance(torch.int32) == (0.0, 0.0)
    assert tolerance(torch.float32, {"rtol": 1e-4}) == (1e-4, TOLERANCES["float32"][1])
    assert tolerance(torch.float32, tf32=True)[0] > tolerance(torch.float32)[0]


def test_half_within_tolerance_passes():
    """A float16 result one rounding away from torch's passes with the float16 tolerance."""
    def inputs(size, seed, device):
        return {"x": torch.linspace(-3, 3, size, dtype=torch.float16)}
    ref = lambda inp: inp["x"] * 3  # noqa: E731
    cand = lambda inp: (inp["x"].float() * 3).half()  # noqa: E731
    assert check(cand, ref, inputs, sizes=[1001], device="cpu").passed


def test_thread_attribution_for_1d_and_2d_launches():
    """Wrong elements name the (blockIdx, threadIdx) of the usual index formulas."""
    from jitlab.judge.checker import _thread_of

    assert _thread_of((300,), (1000,), (4, 1, 1, 256, 1, 1), None) == "block (1,) thread (44,)"
    assert _thread_of((1100,), (2000,), (4, 1, 1, 256, 1, 1), None) == "block (0,) thread (76,)"  # grid-stride pass 2
    assert _thread_of((17, 40), (64, 64), None, (16, 16)) == "block (2, 1) thread (8, 1)"


def test_package_exports_the_functions():
    """jitlab.check / jitlab.bench / jitlab.ab are the functions, whatever was imported before
    (jitlab.check is isolate's: snippet paths there, callables to checker.check)."""
    from jitlab.judge.benchmark import bench
    from jitlab.judge.timing import ab
    from jitlab.worker import isolate

    assert jitlab.check is isolate.check and jitlab.bench is bench and jitlab.ab is ab


def test_written_by_column_only_when_a_launch_is_known():
    """A wrong C++ (CPU) result has no thread to name: its table has no empty "written by" column; a
    kernel launch's has one, naming the block and thread."""
    from jitlab.judge.checker import Case, Mismatch, Verdict

    def inputs(size, seed, device):
        return {"x": torch.arange(size, dtype=torch.float32)}

    cpu = check(lambda inp: inp["x"] * 3, lambda inp: inp["x"] * 2, inputs, sizes=[4], device="cpu")
    assert not cpu.passed
    assert "written by" not in cpu._repr_html_() and "thread" not in str(cpu).splitlines()[2]
    launched = Verdict("k", [Case(4, 0, ["1 of 4 elements differ"], 1, 4,
                                  mismatches=[Mismatch((1,), 3.0, 2.0, "block (0,) thread (1,)")])])
    assert "<th>written by</th>" in launched._repr_html_() and "block (0,) thread (1,)" in launched._repr_html_()
    assert str(launched).splitlines()[2].endswith("thread")


@pytest.mark.slow
def test_poisoned_allocations_switch_torchs_flags_back_without_importing_inductor():
    """Inside the checker's block, torch.empty holds NaN under deterministic algorithms (warn only); after it,
    torch's flags are as they were; and a fresh process that checks never imports torch._inductor (what
    torch.use_deterministic_algorithms would pull in: seconds per worker process)."""
    from jitlab.judge.checker import poisoned_allocations

    torch.use_deterministic_algorithms(False)
    with poisoned_allocations():
        assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
        assert torch.empty(4).isnan().all()
    assert not torch.are_deterministic_algorithms_enabled()
    code = ("import sys, torch\nfrom jitlab.judge.checker import check\n"
            "v = check(lambda i: i['x'] * 2, lambda i: i['x'] * 2, lambda size, seed, dev: {'x': torch.ones(3)},"
            " sizes=[3], seeds=[0], device='cpu', name='k')\n"
            "print(v.passed, 'torch._inductor' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    assert out.stdout.split() == ["True", "False"], out.stderr
