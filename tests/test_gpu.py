"""GPU suite (marker `gpu`): every shipped kernel against torch, launches, errors, printf, the seeds' build ways.

Run on a GPU machine with `make gpu-test`; without a GPU these tests are deselected, never passed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.judge import refs, runner

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"


@pytest.fixture(autouse=True)
def gpu_cache(shared_cache, monkeypatch):
    """One cache for the whole GPU session (torch-style seeds take tens of seconds to build):
    $JITLAB_CACHE_DIR when set, so the demo after the suite reuses it, else a session folder."""
    if not os.environ.get("JITLAB_CACHE_DIR"):
        monkeypatch.setenv("JITLAB_CACHE_DIR", str(shared_cache))


@pytest.mark.parametrize("kernel", refs.find_kernels(KERNELS), ids=lambda k: k.name)
def test_shipped_kernel_matches_torch(kernel):
    """Each kernel in kernels/ (every version) builds and passes the checker at every listed size."""
    rows = runner.run_kernel(kernel, "cuda" if kernel.is_cuda else "cpu", time_it=False)
    assert rows and all(r["status"] == "ok" for r in rows), [(r["variant"], r["detail"]) for r in rows]


def test_saxpy_on_a_side_stream():
    """Kernel-only launches go to torch's current stream (and to stream= when given)."""
    k = jitlab.load(KERNELS / "saxpy.cu")
    x = torch.randn(10_000, device="cuda")
    y = torch.zeros_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())  # x and y are filled on the default stream
    with torch.cuda.stream(s):
        k.saxpy(y, x, 3.0, x.numel(), grid=40, block=256)
    s.synchronize()
    torch.testing.assert_close(y, 3 * x)
    y2 = torch.zeros_like(x)
    s.wait_stream(torch.cuda.current_stream())  # without this the fill of y2 may land after the kernel
    k.saxpy(y2, x, 3.0, x.numel(), grid=40, block=256, stream=s)
    s.synchronize()
    torch.testing.assert_close(y2, 3 * x)


