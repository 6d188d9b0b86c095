"""The CPU emulator (jitlab.jit.engines.emulator): each CUDA feature on one small kernel, each diagnostic at its line.

The kernels are tests/fixtures/emulator/features.cu and faults.cu, each built once per run (one host
compiler call each) in the run's shared cache. GPU twins at the end run the same kernels on a GPU and
on the emulator and compare.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.errors import LaunchError, SnippetError
from jitlab.jit import emulator_run, emulator_support
from jitlab.judge import refs
from jitlab.notebook import exercises

FIXTURES = Path(__file__).parent / "fixtures" / "emulator"
PLANTED = Path(__file__).parent / "fixtures" / "planted" / "hello_threads.cu"


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The fixtures, copied once for the module (the diagnostics name this copy's path)."""
    dst = tmp_path_factory.mktemp("emulator")
    for p in FIXTURES.glob("*.cu"):
        shutil.copy(p, dst / p.name)
    return dst


@pytest.fixture(scope="module")
def k(folder, shared_cache):
    """features.cu built for the emulator."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITLAB_CACHE_DIR", str(shared_cache))
        return jitlab.load(folder / "features.cu", device="cpu")


@pytest.fixture(scope="module")
def bad(folder, shared_cache):
    """faults.cu built for the emulator."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITLAB_CACHE_DIR", str(shared_cache))
        return jitlab.load(folder / "faults.cu", device="cpu")


# ---- the language ----------------------------------------------------------------------------------
def test_a_build_says_it_is_for_the_emulator_and_takes_cpu_tensors(k):
    """The module is a CPU emulator build whose kernels take CPU tensors, as a GPU build takes CUDA ones."""
    assert k.build.engine == emulator_support.ENGINE and "cpu emulator" in repr(k)
    assert "Tensor[float32, cpu, out]" in k.reverse_block.__doc__


