"""Cells that need a GPU on a machine without one (jitlab/notebook/nogpu.py): which errors count, which
names a cell binds, and, in an IPython shell with ``%load_ext jitlab``, one line per such cell and
per cell that uses what it did not define, never a traceback; every other error keeps its traceback."""

from __future__ import annotations

import pytest
import torch

from jitlab.errors import ToolchainError
from jitlab.notebook import nogpu

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")


def _chained() -> Exception:
    try:
        try:
            raise ToolchainError("no CUDA GPU found, so there is no arch to build for")
        except ToolchainError as inner:
            raise RuntimeError("could not build the snippet") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("exc", [
    ToolchainError("no CUDA GPU found, so there is no arch to build for: name one"),
    AssertionError("Torch not compiled with CUDA enabled"),
    RuntimeError("Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU"),
    RuntimeError("CUDA error: No CUDA GPUs are available"),
    _chained(),
], ids=["jitlab", "cpu-torch", "no-driver", "no-gpus", "chained"])
def test_errors_that_mean_no_gpu_are_recognised(exc):
    """jitlab's and torch's "no GPU here" errors, also as the cause of another error, count."""
    assert nogpu.needs_gpu(exc)


@pytest.mark.parametrize("exc", [
    ToolchainError("nvcc not found: install the CUDA toolkit"),
    AssertionError("Torch not compiled with CUDA enabled, or so they say"),
    RuntimeError("CUDA error: out of memory"),
    NameError("name 'x' is not defined"),
    ZeroDivisionError("division by zero"),
], ids=["other-toolchain", "other-assert", "oom", "name", "zero"])
def test_other_errors_are_not_taken_for_no_gpu(exc):
    """Errors that only look alike (another toolchain error, an out-of-memory) are not swallowed."""
    assert not nogpu.needs_gpu(exc)


def test_bound_names_are_the_cells_own_top_level_names():
    """Assignments, def, class, imports, loop targets and a %%cuda cell's NAME; not a function's locals."""
    src = ("import os, numpy as np\nfrom math import pi\nx = 1\na, b = 2, 3\ndef f(z):\n    local = z\n"
           "class C:\n    attr = 1\nfor i in range(2):\n    j = [t for t in range(i)]\n"
           "get_ipython().run_cell_magic('cuda', '-D F=2 vadd --check', 'body')\nd[0] = 1\n")
    assert nogpu.bound_names(src) == ["np", "os", "pi", "x", "a", "b", "f", "C", "i", "j", "vadd"]
    assert nogpu.bound_names("def broken(:\n") == []


@pytest.fixture
def shell(ip, capsys, tmp_path):
    """ip (IPython with %load_ext jitlab) in a folder holding k.cu; run(cell) → (result, what the cell printed)."""
    (tmp_path / "k.cu").write_text("__global__ void k(float* y) { y[0] = 1; }\n")  # device="cuda": a GPU's

    def run(cell):
        capsys.readouterr()
        result = ip.run_cell(cell, store_history=True)
        return result, capsys.readouterr().out
    return run


@no_gpu
def test_a_cell_that_needs_a_gpu_prints_one_line_and_counts_as_done(shell):
    """jitlab's no-GPU error is one line naming what the cell defines and how to get a GPU; the cell
    ends as done, so a Run All goes on."""
    result, out = shell("import jitlab\nx = jitlab.load('k.cu', device='cuda')\ny = 1")
    assert out.count("\n") == 1 and out.startswith(nogpu.PREFIX)
    assert "defines jitlab, x, y" in out and "Runtime → Change runtime type → T4 GPU" in out
    assert "Traceback" not in out and result.success


@no_gpu
def test_a_name_the_gpu_cell_left_undefined_is_one_line_naming_that_cell(shell):
    """A later NameError for a name the GPU cell would have bound names that cell, and that cell's
    names join the list (no cascade of tracebacks)."""
    shell("import jitlab\nx = jitlab.load('k.cu', device='cuda')")
    result, out = shell("z = x + 1")
    assert out.count("\n") == 1 and out.startswith(nogpu.PREFIX)
    assert "`x` comes from cell [1] (`import jitlab`)" in out and result.success
    _, out = shell("print(z)")
    assert "`z` comes from cell [2] (`z = x + 1`)" in out and "Traceback" not in out


@no_gpu
def test_other_errors_keep_their_traceback(shell):
    """A ZeroDivisionError, or a NameError for a name no GPU cell would bind, is IPython's traceback
    and a failed cell."""
    result, out = shell("1 / 0")
    assert "ZeroDivisionError" in out and "Traceback" in out and nogpu.PREFIX not in out and not result.success
    result, out = shell("print(never_defined)")
    assert "NameError" in out and nogpu.PREFIX not in out and not result.success


@no_gpu
def test_a_cuda_cell_without_a_gpu_is_one_line_and_its_name_is_remembered(shell, tmp_path):
    """`%%cuda NAME --bench --device cuda` saves the cell and says in one line what it does on a GPU and how to
    compile it here; calling NAME later is one line naming the %%cuda cell."""
    _, out = shell("%%cuda twice --bench --device cuda\n__global__ void twice(float* y) { y[0] *= 2; }")
    assert out.count("\n") == 1 and out.startswith(nogpu.PREFIX)
    assert "%%cuda twice builds it and binds twice and --bench runs it" in out
    assert "`%%cuda twice --device cuda --compile-only` compiles it" in out and (tmp_path / "kernels" / "twice.cu").is_file()
    result, out = shell("twice(grid=1, block=1)")
    assert "`twice` comes from cell [1] (`%%cuda twice --bench --device cuda`)" in out and result.success


@pytest.mark.slow
@no_gpu
def test_a_cuda_check_cell_without_a_gpu_runs_on_the_cpu_emulator(shell, tmp_path):
    """`%%cuda NAME --check` without a GPU builds the kernel for the CPU emulator, binds NAME (CPU tensors) and
    checks it against kernels/NAME.ref.py there, saying so and giving no time."""
    (tmp_path / "kernels").mkdir(exist_ok=True)
    (tmp_path / "kernels" / "thrice.ref.py").write_text(
        "import torch\nSIZES = [1, 300]\n"
        "def inputs(size, seed, device):\n    return {'y': torch.arange(size, dtype=torch.float32, device=device)}\n"
        "def reference(inp):\n    return inp['y'] * 3\n"
        "def run(k, inp):\n    y = inp['y'].clone()\n    k.thrice(y, y.numel(), grid=(y.numel() + 127) // 128, block=128)\n"
        "    return y\n")
    _, out = shell("%%cuda thrice --check\n__global__ void thrice(float* y, int n) {\n"
                   "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n    if (i < n) y[i] *= 3;\n}")
    assert "for the CPU emulator" in out and "PASS" in out and "run on the CPU emulator" in out and "no timing" in out
    assert nogpu.PREFIX not in out
    result, out = shell("import torch\ny = torch.ones(4)\nthrice(y, 4, grid=1, block=4)\nprint(y.tolist())")
    assert "[3.0, 3.0, 3.0, 3.0]" in out and result.success