def test_2d_grid_and_block_tuples(write):
    """grid and block take tuples; a 2-D kernel indexes with blockIdx.y/threadIdx.y."""
    p = write("idx.cu", """
        __global__ void write_index(int* out, int w, int h) {
            int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
            if (x < w && y < h) out[y * w + x] = y * 1000 + x;
        }
    """)
    k = jitlab.load(p)
    out = torch.empty(37, 53, dtype=torch.int32, device="cuda")
    k.write_index(out, 53, 37, grid=((53 + 15) // 16, (37 + 15) // 16), block=(16, 16))
    ys, xs = torch.meshgrid(torch.arange(37), torch.arange(53), indexing="ij")
    torch.testing.assert_close(out.cpu(), (ys * 1000 + xs).int())


def test_dtypes_cross_correctly(write):
    """double, int64, uint8, bool and bfloat16 pointers and scalars reach the kernel intact."""
    p = write("types.cu", """
        #include <cuda_bf16.h>
        #include <cstdint>
        __global__ void fill(double* d, int64_t* l, uint8_t* u, bool* b, __nv_bfloat16* h,
                             double dv, int64_t lv, uint8_t uv, bool bv, __nv_bfloat16 hv) {
            d[0] = dv; l[0] = lv; u[0] = uv; b[0] = bv; h[0] = hv;
        }
    """)
    k = jitlab.load(p)
    d, l = torch.zeros(1, dtype=torch.float64, device="cuda"), torch.zeros(1, dtype=torch.int64, device="cuda")
    u, b = torch.zeros(1, dtype=torch.uint8, device="cuda"), torch.zeros(1, dtype=torch.bool, device="cuda")
    h = torch.zeros(1, dtype=torch.bfloat16, device="cuda")
    k.fill(d, l, u, b, h, 1.5e300, 2**40 + 3, 200, True, -3.25, grid=1, block=1)
    assert d.item() == 1.5e300 and l.item() == 2**40 + 3 and u.item() == 200 and b.item() is True
    assert h.item() == -3.25


def test_cpu_tensor_for_cuda_kernel():
    """A CPU tensor passed to a CUDA kernel is refused before launch."""
    k = jitlab.load(KERNELS / "saxpy.cu")
    with pytest.raises(jitlab.ArgumentError, match=r"takes a CUDA tensor, got one on cpu; move it with `.cuda\(\)`"):
        k.saxpy(torch.zeros(4, device="cuda"), torch.zeros(4), 1.0, 4, grid=1, block=4)


def test_wrong_dtype_for_cuda_kernel():
    """float16 for a float* is refused with the conversion to make."""
    k = jitlab.load(KERNELS / "saxpy.cu")
    with pytest.raises(jitlab.ArgumentError, match="takes a float32 tensor, got float16"):
        k.saxpy(torch.zeros(4, device="cuda"), torch.zeros(4, device="cuda", dtype=torch.half), 1.0, 4, grid=1, block=4)


def test_missing_launch_configuration():
    """Forgetting grid=/block= says how to launch."""
    k = jitlab.load(KERNELS / "saxpy.cu")
    with pytest.raises(jitlab.ArgumentError, match="pass the launch configuration"):
        k.saxpy(torch.zeros(4, device="cuda"), torch.zeros(4, device="cuda"), 1.0, 4)


def test_invalid_launch_configuration_names_kernel_and_config():
    """A block over CUDA's 1024 threads is refused before the launch; more dynamic shared memory
    than the GPU has is refused by CUDA, whose error is raised with the kernel's name and
    configuration, on both engines."""
    for engine in ("nvcc", "nvrtc"):
        k = jitlab.load(KERNELS / "saxpy.cu", engine=engine)
        x = torch.zeros(4, device="cuda")
        with pytest.raises(jitlab.ArgumentError, match="1024"):
            k.saxpy(x, x, 1.0, 4, grid=1, block=2048)
        with pytest.raises(jitlab.LaunchError, match=r"saxpy<<<grid=\(1, 1, 1\), block=\(4, 1, 1\), shared_mem=16777216>>> "
                                                     r"failed: (cudaErrorInvalidValue|CUDA_ERROR_INVALID_VALUE).*shared_mem at most"):
            k.saxpy(x, x, 1.0, 4, grid=1, block=4, shared_mem=1 << 24)
    k.saxpy(x, x, 1.0, 4, grid=1, block=4)  # the context is still usable
    torch.cuda.synchronize()


def test_device_printf_reaches_python(capsys):
    """Seed 002's hello kernel prints from the GPU into Python's stdout."""
    k = jitlab.load(KERNELS / "hello.cu")
    k.kernel(grid=1, block=1)
    assert "hello world" in capsys.readouterr().out


def test_host_printf_of_torch_style_snippet(capsys):
    """Seed 004's host printf ("pid N") reaches Python's stdout."""
    m = jitlab.load(KERNELS / "square_matrix.cu")
    m.square_matrix(torch.ones(2, 3, device="cuda"))
    assert f"pid {os.getpid()}" in capsys.readouterr().out


def test_vector_add_checks_raise_python_errors():
    """Seed 002's dim/dtype checks throw in C++ and arrive as Python RuntimeErrors."""
    m = jitlab.load(KERNELS / "vector_add")
    with pytest.raises(RuntimeError, match="one-dimensional"):
        m.vector_add(torch.ones(2, 2, device="cuda"), torch.ones(2, 2, device="cuda"))
    with pytest.raises(RuntimeError, match="float32"):
        m.vector_add(torch.ones(4, device="cuda", dtype=torch.float64), torch.ones(4, device="cuda", dtype=torch.float64))


def test_integers_in_torch_check_messages_raise_python_errors(write):
    """An integer streamed into a message in C++ (TORCH_CHECK, c10::str) reaches Python as a
    RuntimeError. On a toolchain whose g++ links its static libstdc++ these crashed the process
    (a second C++ runtime in the extension); jitlab links the loaded libstdc++.so.6 instead."""
    p = write("check_n.cu", '#include <torch/extension.h>\n'
                             'torch::Tensor check_n(torch::Tensor x) {\n'
                             '    TORCH_CHECK(false, "n=", x.numel());\n    return x;\n}\n')
    with pytest.raises(RuntimeError, match="n=3"):
        jitlab.load(p).check_n(torch.ones(3, device="cuda"))
    m = jitlab.load(KERNELS / "vector_add")
    with pytest.raises(RuntimeError, match=r"differ in length \(4 vs 5\)"):
        m.vector_add1(torch.ones(4, device="cuda"), torch.ones(5, device="cuda"))


def test_cuda_edit_and_reload_in_process(write):
    """Edit a kernel body, load again in the same process: the new kernel runs; revert is a cache hit."""
    src = "__global__ void f(float* y, int n) {{ int i = threadIdx.x; if (i < n) y[i] = {v}; }}\n"
    p = write("edit.cu", src.format(v="1.0f"))
    y = torch.zeros(8, device="cuda")
    jitlab.load(p).f(y, 8, grid=1, block=8)
    assert y.sum().item() == 8
    p.write_text(src.format(v="2.0f"))
    m = jitlab.load(p)
    m.f(y, 8, grid=1, block=8)
    assert not m.build.cached and y.sum().item() == 16
    p.write_text(src.format(v="1.0f"))
    m = jitlab.load(p)
    m.f(y, 8, grid=1, block=8)
    assert m.build.cached and y.sum().item() == 8


def test_nvcc_error_points_at_the_users_line(write):
    """An nvcc error shows the user's .cu file and line with the source and a caret."""
    p = write("bad.cu", "__global__ void k(float* y) {\n    y[0] = missing_value;\n}\n")
    with pytest.raises(jitlab.CompileError) as ei:
        jitlab.load(p)
    msg = str(ei.value)
    assert "bad.cu:2:" in msg and "missing_value" in msg and "    2 |     y[0] = missing_value;" in msg


def test_resource_usage_recorded():
    """The build records per-kernel registers for the current arch."""
    b = jitlab.build(KERNELS / "saxpy.cu")
    arch = "sm_%d%d" % torch.cuda.get_device_capability()
    assert b.resources["saxpy"][arch]["registers"] > 0


def test_seed_build_way_load(tmp_path):
    """Seed 001's way: torch.utils.cpp_extension.load on add2.cpp + add2.cu still works on the same files."""
    from torch.utils.cpp_extension import load

    d = tmp_path / "add2"
    shutil.copytree(KERNELS / "add2_seed", d)
    m = load(name="add2_seed_load", sources=[str(d / "add2.cpp"), str(d / "add2.cu")],
             build_directory=str(tmp_path), extra_include_paths=[str(d)])
    a, b = torch.rand(1000, device="cuda"), torch.rand(1000, device="cuda")
    c = torch.empty_like(a)
    m.torch_launch_add2(c, a, b, 1000)
    torch.testing.assert_close(c, a + b)


def test_seed_build_way_setup_py(tmp_path):
    """Seed 002's way: `setup.py build_ext --inplace` builds kernels/vector_add into an importable module."""
    d = tmp_path / "vector_add"
    shutil.copytree(KERNELS / "vector_add", d)
    out = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=d, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    code = ("import torch, example_kernels; a = torch.ones(5, device='cuda'); "
            "print(example_kernels.vector_add(a, a).sum().item())")
    run = subprocess.run([sys.executable, "-c", code], cwd=d, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "10.0", run.stderr[-2000:]


# ---- the checker on deliberately wrong CUDA kernels ---------------------------------------------
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture(scope="module")
def wrong_cu():
    return jitlab.load(FIXTURES / "wrong.cu")


def _scale_inputs(size, seed, device):
    return {"x": torch.randn(size, generator=torch.Generator().manual_seed(seed)).to(device)}


def _scale(fn, per_thread=1):
    def run(inp):
        x = inp["x"]
        y = torch.empty_like(x)
        n = x.numel()
        fn(y, x, n, grid=(n + 256 * per_thread - 1) // (256 * per_thread), block=256)
        return y
    return run


def _check_scale(fn, per_thread=1, sizes=(1, 127, 128, 129, 1000003)):
    return jitlab.check(_scale(fn, per_thread), lambda inp: 2 * inp["x"], _scale_inputs, sizes=list(sizes), seeds=[0])


def test_checker_passes_the_right_cuda_kernel(wrong_cu):
    """The reference kernel passes the awkward sizes."""
    assert _check_scale(wrong_cu.scale_ok).passed


def test_checker_off_by_one_names_thread(wrong_cu):
    """The unwritten last element is reported with the block and thread that should write it."""
    v = _check_scale(wrong_cu.scale_off_by_one, sizes=[129])
    f = v.first_failure
    assert "1 of 129 output elements were never written" in f.reasons[0]
    assert f.mismatches[0].index == (128,) and f.mismatches[0].thread == "block (0,) thread (128,)"


def test_checker_unwritten_tail(wrong_cu):
    """n % 4 elements stay NaN from the poison."""
    v = _check_scale(wrong_cu.scale_unwritten_tail, per_thread=4, sizes=[1000003])
    assert "3 of 1000003 output elements were never written" in v.reasons[0]


def test_checker_input_modification(wrong_cu):
    """A kernel writing to its input is reported."""
    v = _check_scale(wrong_cu.scale_modifies_input, sizes=[1000])
    assert any("modified its input `x`" in r for r in v.reasons)


def test_checker_missing_bounds_check(wrong_cu):
    """Without `if (i < n)` the rounded-up grid scales elements past n."""
    def inputs(size, seed, device):
        return {"buf": torch.randn(size + 300, device=device), "n": size}

    def ref(inp):
        y = inp["buf"].clone()
        y[: inp["n"]] *= 2
        return y

    def run(inp):
        y = inp["buf"].clone()
        wrong_cu.prefix_no_bounds_check(y, inp["n"], grid=(inp["n"] + 255) // 256, block=256)
        return y

    v = jitlab.check(run, ref, inputs, sizes=[129])
    assert "127 of 429 elements differ" in v.reasons[0]
    assert v.first_failure.mismatches[0].thread == "block (0,) thread (129,)"


def test_checker_race_without_syncthreads(wrong_cu):
    """Reading shared memory another warp has not written yet gives wrong elements."""
    def inputs(size, seed, device):
        return {"x": torch.randn(size, device=device)}

    def run(fn):
        def go(inp):
            y = torch.empty_like(inp["x"])
            fn(y, inp["x"], grid=inp["x"].numel() // 256, block=256, shared_mem=256 * 4)
            return y
        return go

    ref = lambda inp: inp["x"].view(-1, 256).flip(1).reshape(-1)  # noqa: E731
    assert jitlab.check(run(wrong_cu.block_reverse_ok), ref, inputs, sizes=[256 * 64]).passed
    v = jitlab.check(run(wrong_cu.block_reverse_race), ref, inputs, sizes=[256 * 64])
    assert not v.passed and v.first_failure.wrong > 0 and "thread" in v.first_failure.mismatches[0].thread


# ---- timing on the GPU -------------------------------------------------------------------------
def test_time_cuda_cold_and_hot():
    """Event timing of a 256 MiB copy: cold and hot labelled, plausible bandwidth, samples kept."""
    from jitlab.judge.timing import time_cuda

    x = torch.empty(1 << 26, device="cuda")
    y = torch.empty_like(x)
    cold = time_cuda(lambda: y.copy_(x), flush_l2=True)
    hot = time_cuda(lambda: y.copy_(x), flush_l2=False)
    gbps = 2 * x.numel() * 4 / (cold.median * 1e-3) / 1e9
    assert cold.cache == "cold" and hot.cache == "hot" and len(cold.samples) >= 10
    assert 300 < gbps < 10_000


def test_peaks_are_measured_once_and_cached():
    """Copy bandwidth and matmul FLOP/s are measured, then read back from peaks.json."""
    from jitlab.judge.peaks import peaks

    p = peaks()
    assert p["copy_gbps"] > 500 and p["matmul_bf16_tflops"] > 10
    t0 = __import__("time").perf_counter()
    assert peaks() == p and __import__("time").perf_counter() - t0 < 0.5


def test_bench_saxpy_against_torch():
    """bench() on a CUDA kernel: timed beside torch eager, GB/s and % of the measured peak."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("saxpy_ref", KERNELS / "saxpy.ref.py")
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    k = jitlab.load(KERNELS / "saxpy.cu")
    r = jitlab.bench(lambda inp: ref.run(k, inp), ref.inputs, 1 << 24, reference=ref.reference,
                     bytes_moved=lambda inp: 12 * inp["x"].numel(), compile_reference=False)
    assert r.verdict.passed and r.gbps > 300 and 5 < r.pct_peak < 150 and r.vs_torch > 0.2


def test_ab_between_two_builds_alive_in_one_process(write):
    """Two versions of one kernel loaded side by side; the 4x-work version is slower."""
    src = ("__global__ void work(float* y, const float* x, int n) {{ int i = blockIdx.x * blockDim.x + threadIdx.x;"
           " if (i < n) {{ float v = x[i]; for (int r = 0; r < {reps}; ++r) v = v * 0.999f + 0.001f; y[i] = v; }} }}\n")
    p = write("work.cu", src.format(reps=64))
    a = jitlab.load(p)
    p.write_text(src.format(reps=256))
    b = jitlab.load(p)
    assert a.build.name != b.build.name
    x = torch.randn(1 << 22, device="cuda")
    y = torch.empty_like(x)
    n = x.numel()
    va = _ab_unbusy(lambda: a.work(y, x, n, grid=n // 256, block=256), lambda: b.work(y, x, n, grid=n // 256, block=256))
    assert va.verdict == "slower"
    same = _ab_unbusy(lambda: a.work(y, x, n, grid=n // 256, block=256), lambda: a.work(y, x, n, grid=n // 256, block=256))
    assert same.verdict == "same", same.why


def _ab_unbusy(fa, fb, tries: int = 5):
    """``jitlab.ab``, asked again while it answers "busy": under ``pytest -n 8`` other workers share the GPU,
    and "busy" is ab refusing to compare on a noisy machine, not a verdict. Five busy answers fail the test."""
    for _ in range(tries):
        v = jitlab.ab(fa, fb)
        if v.verdict != "busy":
            return v
    return v
