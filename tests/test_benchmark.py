"""Timing statistics, A/B verdicts, check-before-time, honest ratios and roofs, result history and plots (CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from jitlab.jit import toolchain
from jitlab.judge import benchmark, results, runner, timing
from jitlab.judge.benchmark import Comparison, bench
from jitlab.judge.checker import Verdict
from jitlab.judge.timing import Timing, ab, ab_verdict, time_cpu

ROOT = Path(__file__).resolve().parent.parent


def test_median_and_quartiles():
    """Median and IQR from raw samples (linear interpolation between order statistics)."""
    t = Timing([5.0, 1.0, 3.0, 2.0, 4.0])
    assert t.median == 3.0 and t.q25 == 2.0 and t.q75 == 4.0 and t.iqr == 2.0
    assert t.to_dict()["samples_ms"] == [5.0, 1.0, 3.0, 2.0, 4.0]


class FakeClock:
    """A clock that moves only when the timed work says so: timing decisions without a machine's noise."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def work(self, *ms: float):
        """A callable that takes ``ms`` milliseconds each call (cycling through several values)."""
        costs = iter(ms * 1_000_000)
        def fn():
            self.now += next(costs) / 1e3
        return fn


@pytest.fixture
def clock(monkeypatch) -> FakeClock:
    c = FakeClock()
    monkeypatch.setattr(timing, "_clock", c)
    monkeypatch.setattr(timing, "machine_load", lambda: (0.1, 2))  # a quiet machine: the busy rule is tested apart
    return c


def test_time_cpu_stops_when_stable(clock):
    """A steady function stops after two rounds of ten, well before the repetition cap."""
    t = time_cpu(clock.work(0.02), rep_s=5.0, max_reps=5000)
    assert len(t.samples) == 20 and t.median == pytest.approx(0.02) and t.device == "cpu"


def test_time_cpu_respects_the_budget(clock):
    """A function whose time never settles stops once the measurement budget is spent."""
    t = time_cpu(clock.work(10, 12, 9, 15), warmup_s=0.0, rep_s=0.1, stable_rtol=0.0)
    assert len(t.samples) == 10  # one round of ten 9-15 ms calls spends the 0.1 s budget
    assert clock.now == pytest.approx(0.123)  # the warm-up call (10 ms) and the round (113 ms)


def test_ab_says_faster_and_slower(clock):
    """A version taking a tenth of the time is 'faster'; swapped, 'slower'; the ratio is the medians'."""
    slow, fast = clock.work(1.0, 1.1, 0.9), clock.work(0.1, 0.11, 0.09)
    v = ab(slow, fast, device="cpu", rounds=3)
    assert v.verdict == "faster" and v.speedup == pytest.approx(10.0)
    assert ab(fast, slow, device="cpu", rounds=3).verdict == "slower"


def test_ab_calls_noise_the_same(clock):
    """Medians 5 % apart inside a 20 % spread are 'same', not a verdict."""
    v = ab(clock.work(0.9, 1.0, 1.1, 1.2), clock.work(0.95, 1.05, 1.15, 1.25), device="cpu", rounds=3)
    assert v.verdict == "same"


@pytest.mark.parametrize("a, b, verdict", [
    ([1.0] * 9 + [50.0], [0.5] * 10, "faster"),          # one stalled sample does not hide a 2x gain
    ([1.0, 1.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0], "same"),
    ([1.0, 2.0, 1.0, 2.0], [1.5, 1.5, 1.5, 1.5], "same"),  # B's median sits inside A's spread
    ([0.2, 0.21, 0.19], [1.0, 1.1, 0.9], "slower"),
])
def test_ab_verdict_from_samples(a, b, verdict):
    """The A/B rule on given samples: the medians' log distance against the larger log IQR."""
    assert ab_verdict(Timing(a), Timing(b)) == verdict


def test_ab_on_a_busy_machine_gives_no_verdict(clock, monkeypatch):
    """A/B on a machine whose load is above its cores is 'busy', with the figure, not faster or slower."""
    monkeypatch.setattr(timing, "machine_load", lambda: (5.5, 2))
    v = ab(clock.work(1.0), clock.work(0.1), device="cpu", rounds=2)
    assert v.verdict == "busy" and v.why == "load 5.5 on 2 cores"
    from jitlab.notebook.report import ab_status

    assert ab_status(v, "v1", 1000) == "A/B @ 1000: machine busy (load 5.5 on 2 cores): no verdict (10.00x)"


