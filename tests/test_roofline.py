"""The roofline chart (CPU): where each version lands, the roofs, and the chart itself."""

from __future__ import annotations

import pytest

import jitlab
from jitlab.judge.benchmark import BenchResult
from jitlab.judge.checker import Verdict
from jitlab.judge.roofline import Chart, Roofs, points
from jitlab.judge.timing import Timing

PEAK = {"copy_gbps": 3000.0, "matmul_fp32_tflops": 50.0, "matmul_bf16_tflops": 700.0}


def _row(name, size, ms, flops, nbytes, torch_ms=None):
    return BenchResult(name, size, Verdict(name, []), Timing([ms] * 5), Timing([torch_ms] * 5) if torch_ms else None,
                       bytes_moved=nbytes, flops=flops, peak=PEAK)


def test_points_place_each_version_by_intensity_and_achieved_flops():
    """A 4096^3 matmul: 2 n^3 FLOPs over 3 n^2 floats (A, B read and C written once) is 683 FLOP/B;
    in 4 ms that is 34.4 TFLOP/s. torch is placed once per size."""
    n = 4096
    flops, nbytes = 2 * n**3, 3 * n * n * 4
    rows = [_row("sgemm_kernel1", n, 40.0, flops, nbytes, torch_ms=2.5), _row("sgemm_kernel5", n, 4.0, flops, nbytes, 2.5)]
    pts = points(rows)
    assert [p.label for p in pts] == ["sgemm_kernel1 @ 4096", "torch @ 4096", "sgemm_kernel5 @ 4096"]
    assert pts[0].intensity == pytest.approx(n / 6)
    assert pts[2].tflops == pytest.approx(flops / 4e-3 / 1e12)
    assert pts[1].torch and pts[1].tflops == pytest.approx(flops / 2.5e-3 / 1e12)


def test_roofs_take_the_lower_of_bandwidth_and_compute():
    """Left of the ridge (50 TFLOP/s / 3 TB/s = 16.7 FLOP/B) bandwidth limits; right of it, compute."""
    r = Roofs.from_peak(PEAK)
    assert r.attainable(1.0, r.fp32_tflops) == pytest.approx(3.0)   # 3000 GB/s x 1 FLOP/B
    assert r.attainable(100.0, r.fp32_tflops) == pytest.approx(50.0)
    assert r.attainable(100.0, r.bf16_tflops) == pytest.approx(300.0)


def test_the_chart_is_a_png_a_notebook_shows(tmp_path):
    """jitlab.roofline(rows) renders; _repr_png_ is what Jupyter displays; save() writes the same bytes."""
    rows = [_row("softmax_kernel1", 1 << 26, 0.5, 5 << 26, 8 << 26, torch_ms=0.2), _row("softmax_kernel3", 1 << 26, 0.19, 5 << 26, 8 << 26)]
    chart = jitlab.roofline(rows, title="softmax")
    assert chart._repr_png_().startswith(b"\x89PNG\r\n\x1a\n")
    chart.save(tmp_path / "r.png")
    assert (tmp_path / "r.png").read_bytes() == chart.png


def test_rows_without_flops_say_what_the_ref_must_declare():
    """A ref without flops(inputs) cannot be placed: the error names both functions."""
    with pytest.raises(ValueError, match=r"flops\(inputs\) and bytes_moved\(inputs\)"):
        Chart([_row("add2", 1 << 28, 1.0, None, 3 << 30)])
