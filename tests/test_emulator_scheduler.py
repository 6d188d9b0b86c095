"""The CPU emulator's scheduler and access hooks (simt/runtime.cpp, simt/memory_checks.inc): what the fast paths
may not change.

The hooks answer most accesses from the stack pointer (the running fiber's record, while its launch owns the
fiber range), a thread at a barrier switches straight to the next one, and a barrier opens by a generation
count. Each test holds one of them to what the slow path did: the same results and the same reports, on one
OS thread or several, from a launch that owns the fiber range or one that runs beside it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.errors import LaunchError
from jitlab.jit import emulator_run

#: The corpus's tiled matmul (both barriers), then kernels of this file's own.
SOURCE = (Path(__file__).parent / "fixtures" / "emulator" / "corpus" / "matmul_tiled.cu").read_text() + r"""__global__ void votes(int* out) {
    int t = threadIdx.x, i = 4 * (blockIdx.x * blockDim.x + t);
    out[i] = __syncthreads_count(t % 3 == 0);
    out[i + 1] = __syncthreads_and(t < 90);
    out[i + 2] = __syncthreads_or(t == 5);
    out[i + 3] = __syncthreads_count(t & 1);
}
__global__ void past_end(float* y, const float* x) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    y[i] = x[i];
}
__global__ void spin(int* out, int rounds) {
    for (int r = 0; r < rounds; ++r) {
        out[threadIdx.x] += 1;
        __syncthreads();
    }
}
"""
LINE_END = SOURCE.splitlines().index("    y[i] = x[i];") + 1  # in past_end
LINE_SPIN = SOURCE.splitlines().index("    for (int r = 0; r < rounds; ++r) {") + 1  # the loop of spin, then its barrier
#: Its own module: `last` is the module's only __shared__ array (a pointer past one array into the next one
#: is not detected).
PAST_SHARED = r"""__global__ void past_shared(float* out) {
    __shared__ float last[32];
    float* p = last;
    p[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = p[threadIdx.x];
}
"""
LINE_PAST = PAST_SHARED.splitlines().index("    p[threadIdx.x] = 1.0f;") + 1


def _built(folder, name: str, text: str, cache):
    (folder / name).write_text(text)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JITLAB_CACHE_DIR", str(cache))
        return jitlab.load(folder / name, device="cpu")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("scheduler")


@pytest.fixture(scope="module")
def sched(folder, shared_cache):
    """SOURCE built for the emulator."""
    return _built(folder, "sched.cu", SOURCE, shared_cache)


@pytest.fixture(scope="module")
def past(folder, shared_cache):
    """PAST_SHARED built for the emulator."""
    return _built(folder, "past.cu", PAST_SHARED, shared_cache)


@pytest.fixture(params=[1, 4], ids=["1 worker", "4 workers"])
def workers(request, monkeypatch):
    """Launches run their blocks on this many OS threads (4 is more than this machine may have: still exact)."""
    configure = emulator_run.configure
    monkeypatch.setattr(emulator_run, "configure", lambda lib, **kw: configure(lib, **{**kw, "workers": request.param}))
    return request.param


def _matmul(sched, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    a, b = torch.randn(n, n, generator=g), torch.randn(n, n, generator=g)
    c = torch.zeros(n, n)
    sched.matmul_tiled(c, a, b, n, grid=(n // 16, n // 16), block=(16, 16))
    return c, a @ b


def test_a_tiled_matmul_is_right_on_any_number_of_workers(sched, workers):
    """Every worker's fibers lie in the launch's one mapping: each finds its own record, and the product is exact."""
    c, want = _matmul(sched, 96)
    assert torch.allclose(c, want, rtol=1e-4, atol=1e-4)


def test_consecutive_barrier_votes_each_return_their_own_count(sched, workers):
    """__syncthreads_count/_and/_or, one after another (threads handed straight on at each): every thread of every
    block gets each barrier's own answer, never the next one's."""
    out = torch.full((3 * 96 * 4,), -1, dtype=torch.int32)
    sched.votes(out, grid=3, block=96)
    assert out.view(-1, 4).tolist() == [[32, 0, 1, 48]] * (3 * 96)


@pytest.mark.parametrize("checked", [False, True], ids=["plain", "checked"])
def test_a_pointer_past_the_last_shared_array_is_reported_at_its_line(past, workers, checked):
    """Through a pointer, past the module's last __shared__ array: stopped before the write, named, at its line, in
    plain and checked runs and on any number of workers."""
    with emulator_run.checking(checked), pytest.raises(LaunchError) as e:
        past.past_shared(torch.zeros(64), grid=2, block=64)
    assert "past the __shared__ array `last`" in str(e.value) and f"past.cu:{LINE_PAST}" in str(e.value), str(e.value)


def test_a_launch_beside_another_of_the_same_library_checks_the_same(sched):
    """A second launch from another Python thread while the first owns the fiber range takes the hooks' slow path:
    it still stops a read past a tensor at its line and still computes a tiled product right, and so does the first."""
    first: dict = {}

    def long_launch():
        first["c"], first["want"] = _matmul(sched, 512)

    t = threading.Thread(target=long_launch)
    t.start()
    time.sleep(0.05)
    with pytest.raises(LaunchError) as e:
        sched.past_end(torch.zeros(1024), torch.ones(1000), grid=4, block=256)
    beside, want = _matmul(sched, 64)
    running = t.is_alive()
    t.join()
    assert running, "the first launch ended before the second's: nothing ran beside it"
    assert f"sched.cu:{LINE_END}" in str(e.value) and "`x[1000]`, but `x` has 1000 elements" in str(e.value), str(e.value)
    assert torch.allclose(beside, want, rtol=1e-4, atol=1e-4)
    assert torch.allclose(first["c"], first["want"], rtol=1e-4, atol=1e-4)
    out = torch.zeros(256, dtype=torch.int32)  # and the range was handed back: the next launch runs as before
    sched.spin(out, 3, grid=1, block=256)
    assert out.tolist() == [3] * 256


def test_a_time_limit_stops_threads_that_pass_barriers_to_each_other(sched, monkeypatch):
    """Threads that only hand over to each other at barriers (no return to the scheduler in between) still stop at
    the time limit, and the report names the kernel's line."""
    monkeypatch.setenv("JITLAB_EMULATOR_TIMEOUT", "0.5")
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"time limit of 0.5 s") as e:
        sched.spin(torch.zeros(256, dtype=torch.int32), 1 << 30, grid=4, block=256)
    assert time.monotonic() - t0 < 10
    assert any(f"sched.cu:{line}" in str(e.value) for line in (LINE_SPIN, LINE_SPIN + 1, LINE_SPIN + 2)), str(e.value)
