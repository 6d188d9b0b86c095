"""Reads of ``__shared__`` arrays indexed in full, and of pointer parameters inside a tensor, skip the access hook
in the CPU emulator's plain runs (``jit/engines/plain_reads.py``; ``jitlab_simt::plain_read``, ``in_tensor``):
which reads the translation rewrites, on the same lines; and that a rewritten read still gives the value, still
has a bad index or address named at its line in a plain run, and is still seen by a checked run's race
detector."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.errors import LaunchError
from jitlab.jit import emulator_run
from jitlab.jit.engines import emulator
from jitlab.jit.parse import SourceFile

READS = r"""
__shared__ float edge[8];
__global__ void reads(float* out, int n) {
    __shared__ float tile[4][8];
    __shared__ float row[8];
    volatile __shared__ int flag[2];
    int t = threadIdx.x;
    float v = tile[1][t];
    out[0] = -row[t] + (float)tile[0][1] * row[2];
    row[t] += tile[2][t];
    float& keep = row[0];
    float* whole = tile[3];
    atomicAdd(&row[4], 1.0f);
    out[1] = flag[0] + edge[t];
    out[2] = fminf(row[1], 2.0f);
    out[3] = tile[row[5]][1];
}
__device__ float other(const float* row) { return row[0]; }
__device__ float shadows() { float edge[8] = {}; return edge[1]; }
"""


def _translated(text: str) -> str:
    return emulator.translated(SourceFile(path=Path("reads.cu"), text=text, language="cuda"), twins=False)[0]


def _reads(line: str) -> list[str]:
    """The arrays a line's rewritten reads name, in order."""
    return re.findall(r"auto& jitlab_a = (\w+);", line)


def test_reads_used_as_values_are_rewritten_on_their_lines():
    """A read on the right of `=`, in arithmetic, an initialiser, under `-` or a cast is rewritten; a write, a
    compound assignment's target, a reference, a pointer to a row, `&x`, a call's argument, a volatile array, an
    index inside another rewritten read, and a name another declaration shadows are not. Every line stays where it
    was."""
    out = _translated(READS)
    lines, source = out.splitlines(), READS.splitlines()
    assert len(lines) == len(source)
    got = {src.strip(): _reads(line) for src, line in zip(source, lines) if src.strip()}
    assert got["float v = tile[1][t];"] == ["tile"]
    assert got["out[0] = -row[t] + (float)tile[0][1] * row[2];"] == ["row", "tile", "row"]
    assert got["row[t] += tile[2][t];"] == ["tile"]
    for untouched in ("float& keep = row[0];", "float* whole = tile[3];", "atomicAdd(&row[4], 1.0f);",
                      "out[2] = fminf(row[1], 2.0f);", "__device__ float other(const float* row) { return row[0]; }",
                      "__device__ float shadows() { float edge[8] = {}; return edge[1]; }"):
        assert got[untouched] == [], untouched
    assert got["out[1] = flag[0] + edge[t];"] == ["edge"]  # the file-scope array; the volatile one keeps its hook
    assert got["out[3] = tile[row[5]][1];"] == ["tile"] and "auto jitlab_i0 = (row[5]);" in lines[source.index(
        "    out[3] = tile[row[5]][1];")]


def test_a_file_that_reads_nothing_through_a_subscript_is_unchanged():
    """No read through `[]` (a write, a pointer dereference): the text is the user's."""
    text = "__global__ void k(float* y, const float* x) { y[threadIdx.x] = *x * 2.0f; }\n"
    assert _translated(text) == text


POINTERS = r"""
__global__ void pointers(float* y, const float* x, const float* __restrict__ w, float** rows, int n) {
    int i = threadIdx.x;
    float v = x[i] * w[i + 1];
    y[i] = v + rows[0][i];
    assert(x[i] >= 0.0f);
    y[i] += TWICE(x[i]) + fminf(x[i], 1.0f);
}
__device__ float shadowed(float* y, const float* x, int i) {
    {
        const float* x = y;
        return x[i];
    }
}
"""


def test_pointer_parameters_indexed_once_are_rewritten_where_their_value_is_used():
    """`x[i]` and `w[i + 1]` in arithmetic, an initialiser: rewritten; a pointer to pointers, a name declared again
    in its function, an assert's or a capitalised macro's argument (their text may be printed), a call's
    argument, a return and a write: not."""
    out = _translated(POINTERS)
    lines, source = out.splitlines(), POINTERS.splitlines()
    assert len(lines) == len(source)
    got = {src.strip(): re.findall(r"const auto\* jitlab_p = &(\w+)\[", line) for src, line in zip(source, lines)}
    assert got["float v = x[i] * w[i + 1];"] == ["x", "w"]
    for untouched in ("y[i] = v + rows[0][i];", "assert(x[i] >= 0.0f);", "y[i] += TWICE(x[i]) + fminf(x[i], 1.0f);",
                      "return x[i];"):
        assert got[untouched] == [], untouched


