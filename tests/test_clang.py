"""Host units with clang, where a clang++ is found: torch C++ snippets built and called on CPU, their host units
compiled by clang on clang's own precompiled set; code clang refuses built by GCC, which also gives the errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab import CompileError
from jitlab.jit import toolchain
from jitlab.jit.engines import clang, objects

pytestmark = pytest.mark.slow

needs_clang = pytest.mark.skipif(clang.path() is None, reason="needs clang++ 11 or newer (make test installs it: "
                                 "scripts/setup-system)")

DOUBLED = """
#include <torch/extension.h>
torch::Tensor doubled(torch::Tensor x) { return x * %s; }
"""
# __builtin_has_attribute: a GCC built-in that clang does not have.
GCC_ONLY_CODE = """
#include <torch/extension.h>
__attribute__((noinline)) int64_t step(int64_t v) { return v + 1; }
torch::Tensor counted(torch::Tensor x, int64_t n) {
    return x + float(__builtin_has_attribute(step, noinline) ? step(n) : n);
}
"""


def _logs(build: jitlab.Build) -> str:
    return "\n".join((p / "build.log").read_text() for p in (Path(os.environ["JITLAB_CACHE_DIR"]) / "objects").iterdir()
                     if (p / "build.log").is_file())


def _fake(folder: Path, name: str, major: int) -> Path:
    tool = folder / name
    tool.write_text(f"#!/bin/sh\necho 'clang version {major}.0.1 (fake)'\n")
    tool.chmod(0o755)
    return tool


def test_clang_is_found_as_clang_plus_plus_else_the_newest_numbered_one_and_never_one_too_old(tmp_path, monkeypatch,
                                                                                               cache):
    """clang++ on PATH first; else the largest clang++-N; JITLAB_CLANG names one or turns clang off; a clang
    without -fpch-instantiate-templates (before 11) is none."""
    monkeypatch.delenv("JITLAB_CLANG", raising=False)
    for name, major in (("clang++-9", 9), ("clang++-12", 12), ("clang++-14", 14), ("clang++-140x", 99)):
        _fake(tmp_path, name, major)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert clang.path() == str(tmp_path / "clang++-14")
    _fake(tmp_path, "clang++", 13)
    clang._path.cache_clear()  # found once per process and PATH: a clang++ installed meanwhile is a new process's
    assert clang.path() == str(tmp_path / "clang++")
    monkeypatch.setenv("JITLAB_CLANG", "clang++-12")
    assert clang.path() == str(tmp_path / "clang++-12")
    monkeypatch.setenv("JITLAB_CLANG", "clang++-9")
    assert clang.path() is None
    monkeypatch.setenv("JITLAB_CLANG", "0")
    assert clang.path() is None


def test_gcc_only_words_are_left_out_for_clang():
    """-fno-gnu-unique (operator libraries) and -Winvalid-pch mean nothing to clang, which refuses them."""
    assert clang.words(["-O3", "-fno-gnu-unique", "-DX=1", "-Winvalid-pch", "-fPIC"]) == ["-O3", "-DX=1", "-fPIC"]


@needs_clang
def test_a_torch_cpp_snippet_builds_with_clang_on_its_set_and_an_edit_rebuilds(cache, write):
    """The host unit is clang's, on clang's precompiled set (a .pch made with -fpch-instantiate-templates),
    the function runs; an edit compiles that unit again, with clang."""
    p = write("doubled.cpp", DOUBLED % "2")
    m = jitlab.load(p)
    assert m.doubled(torch.arange(3.0)).tolist() == [0.0, 2.0, 4.0]
    log = _logs(m.build)
    assert log.startswith(clang.path()) and "-include-pch" in log and "/clang-torch-" in log
    sets = [p.name for p in Path(os.environ["JITLAB_PCH_DIR"]).iterdir() if p.is_dir()]
    assert any(s.startswith("clang-torch-") for s in sets)
    p.write_text(DOUBLED % "3")
    assert jitlab.load(p).doubled(torch.arange(3.0)).tolist() == [0.0, 3.0, 6.0]


@needs_clang
def test_code_clang_refuses_is_built_by_gcc_and_its_next_builds_go_to_gcc_at_once(cache, write):
    """A GCC extension clang rejects still builds (drop-in: what torch's GCC takes, jitlab takes); the unit's hint
    sends its next builds to GCC without asking clang again."""
    p = write("counted.cpp", GCC_ONLY_CODE)
    m = jitlab.load(p)
    assert m.counted(torch.zeros(2), 4).tolist() == [5.0, 5.0]
    hints = list((Path(os.environ["JITLAB_CACHE_DIR"]) / "objects" / "hints").iterdir())
    assert [h.read_text() for h in hints] == [f"{objects.CLANG_REFUSED}\n"]
    objects_dir = Path(os.environ["JITLAB_CACHE_DIR"]) / "objects"
    built = [f for f in objects_dir.iterdir() if (f / "counted.cpp.o").is_file()]
    assert len(built) == 1 and (built[0] / "build.log").read_text().split()[0] == toolchain.cxx_path()
    p.write_text(GCC_ONLY_CODE.replace("v + 1", "v + 2"))
    m2 = jitlab.load(p)
    assert m2.counted(torch.zeros(2), 4).tolist() == [6.0, 6.0]
    edited = [f for f in objects_dir.iterdir() if (f / "counted.cpp.o").is_file() and "v + 2" in (f / "counted.cpp").read_text()]
    assert len(edited) == 1 and (edited[0] / "build.log").read_text().split()[0] == toolchain.cxx_path()


@needs_clang
def test_an_error_in_a_torch_cpp_snippet_is_gccs_message_at_the_users_line(cache, write):
    """Both compilers refuse a missing semicolon: the error is GCC's, as without clang, at the user's line."""
    p = write("broken.cpp", DOUBLED.replace("x * %s;", "x * 2") % ())
    with pytest.raises(CompileError) as e:
        jitlab.load(p)
    assert "broken.cpp:2:54: error: expected" in str(e.value) and e.value.log.split()[0] == toolchain.cxx_path()


def test_without_clang_the_host_unit_is_gccs(cache, write, monkeypatch):
    """JITLAB_CLANG=0: GCC on its own set, as before."""
    monkeypatch.setenv("JITLAB_CLANG", "0")
    p = write("doubled_gcc.cpp", DOUBLED % "4")
    m = jitlab.load(p)
    assert m.doubled(torch.ones(2)).tolist() == [4.0, 4.0]
    log = _logs(m.build)
    assert log.split()[0] == toolchain.cxx_path() and "-Winvalid-pch" in log and "-include-pch" not in log


@needs_clang
def test_a_define_torch_uses_still_builds_on_clangs_set(cache, write):
    """defines={"SCALE": 2}, a name torch's headers use: GCC would parse all of torch again (a build note says
    so); clang's set was made without it and stays usable, since the user's code alone sees the macro."""
    p = write("twice.cpp", """
        #include <torch/extension.h>
        torch::Tensor twice(torch::Tensor x) { return x * SCALE; }
    """)
    m = jitlab.load(p, defines={"SCALE": 2})
    assert m.twice(torch.ones(2)).tolist() == [2.0, 2.0]
    assert _logs(m.build).startswith(clang.path())
    assert not [n for n in m.build.notes if "without the precompiled torch header" in n]


def test_a_clang_set_an_interrupt_ended_is_tried_again_and_one_clang_refused_is_not(monkeypatch, tmp_path):
    """A set clang could not make is left for the rest of the process (each unit would wait ~20 s for it again);
    one that Ctrl-C ended is not: the next build tries clang's set again."""
    from jitlab.errors import ToolchainError
    from jitlab.jit import processes
    from jitlab.jit.engines import pch
    from jitlab.jit.flags import default_host_flags

    monkeypatch.setenv("JITLAB_PCH_DIR", str(tmp_path))
    monkeypatch.setattr(pch, "_refused", {})
    fake = str(_fake(tmp_path, "clang++-15", 15))
    flags = default_host_flags(False)

    def interrupted(*args, **kwargs):
        processes.end_all()  # what Ctrl-C does while the set's compiler runs
        raise ToolchainError("jitlab: precompiling torch's headers failed: killed")

    monkeypatch.setattr(pch, "made_once", interrupted)
    with pytest.raises(ToolchainError):
        pch._precompiled(flags, False, "host", (), fake)
    assert pch._refused == {}

    def refused(*args, **kwargs):
        raise ToolchainError("jitlab: precompiling torch's headers failed: clang: error: unknown argument")

    monkeypatch.setattr(pch, "made_once", refused)
    for _ in range(2):
        with pytest.raises(ToolchainError, match="unknown argument"):
            pch._precompiled(flags, False, "host", (), fake)
    assert list(pch._refused) == [pch._describe("torch", flags, False, "host", (), fake)[2]]
