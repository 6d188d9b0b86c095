"""Shared libraries link with GNU gold where the compiler finds it (``linker.fast``): a torch module and an
emulated kernel's library, each loaded and called; ``$JITLAB_LINKER`` and the user's own ``-fuse-ld=`` win."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.jit import toolchain
from jitlab.jit.engines import linker


def _gold_links() -> bool:
    """Whether gold links a shared library with the C++ runtime for the compiler jitlab uses (``$CXX`` or ``c++``:
    the lent GPU box's ``$CXX``, a GCC under /opt without a shared libstdc++, cannot with gold; there jitlab links
    with ld, as the fake-gold tests show here)."""
    with tempfile.TemporaryDirectory() as d:
        return subprocess.run([toolchain.cxx_path() or "c++", "-shared", "-fPIC", "-fuse-ld=gold", "-x", "c++", os.devnull, "-o",
                               str(Path(d, "probe.so"))], capture_output=True).returncode == 0


needs_gold = pytest.mark.skipif(not _gold_links(), reason="this machine's gold cannot link a C++ shared library "
                                                          "(none found, or one that cannot read libstdc++)")


def _linked_by_gold(so: Path) -> bool:
    """gold leaves a note section naming itself in what it links; GNU ld never does."""
    sections = subprocess.run(["readelf", "-S", "-W", str(so)], capture_output=True, text=True, check=True).stdout
    return ".note.gnu.gold-version" in sections


@pytest.fixture
def choose(monkeypatch):
    """choose(name): ``$JITLAB_LINKER`` set (None: unset), the remembered choice forgotten before and after."""
    def set_(name):
        if name is None:
            monkeypatch.delenv("JITLAB_LINKER", raising=False)
        else:
            monkeypatch.setenv("JITLAB_LINKER", name)
        linker._fast.cache_clear()
        linker._failed.clear()
    yield set_
    linker._fast.cache_clear()
    linker._failed.clear()


def test_gold_is_chosen_exactly_where_it_links_a_cpp_library(choose):
    """On every machine, unset ``$JITLAB_LINKER``: gold where it links a shared library with libstdc++ for jitlab's
    compiler (this VM), the compiler's own ld where it cannot (the lent GPU box's ``$CXX``)."""
    choose(None)
    assert linker.fast() == (["-fuse-ld=gold"] if _gold_links() else [])


@needs_gold
def test_gold_is_chosen_where_found_and_the_users_choice_wins(choose):
    """Unset: gold. ``default``/``bfd``: the compiler's own ld. A linker the compiler cannot find: its own ld
    too, never a broken link line. A ``-fuse-ld=`` among the user's link flags: nothing added."""
    choose(None)
    assert linker.fast() == ["-fuse-ld=gold"]
    assert linker.fast(["-Wl,-rpath,/x", "-fuse-ld=bfd"]) == [] and linker.fast(["-Wl,--ld-path=/bin/ld"]) == []
    for name in ("default", "bfd"):
        choose(name)
        assert linker.fast() == []
    choose("no-such-linker")
    assert linker.fast() == []


def _fake_gold(folder: Path, refuses: str) -> Path:
    """A folder holding an ``ld.gold`` that fails every link whose arguments contain ``refuses`` and hands the
    rest to the real gold: GCC takes it first when ``COMPILER_PATH`` names the folder."""
    folder.mkdir()
    fake = folder / "ld.gold"
    fake.write_text(f'#!/bin/sh\ncase "$*" in *{refuses}*) echo "fake gold: refused" >&2; exit 1;; esac\n'
                    'exec /usr/bin/ld.gold "$@"\n')
    fake.chmod(0o755)
    return folder


@needs_gold
def test_a_gold_that_cannot_link_the_cpp_runtime_is_not_chosen(tmp_path, choose, monkeypatch):
    """gold that prints its version but fails a link with libstdc++ (as on a box whose GCC names a library folder
    that is not there): the probe link fails, so nothing is added and links use the compiler's own ld."""
    monkeypatch.setenv("COMPILER_PATH", str(_fake_gold(tmp_path / "fake", "probe.so")))
    choose(None)
    assert linker.fast() == []


@needs_gold
def test_a_link_gold_fails_is_linked_again_by_ld_and_later_links_skip_gold(tmp_path, choose, monkeypatch):
    """A link gold fails is run again without it and succeeds; the process's later links go to ld at once."""
    monkeypatch.setenv("COMPILER_PATH", str(_fake_gold(tmp_path / "fake", "fails_here")))
    choose(None)
    assert linker.fast() == ["-fuse-ld=gold"]
    src = tmp_path / "one.cpp"
    src.write_text("int one() { return 1; }\n")
    obj = tmp_path / "one.o"
    subprocess.run(["c++", "-c", "-fPIC", str(src), "-o", str(obj)], check=True)
    proc = linker.run(["c++", "-shared", str(obj), "-o", str(tmp_path / "fails_here.so")])
    assert proc.returncode == 0 and "-fuse-ld=gold" not in proc.args and (tmp_path / "fails_here.so").is_file()
    assert proc.stderr.startswith("jitlab: gold failed (fake gold: refused); linked again with ld")
    assert not _linked_by_gold(tmp_path / "fails_here.so")
    assert linker.fast() == []


@needs_gold
@pytest.mark.slow
def test_a_torch_module_is_linked_by_gold_and_works(tmp_path, use_shared_cache, choose):
    """A torch C++ snippet's module: gold on its link line and in the library, and its function answers."""
    choose(None)
    src = tmp_path / "gold_add.cpp"
    src.write_text('#include <torch/extension.h>\n'
                   'torch::Tensor gold_add(torch::Tensor a, torch::Tensor b) { return a + b + 1; }\n')
    b = jitlab.build(src)
    assert "-fuse-ld=gold" in (b.folder / "link.log").read_text()
    assert _linked_by_gold(b.folder / b.manifest.artifact)
    m = jitlab.load(src)
    torch.testing.assert_close(m.gold_add(torch.ones(3), torch.ones(3)), torch.full((3,), 3.0))


@pytest.mark.slow
@needs_gold
def test_an_emulated_kernels_library_is_linked_by_gold_and_runs(tmp_path, choose):
    """The CPU emulator's library (the snippet and the runtime): linked by gold, the kernel right, and an
    out-of-bounds read still named with its tensor (the runtime reads the library's own symbols)."""
    choose(None)
    src = tmp_path / "gold_scale.cu"
    src.write_text("__global__ void gold_scale(float* y, const float* x, int n) {\n"
                   "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                   "    y[i] = 2.0f * x[i];\n"
                   "}\n")
    b = jitlab.build(src, device="cpu")
    assert _linked_by_gold(b.folder / b.manifest.artifact)
    k = jitlab.load(src, device="cpu")
    x, y = torch.arange(64.0), torch.zeros(64)
    k.gold_scale(y, x, 64, grid=1, block=64)
    torch.testing.assert_close(y, 2 * x)
    with pytest.raises(jitlab.LaunchError, match=r"`x\[60\]`, but `x` has 60 elements"):
        k.gold_scale(torch.zeros(64), torch.arange(60.0), 60, grid=1, block=64)