def test_ab_runs_real_functions():
    """On real work, ab() alternates both sides and keeps every sample (no verdict asserted: that
    depends on the machine; the rule is tested on given samples above)."""
    x = torch.randn(20_000)
    v = ab(lambda: x.sort(), lambda: x[:2000].sort(), device="cpu", rounds=2, rep_s=0.01)
    assert v.verdict in ("faster", "same", "slower", "busy") and len(v.a.samples) >= 20 and len(v.b.samples) >= 20


def _inputs(size, seed, device):
    return {"x": torch.randn(size, generator=torch.Generator().manual_seed(seed))}


def _ref(inp):
    return inp["x"] * 2


def test_wrong_kernel_is_never_timed():
    """bench() checks first: a wrong kernel gets a verdict and no time."""
    r = bench(lambda inp: inp["x"] * 3, _inputs, 1000, reference=_ref, device="cpu")
    assert r.timing is None and not r.verdict.passed and "not timed" in str(r)


def test_bench_reports_bandwidth_and_speedup():
    """A right kernel is timed beside torch, with GB/s from the declared byte count."""
    r = bench(lambda inp: inp["x"] + inp["x"], _inputs, 1 << 16, reference=_ref, device="cpu",
              bytes_moved=lambda inp: 8 * inp["x"].numel())
    assert r.timing and r.torch_timing and r.gbps > 0 and r.vs_torch > 0
    d = r.to_dict()
    assert d["passed"] and d["median_ms"] == r.timing.median and d["gbps"] == r.gbps


def test_bench_needs_a_reference():
    """Timing without a reference would skip the check: refused."""
    with pytest.raises(ValueError, match="reference"):
        bench(lambda inp: inp, _inputs, 8, device="cpu")


def test_history_and_plot(tmp_path, monkeypatch):
    """Records append per kernel and read back in order; the plot is a PNG."""
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(tmp_path))
    rows = [{"variant": "v0", "size": 2**k, "median_ms": 1.0 / k, "gbps": 10.0 * k, "torch_ms": 1.0, "torch_gbps": 50.0}
            for k in range(10, 14)]
    for r in rows:
        results.append("demo", r)
    hist = results.history("demo")
    assert [h["size"] for h in hist] == [2**k for k in range(10, 14)]
    png = results.plot("demo", rows, peak_gbps=100.0)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results.chart_kind(rows) == "lines"


def test_plot_of_one_size_per_version_is_a_bar_chart(tmp_path, monkeypatch):
    """`jitlab run` times each version at one size: bars per version (with torch), not lone dots."""
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(tmp_path))
    rows = [{"variant": v, "size": 2**20, "median_ms": 1.0, "gbps": g, "torch_ms": 1.1, "torch_gbps": 900.0}
            for v, g in (("original", 400.0), ("kernel1", 950.0))]
    assert results.chart_kind(rows) == "bars"
    png = results.plot("demo", rows, peak_gbps=1000.0)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_run_command_on_a_cpp_kernel(tmp_path):
    """`jitlab run` on a C++ kernel checks, times against torch, prints the table and writes JSON."""
    env = {**os.environ, "JITLAB_CACHE_DIR": str(tmp_path), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "jitlab", "run", "kernels/add2_cpu.cpp", "--max-size", "200000"],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "× faster than torch" in out.stdout and "add2_cpu" in out.stdout and "1 passed, 0 failed" in out.stdout
    rec = json.loads((tmp_path / "results" / "add2_cpu.jsonl").read_text().splitlines()[-1])
    assert rec["passed"] and rec["median_ms"] > 0 and rec["vs_torch"] > 0


# ---- honest figures: spreads, busy machines, the roof a kernel is under ---------------------------
def _quiet(ms: float, spread: float = 0.1) -> Timing:
    """CPU samples around ``ms`` (±``spread``) taken with the load average well under the cores."""
    return Timing([ms * (1 + f) for f in (-spread, 0.0, spread, 0.0)], device="cpu", load=0.5, cores=2, threads=1)


