"""Never stale: a cache hit needs every file the compiler read unchanged, however it was included.

Real compilers, no mocks. C++ snippets run on the CPU (values asserted); CUDA snippets compile only
(NVRTC or nvcc), and the build must not be a cache hit and must change what it made. Each edit is
backdated by a second, as an edit saved before a load is: a file written while its build runs makes
that build's entry unusable (tested on its own below).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import jitlab
from jitlab.jit import cache, toolchain

#: The compiler the wrapper scripts run, found before any test sets CXX to a wrapper.
REAL_CXX = toolchain.cxx_path()
needs_nvcc = pytest.mark.skipif(toolchain.nvcc_path() is None, reason="needs nvcc")
FILL = """
#include "cfg.h"
void fill(float* out, int n) {
    static const float W[] = {
#include "weights.inc"
    };
    for (int i = 0; i < n; ++i) out[i] = W[i % 2] + BIAS;
}
"""
SCALE = """
__global__ void scale(float* x, int n) {
    const float W[] = {
#include "weights.inc"
    };
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= W[i % 2];
}
"""


def edit(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` with an mtime a second ago (an edit saved before the load)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    then = time.time_ns() - 1_000_000_000
    os.utime(path, ns=(then, then))
    return path


def fill(path, n=2, **kw) -> tuple[list[float], bool]:
    m = jitlab.load(path, **kw)
    out = torch.zeros(n)
    m.fill(out, n)
    return out.tolist(), m.build.cached


@pytest.fixture
def snippet(tmp_path, cache):
    """A kernel-only C++ snippet whose weights come from an include inside an initializer list."""
    edit(tmp_path / "cfg.h", "#define BIAS 0\n")
    edit(tmp_path / "weights.inc", "1.0f, 2.0f\n")
    return edit(tmp_path / "fill.cpp", FILL)


def test_initializer_list_include_edit_rebuilds(snippet):
    """An edit of a header included inside an initializer list gives the new values, and a revert is a hit."""
    assert fill(snippet) == ([1.0, 2.0], False)
    assert fill(snippet) == ([1.0, 2.0], True)
    edit(snippet.parent / "weights.inc", "5.0f, 6.0f\n")
    assert fill(snippet) == ([5.0, 6.0], False)
    edit(snippet.parent / "weights.inc", "1.0f, 2.0f\n")
    assert fill(snippet) == ([1.0, 2.0], True)


def test_function_body_include_edit_rebuilds(tmp_path, cache):
    """A header included inside a function body (an X-macro) is part of what a hit checks."""
    edit(tmp_path / "body.inc", "acc += 1.0f;\n")
    src = edit(tmp_path / "x.cpp", 'void fill(float* out, int n) {\n  float acc = 0;\n#include "body.inc"\n'
                                   '  for (int i = 0; i < n; ++i) out[i] = acc;\n}\n')
    assert fill(src, 1) == ([1.0], False)
    edit(tmp_path / "body.inc", "acc += 7.0f;\n")
    assert fill(src, 1) == ([7.0], False)


def test_computed_include_edit_rebuilds(tmp_path, cache):
    """``#define CFG "cfg2.h"`` then ``#include CFG``: an edit of cfg2.h is seen."""
    edit(tmp_path / "cfg2.h", "#define BIAS 3\n")
    src = edit(tmp_path / "c.cpp", '#define CFG "cfg2.h"\n#include CFG\n'
                                   'void fill(float* out, int n) { for (int i = 0; i < n; ++i) out[i] = BIAS; }\n')
    assert fill(src, 1) == ([3.0], False)
    edit(tmp_path / "cfg2.h", "#define BIAS 4\n")
    assert fill(src, 1) == ([4.0], False)


