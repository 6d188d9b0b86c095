"""The NVRTC engine on the GPU: every kernel-only snippet gets the same verdicts as with nvcc, the
typed call behaves the same (launch errors, shared memory, streams), printf reaches a notebook cell,
and a new process loads the cached CUBIN."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import end_shell

import jitlab
from jitlab.errors import LaunchError
from jitlab.jit import builder
from jitlab.jit.engines import nvrtc
from jitlab.jit.flags import Options
from jitlab.worker import jobs

pytestmark = pytest.mark.gpu
KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def _nvrtc_snippets() -> list[Path]:
    """The kernel-only .cu snippets in kernels/ and kernels/exercises/ that NVRTC can take."""
    out = []
    for p in sorted([*KERNELS.glob("*.cu"), *(KERNELS / "exercises").glob("*.cu")]):
        plan = builder.prepare(p, Options(arch=["sm_90"]))[0]
        if nvrtc.unsuitable(plan) is None:
            out.append(p)
    return out


SNIPPETS = _nvrtc_snippets()


def test_most_kernel_only_snippets_take_nvrtc():
    """Shipped kernel-only snippets (saxpy, hello, row_sum, ...) take NVRTC; ones with host launchers (add2) do not."""
    names = {p.name for p in SNIPPETS}
    assert {"saxpy.cu", "hello.cu", "scale_half.cu", "row_sum.cu", "warp_max.cu"} <= names
    assert "add2.cu" not in names and "launch_grid.cu" not in names  # host launchers: nvcc


@pytest.mark.parametrize("path", SNIPPETS, ids=[p.name for p in SNIPPETS])
def test_same_verdicts_on_both_engines(path):
    """Checked against its reference in a worker, each engine gives the same outcome (exercises'
    starting code fails the same way)."""
    a = jitlab.check(path, engine="nvrtc")
    b = jitlab.check(path, engine="nvcc")
    assert a.category == b.category, (str(a), str(b))
    assert [v.passed for v in a.verdicts] == [v.passed for v in b.verdicts]


def test_loads_with_nvrtc_and_computes():
    """saxpy loads with NVRTC by default and computes 2.5 * x + y as torch does."""
    m = jitlab.load(KERNELS / "saxpy.cu")
    assert m.build.engine == "nvrtc" and "nvrtc" in repr(m)
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    want = 2.5 * x + y
    m.saxpy(y, x, 2.5, 1000, grid=4, block=256)
    torch.testing.assert_close(y, want)


def test_launch_error_names_the_kernel_and_configuration():
    """A launch the driver refuses (16 MiB of shared memory) is a LaunchError naming kernel and configuration."""
    m = jitlab.load(KERNELS / "saxpy.cu", engine="nvrtc")
    x = torch.randn(8, device="cuda")
    # More dynamic shared memory than any GPU has: the driver refuses the launch.
    with pytest.raises(LaunchError, match=r"saxpy<<<grid=\(1, 1, 1\), block=\(8, 1, 1\), shared_mem=16777216>>> failed: "
                                          r"CUDA_ERROR_INVALID_VALUE"):
        m.saxpy(x, x, 1.0, 8, grid=1, block=8, shared_mem=1 << 24)


def test_dynamic_shared_memory_and_a_side_stream(tmp_path):
    """An NVRTC kernel using dynamic shared memory, launched on a side stream, reverses its input."""
    p = tmp_path / "rev.cu"
    p.write_text("""__global__ void reverse(float* y, const float* x, int n) {
    extern __shared__ float tile[];
    int i = threadIdx.x;
    if (i < n) tile[i] = x[i];
    __syncthreads();
    if (i < n) y[i] = tile[n - 1 - i];
}
""")
    m = jitlab.load(p, engine="nvrtc")
    x = torch.randn(256, device="cuda")
    y = torch.empty_like(x)
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        m.reverse(y, x, 256, grid=1, block=256, shared_mem=256 * 4)
    s.synchronize()
    torch.testing.assert_close(y, x.flip(0))


@pytest.mark.parametrize("engine", ["nvrtc", "nvcc"])
def test_dynamic_shared_memory_past_48_kb(tmp_path, engine):
    """shared_mem=96 KB works on both engines: the launcher opts the kernel in, as CUDA requires past 48 KB."""
    p = tmp_path / f"big_{engine}.cu"
    p.write_text("""__global__ void reverse_big(float* y, const float* x, int n) {
    extern __shared__ float tile[];
    for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = x[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x) y[i] = tile[n - 1 - i];
}
""")
    m = jitlab.load(p, engine=engine)
    n = 24 * 1024  # 96 KB of floats: past the 48 KB default, within every GPU since Volta's opt-in limit
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    m.reverse_big(y, x, n, grid=1, block=256, shared_mem=n * 4)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, x.flip(0))


def test_printf_is_forwarded(capfd):
    """Device printf from an NVRTC build reaches this process's stdout, once per thread."""
    m = jitlab.load(KERNELS / "hello.cu", engine="nvrtc")
    m.kernel(grid=1, block=2)
    torch.cuda.synchronize()
    assert "hello worldhello world" in capfd.readouterr().out


