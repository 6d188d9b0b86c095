"""Timing statistics, A/B verdicts, check-before-time, result history and plots (CPU)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jitlab.judge import results
from jitlab.judge.benchmark import bench
from jitlab.judge import timing
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


def test_ab_runs_real_functions():
    """On real work, ab() alternates both sides and keeps every sample (no verdict asserted: that
    depends on the machine; the rule is tested on given samples above)."""
    x = torch.randn(20_000)
    v = ab(lambda: x.sort(), lambda: x[:2000].sort(), device="cpu", rounds=2, rep_s=0.01)
    assert v.verdict in ("faster", "same", "slower") and len(v.a.samples) >= 20 and len(v.b.samples) >= 20


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


def test_run_command_on_a_cpp_kernel(tmp_path):
    """`jitlab run` on a C++ kernel checks, times against torch, prints the table and writes JSON."""
    env = {**os.environ, "JITLAB_CACHE_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "jitlab", "run", "kernels/add2_cpu.cpp", "--max-size", "200000"],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "× faster than torch" in out.stdout and "add2_cpu" in out.stdout and "1 passed, 0 failed" in out.stdout
    rec = json.loads((tmp_path / "results" / "add2_cpu.jsonl").read_text().splitlines()[-1])
    assert rec["passed"] and rec["median_ms"] > 0 and rec["vs_torch"] > 0
