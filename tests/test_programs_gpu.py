"""Whole CUDA programs on the GPU: device printf in a terminal (`jitlab exec`) and in a notebook cell
(`%%cuda` with main), a hanging kernel stopped at the timeout, and compute-sanitizer finding a planted
out-of-bounds write at its line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import jitlab
from jitlab.worker.execute import run_program

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parent.parent

HELLO = """\
#include <cstdio>
#include <cstdlib>
__global__ void hello(int tag) { printf("hello from thread %d tag %d\\n", threadIdx.x, tag); }
int main(int argc, char** argv) {
  int tag = argc > 1 ? std::atoi(argv[1]) : 0;
  std::printf("host before\\n");
  std::fflush(stdout);
  hello<<<1, 3>>>(tag);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("host after: %s\\n", cudaGetErrorString(e));
  return e == cudaSuccess ? 0 : 1;
}
"""

HANG = """\
__global__ void spin(volatile int* flag) { while (*flag == 0) { } }
int main() {
  int* flag; cudaMalloc(&flag, sizeof(int)); cudaMemset(flag, 0, sizeof(int));
  spin<<<1, 1>>>(flag);
  return (int)cudaDeviceSynchronize();
}
"""

OOB = """\
#include <cstdio>
__global__ void fill(float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i <= n) y[i] = 1.0f;  // planted: i == n writes one past the end
}
int main() {
  const int n = 256;
  float* y;
  cudaMalloc(&y, n * sizeof(float));
  fill<<<2, 256>>>(y, n);
  cudaError_t e = cudaDeviceSynchronize();
  std::printf("sync: %s\\n", cudaGetErrorString(e));
  cudaFree(y);
  return 0;
}
"""


def test_exec_prints_device_printf_in_a_terminal(cache, tmp_path):
    """`python -m jitlab exec prog.cu -- 7` prints the host and device lines in order and exits 0."""
    p = tmp_path / "hello.cu"
    p.write_text(HELLO)
    r = subprocess.run([sys.executable, "-m", "jitlab", "exec", str(p), "--", "7"], capture_output=True, text=True,
                       cwd=tmp_path, env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "host before" and lines[-1] == "host after: no error"
    assert sorted(lines[1:-1]) == [f"hello from thread {i} tag 7" for i in range(3)]


def test_cuda_cell_with_main_prints_in_a_notebook(cache, tmp_path):
    """In a Jupyter kernel, a %%cuda cell with main runs the program and its printf shows in the cell."""
    import nbclient
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell(f"import sys; sys.path.insert(0, {str(ROOT)!r})\n%load_ext jitlab"),
        nbformat.v4.new_code_cell('%%cuda hello_prog --args "5"\n' + HELLO),
        nbformat.v4.new_code_cell("print(hello_prog.returncode)"),
    ])
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = "".join(o.get("text", "") for o in nb.cells[1].outputs if o.get("output_type") == "stream")
    assert "host before" in text and "host after: no error" in text
    assert all(f"hello from thread {i} tag 5" in text for i in range(3)), text
    assert "".join(o.get("text", "") for o in nb.cells[2].outputs).strip() == "0"
    assert (tmp_path / "kernels" / "hello_prog.cu").read_text() == HELLO


def test_hanging_kernel_program_is_stopped(cache, tmp_path):
    """A program whose kernel never ends is killed at its timeout; the next program runs normally."""
    p = tmp_path / "hang.cu"
    p.write_text(HANG)
    run = run_program(p, timeout=10, echo=False)
    assert run.timed_out and run.seconds < 30 and "timeout" in run.status
    ok = tmp_path / "hello.cu"
    ok.write_text(HELLO)
    assert run_program(ok, echo=False).ok


def test_sanitizer_finds_the_planted_write_at_its_line(cache, tmp_path):
    """compute-sanitizer on a program reports the out-of-bounds write at the program's own line."""
    p = tmp_path / "oob.cu"
    p.write_text(OOB)
    report = jitlab.sanitize(p)
    assert not report.clean
    f = report.findings[0]
    assert "write" in f.kind.lower() and f.kernel == "fill"
    assert Path(f.file).name == "oob.cu" and f.line == 4, str(report)
    assert "planted" in f.source


def test_profile_runs_on_a_program(cache, tmp_path):
    """`jitlab.profile` on a program profiles its kernels, or says why the counters cannot be read."""
    p = tmp_path / "hello.cu"
    p.write_text(HELLO)
    prof = jitlab.profile(p)
    assert (prof.available and prof.kernels[0].kernel == "hello") or "counters" in prof.reason, prof.output[-2000:]
