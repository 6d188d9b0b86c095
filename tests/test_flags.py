"""What a user sets, as the compilers get it: include flags with relative paths."""

from __future__ import annotations

import pytest
import torch

import jitlab
from jitlab.jit.flags import Options


def test_relative_include_flags_are_made_absolute_against_the_working_directory(tmp_path, monkeypatch):
    """`-Iinc`, `-I inc`, `-isystem=inc`, `-include pre.h` get the working directory's absolute paths; others stay."""
    monkeypatch.chdir(tmp_path)
    o = Options(cflags=["-Iinc", "-I", "inc", "-isystem=inc", "-include", "pre.h", "-I/abs", "-O2", "-DX=a/b"],
                cuda_cflags=["--include-path=inc"])
    inc = str(tmp_path / "inc")
    assert o.cflags == [f"-I{inc}", "-I", inc, f"-isystem={inc}", "-include", str(tmp_path / "pre.h"), "-I/abs",
                        "-O2", "-DX=a/b"]
    assert o.cuda_cflags == [f"--include-path={inc}"]


@pytest.mark.parametrize("flags", [["-Ivendor"], ["-isystem", "vendor"], ["-include", "vendor/gain.h"]])
def test_relative_include_flag_reaches_the_compiler(cache, tmp_path, monkeypatch, flags):
    """A snippet built with a relative `-I`, `-isystem` or `-include` finds the header from the caller's folder."""
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "gain.h").write_text("#pragma once\n#define GAIN 3.0f\n")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "k.cpp").write_text('#ifndef GAIN\n#include "gain.h"\n#endif\n'
                                    "void gain(float* y, int n) { for (int i = 0; i < n; ++i) y[i] *= GAIN; }\n")
    monkeypatch.chdir(tmp_path)
    m = jitlab.load("src/k.cpp", cflags=flags)
    y = torch.ones(2)
    m.gain(y, 2)
    assert y.tolist() == [3.0, 3.0]