TILED = r"""
#define W 8
struct Pair { int a, b; };
struct Three { float x, y, z; };
__global__ void tiled(float* out, const float* in, int past) {
    __shared__ float tile[W][W];
    __shared__ double wide[W];
    __shared__ char bytes[W];
    __shared__ Pair pairs[W];
    __shared__ Three threes[W];
    int x = threadIdx.x, y = threadIdx.y;
    tile[y][x] = in[y * W + x];
    if (y == 0) { wide[x] = 0.5 * x; pairs[x] = Pair{x, -x}; threes[x] = Three{1.f, 2.f, 3.f * x}; }
    if (x == 0 && y == 0) for (int i = 0; i < W; ++i) bytes[i] = (char)(i + 1);  // one writer: 4-byte granules
    __syncthreads();
    float acc = 0.0f;
    for (int k = 0; k < W; ++k) acc += tile[y][k] * tile[k][x];
    Pair p = pairs[x];
    Three q = threes[x];
    out[y * W + x] = acc + (float)wide[x] + bytes[x] + p.a + p.b + q.z + tile[y][x + past] * 0.0f;
}
__global__ void racy(float* out, const float* in) {
    __shared__ float tile[W][W];
    int x = threadIdx.x, y = threadIdx.y;
    tile[y][x] = in[y * W + x];
    float v = tile[x][y];
    out[y * W + x] = v;
}
"""
LINE_PAST = TILED.splitlines().index(
    "    out[y * W + x] = acc + (float)wide[x] + bytes[x] + p.a + p.b + q.z + tile[y][x + past] * 0.0f;") + 1
LINE_RACY = TILED.splitlines().index("    float v = tile[x][y];") + 1


@pytest.fixture
def tiled(tmp_path, use_shared_cache):
    path = tmp_path / "tiled.cu"
    path.write_text(TILED)
    return jitlab.load(path, device="cpu")


def _want(x: torch.Tensor) -> torch.Tensor:
    m = x.view(8, 8)
    cols = torch.arange(8.0)
    return (m @ m + 0.5 * cols + (cols + 1) + 3 * cols).view(-1)


@pytest.mark.parametrize("checked", [False, True], ids=["plain", "checked"])
def test_rewritten_reads_give_the_values(tiled, checked):
    """float, double, char, an 8-byte struct (unhooked) and a 12-byte one (read as written): the same numbers in
    a plain run and a checked one."""
    x, out = torch.randn(64), torch.zeros(64)
    with emulator_run.checking(checked):
        tiled.tiled(out, x, 0, grid=1, block=(8, 8))
    torch.testing.assert_close(out, _want(x))


def test_an_index_one_past_the_row_is_named_at_its_line_in_a_plain_run(tiled):
    """`tile[y][x + 1]` with x = 7 is inside the array's memory (the next row) but past its extent: a plain run
    stops it at the line, as -fsanitize=bounds did before the rewrite."""
    with pytest.raises(LaunchError) as e:
        tiled.tiled(torch.zeros(64), torch.randn(64), 1, grid=1, block=(8, 8))
    text = str(e.value)
    assert f"tiled.cu:{LINE_PAST}" in text and "index 8 is out of bounds" in text, text


def test_a_rewritten_read_that_races_is_named_by_the_checked_run(tiled):
    """A transpose read without its `__syncthreads()`: the checked run names the race at the read's line."""
    with pytest.raises(LaunchError) as e, emulator_run.checking():
        tiled.racy(torch.zeros(64), torch.randn(64), grid=1, block=(8, 8))
    assert "Race" in str(e.value) and f"tiled.cu:{LINE_RACY}" in str(e.value), str(e.value)


STORES = r"""
struct Two { float a, b; };
__global__ void stores(float* out, int shift) {
    __shared__ float tile[4][4];
    __shared__ Two pairs[4];
    int x = threadIdx.x, y = threadIdx.y;
    tile[y][x] = out[y * 4 + x] * 2.0;
    pairs[x] = {1.0f, 2.0f};
    tile[y][x] += 1.0f;
    tile[y][x + shift] = 3.0f;
    __syncthreads();
    out[y * 4 + x] = tile[x][y] + pairs[x].b;
}
"""
LINE_SHIFT = STORES.splitlines().index("    tile[y][x + shift] = 3.0f;") + 1


def test_stores_to_shared_arrays_as_statements_are_rewritten():
    """`tile[y][x] = v;` (a double value: converted to the element's type) becomes plain_store's choice on its line;
    a braced value, a compound assignment and a store to a tensor stay as written."""
    lines = _translated(STORES).splitlines()
    source = STORES.splitlines()
    assert len(lines) == len(source)
    stored = {src.strip(): "plain_store(jitlab_a" in line for src, line in zip(source, lines)}
    assert stored["tile[y][x] = out[y * 4 + x] * 2.0;"] and stored["tile[y][x + shift] = 3.0f;"]
    assert not stored["pairs[x] = {1.0f, 2.0f};"] and not stored["tile[y][x] += 1.0f;"]
    assert not stored["out[y * 4 + x] = tile[x][y] + pairs[x].b;"]


@pytest.mark.parametrize("checked", [False, True], ids=["plain", "checked"])
def test_a_rewritten_store_gives_the_values_and_an_index_past_its_row_is_named(tmp_path, use_shared_cache, checked):
    """The stores give the same numbers plain and checked. With shift 1, a plain run stops `tile[y][x + 1]` (x = 3) at
    its line; a checked run first meets the race that shift makes (the stored hook still sees every store there)."""
    path = tmp_path / "stores.cu"
    path.write_text(STORES)
    k = jitlab.load(path, device="cpu")
    x = torch.randn(16)
    out = x.clone()
    with emulator_run.checking(checked):
        k.stores(out, 0, grid=1, block=(4, 4))
    m = x.view(4, 4) * 2 + 1
    m[:, :] = 3.0  # the shifted store (shift 0) writes every element last
    torch.testing.assert_close(out, (m.t() + 2.0).reshape(-1))
    with pytest.raises(LaunchError) as e, emulator_run.checking(checked):
        k.stores(x.clone(), 1, grid=1, block=(4, 4))
    want = "Race: a race on `tile`" if checked else "index 4 is out of bounds"
    assert f"stores.cu:{LINE_SHIFT}" in str(e.value) and want in str(e.value), str(e.value)