def test_overlapping_spreads_give_no_verdict():
    """Medians 5 % apart inside ±20 % samples: 'within noise', no faster or slower, the range shown."""
    c = Comparison.of(_quiet(1.0, 0.2), _quiet(1.05, 0.2), "torch eager, 1 thread")
    assert c.verdict == "same" and not c.decided and c.low < 1 < c.high
    assert c.cell().startswith("within noise: no verdict (") and "faster" not in str(c) and "slower" not in str(c)
    assert str(c).startswith("within noise of torch eager, 1 thread: no verdict")


def test_separated_spreads_give_a_verdict_with_its_range():
    """Torch 3x slower with ±10 % samples: a verdict, with the range its quartiles allow."""
    c = Comparison.of(_quiet(1.0), _quiet(3.0), "torch eager, 1 thread")
    assert c.verdict == "faster" and c.decided and c.low == pytest.approx(3 * 0.975 / 1.025)
    assert c.cell() == "3.00× (2.85–3.15)"
    assert str(c) == "3.00× faster than torch eager, 1 thread (2.85–3.15× by the quartiles)"


def test_a_busy_machine_gives_no_verdict_and_says_why():
    """A load average above the cores, or an IQR wider than half the median, is 'machine busy: no verdict'."""
    loaded = Timing(_quiet(3.0).samples, device="cpu", load=3.9, cores=2)
    c = Comparison.of(_quiet(1.0), loaded, "torch eager")
    assert c.verdict == "busy" and c.cell() == "machine busy: no verdict (load 3.9 on 2 cores)"
    wild = Comparison.of(_quiet(1.0), Timing([0.3, 3.0, 8.0, 1.0], device="cpu", load=0.2, cores=2), "torch eager")
    assert wild.verdict == "busy" and "machine busy: no verdict" in str(wild) and "spread" in wild.why
    events = "cuda"  # the label of samples CUDA events took (given here: nothing runs on a GPU)
    gpu = Timing(_quiet(3.0).samples, device=events, load=9.0, cores=2)  # CUDA events: CPU load is not the rule
    assert Comparison.of(Timing(_quiet(1.0).samples, device=events), gpu, "torch eager").verdict == "faster"


def test_cpu_timings_state_torchs_thread_count():
    """bench() on the CPU times both sides with CPU_THREADS torch threads, says so, and restores torch's setting."""
    before = torch.get_num_threads()
    r = bench(lambda inp: inp["x"] + inp["x"], _inputs, 1 << 14, reference=_ref, device="cpu", rep_s=0.01)
    assert r.torch_timing.threads == r.timing.threads == benchmark.CPU_THREADS == 1
    assert "torch eager, 1 thread" in str(r) and r.to_dict()["threads"] == 1
    assert torch.get_num_threads() == before
    assert r.torch_timing.load is not None and r.to_dict()["torch"]["verdict"] in ("faster", "slower", "same", "busy")


PEAK = {"copy_gbps": 3000.0, "matmul_fp32_tflops": 50.0, "matmul_bf16_tflops": 700.0}


def _matmul(dtype: str, ms: float) -> benchmark.BenchResult:
    """A 4096^3 matmul (683 FLOP/B: right of every ridge here) timed at ``ms``."""
    n = 4096
    return benchmark.BenchResult("mm", n, Verdict("mm", []), _quiet(ms), bytes_moved=3 * n * n * 4, flops=2 * n**3,
                                 peak=PEAK, dtype=dtype)


