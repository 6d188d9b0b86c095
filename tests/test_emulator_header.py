"""The CPU emulator's units include jitlab's SIMT header precompiled (``emulator.precompiled_header``): GCC takes
the ``.gch`` with the units' own flags; a debug build, whose flags it does not fit, reads the header itself and
runs the same; a user's define still reaches the kernel."""

from __future__ import annotations

import subprocess

import pytest
import torch

import jitlab
from jitlab.jit.engines import emulator

SCALE = """
#ifndef SCALE
#define SCALE 2
#endif
__global__ void scaled(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = SCALE * x[i];
}
"""


@pytest.fixture
def snippet(tmp_path, use_shared_cache):
    path = tmp_path / "scaled.cu"
    path.write_text(SCALE)
    return path


def _run(k, scale: float) -> None:
    x, y = torch.arange(40.0), torch.zeros(40)
    k.scaled(y, x, 40, grid=2, block=32)
    torch.testing.assert_close(y, scale * x)


def test_the_units_compile_takes_the_precompiled_header(snippet, monkeypatch):
    """The compile a build runs, run again with ``-H``: GCC reports the ``.gch`` as used (``!``), not the
    header text. Flags that drift from the ones the header was made with fail here."""
    commands = []
    real = emulator._compile
    monkeypatch.setattr(emulator, "_compile",
                        lambda cmd, what, sources, **kw: commands.append(cmd) or real(cmd, what, sources, **kw))
    snippet.write_text(f"// {snippet.parent.name}: a text no other build has, so this one compiles\n{SCALE}")
    _run(jitlab.load(snippet, device="cpu"), 2)
    unit = next(c for c in commands if "-c" in c and c[c.index("-c") + 1].endswith("emulated.cpp"))
    out = unit[unit.index("-o") + 1]
    header = emulator.precompiled_header()
    assert unit[unit.index("-include") + 1] == str(header)
    shown = subprocess.run([*unit[:unit.index("-o")], "-o", out + ".again", "-H"], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    first = shown.stderr.splitlines()[0]
    assert first == f"! {header}.gch", shown.stderr[:500]


def test_a_debug_build_reads_the_header_and_runs_the_same(snippet):
    """``debug=True`` compiles at -O0, which the ``.gch`` (made at -O2) does not fit: GCC reads the header's
    text instead, and the kernel gives the same numbers."""
    _run(jitlab.load(snippet, device="cpu", debug=True), 2)


def test_a_users_define_reaches_the_kernel_with_the_precompiled_header(snippet):
    """``SCALE=3`` (``-DSCALE=3``) changes the kernel, not the header: the ``.gch`` serves and the define is seen."""
    _run(jitlab.load(snippet, device="cpu", defines={"SCALE": 3}), 3)


@pytest.mark.slow
def test_the_header_is_held_to_its_stamp_and_made_again_after_a_write(tmp_path, monkeypatch, cache):
    """Finding the ``.gch`` reads none of its 18 MB (its inode and change time vouch for it, as for torch's sets);
    a ``.gch`` written to after it was made is made again, and units build on the new one."""
    from jitlab.jit import cache

    monkeypatch.setenv("JITLAB_PCH_DIR", str(tmp_path / "pch"))
    header = emulator.precompiled_header()
    gch = header.with_name(header.name + ".gch")
    hashed = []
    real = cache.file_sha256
    monkeypatch.setattr(cache, "file_sha256", lambda p: hashed.append(str(p)) or real(p))
    assert emulator.precompiled_header() == header
    assert str(gch) not in hashed and hashed == [str(header)]  # the one-line header beside it, hashed
    size = gch.stat().st_size
    with open(gch, "r+b") as f:  # the same size, one byte flipped: only its change time tells
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    written = gch.stat()
    again = emulator.precompiled_header()
    made = again.with_name(again.name + ".gch").stat()
    # made again (GCC's .gch is not the same bytes from one run to the next, so its stamp tells, not a byte)
    assert (made.st_ino, made.st_mtime_ns) != (written.st_ino, written.st_mtime_ns)
    assert emulator.precompiled_header() == again  # and the new one is held to its own stamp
    snippet = tmp_path / "scaled.cu"
    snippet.write_text(SCALE)
    _run(jitlab.load(snippet, device="cpu"), 2)  # a unit builds on the new one
