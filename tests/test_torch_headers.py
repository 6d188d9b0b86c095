"""torch's headers as jitlab's units see them: the light scalar headers, and the one-line error for torch's
CUDA headers on a CPU build of torch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import jitlab
from jitlab import CompileError
from jitlab.jit.engines import torch_headers


def test_light_headers_are_torchs_without_ostream():
    """The light Half.h/BFloat16.h are torch's text with <iosfwd> for <ostream> and operator<< declared:
    every other line is torch's own."""
    util = Path(torch.__file__).parent / "include" / "torch" / "headeronly" / "util"
    for name in torch_headers.LIGHT_TYPES:
        original = (util / f"{name}.h").read_text()
        light = torch_headers.light_text(name, original)
        assert light is not None and "<ostream>" not in light and "#include <iosfwd>" in light
        assert f"inline std::ostream& operator<<(std::ostream& out, const {name}& value);" in light
        kept = set(original.splitlines()) - {"#include <ostream>", "  out << (float)value;", "  return out;", "}"}
        assert kept - set(light.splitlines()) == {f"inline std::ostream& operator<<(std::ostream& out, const {name}& value) {{"}


def test_unexpected_header_text_gets_no_light_copy():
    """A header whose operator<< is not the expected one is left to torch (None): never a wrong copy."""
    assert torch_headers.light_text("Half", "#include <ostream>\nstruct Half {};\n") is None


def test_light_dir_is_made_again_when_removed(tmp_path, monkeypatch):
    """The light folder lives in the precompiled-header folder and is rewritten if a file is gone."""
    monkeypatch.setenv("JITLAB_PCH_DIR", str(tmp_path))
    root = torch_headers.light_scalar_dir()
    half = root / "torch" / "headeronly" / "util" / "Half.h"
    assert root.parent == tmp_path and half.is_file()
    half.unlink()
    assert torch_headers.light_scalar_dir() == root and half.is_file()


def test_cuda_torch_includes_are_found_at_their_line():
    """Each c10/cuda or ATen/cuda include is found with its line and column; others are not."""
    text = '#include <torch/extension.h>\n  #include "c10/cuda/CUDAGuard.h"\n#include <ATen/cuda/CUDAContext.h>\n'
    assert torch_headers.cuda_torch_includes(text) == [(2, 12, "c10/cuda/CUDAGuard.h"),
                                                       (3, 10, "ATen/cuda/CUDAContext.h")]


@pytest.mark.skipif(torch.version.cuda is not None, reason="a CPU build of torch")
def test_cpu_torch_cuda_header_is_one_line_at_the_users_line(write, cache):
    """On a CPU torch, a snippet including c10/cuda/CUDAGuard.h fails before compiling, in one line at
    its include: the header, that torch is a CPU build without its CUDA headers, and what to do."""
    path = write("guarded.cu", """
        #include <torch/extension.h>
        #include <c10/cuda/CUDAGuard.h>
        __global__ void k(float* y) { y[0] = 1; }
        torch::Tensor f(torch::Tensor x) {
          const c10::cuda::CUDAGuard guard(x.device());
          k<<<1, 1>>>(x.data_ptr<float>());
          return x;
        }
        """)
    with pytest.raises(CompileError) as info:
        jitlab.build(path, compile_only=True, arch="sm_90")
    err = info.value
    assert [(d.line, d.column) for d in err.diagnostics] == [(2, 11)]
    message = err.diagnostics[0].message
    assert message.startswith("includes <c10/cuda/CUDAGuard.h>, but the installed torch")
    assert "is a CPU build without its CUDA headers (c10/cuda/impl/cuda_cmake_macros.h is missing)" in message
    assert message.endswith("compile it with a CUDA build of torch, or on a GPU machine")
    assert "guarded.cu:2:11: error: includes <c10/cuda/CUDAGuard.h>" in str(err)
    assert "No such file" not in str(err) and not (cache / "objects").exists()