def test_include_flag_header_edit_rebuilds(snippet):
    """A header given with ``-include`` in cflags is checked on every hit."""
    forced = edit(snippet.parent / "forced.h", "#define BIAS 10\n")
    src = _nobias(snippet)
    assert fill(src, cflags=["-include", str(forced)]) == ([11.0, 12.0], False)
    edit(forced, "#define BIAS 20\n")
    assert fill(src, cflags=["-include", str(forced)]) == ([21.0, 22.0], False)


@pytest.mark.parametrize("variable", ["CPLUS_INCLUDE_PATH", "CPATH"])
def test_environment_include_path_header_edit_rebuilds(tmp_path, cache, monkeypatch, variable):
    """A header found through CPLUS_INCLUDE_PATH or CPATH is recorded and checked like any other."""
    edit(tmp_path / "env" / "envcfg.h", "#define BIAS 2\n")
    monkeypatch.setenv(variable, str(tmp_path / "env"))
    src = edit(tmp_path / "s" / "e.cpp", '#include <envcfg.h>\n'
                                         'void fill(float* out, int n) { for (int i = 0; i < n; ++i) out[i] = BIAS; }\n')
    assert fill(src, 1) == ([2.0], False)
    assert fill(src, 1) == ([2.0], True)
    edit(tmp_path / "env" / "envcfg.h", "#define BIAS 9\n")
    assert fill(src, 1) == ([9.0], False)


def test_ldflags_static_library_rebuilt_relinks(tmp_path, cache):
    """A static library named in ldflags and rebuilt is linked again: the new library's values."""
    lib = tmp_path / "lib" / "libw.a"

    def make_lib(value: float):
        lib.parent.mkdir(exist_ok=True)
        c = edit(tmp_path / "lib" / "w.cpp", f'extern "C" float weight() {{ return {value}f; }}\n')
        subprocess.run([toolchain.cxx_path(), "-fPIC", "-c", str(c), "-o", str(c.with_suffix(".o"))], check=True)
        lib.unlink(missing_ok=True)
        subprocess.run(["ar", "rcs", str(lib), str(c.with_suffix(".o"))], check=True)
        then = time.time_ns() - 1_000_000_000
        os.utime(lib, ns=(then, then))

    make_lib(3.0)
    src = edit(tmp_path / "l.cpp", 'extern "C" float weight();\n'
                                   'void fill(float* out, int n) { for (int i = 0; i < n; ++i) out[i] = weight(); }\n')
    assert fill(src, 1, ldflags=[str(lib)]) == ([3.0], False)
    assert fill(src, 1, ldflags=[str(lib)]) == ([3.0], True)
    make_lib(8.0)
    assert fill(src, 1, ldflags=[str(lib)]) == ([8.0], False)