def test_printf_reaches_a_notebook_cell(tmp_path):
    """In a Jupyter kernel, device printf from an NVRTC build shows in the cell's output."""
    import nbclient
    import nbformat

    root = Path(__file__).resolve().parent.parent
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        f"import sys; sys.path.insert(0, {str(root)!r})\nimport jitlab\n"
        f"m = jitlab.load({str(KERNELS / 'hello.cu')!r}, engine='nvrtc')\nprint(m.build.engine)\nm.kernel(grid=1, block=3)")])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    text = "".join(o.get("text", "") for o in nb.cells[0].outputs if o.get("output_type") == "stream")
    assert "nvrtc" in text and "hello world" * 3 in text


def test_new_process_loads_the_cached_cubin(tmp_path):
    """A new process loads the cached NVRTC CUBIN (a cache hit) and computes with it."""
    p = tmp_path / "scale.cu"
    p.write_text("__global__ void scale(float* y, float a, int n) {\n"
                 "  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] *= a;\n}\n")
    assert not jitlab.load(p, engine="nvrtc").build.cached
    code = (f"import torch, jitlab; m = jitlab.load({str(p)!r}); y = torch.ones(10, device='cuda'); "
            f"m.scale(y, 3.0, 10, grid=1, block=32); print(m.build.engine, m.build.cached, y.sum().item())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["nvrtc", "True", "30.0"]


def test_launch_from_a_thread_that_made_no_cuda_call():
    """The driver launch needs the CUDA context current in the calling thread: a thread that has
    made no CUDA call of its own still launches (the launcher makes the context current once)."""
    import threading

    m = jitlab.load(KERNELS / "saxpy.cu", engine="nvrtc")
    x, y = torch.randn(1000, device="cuda"), torch.randn(1000, device="cuda")
    want = 3.0 * x + y
    errors = []

    def work():
        try:
            m.saxpy(y, x, 3.0, 1000, grid=4, block=256)
        except Exception as e:  # reported below, in the test's thread
            errors.append(e)

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert not errors, errors
    torch.cuda.synchronize()
    torch.testing.assert_close(y, want)


ASSERTS = """#include <cassert>
__global__ void positive(float* y, const float* x, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        assert(x[i] >= 0.0f);
        y[i] = x[i];
    }
}
"""
ASSERTS_REF = """import torch
SIZES = [256]
def inputs(size, seed, device):
    g = torch.Generator(device="cpu").manual_seed(seed)
    return {"x": torch.randn(size, generator=g).to(device)}
def reference(inp):
    return inp["x"].clone()
def run(m, inp):
    y = torch.empty_like(inp["x"])
    m.positive(y, inp["x"], y.numel(), grid=1, block=256)
    return y
"""


def test_debug_build_on_nvrtc_reports_the_device_assert(tmp_path):
    """``debug=True`` on NVRTC (``-G``, asserts on): the failing assert is reported, isolated, as a
    device assert at the snippet's line; a debug load computes right where the assert holds."""
    p = tmp_path / "positive.cu"
    p.write_text(ASSERTS)
    (tmp_path / "positive.ref.py").write_text(ASSERTS_REF)
    m = jitlab.load(p, engine="nvrtc", debug=True)
    assert m.build.engine == "nvrtc"
    x = torch.rand(256, device="cuda")
    y = torch.empty_like(x)
    m.positive(y, x, 256, grid=1, block=256)
    torch.testing.assert_close(y, x)
    out = jitlab.check(p, engine="nvrtc", debug=True, timeout=120)
    assert out.category == jobs.ASSERT, str(out)
    assert "positive.cu:5" in (out.where or "") + out.output, str(out)


def test_cuda_magic_check_builds_with_nvrtc(cache, tmp_path, monkeypatch, capsys):
    """``%%cuda NAME --check`` on a kernel-only cell: NVRTC builds it and the checker's table is printed."""
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.chdir(tmp_path)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "positive.ref.py").write_text(ASSERTS_REF.replace("torch.randn", "torch.rand"))
    shell = InteractiveShell.instance()
    try:
        shell.run_line_magic("load_ext", "jitlab")
        shell.run_cell_magic("cuda", "positive --check", ASSERTS)
        out = capsys.readouterr().out
        assert "ok" in out and "verdict" in out, out
        again = jitlab.load(tmp_path / "kernels" / "positive.cu").build
        assert again.cached and again.engine == "nvrtc"
    finally:
        end_shell()
