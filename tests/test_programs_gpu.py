"""Whole CUDA programs on the GPU: device printf in a terminal (`jitlab exec`) and in a notebook cell
(`%%cuda` with main), a hanging kernel stopped at the timeout, compute-sanitizer finding a planted
out-of-bounds write at its line, and the kernels loaded from an NVRTC CUBIN (a kernel edit keeps the
executable; constants, templates and launch errors as with nvcc; dynamic parallelism on nvcc)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import jitlab
from jitlab.worker.execute import build_program, run_program

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


@pytest.mark.parametrize("engine, built", [("auto", "nvrtc-program"), ("nvcc", "nvcc")])
def test_sanitizer_finds_the_planted_write_at_its_line(cache, tmp_path, engine, built):
    """compute-sanitizer on a program reports the out-of-bounds write at the program's own line, its kernels
    loaded from the CUBIN (auto) or held by nvcc's executable."""
    p = tmp_path / "oob.cu"
    p.write_text(OOB)
    assert build_program(p, engine=engine).engine == built
    report = jitlab.sanitize(p, engine=engine)
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


# ---- kernels from an NVRTC CUBIN (jitlab/jit/engines/nvrtc_program.py) ----------------------------------

FEATURES = (ROOT / "tests" / "fixtures" / "programs" / "features.cu").read_text()

BAD_LAUNCH = """\
#include <cstdio>
__global__ void k(int* x) { x[threadIdx.x] = threadIdx.x; }
int main() {
  int* x;
  cudaMalloc(&x, 4096 * sizeof(int));
  k<<<1, 4096>>>(x);  // more threads than a block holds
  std::printf("bad: %s\\n", cudaGetErrorString(cudaGetLastError()));
  k<<<1, 32>>>(x);
  std::printf("good: %s\\n", cudaGetErrorString(cudaGetLastError()));
  std::printf("sync: %s\\n", cudaGetErrorString(cudaDeviceSynchronize()));
  return 0;
}
"""

DYNAMIC = """\
#include <cstdio>
__global__ void child(int* y) { y[threadIdx.x] = threadIdx.x; }
__global__ void parent(int* y) { child<<<1, 32>>>(y); }
int main() {
  int* y;
  cudaMalloc(&y, 32 * sizeof(int));
  parent<<<1, 1>>>(y);
  int h[32];
  cudaMemcpy(h, y, sizeof h, cudaMemcpyDeviceToHost);
  std::printf("y[31] %d: %s\\n", h[31], cudaGetErrorString(cudaGetLastError()));
  return 0;
}
"""


def test_a_kernel_edit_runs_the_new_cubin_in_the_same_executable(cache, tmp_path):
    """Editing a kernel's body prints the new text through the CUBIN path: the host code is not compiled,
    the executable is the same file (inode, mtime), and the build before it still runs its own kernel,
    at the same time as the new one."""
    p = tmp_path / "hello.cu"
    p.write_text(HELLO)
    first = run_program(p, ["1"], echo=False)
    exe = cache / first.build.manifest.executable
    before = os.stat(exe)
    p.write_text(HELLO.replace("hello from", "hi from"))
    second = run_program(p, ["2"], echo=False)
    assert first.ok and second.ok and second.build.engine == "nvrtc-program"
    assert "hi from thread 0 tag 2" in second.stdout and "hello" not in second.stdout
    units = {u["name"]: u["cached"] for u in second.build.manifest.units}
    assert units == {"hello.device.cu": False, "hello.host.cpp": True, "hello.slots.cpp": True}
    assert second.build.manifest.executable == first.build.manifest.executable
    after = os.stat(second.build.artifact)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    both = [subprocess.Popen([str(b.artifact), "3"], stdout=subprocess.PIPE, text=True) for b in (first.build, second.build)]
    old, new = (proc.communicate(timeout=60)[0] for proc in both)
    assert "hello from thread 0 tag 3" in old and "hi from thread 0 tag 3" in new


@pytest.mark.parametrize("name, source", [("features.cu", FEATURES), ("bad_launch.cu", BAD_LAUNCH)])
def test_kernels_from_the_cubin_behave_as_with_nvcc(cache, tmp_path, name, source):
    """A __constant__ set from main, a template kernel on two types, a __device__ variable read back, device
    printf, and a launch error for cudaGetLastError: the same output and status with NVRTC's CUBIN as with nvcc."""
    p = tmp_path / name
    p.write_text(source)
    ours, theirs = run_program(p, echo=False), run_program(p, engine="nvcc", echo=False)
    assert (ours.build.engine, theirs.build.engine) == ("nvrtc-program", "nvcc")
    assert ours.returncode == theirs.returncode == 0, ours.stderr
    assert sorted(ours.stdout.splitlines()) == sorted(theirs.stdout.splitlines()) and ours.stderr == theirs.stderr
    if name == "features.cu":
        assert ours.stdout.splitlines()[-1] == "fill<float> 3 fill<int> 6 launches 2"
        assert sorted(ours.stdout.splitlines()[:2]) == ["hello from thread 0 tag 7", "hello from thread 1 tag 7"]
    else:
        bad, *rest = ours.stdout.splitlines()  # the refusal's wording is the runtime's (CUDA 13: "invalid argument")
        assert bad.startswith("bad: ") and bad != "bad: no error" and rest == ["good: no error", "sync: no error"]


def test_dynamic_parallelism_runs_on_nvcc_saying_why(cache, tmp_path):
    """A kernel that launches a kernel is built by nvcc (-rdc), the build's notes saying why in one line."""
    p = tmp_path / "dynamic.cu"
    p.write_text(DYNAMIC)
    run = run_program(p, cuda_cflags=["-rdc=true"], echo=False)
    assert run.build.engine == "nvcc" and any("dynamic parallelism" in n for n in run.build.notes)
    assert run.ok and run.stdout == "y[31] 31: no error\n", run.stderr
