"""Kernels whose threads can only end run them one after the other on the CPU emulator (runtime.cpp's
``Worker::run_in_turn``): one record and one stack serve a whole block, where fibers touch one each. Which libraries
may is read from the unit's object (``emulator.runs_in_turn``: no barrier, warp collective or spin-wait); what a
kernel computes, prints and is stopped for stays what the fibers gave. The launch shims pass a kernel's arguments
without the access hooks, and the kernel's own accesses keep them."""

from __future__ import annotations

import ctypes
import re
import subprocess

import pytest
import torch

import jitlab
from jitlab.errors import LaunchError
from jitlab.jit.engines import emulator

#: A unit each, and whether its threads may run in turn.
UNITS = {
    "plain": ("__global__ void k(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = threadIdx.x; }", True),
    "atomic_add": ("__global__ void k(int* out) { atomicAdd(out, 1); }", True),
    "helper_function": ("__device__ __noinline__ int twice(int v) { return 2 * v; }\n"
                        "__global__ void k(int* out) { out[threadIdx.x] = twice(threadIdx.x); }", True),
    "barrier": ("__global__ void k(int* out) { __shared__ int s; if (threadIdx.x == 0) s = 7; __syncthreads();\n"
                "  out[threadIdx.x] = s; }", False),
    "shuffle": ("__global__ void k(int* out) { out[threadIdx.x] = __shfl_down_sync(0xffffffffu, (int)threadIdx.x, 1); }",
                False),
    "volatile_flag": ("__global__ void k(volatile int* flag) { if (threadIdx.x == 0) { while (flag[1] == 0) {} }\n"
                      "  else if (threadIdx.x == 33) flag[1] = 1; }", False),
    "compare_and_swap": ("__global__ void k(int* lock) { while (atomicCAS(lock, 0, 1) != 0) {} atomicExch(lock, 0); }",
                         False),
    "cooperative_groups": ("#include <cooperative_groups.h>\nnamespace cg = cooperative_groups;\n"
                           "__global__ void k(int* out) { cg::this_thread_block().sync(); out[threadIdx.x] = 1; }",
                           False),
}


def _load(folder, name: str, text: str):
    path = folder / f"{name}.cu"
    path.write_text(text)
    return jitlab.load(path, device="cpu")


@pytest.mark.parametrize("name", UNITS)
def test_only_units_that_cannot_wait_run_in_turn(name, tmp_path, use_shared_cache):
    """A barrier, a warp collective (cooperative groups' too), a volatile read or a compare-and-swap in the unit
    keeps its threads fibers; an atomic add, a helper function or plain code lets them run in turn."""
    text, in_turn = UNITS[name]
    m = _load(tmp_path, name, text)
    assert emulator.runs_in_turn(m.build.artifact) is in_turn


def test_a_library_without_its_object_runs_fibers(tmp_path):
    """Where the unit's object cannot be read, the answer is the safe one: fibers."""
    lib = tmp_path / "lonely.so"
    lib.write_bytes(b"")
    assert emulator.runs_in_turn(lib) is False


TURNS = r"""
__global__ void turns(int* out, int* count, const int* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float local[4];
    for (int j = 0; j < 4; ++j) local[j] = x[i] + j;
    out[i] = (int)(local[3] * 2);
    atomicAdd(count, 1);
    if (blockIdx.x == 0 && threadIdx.x < 4) printf("thread %d of block %d\n", threadIdx.x, blockIdx.x);
}
__global__ void reads(int* out, const int* x, int n, int past) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = x[i + past];
}
__global__ void endless(int* out) {
    for (unsigned i = 0; ; ++i) out[threadIdx.x] = i;
}
"""
LINE_READ = TURNS.splitlines().index("    if (i < n) out[i] = x[i + past];")
LINE_LOOP = TURNS.splitlines().index("    for (unsigned i = 0; ; ++i) out[threadIdx.x] = i;")