def test_a_compute_bound_kernel_reports_tflops_against_its_matmul_roof(capsys):
    """Right of the ridge, a float32 kernel shows TFLOP/s and % of the fp32 matmul peak; bf16 the tensor-core roof."""
    r = _matmul("float32", 5.0)
    tp = r.throughput
    assert (tp.unit, tp.roof) == ("TFLOP/s", "fp32 matmul") and tp.pct == pytest.approx(100 * r.tflops / 50.0)
    assert str(tp) == "27.5 TFLOP/s" and tp.of_roof == "55% fp32 matmul"
    assert "27.5 TFLOP/s (55% of the measured fp32 matmul peak)" in str(r) and "GB/s" not in str(r)
    assert _matmul("bfloat16", 0.5).throughput.of_roof == "39% bf16 matmul"
    assert _matmul("float16", 0.5).throughput.roof == "fp16 matmul"
    runner.print_table([{"kernel": "sgemm", "variant": "original", "status": "ok", "size": 4096, "result": r}])
    head, row = capsys.readouterr().out.splitlines()
    assert "throughput" in head and "% of roof" in head and "27.5 TFLOP/s" in row and "55% fp32 matmul" in row
    d = r.to_dict()
    assert (d["throughput_unit"], d["roof"], d["gbps"]) == ("TFLOP/s", "fp32 matmul", r.gbps)  # old fields kept


def test_a_memory_bound_kernel_reports_bandwidth_against_the_copy_roof():
    """Left of the ridge (softmax: 5 FLOPs per 8 bytes) a kernel shows GB/s and % of the copy peak."""
    n = 1 << 26
    r = benchmark.BenchResult("softmax", n, Verdict("softmax", []), _quiet(0.2), bytes_moved=8 * n, flops=5 * n,
                              peak=PEAK, dtype="float32")
    tp = r.throughput
    assert (str(tp), tp.of_roof) == ("2684 GB/s", "89% copy") and tp.pct == pytest.approx(r.pct_peak)


ALIAS_REF = (ROOT / "kernels" / "add2_cpu.ref.py").read_text() + '''

def run_slow(m, inp):
    return run(m, inp).clone()


VARIANTS = {"add2_cpu_slow": run_slow, "add2_cpu_fast": run}
'''


@pytest.mark.slow
@pytest.mark.skipif(toolchain.nvcc_path() is None, reason="needs nvcc for the compile-checked kernel")
def test_run_summary_and_the_original_alias(tmp_path):
    """`jitlab run` without a GPU: an aliased original is named and timed once; the summary counts compile-checks apart."""
    if torch.cuda.is_available():
        pytest.skip("checks the GPU-less run")
    root = tmp_path / "kernels"
    root.mkdir()
    (root / "add2_cpu.cpp").write_text((ROOT / "kernels" / "add2_cpu.cpp").read_text())
    (root / "add2_cpu.ref.py").write_text(ALIAS_REF)
    (root / "saxpy.cu").write_text((ROOT / "kernels" / "saxpy.cu").read_text())
    (root / "saxpy.ref.py").write_text((ROOT / "kernels" / "saxpy.ref.py").read_text())
    env = {**os.environ, "JITLAB_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "jitlab", "run", str(root), "--max-size", "2000", "--arch", "sm_75"],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert sum("original = add2_cpu_fast" in line for line in lines) == 1
    assert not any("add2_cpu_fast" in line and "original" not in line for line in lines)
    assert any(line.split()[1:2] == ["add2_cpu_slow"] for line in lines if line.startswith("add2_cpu "))
    assert "CPU timings: the kernel and torch eager with 1 thread each" in out.stdout
    assert ("1 kernel checked and timed: 1 passed, 0 failed; 1 kernel compile-checked for sm_75 (nothing CUDA ran): "
            "1 compiled, 0 failed") in out.stdout
    variants = [json.loads(line)["variant"] for line in (tmp_path / "cache" / "results" / "add2_cpu.jsonl").open()]
    assert variants == ["original = add2_cpu_fast", "add2_cpu_slow"]


def test_a_no_verdict_cell_keeps_the_run_table_aligned(capsys):
    """`jitlab run` prints its table a row at a time, widths set first: a "machine busy" cell fits its
    column, so the build time and detail stay under their headers."""
    busy = benchmark.Comparison("torch eager, 1 thread", 1.2, 0.5, 3.0, "busy", "load 12.3 on 16 cores")
    table = runner.Table.for_kernels([SimpleNamespace(name="add2_cpu")], compiled=False)
    cells = ["add2_cpu", "original", "ok", "1000003", "274.09 µs", "44 GB/s", "", busy.cell(), "", "0.5 s", "cached"]
    table.print_header()
    table._print(cells)
    head, row = capsys.readouterr().out.splitlines()
    assert head.index("build") == row.index("0.5 s") and head.index("detail") == row.index("cached")