def wrapper(path: Path, body: str) -> Path:
    """A compiler wrapper script: ``--version`` is the real compiler's, ``body`` runs before it."""
    path.write_text(f"#!/bin/sh\n{body}\nexec {REAL_CXX} \"$@\"\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_cxx_wrapper_with_the_same_version_is_a_new_toolchain(snippet, monkeypatch):
    """CXX pointing at a wrapper that prints the same --version but adds a define builds anew."""
    monkeypatch.setenv("CXX", str(wrapper(snippet.parent / "cxx1", 'set -- "$@" -DBIAS=0')))
    assert fill(_nobias(snippet)) == ([1.0, 2.0], False)
    monkeypatch.setenv("CXX", str(wrapper(snippet.parent / "cxx2", 'set -- "$@" -DBIAS=100')))
    assert fill(_nobias(snippet)) == ([101.0, 102.0], False)


def _nobias(snippet: Path) -> Path:
    return edit(snippet.parent / "nobias.cpp", FILL.replace('#include "cfg.h"\n', ""))


def test_header_edited_during_its_build_then_reverted_is_rebuilt(snippet, monkeypatch):
    """A header that changes while its build runs leaves an entry that is never a hit: the revert rebuilds."""
    header = snippet.parent / "cfg.h"
    once = snippet.parent / "once"
    once.touch()
    # The compiler wrapper saves BIAS 5 over the header the key hashed (BIAS 0) before compiling, once.
    monkeypatch.setenv("CXX", str(wrapper(snippet.parent / "cxx", f'[ -f {once} ] && rm {once} && '
                                          f'printf "#define BIAS 5\\n" > {header}')))
    assert fill(snippet) == ([6.0, 7.0], False)  # built with the header as it was during the build
    assert header.read_text() == "#define BIAS 5\n"
    assert fill(snippet) == ([6.0, 7.0], False)  # the key of BIAS 5: built anew
    edit(header, "#define BIAS 0\n")
    assert fill(snippet) == ([1.0, 2.0], False)  # the revert: the first entry holds BIAS 5's code, not used


@pytest.mark.slow
def test_unchanged_build_in_a_new_process_is_a_hit(snippet):
    """After a build, a new process loads the same snippet without compiling anything."""
    fill(snippet)
    code = f"import jitlab; print(jitlab.load({str(snippet)!r}).build.cached)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert out.stdout.strip().splitlines()[-1] == "True", out.stderr


def test_a_malformed_dependency_record_is_a_miss(snippet):
    """A manifest whose dependency record is malformed is rebuilt, never a crash."""
    first = jitlab.load(snippet).build
    manifest = cache.read_manifest(first.folder)
    cache.write_json(first.folder / cache.MANIFEST, {**manifest, "deps": [["/nowhere", "x"]]})
    assert fill(snippet) == ([1.0, 2.0], False)


@pytest.fixture
def cuda_snippet(tmp_path, cache):
    edit(tmp_path / "weights.inc", "1.0f, 2.0f\n")
    return edit(tmp_path / "scale.cu", SCALE)


@pytest.mark.slow
@needs_nvcc
@pytest.mark.parametrize("engine", ["nvrtc", "nvcc"])
def test_cuda_initializer_list_include_edit_rebuilds(cuda_snippet, engine):
    """NVRTC and nvcc compile-only builds: an initializer-list include's edit rebuilds; a revert is a hit."""
    def build():
        return jitlab.build(cuda_snippet, compile_only=True, arch="sm_90", engine=engine)

    first = build()
    assert not first.cached and first.engine == engine and build().cached
    edit(cuda_snippet.parent / "weights.inc", "3.0f, 4.0f\n")
    second = build()
    assert not second.cached and second.artifact.read_bytes() != first.artifact.read_bytes()
    edit(cuda_snippet.parent / "weights.inc", "1.0f, 2.0f\n")
    again = build()
    assert again.cached and again.artifact.read_bytes() == first.artifact.read_bytes()


def test_nvrtc_computed_include_edit_rebuilds(tmp_path, cache):
    """NVRTC: ``#define CFG "kcfg.h"`` then ``#include CFG`` inside a kernel body; an edit of kcfg.h rebuilds."""
    edit(tmp_path / "kcfg.h", "x[i] *= 2.0f;\n")
    src = edit(tmp_path / "k.cu", '#define CFG "kcfg.h"\n__global__ void scale(float* x, int n) {\n'
                                  '    int i = threadIdx.x;\n    if (i < n) {\n#include CFG\n    }\n}\n')
    first = jitlab.build(src, compile_only=True, arch="sm_90", engine="nvrtc")
    edit(tmp_path / "kcfg.h", "x[i] += 3.0f;\n")
    second = jitlab.build(src, compile_only=True, arch="sm_90", engine="nvrtc")
    assert not second.cached and second.artifact.read_bytes() != first.artifact.read_bytes()


@needs_nvcc
def test_headers_beside_an_nvcc_wrapper_script_are_still_the_users(tmp_path, cache, monkeypatch):
    """nvcc found on PATH as a wrapper script (``~/bin/nvcc`` that execs the toolkit's): the folder above it is
    not taken for the CUDA toolkit, so an edit of a header under it (the user's project) rebuilds."""
    real = Path(toolchain.nvcc_path()).resolve()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvcc"
    script.write_text(f"#!/bin/sh\nexec {real} \"$@\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    for name in ("CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert toolchain.nvcc_path() == str(script)
    header = edit(tmp_path / "project" / "kcfg.h", "x[i] *= 2.0f;\n")
    src = edit(header.parent / "k.cu", '__global__ void scale(float* x, int n) {\n    int i = threadIdx.x;\n'
                                        '    if (i < n) {\n#include "kcfg.h"\n    }\n}\n')
    first = jitlab.build(src, compile_only=True, arch="sm_90", engine="nvrtc")
    assert any(str(header) in str(row) for row in first.manifest.deps)  # recorded: the user's, not the toolkit's
    edit(header, "x[i] += 3.0f;\n")
    second = jitlab.build(src, compile_only=True, arch="sm_90", engine="nvrtc")
    assert not second.cached and second.artifact.read_bytes() != first.artifact.read_bytes()


@pytest.mark.slow
@needs_nvcc
def test_cuda_include_flag_header_edit_rebuilds(cuda_snippet):
    """nvcc with ``-include`` in cuda_cflags: the forced header's edit changes the kernel."""
    forced = edit(cuda_snippet.parent / "forced.cuh", "#define EXTRA 0\n")
    src = edit(cuda_snippet.parent / "s2.cu", SCALE.replace("x[i] *= W[i % 2];", "x[i] *= W[i % 2] + EXTRA;"))

    def build():
        return jitlab.build(src, compile_only=True, arch="sm_90", cuda_cflags=["-include", str(forced)])

    first = build()
    assert build().cached
    edit(forced, "#define EXTRA 2.5f\n")
    second = build()
    assert not second.cached and second.artifact.read_bytes() != first.artifact.read_bytes()


@pytest.mark.slow
def test_torch_style_initializer_list_include_edit_rebuilds(tmp_path, cache):
    """A torch-style host unit (object cache): an initializer-list include's edit gives the new values."""
    edit(tmp_path / "tw.inc", "1.0f\n")
    src = edit(tmp_path / "addw.cpp", '#include <torch/extension.h>\ntorch::Tensor addw(torch::Tensor x) {\n'
                                      '    static const float W[] = {\n#include "tw.inc"\n    };\n    return x + W[0];\n}\n')
    assert jitlab.load(src).addw(torch.zeros(2)).tolist() == [1.0, 1.0]
    edit(tmp_path / "tw.inc", "4.0f\n")
    m = jitlab.load(src)
    assert not m.build.cached and m.addw(torch.zeros(2)).tolist() == [4.0, 4.0]
    edit(tmp_path / "tw.inc", "1.0f\n")
    m = jitlab.load(src)
    assert m.build.cached and m.addw(torch.zeros(2)).tolist() == [1.0, 1.0]


def test_the_toolchains_headers_are_left_by_name_and_the_users_resolved_and_kept(tmp_path, monkeypatch):
    """A depfile that lists all of torch's headers (clang's, with its precompiled set) costs no system call per
    header: only the user's file is resolved and recorded; a toolchain folder given as the snippet's own (``-I``)
    is still checked."""
    from jitlab.jit import deps

    include = Path(torch.__file__).parent / "include"
    torch_headers = [str(p) for _, p in zip(range(2000), include.rglob("*.h"))]
    mine = tmp_path / "mine.h"
    mine.write_text("#pragma once\n")
    deps.worth_checking([str(mine)])  # the toolchain's folders, found once per process
    resolved = []
    real = os.path.realpath
    monkeypatch.setattr(os.path, "realpath", lambda p, *a, **k: resolved.append(p) or real(p, *a, **k))
    assert deps.worth_checking([*torch_headers, str(mine)]) == [real(mine)]
    assert str(mine) in map(str, resolved) and not [p for p in resolved if str(p).startswith(str(include))]
    first = Path(torch_headers[0])
    assert deps.worth_checking([str(first)], keep=[str(first.parent)]) == [real(first)]