@pytest.fixture
def turns(tmp_path, use_shared_cache):
    m = _load(tmp_path, "turns", TURNS)
    assert emulator.runs_in_turn(m.build.artifact)
    return m


def _fibers(m, on: bool) -> None:
    """Make the library's next launches run fibers (``on``) or in turn, as Python had said (the same library)."""
    m.turns(torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
            0, grid=1, block=1)  # the first call tells the library what Python found
    ctypes.CDLL(str(m.build.artifact)).jitlab_simt_in_turn(0 if on else 1)


def _run(m, capfd):
    n = 1000
    x = torch.arange(n, dtype=torch.int32)
    out, count = torch.zeros(n, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)
    capfd.readouterr()
    m.turns(out, count, x, n, grid=8, block=128)
    return out, count, capfd.readouterr().out


def test_in_turn_gives_what_fibers_give(turns, capfd):
    """Results, an atomic count and printf's lines in thread order: the same in turn as with fibers."""
    _fibers(turns, False)
    out, count, printed = _run(turns, capfd)
    assert out.tolist() == [2 * (i + 3) for i in range(1000)] and count.item() == 1000
    assert printed.splitlines() == [f"thread {t} of block 0" for t in range(4)]
    _fibers(turns, True)
    again = _run(turns, capfd)
    assert again[0].tolist() == out.tolist() and again[1].item() == 1000 and again[2] == printed


@pytest.mark.parametrize("fibers", [False, True], ids=["in_turn", "fibers"])
def test_an_access_past_a_tensor_is_named_the_same(turns, fibers):
    """x[n] read by the last thread, in turn or as a fiber: the same report, the tensor, the index, the line and
    the thread."""
    _fibers(turns, fibers)
    x, out = torch.arange(256, dtype=torch.int32), torch.zeros(256, dtype=torch.int32)
    with pytest.raises(LaunchError) as e:
        turns.reads(out, x, 256, 1, grid=2, block=128)
    text = str(e.value)
    assert "x[256]" in text and f"turns.cu:{LINE_READ + 1}" in text, text
    assert "thread (127, 0, 0) of block (1, 0, 0)" in text, text


def test_an_endless_loop_in_turn_stops_at_the_time_limit(turns, monkeypatch):
    """A thread that never ends, run in turn, is stopped at the time limit and named at its loop."""
    monkeypatch.setenv("JITLAB_EMULATOR_TIMEOUT", "0.5")
    with pytest.raises(LaunchError) as e:
        turns.endless(torch.zeros(32, dtype=torch.int32), grid=1, block=32)
    assert "TimeLimit" in str(e.value) and f"turns.cu:{LINE_LOOP + 1}" in str(e.value), str(e.value)


def _functions(obj) -> dict[str, str]:
    """Each function of an object file's disassembly (demangled name → its instructions and relocations)."""
    out = subprocess.run(["objdump", "-dr", "--no-show-raw-insn", "-C", str(obj)], capture_output=True, text=True,
                         check=True).stdout
    return {m[1]: m[2] for m in re.finditer(r"^[0-9a-f]+ <(.+?)>:\n(.*?)(?=^[0-9a-f]+ <|\Z)", out, re.M | re.S)}


def test_the_launch_shim_reads_arguments_unhooked_and_the_kernel_stays_checked(turns):
    """The shim's lambdas read the arguments from the launching frame with no access hook, and call the kernel,
    which GCC did not inline into them: its own loads and stores still call the hooks."""
    functions = _functions(turns.build.artifact.with_name("emulated.o"))
    shim = {name: body for name, body in functions.items() if name.startswith("jitlab_launch_reads") and "lambda" in name}
    assert shim and not any("__tsan_" in body for body in shim.values()), shim
    assert any("reads(int*, int const*, int, int)" in body for body in shim.values()), shim
    kernel = functions["reads(int*, int const*, int, int)"]
    assert "__tsan_read4" in kernel and "__tsan_write4" in kernel