def test_3d_indexing_gives_every_thread_its_number(k):
    """threadIdx/blockIdx/blockDim/gridDim in 3-D grids of 3-D blocks number every thread once."""
    grid, block = (3, 2, 2), (4, 2, 3)
    out = torch.full((2 * 3, 2 * 2, 3 * 4), -1, dtype=torch.int32)
    k.index_3d(out, grid=grid, block=block)
    z, y, x = torch.meshgrid(torch.arange(6), torch.arange(4), torch.arange(12), indexing="ij")
    blk = ((z // 3) * 2 + y // 2) * 3 + x // 4
    thr = ((z % 3) * 2 + y % 2) * 4 + x % 4
    assert torch.equal(out, (blk * 24 + thr).int())


def test_static_shared_memory_and_a_barrier(k):
    """A __shared__ array is one block's, and __syncthreads() orders its writes before the reads."""
    x = torch.arange(256, dtype=torch.float32)
    y = torch.empty_like(x)
    k.reverse_block(y, x, grid=4, block=64)
    assert torch.equal(y, x.view(4, 64).flip(1).flatten())


def test_extern_shared_memory_is_sized_by_shared_mem(k):
    """``extern __shared__`` gets the launch's shared_mem bytes."""
    x = torch.arange(3 * 100, dtype=torch.float32)
    y = torch.empty_like(x)
    k.reverse_dynamic(y, x, grid=3, block=100, shared_mem=100 * 4)
    assert torch.equal(y, x.view(3, 100).flip(1).flatten())


def test_syncthreads_count_and_or(k):
    """__syncthreads_count/_and/_or reduce a predicate over the block."""
    out = torch.zeros(3, dtype=torch.int32)
    p = (torch.arange(96) % 3 == 0).int()
    k.barrier_votes(out, p, grid=1, block=96)
    assert out.tolist() == [32, 0, 1]
    k.barrier_votes(out, torch.ones(96, dtype=torch.int32), grid=1, block=96)
    assert out.tolist() == [96, 1, 1]


def test_warp_shuffles(k):
    """__shfl_sync (and width), __shfl_up/down/xor_sync read the lane CUDA defines; out-of-range lanes keep their own."""
    x = torch.arange(64, dtype=torch.int32) * 10
    out = torch.zeros(64, 5, dtype=torch.int32)
    k.shuffles(out, x, grid=1, block=64)
    lane, base = torch.arange(64) % 32, torch.arange(64) // 32 * 32
    own = x
    assert torch.equal(out[:, 0], x[base + 3])
    assert torch.equal(out[:, 1], torch.where(lane >= 1, x[(torch.arange(64) - 1).clamp(min=0)], own))
    assert torch.equal(out[:, 2], torch.where(lane < 30, x[(torch.arange(64) + 2).clamp(max=63)], own))
    assert torch.equal(out[:, 3], x[torch.arange(64) ^ 1])
    assert torch.equal(out[:, 4], x[torch.arange(64) // 16 * 16 + 5])


def test_warp_votes_syncwarp_and_activemask(k):
    """__ballot/__any/__all_sync per warp; __activemask() in a branch names the lanes that took it."""
    p = torch.zeros(64, dtype=torch.int32)
    p[[1, 5, 40]] = 1
    out = torch.zeros(64 * 4, dtype=torch.int32)  # masks as int: read back as their 32 bits
    k.votes(out, p, grid=1, block=64)
    o = out.view(64, 4).long() & 0xFFFFFFFF
    assert o[0, 0] == (1 << 1) | (1 << 5) and o[32, 0] == 1 << 8
    assert o[:, 1].tolist() == [1] * 64 and o[:, 2].tolist() == [0] * 64
    assert o[0::2, 3].tolist() == [0x55555555] * 32 and o[1::2, 3].tolist() == [0] * 32


def test_a_warp_shuffle_reduction_is_exact(k):
    """The lessons' warp-shuffle sum over 2^20 ones is exactly 2^20."""
    n = 1 << 20
    out = torch.zeros(1)
    k.warp_sum(out, torch.ones(n), n, grid=n // 256, block=256)
    assert out.item() == n


def test_every_atomic_on_global_and_shared_memory(k):
    """add, sub, min, max, and, or, xor, CAS, exch, inc, dec (global) and add, min, xor (shared)."""
    g = torch.zeros(14, dtype=torch.int32)
    g[1], g[2], g[4] = 0, 1000, -1
    u = torch.tensor([0, 50], dtype=torch.uint32)
    f = torch.zeros(1)
    k.atomics(g, u, f, grid=1, block=64)
    assert g[0] == 64 and g[1] == -128 and g[2] == 100 - 63 and g[3] == 63
    assert g[4] == ~0xFF and g[5] == 0xFFFF and g[6] == 0
    assert g[7] >= 1 and g[8] == 1 and g[9] == 7
    assert u.tolist() == [64 % 10, 87]  # inc wraps after 9; dec: 50 → 0, wraps to 100, 13 more
    assert f.item() == 32.0
    assert g[11] == 64 and g[12] == 0 and g[13] == 0  # 0 ^ 1 ^ ... ^ 63 == 0


def test_printf_reaches_stdout(k, capfd):
    """Device printf is printed in the launch, as a GPU's after it."""
    k.hello(torch.zeros(32, dtype=torch.int32), 2, grid=1, block=32)
    out = capfd.readouterr().out
    assert "hello from thread 0 of block 0" in out and "hello from thread 1 of block 0" in out


def test_printf_prints_once_under_checking(k, capfd):
    """Under checking() a launch runs once (device state carries over as on a GPU): its printf output appears once."""
    with emulator_run.checking():
        k.hello(torch.zeros(32, dtype=torch.int32), 1, grid=1, block=32)
    assert capfd.readouterr().out.count("hello from thread 0 of block 0") == 1


def test_math_functions_and_qualifiers(k):
    """sinf, expf, __expf, rsqrtf, fmaf, __fdividef, a __forceinline__/__host__ __device__ helper, tanhf,
    fminf and max agree with torch (float32)."""
    x = torch.linspace(-3, 3, 1000)
    y = torch.zeros(1000, 8)
    k.math(y, x, 1000, grid=4, block=256)
    want = torch.stack([x.sin(), x.exp(), x.exp(), (x.abs() + 1).rsqrt(), x * x + 1, x / 3, x * x + 2 * x,
                        x.tanh() + x.clamp(max=0) + x.clamp(min=0.5)], 1)
    torch.testing.assert_close(y, want, rtol=2e-6, atol=2e-6)


def test_half_and_bfloat16_round_as_cuda(k):
    """__half and __nv_bfloat16 arithmetic and conversions round to nearest even, as torch's."""
    n = 4096
    g = torch.Generator().manual_seed(0)
    xh = (torch.randn(n, generator=g) * 100).half()
    xb = (torch.randn(n, generator=g) * 100).bfloat16()
    yh, yb = torch.empty_like(xh), torch.empty_like(xb)
    k.halves(yh, xh, yb, xb, 1.5, n, grid=n // 256, block=256)
    assert torch.equal(yh, (xh * torch.tensor(1.5, dtype=torch.half)) + torch.tensor(0.25, dtype=torch.half))
    assert torch.equal(yb, (xb.float() * 3).bfloat16() + torch.tensor(1.0, dtype=torch.bfloat16))


def test_a_host_function_launches_with_the_triple_chevrons(k):
    """``fill<<<grid, block>>>(...)`` in a host function runs on the emulator."""
    y = torch.zeros(1000)
    k.launch_fill(y, 3.0, 1000)
    assert torch.equal(y, torch.full((1000,), 3.0))


def test_an_empty_grid_is_cudas_configuration_error(k):
    """A launch with no blocks fails as on a GPU (cudaErrorInvalidConfiguration), from a host launcher too."""
    with pytest.raises(LaunchError, match="cudaErrorInvalidConfiguration"):
        k.launch_fill(torch.zeros(1), 1.0, 0)


# ---- what a GPU never tells ---------------------------------------------------------------------------
def _at(folder: Path, line: int) -> str:
    return re.escape(f"{folder / 'faults.cu'}:{line}")


def test_a_barrier_some_threads_skip_is_reported_at_its_line(bad, folder):
    """__syncthreads() after an early return: the launch fails naming the barrier's line and a thread that left."""
    with pytest.raises(LaunchError, match=rf"BarrierDivergence: __syncthreads\(\) at {_at(folder, 9)} is reached by "
                                          rf"72 of the 128 threads of block \(1, 0, 0\): thread \(72, 0, 0\)"):
        bad.early_return(torch.zeros(256), 200, grid=2, block=128)


def test_a_shuffle_naming_lanes_that_returned_is_reported(bad, folder):
    """A full-mask shuffle after some lanes returned names the shuffle's line and the lanes."""
    with pytest.raises(LaunchError, match=rf"WarpMaskError: __shfl_down_sync at {_at(folder, 16)}: .*lanes 4, 5,"):
        bad.shuffle_after_return(torch.zeros(32), 4, grid=1, block=32)


def test_a_shuffle_naming_lanes_a_partial_warp_lacks_is_reported(bad, folder):
    """A full mask in a warp of 16 threads names lanes the block does not have."""
    with pytest.raises(LaunchError, match=rf"__shfl_xor_sync at {_at(folder, 21)}: .*which this warp does not have"):
        bad.shuffle_partial_warp(torch.zeros(48), grid=1, block=48)


def test_a_shuffle_waiting_for_a_lane_at_a_barrier_is_a_deadlock_not_a_hang(bad, folder):
    """Lanes at a shuffle and lanes at __syncthreads() wait for each other: reported with both lines."""
    with pytest.raises(LaunchError, match=rf"Deadlock: __shfl_sync at {_at(folder, 26)} waits for lane 16, which "
                                          rf"waits at __syncthreads\(\) at {_at(folder, 28)}"):
        bad.shuffle_waits_for_barrier(torch.zeros(32), grid=1, block=32)


def test_an_index_past_a_shared_array_is_reported_at_its_line(bad, folder):
    """s[threadIdx.x] with 64 threads and 32 elements: the index, the array type and the line."""
    with pytest.raises(LaunchError, match=rf"index 32 is out of bounds for .*float \[32\].* at {_at(folder, 34)}"):
        bad.shared_overflow(torch.zeros(64), grid=1, block=64)


def test_a_failed_assert_stops_the_kernel_at_its_line(bad, folder):
    """assert() in a kernel fails the launch (as a GPU's device assert) with the expression and line."""
    x = torch.zeros(64, dtype=torch.int32)
    bad.asserts(x, grid=1, block=64)
    x[17] = -1
    with pytest.raises(LaunchError, match=rf"assertion `x\[threadIdx.x\] >= 0` failed at {_at(folder, 39)} "
                                          rf"\(thread \(17, 0, 0\)"):
        bad.asserts(x, grid=1, block=64)


def test_a_missing_barrier_is_a_race_naming_both_lines_and_the_barriers_place(bad, folder):
    """With checking, a read of what another thread stores in the same barrier interval names both accesses
    (in whichever block reports first: blocks run on several threads)."""
    x = torch.rand(4 * 64)
    out = torch.zeros(4)
    bad.missing_barrier(out, x, grid=4, block=64)  # unchecked: runs, silently wrong
    with emulator_run.checking(), pytest.raises(LaunchError, match=(
            rf"a race on `s` element 32: thread \(32, 0, 0\) of block \(([0-3]), 0, 0\) writes it at {_at(folder, 46)}, "
            rf"and thread \(0, 0, 0\) of block \(\1, 0, 0\) read it at {_at(folder, 47)}, with nothing between them: "
            rf"a __syncthreads\(\) belongs between the write at {_at(folder, 46)} and the read at {_at(folder, 47)}")):
        bad.missing_barrier(out, x, grid=4, block=64)


@pytest.mark.parametrize("checked", [True, False], ids=["checked", "plain"])
def test_an_access_past_a_tensors_end_names_the_tensor_index_and_line(bad, folder, checked):
    """Checked or not, a read past a tensor is stopped before it happens, naming `x[1000]` and the line."""
    x, y = torch.ones(1000), torch.zeros(1000)
    with emulator_run.checking(checked), pytest.raises(LaunchError, match=(
            rf"out-of-bounds read at {_at(folder, 59)} \(thread \(232, 0, 0\) of block \(3, 0, 0\)\): "
            rf"`x\[1000\]`, but `x` has 1000 elements")):
        bad.no_bounds_check(y, x, 1000, grid=4, block=256)


FIVE_TENSORS = """__global__ void five(float* y, const float* a, const float* b, const float* c, const float* d,
                     int n, int first, int last) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a[i + first] + b[i] + c[i] + d[i + last];
}
"""


@pytest.mark.parametrize("first, last, says", [(0, 0, None), (1, 0, "`a\\[1000\\]`"), (0, -1, "`d\\[-1\\]`")],
                         ids=["inside", "past-a", "before-d"])
def test_a_plain_run_checks_every_tensor_of_a_launch_with_more_than_its_inline_four(tmp_path, use_shared_cache,
                                                                                      first, last, says):
    """A plain run tests its first four tensors' bounds inline in the access hooks and the rest in the runtime:
    right numbers inside; a read past `a` (one of the four) and one before `d` (the fifth) each stopped, named."""
    (tmp_path / "five.cu").write_text(FIVE_TENSORS)
    k = jitlab.load(tmp_path / "five.cu", device="cpu")
    y, a, b, c, d = torch.zeros(1000), torch.ones(1000), torch.ones(1000), torch.ones(1000), torch.ones(1000)
    if says is None:
        k.five(y, a, b, c, d, 1000, first, last, grid=4, block=256)
        assert y.eq(4).all()
        return
    with pytest.raises(LaunchError, match=rf"out-of-bounds read at {re.escape(str(tmp_path / 'five.cu'))}:4 .*{says}"):
        k.five(y, a, b, c, d, 1000, first, last, grid=4, block=256)


def test_a_report_names_the_file_relative_to_where_the_learner_is(bad, folder, monkeypatch):
    """From the snippet's own folder (a notebook's working directory), the report says `faults.cu:59`, not a
    path from the filesystem's root."""
    monkeypatch.chdir(folder)
    with pytest.raises(LaunchError) as e:
        bad.no_bounds_check(torch.zeros(1000), torch.ones(1000), 1000, grid=4, block=256)
    assert "out-of-bounds read at faults.cu:59 (" in str(e.value) and str(folder) not in str(e.value)


def test_a_checks_report_says_a_launch_error_once(folder, monkeypatch):
    """`jitlab check` of a snippet whose kernel writes past its output, on the emulator: the verdict's reason is
    the message it already printed, so the report says it once."""
    from jitlab.worker import jobs

    monkeypatch.setenv("JITLAB_CACHE_DIR", str(folder / "cache"))
    (folder / "past_end.cu").write_text("__global__ void past_end(float* y, const float* x, int n) {\n"
                                        "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                                        "    if (i <= n) y[i] = 2.0f * x[i];\n}\n")
    (folder / "past_end.ref.py").write_text(
        "import torch\nSIZES = [1000]\n"
        "def inputs(size, seed, device):\n    return {'x': torch.ones(size, device=device)}\n"
        "def reference(inp):\n    return 2 * inp['x']\n"
        "def run(k, inp):\n    y, n = torch.empty_like(inp['x']), inp['x'].numel()\n"
        "    k.past_end(y, inp['x'], n, grid=(n + 255) // 256, block=256)\n    return y\n")
    out = jobs.run_job(jobs.Job("check", str(folder / "past_end.cu"), options={"device": "cpu"}))
    assert out.category == jobs.LAUNCH and str(out).count("out-of-bounds") == 1, str(out)


def test_a_lost_update_between_blocks_is_a_race_at_its_line(bad, folder):
    """`out[0] += v` from every block (no atomic): checking() names the element, both threads (of two blocks,
    which run in either order) and the line."""
    with emulator_run.checking(), pytest.raises(LaunchError) as e:
        bad.lost_update(torch.zeros(1), torch.ones(512), grid=2, block=256)
    found = re.search(rf"a race on `out\[0\]`: thread \(0, 0, 0\) of block \((\d), 0, 0\) reads it at {_at(folder, 65)}, "
                      rf"and thread \(0, 0, 0\) of block \((\d), 0, 0\) wrote it at {_at(folder, 65)}", str(e.value))
    assert found and {found[1], found[2]} == {"0", "1"}, str(e.value)


def test_a_correct_kernel_passes_the_race_check(k):
    """The race check leaves a correct kernel's result as one run makes it."""
    x = torch.arange(256, dtype=torch.float32)
    y = torch.empty_like(x)
    with emulator_run.checking():
        k.reverse_block(y, x, grid=4, block=64)
    assert torch.equal(y, x.view(4, 64).flip(1).flatten())


@pytest.mark.parametrize("line, feature", [
    ('asm volatile("membar.gl;");', "inline PTX"),
    ("nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> f;", "tensor cores"),
    ("cooperative_groups::this_grid().sync();", "grid-wide cooperative sync"),
    ("float v = tex1Dfetch<float>(0, 0);", "textures"),
    ("cub::WarpReduce<float> r;", "CUB/Thrust"),
])
def test_what_the_emulator_does_not_run_is_refused_by_name(write, line, feature):
    """Inline PTX, tensor cores, grid sync, textures, CUB: a SnippetError naming the feature and line, before compiling."""
    p = write("nope.cu", f"__global__ void nope(float* y) {{\n    {line}\n}}\n")
    with pytest.raises(SnippetError, match=rf"{re.escape(str(p))}:2: the CPU emulator does not run {feature}"):
        jitlab.load(p, device="cpu")


def test_a_compile_error_is_at_the_users_line(write, cache):
    """The host compiler's error names the snippet's file and line, not the generated unit's."""
    p = write("typo.cu", "__global__ void typo(float* y) {\n    y[0] = undefined_name;\n}\n")
    with pytest.raises(jitlab.CompileError, match=rf"{re.escape(str(p))}:2"):
        jitlab.load(p, device="cpu")


def test_a_file_the_parser_cannot_read_is_the_host_compilers_error_at_its_line(cache):
    """Lesson 00's planted mistake (no `;` after printf) is the emulator's compiler's error at the statement's
    line, not the parser's "no __global__ kernel found"."""
    with pytest.raises(jitlab.CompileError) as e:
        jitlab.load(PLANTED, device="cpu")
    d = e.value.diagnostics[0]
    assert (Path(d.path), d.line) == (PLANTED, 7) and "expected" in d.message, str(e.value)
    assert "cpu emulator" in e.value.summary and "no __global__" not in str(e.value)


def test_an_exercise_the_parser_cannot_read_is_a_compile_error_at_its_line(tmp_path, cache):
    """An exercise cell with its printf's `;` deleted checks as a compile error at that line (the emulator's
    compiler), as `jitlab.check(path, device="cpu")` does."""
    ex = exercises.get("hello_one")
    src = tmp_path / "hello_one.cu"
    src.write_text(ex.path.read_text().replace("(int)threadIdx.x);", "(int)threadIdx.x)"))
    line = 1 + src.read_text().splitlines().index(next(x for x in src.read_text().splitlines() if "printf" in x))
    r = exercises.check("hello_one", path=src, device="cpu")
    assert r.status == "compile error" and isinstance(r.error, jitlab.CompileError), r
    assert (Path(r.error.diagnostics[0].path), r.error.diagnostics[0].line) == (src, line)
    shutil.copy(ex.ref, tmp_path / "hello_one.ref.py")
    out = jitlab.check(src, device="cpu", isolate=False)
    assert not out.passed and f"hello_one.cu:{line}:" in str(out) and "no __global__" not in str(out), str(out)


def test_a_cpp_snippet_with_device_cpu_is_its_usual_cpu_build(cache):
    """device="cpu" on a C++ snippet (no CUDA) builds it as always: the emulator is for .cu files."""
    m = jitlab.load(KERNELS / "add2_cpu.cpp", device="cpu")
    assert m.build.engine == "c++"


def test_an_edit_rebuilds_and_the_same_text_is_a_cache_hit(write, cache):
    """Builds are content-keyed in jitlab's cache: same text a hit, an edit a new build."""
    p = write("v.cu", "__global__ void v(float* y) { y[threadIdx.x] = 1.0f; }\n")
    first = jitlab.load(p, device="cpu")
    assert not first.build.cached and jitlab.load(p, device="cpu").build.cached
    p.write_text("__global__ void v(float* y) { y[threadIdx.x] = 2.0f; }\n")
    y = torch.zeros(4)
    jitlab.load(p, device="cpu").v(y, grid=1, block=4)
    assert y.tolist() == [2.0] * 4


# ---- device="auto": without a GPU, kernel-only snippets run here by default ------------------------------
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
TRIPLE = "__global__ void triple(float* y, int n) {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] *= 3;\n}\n"


@no_gpu
def test_without_a_gpu_load_runs_a_kernel_only_snippet_on_the_emulator(write, use_shared_cache):
    """`jitlab.load(path)` on a machine without a CUDA GPU builds a kernel-only .cu for the CPU emulator, and
    its kernels run with CPU tensors (not "no CUDA GPU found … compile-only")."""
    k = jitlab.load(write("triple.cu", TRIPLE))
    assert k.build.engine == emulator_support.ENGINE
    y = torch.arange(300.0)
    k.triple(y, 300, grid=3, block=128)
    assert torch.equal(y, torch.arange(300.0) * 3)


@no_gpu
@pytest.mark.parametrize("source, kw", [
    (TRIPLE, {"device": "cuda"}),
    (TRIPLE.replace("y[i] *= 3;", 'y[i] *= 3; asm("");'), {}),
], ids=["device-cuda", "inline-ptx"])
def test_without_a_gpu_what_is_not_for_the_emulator_keeps_the_gpu_build(write, cache, source, kw):
    """device="cuda", or a kernel the emulator refuses, is a GPU build: without a GPU the error names compile_only."""
    with pytest.raises(jitlab.ToolchainError, match="no CUDA GPU found.*compile_only"):
        jitlab.load(write("triple.cu", source), **kw)


@no_gpu
def test_without_a_gpu_a_torch_style_snippet_keeps_its_gpu_build(cache):
    """A torch-style .cu (host functions taking torch::Tensor) is never taken to the emulator by default."""
    with pytest.raises(jitlab.ToolchainError, match="no CUDA GPU found"):
        jitlab.load(KERNELS / "square_matrix.cu")


@no_gpu
def test_without_a_gpu_compile_only_is_not_the_emulators(write, cache):
    """compile_only=True with device="auto" compiles for a GPU's arch, as before."""
    b = jitlab.build(write("triple.cu", TRIPLE), compile_only=True, arch="sm_90")
    assert b.engine != emulator_support.ENGINE and b.archs == ["sm_90"]


@pytest.mark.slow
@no_gpu
def test_the_emulator_by_default_is_said_once_per_process(write, shared_cache):
    """A new process that builds two kernel-only snippets without a GPU says once, in one line, that they run
    on the CPU emulator and how to build for a GPU instead."""
    a, b = write("triple.cu", TRIPLE), write("twice.cu", TRIPLE.replace("triple", "twice").replace("3", "2"))
    script = f"import jitlab\njitlab.load({str(a)!r})\njitlab.load({str(b)!r})\njitlab.load({str(a)!r})\n"
    env = {**os.environ, "JITLAB_CACHE_DIR": str(shared_cache), "PYTHONPATH": str(KERNELS.parent)}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    said = [line for line in r.stderr.splitlines() if "no CUDA GPU here" in line]
    assert len(said) == 1 and "CPU emulator" in said[0] and 'device="cuda"' in said[0] and "--device cuda" in said[0], r.stderr


# ---- the same kernels on a GPU ------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["index_3d", "reverse_block", "shuffles", "warp_sum", "math", "halves"])
def test_the_gpu_and_the_emulator_agree(folder, name):
    """Each feature kernel gives the GPU's result on the emulator (math within float32 rounding)."""
    gpu, cpu = jitlab.load(folder / "features.cu"), jitlab.load(folder / "features.cu", device="cpu")
    n = 1 << 12
    g = torch.Generator().manual_seed(0)
    cases = {
        "index_3d": lambda d: ((torch.zeros(6, 4, 12, dtype=torch.int32, device=d),), {"grid": (3, 2, 2), "block": (4, 2, 3)}),
        "reverse_block": lambda d: ((torch.zeros(256, device=d), torch.arange(256.0, device=d)), {"grid": 4, "block": 64}),
        "shuffles": lambda d: ((torch.zeros(64, 5, dtype=torch.int32, device=d), torch.arange(64, dtype=torch.int32, device=d)),
                               {"grid": 1, "block": 64}),
        "warp_sum": lambda d: ((torch.zeros(1, device=d), torch.ones(n, device=d), n), {"grid": n // 256, "block": 256}),
        "math": lambda d: ((torch.zeros(n, 8, device=d), torch.linspace(-3, 3, n, device=d), n), {"grid": n // 256, "block": 256}),
        "halves": lambda d: ((torch.zeros(n, dtype=torch.half, device=d), torch.randn(n, generator=g).half().to(d),
                              torch.zeros(n, dtype=torch.bfloat16, device=d), torch.randn(n, generator=g).bfloat16().to(d),
                              1.5, n), {"grid": n // 256, "block": 256}),
    }
    a, kw = cases[name]("cuda")
    b = tuple(x.cpu() if isinstance(x, torch.Tensor) else x for x in a)  # the same inputs, before the GPU runs
    getattr(gpu, name)(*a, **kw)
    getattr(cpu, name)(*b, **kw)
    torch.cuda.synchronize()
    for x, y in zip(a, b):
        if isinstance(x, torch.Tensor) and x.dtype in (torch.half, torch.bfloat16):
            # nvcc fuses __hadd(__hmul(x, a), b) into one half FMA (-fmad=true, its default); the emulator
            # rounds the product first, as torch does. The two differ by the product's rounding and the
            # sum's, at most 2**-8 for |x * 1.5| < 8 (an H200 showed 2**-9 on 389 of 4096 elements).
            torch.testing.assert_close(x.cpu().float(), y.float(), rtol=0, atol=2.0**-8)
        elif isinstance(x, torch.Tensor):
            torch.testing.assert_close(x.cpu(), y, rtol=1e-5, atol=1e-5)


# ---- every exercise and every shipped kernel-only snippet -----------------------------------------------
KERNELS = Path(__file__).resolve().parent.parent / "kernels"
#: What the emulator does not run, and why (the exercises and kernels left out of the runs below).
NOT_EMULATED = {
    "wmma_tile": "tensor cores (WMMA)",
    "vadd_checks": "torch-style: host code taking torch::Tensor",
    "hgemm": "tensor cores (WMMA) and inline PTX (ldmatrix)",
    "scan": "inline PTX (st.relaxed.gpu / ld.relaxed.gpu in the decoupled look-back)",
    "square_matrix": "torch-style", "custom_operation": "torch-style",
}
#: The largest size each kernel is checked at here (1e6 threads at most; matmuls by their side).
MAX_SIZE = {"sgemm": 136, "layernorm": 1 << 14, "softmax": 1 << 14}
#: Shipped kernels and exercises whose emulated check takes over ~3 s on 2 cores (make test-slow runs them).
SLOW_ON_THE_EMULATOR = ("sgemm", "matmul_tiles")


def _verdicts(path: Path, ref: Path, name: str, max_size: int = 1 << 17) -> list:
    """Every version of the snippet at ``path`` checked on the emulator as jitlab.check does (here, in process)."""
    mod = jitlab.load(path, device="cpu")
    with emulator_run.checking():
        return [v for _, v in refs.check_each(mod, refs.load(ref), "cpu", name=name, max_size=max_size)]


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow if n in SLOW_ON_THE_EMULATOR else ())
                                  for n in exercises.all_exercises() if n not in NOT_EMULATED])
def test_every_exercise_passes_solved_and_fails_as_started(name, use_shared_cache):
    """Each exercise's solution passes on the CPU emulator and its starting code fails (sizes up to 2^17;
    the notebooks' run checks each starting code through jitlab.notebook.exercises.check, in a worker)."""
    ex = exercises.get(name)
    solved, start = _verdicts(ex.solution, ex.ref, name), _verdicts(ex.path, ex.ref, name)
    assert all(v.passed for v in solved), "\n".join(map(str, solved))
    assert not all(v.passed for v in start), "\n".join(map(str, start))




def _shipped():
    out = []
    for k in refs.find_kernels(KERNELS):
        if k.path.suffix == ".cu" and k.name not in NOT_EMULATED:
            out.append(pytest.param(k, id=k.name, marks=pytest.mark.slow if k.name in SLOW_ON_THE_EMULATOR else ()))
    return out


@pytest.mark.parametrize("kernel", _shipped())
def test_every_shipped_kernel_agrees_with_its_reference(kernel, use_shared_cache):
    """Each kernel-only snippet in kernels/ and all its versions agree with torch on the emulator, each launch
    run under the race detector (a race fails it)."""
    verdicts = _verdicts(kernel.path, kernel.ref, kernel.name, MAX_SIZE.get(kernel.name, 1 << 17))
    assert verdicts and all(v.passed for v in verdicts), "\n".join(map(str, verdicts))


def test_the_left_out_kernels_are_the_ones_the_emulator_refuses():
    """Every shipped .cu left out above is refused by the emulator or torch-style (so the list cannot go stale)."""
    for k in refs.find_kernels(KERNELS):
        if k.path.suffix == ".cu" and k.name in NOT_EMULATED:
            assert emulator_support.cannot_run(k.path), k.name


@pytest.mark.slow
def test_launches_leave_no_memory_areas_behind(tmp_path, shared_cache):
    """Each snippet's library runs 1024-thread blocks and keeps nothing mapped after its launches: a process
    that ran many snippets can still start threads (the kernel caps memory areas at vm.max_map_count)."""
    code = r'''
import sys, torch, jitlab
from pathlib import Path
folder = Path(sys.argv[1])
def areas():
    return len(Path("/proc/self/maps").read_text().splitlines())
mods = []
for i in range(4):
    p = folder / f"wide{i}.cu"
    p.write_text("__global__ void wide%d(float* x) { x[threadIdx.x] += %d.0f; }\n" % (i, i + 1))
    mods.append(getattr(jitlab.load(p, device="cpu"), f"wide{i}"))
x = torch.zeros(1024)
mods[0](x, grid=1, block=1024)  # the first launch maps what every launch needs (threads, libraries)
before = areas()
for launch in mods:
    launch(x, grid=1, block=1024)
    launch(x, grid=1, block=1024)
print(areas() - before)
'''
    env = dict(os.environ, JITLAB_CACHE_DIR=str(shared_cache))
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    grown = int(out.stdout.strip().splitlines()[-1])
    assert grown < 500, f"{grown} memory areas left mapped by 8 launches (each block's stacks were ~2048)"


def test_the_runtime_is_made_once_per_toolchain_beside_the_header_sets(monkeypatch, tmp_path):
    """Two build caches that share JITLAB_PCH_DIR (a test suite's fresh cache per test, a user's caches) share
    the emulator's runtime object: it lives with the toolchain's other builds, not in either cache."""
    from jitlab import config
    from jitlab.jit.engines import emulator

    made = []
    for name in ("one", "two"):
        monkeypatch.setenv("JITLAB_CACHE_DIR", str(tmp_path / name))
        made.append(emulator.runtime_object())
    assert made[0] == made[1] and made[0].is_file()
    assert made[0].is_relative_to(config.pch_dir()) and not (tmp_path / "one").exists()
