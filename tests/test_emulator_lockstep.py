"""Lock-step twins (``jit/engines/lockstep.py``): a plain run on the CPU emulator runs a kernel's block as one loop
over its threads for each stretch between barriers, in the order the fibers take, and gets what the fibers get: the
same numbers, the same diagnostics at the user's lines; checked runs keep the fibers. Kernels a twin cannot run
keep the fibers too, and a twin the host compiler refuses is dropped, never shown to the user."""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

import jitlab
from jitlab.errors import CompileError, LaunchError
from jitlab.jit import emulator_run
from jitlab.jit.engines import lockstep
from jitlab.jit.parse import syntax_tree

KERNELS = r"""#define T 8
__global__ void tiles(float* c, const float* a, const float* b, int n) {
    __shared__ float sa[T][T], sb[T][T];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;
    float acc = 0.0f;
    for (int k0 = 0; k0 < n; k0 += T) {
        sa[ty][tx] = a[row * n + k0 + tx];
        sb[ty][tx] = b[(k0 + ty) * n + col];
        __syncthreads();
        for (int k = 0; k < T; ++k) acc += sa[ty][k] * sb[k][tx];
        __syncthreads();
    }
    c[row * n + col] = acc;
}
__global__ void block_sums(float* out, const float* x, int n) {
    __shared__ float s[128];
    unsigned t = threadIdx.x;
    s[t] = blockIdx.x * blockDim.x + t < n ? x[blockIdx.x * blockDim.x + t] : 0.0f;
    __syncthreads();
    if (blockDim.x >= 128) { if (t < 64) s[t] += s[t + 64]; __syncthreads(); }
    for (unsigned h = 32; h > 0; h /= 2) {
        if (t < h) s[t] += s[t + h];
        __syncthreads();
    }
    if (t == 0) out[blockIdx.x] = s[0];
}
__global__ void walk_rows(float* out, const float* x, int width) {
    __shared__ float row[64];
    x += blockIdx.x * width;
    float total = 0.0f;
    while (width > 0) {
        row[threadIdx.x] = x[threadIdx.x];
        __syncthreads();
        total += row[(threadIdx.x + 1) % 64];
        __syncthreads();
        x += 64;
        width -= 64;
    }
    out[blockIdx.x * 64 + threadIdx.x] = total;
}
__global__ void where_am_i(int* out) {
    __shared__ int last;
    int i = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    if (i == 0) last = -1;
    __syncthreads();
    if (i == blockDim.x * blockDim.y * blockDim.z - 1) last = i;
    __syncthreads();
    out[3 * i] = threadIdx.x, out[3 * i + 1] = threadIdx.y, out[3 * i + 2] = threadIdx.z + 100 * last;
}
__global__ void rounds_by_thread(float* out) {
    __shared__ float s[64];
    for (int r = 0; r < (int)threadIdx.x / 32 + 1; ++r) {
        s[threadIdx.x] = r;
        __syncthreads();
    }
    out[threadIdx.x] = s[threadIdx.x];
}
__global__ void past_the_tile(float* out) {
    __shared__ float s[64];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x + 1];
}
__global__ void kept_address(float* out) {
    float acc = threadIdx.x;
    float* at = &acc;
    __syncthreads();
    *at += 0.5f;
    __syncthreads();
    out[threadIdx.x] = acc;
}
__global__ void rows_then_sum(float* out, const float* x, int n) {
    __shared__ float s[64];
    int i = threadIdx.x;
    if (i >= n) return;
    s[i] = x[i];
    __syncthreads();
    out[i] = s[0] + s[n - 1 - i];
}
__global__ void two_loops(float* out) {
    __shared__ float s[32];
    float a = 0.0f;
    for (int k = 0; k < 4; ++k) a += k;
    s[threadIdx.x] = a + threadIdx.x;
    __syncthreads();
    float b = 0.0f;
    for (int k = 0; k < 2; ++k) b += s[(threadIdx.x + k) % 32];
    out[threadIdx.x] = b;
}
__global__ void big_locals(float* out) {
    __shared__ float s[1024];
    float keep[40];
    for (int j = 0; j < 40; ++j) keep[j] = threadIdx.x + j;
    s[threadIdx.x] = keep[39];
    __syncthreads();
    out[threadIdx.x] = s[1023 - threadIdx.x] + keep[0];
}
"""
LINE_PAST = KERNELS.splitlines().index("    out[threadIdx.x] = s[threadIdx.x + 1];") + 1
LINE_ROUNDS = KERNELS.splitlines().index("    for (int r = 0; r < (int)threadIdx.x / 32 + 1; ++r) {") + 1


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """KERNELS, built once for the emulator (its own cache), and its folder."""
    folder = tmp_path_factory.mktemp("lockstep")
    (folder / "steps.cu").write_text(KERNELS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITLAB_CACHE_DIR", str(folder / "cache"))
        return jitlab.load(folder / "steps.cu", device="cpu"), folder


def _twins(lib) -> set[str]:
    out = subprocess.run(["nm", "-C", str(lib.build.artifact)], capture_output=True, text=True).stdout
    return set(re.findall(r"jitlab_steps_(\w+)\(", out))


def test_the_kernels_that_can_get_a_twin_have_one(built):
    """Loops, ifs and blocks holding barriers, parameters each thread moves, 3-D blocks: each kernel gets its twin."""
    k, _ = built
    assert _twins(k) == {"tiles", "block_sums", "walk_rows", "where_am_i", "rounds_by_thread", "past_the_tile",
                         "kept_address", "rows_then_sum", "two_loops", "big_locals"}


@pytest.mark.parametrize("checked", [False, True], ids=["plain", "checked"])
def test_a_twin_computes_what_the_fibers_compute(built, checked):
    """A tiled matmul, a reduction with an unrolled step and a loop, a row walk that moves its pointer parameter:
    the same numbers plain (the twins) and checked (the fibers, the race detector on)."""
    k, _ = built
    g = torch.Generator().manual_seed(5)
    n = 24
    a, b, c = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g), torch.zeros(n, n)
    x = torch.randn(1000, generator=g)
    sums = torch.zeros(8)
    rows, walked = torch.randn(3, 192, generator=g), torch.zeros(3 * 64)
    with emulator_run.checking(checked):
        k.tiles(c, a, b, n, grid=(n // 8, n // 8), block=(8, 8))
        k.block_sums(sums, x, 1000, grid=8, block=128)
        k.walk_rows(walked, rows, 192, grid=3, block=64)
    assert torch.allclose(c, a @ b, atol=1e-4)
    assert torch.allclose(sums, torch.nn.functional.pad(x, (0, 24)).view(8, 128).sum(1), atol=1e-4)
    want = rows.view(3, 3, 64).roll(-1, 2).sum(1)  # each block: row[(t + 1) % 64] of its three 64-wide chunks
    assert torch.allclose(walked, want.reshape(-1), atol=1e-5)


def test_an_address_taken_before_a_barrier_still_names_the_variable_after_it(built):
    """``float* at = &acc;`` then a barrier: the twin keeps ``acc`` in its slot, so ``*at`` reaches it later."""
    k, _ = built
    out = torch.zeros(64)
    k.kept_address(out, grid=1, block=64)
    assert torch.equal(out, torch.arange(64.0) + 0.5)


def test_a_return_before_a_barrier_is_the_fibers_report_and_fine_when_all_return(built):
    """`if (i >= n) return;` then a barrier: every thread staying, the twin computes; some gone, the launch fails
    with the fibers' own message at the barrier's line, naming the first thread that returned."""
    k, folder = built
    x, out = torch.randn(64), torch.zeros(64)
    k.rows_then_sum(out, x, 64, grid=1, block=64)
    torch.testing.assert_close(out, x[0] + x.flip(0))
    line = KERNELS.splitlines().index("    __syncthreads();", KERNELS.splitlines().index("    if (i >= n) return;")) + 1
    with pytest.raises(LaunchError, match=rf"BarrierDivergence: __syncthreads\(\) at "
                                          rf"{re.escape(str(folder / 'steps.cu'))}:{line} is reached by 40 of the 64 "
                                          rf"threads of block \(0, 0, 0\): thread \(40, 0, 0\) of block \(0, 0, 0\) "
                                          rf"had already returned"):
        k.rows_then_sum(torch.zeros(64), x, 40, grid=1, block=64)


def test_a_name_two_stretches_declare_each_for_itself_keeps_the_twin(built):
    """Two loops, one a stretch, each with its own `int k`: locals of their stretches, no slot, so the kernel keeps
    its twin and each loop its own k."""
    k, _ = built
    out = torch.zeros(32)
    k.two_loops(out, grid=1, block=32)
    t = torch.arange(32.0)
    assert torch.equal(out, 12 + t + (t + 1) % 32)


def test_threads_are_numbered_as_cuda_numbers_them(built):
    """threadIdx steps x fastest, then y, then z, through a (4, 3, 2) block, in every stretch of the twin."""
    k, _ = built
    out = torch.zeros(3 * 24, dtype=torch.int32)
    k.where_am_i(out, grid=1, block=(4, 3, 2))
    got = out.view(24, 3)
    i = torch.arange(24)
    assert torch.equal(got[:, 0], i % 4) and torch.equal(got[:, 1], i // 4 % 3)
    assert torch.equal(got[:, 2], (i // 12 + 2300).to(torch.int32))


def test_threads_that_part_at_a_loop_holding_a_barrier_are_named(built):
    """Threads that would run a loop holding a barrier a different number of times: the twin stops the launch at the
    loop's line, naming one thread that goes round again and one that leaves (a GPU would hang)."""
    k, folder = built
    with pytest.raises(LaunchError, match=rf"BarrierDivergence: the threads of block \(0, 0, 0\) part at the loop at "
                                          rf"{re.escape(str(folder / 'steps.cu'))}:{LINE_ROUNDS}, which holds the "
                                          rf"__syncthreads\(\) at .*steps.cu:{LINE_ROUNDS + 2}: thread \(0, 0, 0\) of block \(0, 0, 0\) leaves it and "
                                          rf"thread \(32, 0, 0\) of block \(0, 0, 0\) goes round again"):
        k.rounds_by_thread(torch.zeros(64), grid=1, block=64)


def test_an_index_past_a_shared_array_names_the_thread_at_its_line(built):
    """-fsanitize=bounds in a twin names the user's line and the thread that ran past, as the fibers do."""
    k, folder = built
    with pytest.raises(LaunchError, match=rf"index 64 is out of bounds for `.float \[64\].` at "
                                          rf"{re.escape(str(folder / 'steps.cu'))}:{LINE_PAST} \(thread \(63, 0, 0\)"):
        k.past_the_tile(torch.zeros(64), grid=1, block=64)


def test_a_block_too_large_for_the_twins_slots_runs_as_fibers(built):
    """A 1024-thread block whose threads each keep 40 floats across a barrier (160 KiB of slots, more than the
    fiber's stack may hold): the twin declines before running anything and the fibers give the answer."""
    k, _ = built
    out = torch.zeros(1024)
    k.big_locals(out, grid=1, block=1024)
    t = torch.arange(1024.0)
    assert torch.equal(out, (1023 - t) + 39 + t)


REFUSED = {
    "shuffle": ("__global__ void k(float* o) { __shared__ float s[32]; s[threadIdx.x] = 1; __syncthreads();\n"
                "  o[threadIdx.x] = __shfl_down_sync(0xffffffffu, s[threadIdx.x], 1); }", "__shfl_down_sync"),
    "helper_with_a_barrier": ("__device__ void wait_all() { __syncthreads(); }\n"
                              "__global__ void k(float* o) { o[threadIdx.x] = 1; wait_all(); }", "wait_all"),
    "template": ("template <int N> __global__ void k(float* o) { __syncthreads(); o[threadIdx.x] = N; }",
                 "a kernel template"),
    "break": ("__global__ void k(float* o, int n) { for (int i = 0; i < n; ++i) { if (o[i] < 0) break;\n"
              "  __syncthreads(); } }", "a break or continue"),
    "auto": ("__global__ void k(float* o) { auto v = o[threadIdx.x]; __syncthreads(); o[threadIdx.x] = v + 1; }",
             "auto"),
    "pointer_into_shared": ("__global__ void k(float* o) { __shared__ float s[32]; float* p = s; p[threadIdx.x] = 1;\n"
                            "  __syncthreads(); o[threadIdx.x] = p[0]; }", "__shared__ array s"),
    "volatile": ("__global__ void k(volatile int* f) { if (threadIdx.x == 1) f[0] = 1; while (f[0] == 0) {} }",
                 "volatile"),
    "barrier_in_a_switch": ("__global__ void k(int m) { switch (m) { case 1: __syncthreads(); } }",
                            "a barrier inside a case statement"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_what_a_twin_cannot_run_keeps_the_fibers(name):
    """A warp collective, a barrier in a helper or a switch, a template, a break out of a loop holding a barrier, a
    spin-wait, an ``auto`` variable beside the barriers, a pointer into a shared array: no twin, and why."""
    text, why = REFUSED[name]
    src = text.encode()
    assert why in (lockstep.refusal(syntax_tree(src).root_node, src, "k.cu", "k") or "")


def test_a_twin_the_compiler_refuses_is_dropped_and_the_kernel_runs(tmp_path, use_shared_cache):
    """A variable beside the barriers whose type has no default constructor: its twin's slots do not compile, so the
    unit is compiled without twins and the kernel runs as fibers, right."""
    path = tmp_path / "no_default.cu"
    path.write_text("struct Pair { __device__ Pair(int a) : v(a) {} int v; };\n"
                    "__global__ void k(int* out) {\n"
                    "    Pair p = Pair(threadIdx.x * 2);\n"
                    "    __syncthreads();\n"
                    "    out[threadIdx.x] = p.v;\n"
                    "}\n")
    m = jitlab.load(path, device="cpu")
    assert _twins(m) == set()
    out = torch.zeros(32, dtype=torch.int32)
    m.k(out, grid=1, block=32)
    assert torch.equal(out, torch.arange(0, 64, 2, dtype=torch.int32))


def test_a_mistake_in_a_kernel_with_a_twin_is_reported_once(tmp_path, use_shared_cache):
    """The compiler's message about the user's own code comes from the unit without twins: each error once."""
    path = tmp_path / "typo.cu"
    path.write_text("__global__ void k(float* out) {\n"
                    "    float v = out[threadIdx.x];\n"
                    "    __syncthreads();\n"
                    "    out[threadIdx.x] = v + undeclared_name;\n"
                    "}\n")
    with pytest.raises(CompileError) as e:
        jitlab.load(path, device="cpu")
    assert str(e.value).count("undeclared_name") >= 1
    assert len(re.findall(r"typo\.cu:4:\d+: error", str(e.value))) == 1, str(e.value)
