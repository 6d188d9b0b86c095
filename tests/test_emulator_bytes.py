"""The race detector on `__shared__` arrays of 1- and 2-byte elements (simt/memory_checks.inc): it watches 4-byte
granules, and threads that each write their own `char` or `short` of one granule touch different bytes, which is
no race; two threads on the same byte still are."""

from __future__ import annotations

import pytest
import torch

import jitlab
from jitlab.errors import LaunchError
from jitlab.jit import emulator_run

BYTES = r"""
__global__ void flags(int* out, const int* x) {
    __shared__ char keep[256];
    __shared__ short half[256];
    int t = threadIdx.x;
    keep[t] = x[t] > 0;
    half[t] = (short)(x[t] * 2);
    char mine = keep[t];
    __syncthreads();
    out[t] = mine + keep[(t + 1) % 256] + half[(t + 255) % 256];
}
__global__ void same_byte(int* out) {
    __shared__ char slot[4];
    slot[0] = (char)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = slot[0];
}
__global__ void read_before_barrier(int* out) {
    __shared__ char slot[64];
    slot[threadIdx.x] = 1;
    out[threadIdx.x] = slot[(threadIdx.x + 1) % 64];
}
"""
LINE_SAME = BYTES.splitlines().index("    slot[0] = (char)threadIdx.x;") + 1
LINE_READ = BYTES.splitlines().index("    out[threadIdx.x] = slot[(threadIdx.x + 1) % 64];") + 1


@pytest.fixture
def k(tmp_path, use_shared_cache):
    path = tmp_path / "bytes.cu"
    path.write_text(BYTES)
    return jitlab.load(path, device="cpu")


def test_neighbouring_chars_and_shorts_written_by_their_threads_pass_the_check(k):
    """Each thread writes its own `char` and `short`, then reads its neighbours' after the barrier: checked,
    no race, and the numbers a plain run gives."""
    x = torch.arange(-100, 156, dtype=torch.int32)
    out = torch.zeros(256, dtype=torch.int32)
    with emulator_run.checking():
        k.flags(out, x, grid=1, block=256)
    pos = (x > 0).int()
    torch.testing.assert_close(out, pos + pos.roll(-1) + (2 * x).roll(1))


def test_two_threads_writing_one_char_still_race(k):
    """Every thread stores its index into `slot[0]`: the check names the race at the line."""
    with emulator_run.checking(), pytest.raises(LaunchError) as e:
        k.same_byte(torch.zeros(32, dtype=torch.int32), grid=1, block=32)
    assert "Race" in str(e.value) and f"bytes.cu:{LINE_SAME}" in str(e.value), str(e.value)


def test_a_neighbours_char_read_before_the_barrier_still_races(k):
    """A thread reads the `char` its neighbour writes, with no `__syncthreads()` between: a race at the read."""
    with emulator_run.checking(), pytest.raises(LaunchError) as e:
        k.read_before_barrier(torch.zeros(64, dtype=torch.int32), grid=1, block=64)
    assert "Race" in str(e.value) and f"bytes.cu:{LINE_READ}" in str(e.value), str(e.value)
