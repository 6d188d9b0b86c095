"""The `jitlab` command (`python -m jitlab`): build, clean, demo, exit codes and what it prints."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from jitlab.jit import toolchain

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"


@pytest.fixture
def jl(tmp_path, monkeypatch, jitlab_cli):
    """jl("build", ...) → what `jitlab build ...` exits with and prints, run from the project's root
    with its own cache folder (in this process: see conftest's jitlab_cli)."""
    jitlab_cli.cache = tmp_path / "cli_cache"
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(jitlab_cli.cache))
    return jitlab_cli


def jitlab_process(*args: str, cache: Path) -> subprocess.CompletedProcess:
    """`python -m jitlab ...` as a process of its own."""
    env = {**os.environ, "JITLAB_CACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "jitlab", *map(str, args)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_python_m_jitlab_is_the_command(tmp_path, write):
    """`python -m jitlab` exits with main's code: 0 for a build, 1 for a compile error (file:line on
    stderr), 2 for bad usage."""
    good = jitlab_process("build", KERNELS / "add2_cpu.cpp", cache=tmp_path / "c")
    assert good.returncode == 0 and "add2_cpu" in good.stdout, good.stderr
    bad = write("broken.cpp", "void f(float* y) { y[0] = not_declared_here; }\n")
    r = jitlab_process("build", bad, cache=tmp_path / "c")
    assert r.returncode == 1 and "broken.cpp:1:" in r.stderr, r.stdout + r.stderr
    r = jitlab_process("frobnicate", cache=tmp_path / "c")
    assert r.returncode == 2 and "usage: jitlab" in r.stderr


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
def test_build_device_chooses_the_emulator_or_a_gpu(jl):
    """Without a GPU, `jitlab build X.cu` (--device auto) builds a kernel-only snippet for the CPU emulator,
    --device cpu too; --device cuda is a GPU build, which without one names --compile-only."""
    for args in ([], ["--device", "cpu"]):
        r = jl("build", *args, "kernels/saxpy.cu")
        assert r.returncode == 0 and "kernel-style (cpu emulator)" in r.stdout, r.stdout + r.stderr
    r = jl("build", "--device", "cuda", "kernels/saxpy.cu")
    assert r.returncode == 1 and "no CUDA GPU found" in r.stderr and "--compile-only" in r.stderr, r.stderr
    r = jl("build", "--device", "gpu", "kernels/saxpy.cu")
    assert r.returncode == 2 and "invalid choice: 'gpu'" in r.stderr


def build_dirs(cache: Path) -> list[Path]:
    return [p for p in cache.iterdir() if p.is_dir()] if cache.exists() else []


@pytest.mark.skipif(toolchain.nvcc_path() is None, reason="needs nvcc")
def test_build_compile_only_prints_resources(jl):
    """build --compile-only --arch sm_75,sm_90 prints registers per kernel and arch."""
    r = jl("build", "--compile-only", "--arch", "sm_75,sm_90", "kernels/saxpy.cu")
    assert r.returncode == 0, r.stderr
    assert "saxpy [sm_75]:" in r.stdout and "saxpy [sm_90]:" in r.stdout
    assert "registers" in r.stdout and "kernel-style" in r.stdout


def test_build_cpp_then_cache_hit(jl):
    """Building a C++ snippet twice: the second run is a cache hit."""
    first = jl("build", "kernels/add2_cpu.cpp")
    assert first.returncode == 0, first.stderr
    assert "built in" in first.stdout and "cache hit" not in first.stdout
    second = jl("build", "kernels/add2_cpu.cpp")
    assert second.returncode == 0, second.stderr
    assert "cache hit" in second.stdout
    assert len(build_dirs(jl.cache)) == 1


def test_build_error_exits_1_with_file_and_line(jl, write):
    """A C++ compile error exits 1 and prints the file:line of the error on stderr."""
    p = write("broken.cpp", """
        void f(float* y, int n) {
            y[0] = not_declared_here;
        }
    """)
    r = jl("build", p)
    assert r.returncode == 1
    assert "broken.cpp:2:" in r.stderr and "not_declared_here" in r.stderr
    assert "broken.cpp:2:" not in r.stdout


def test_missing_path_exits_1(jl):
    """A path that does not exist exits 1 with the path named on stderr."""
    r = jl("build", "kernels/no_such_kernel.cu")
    assert r.returncode == 1 and "no_such_kernel.cu" in r.stderr


def test_clean_removes_build_folders(jl):
    """clean deletes every build folder and says how many."""
    assert jl("build", "kernels/add2_cpu.cpp").returncode == 0
    assert jl("build", "kernels/add2_cpu.cpp", "-D", "UNUSED=1").returncode == 0
    assert len(build_dirs(jl.cache)) == 2
    r = jl("clean")
    assert r.returncode == 0, r.stderr
    assert "removed 2 build folders" in r.stdout
    assert build_dirs(jl.cache) == []


@pytest.mark.parametrize("args", [["frobnicate"], ["build", "--no-such-option", "kernels/saxpy.cu"], []])
def test_bad_usage_exits_2(jl, args):
    """An unknown subcommand, an unknown option or no subcommand exits 2 with argparse's usage."""
    r = jl(*args)
    assert r.returncode == 2
    assert "usage: jitlab" in r.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the GPU-less demo")
def test_demo_runs_cpp_kernel_without_gpu(jl, tmp_path):
    """demo on a folder with one C++ kernel and its reference: runs it on CPU and passes."""
    root = tmp_path / "demo_kernels"
    root.mkdir()
    shutil.copy(KERNELS / "add2_cpu.cpp", root)
    shutil.copy(KERNELS / "add2_cpu.ref.py", root)
    r = jl("demo", root)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no CUDA GPU found" in r.stdout
    assert "add2_cpu" in r.stdout and "1 passed, 0 failed" in r.stdout


def test_demo_reports_a_wrong_kernel(jl, tmp_path):
    """demo on a kernel that disagrees with its reference exits 1 and counts it failed."""
    root = tmp_path / "demo_kernels"
    root.mkdir()
    src = (KERNELS / "add2_cpu.cpp").read_text().replace("a[i] + b[i]", "a[i] - b[i]")
    assert "a[i] - b[i]" in src
    (root / "add2_cpu.cpp").write_text(src)
    shutil.copy(KERNELS / "add2_cpu.ref.py", root)
    r = jl("demo", root, "--max-size", "200")
    assert r.returncode == 1
    assert "FAIL" in r.stdout and "0 passed, 1 failed" in r.stdout


def test_version(jl):
    """`jitlab --version` prints the version."""
    r = jl("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"jitlab {__import__('jitlab').__version__}"


@pytest.mark.parametrize("command", ["run", "build", "check", "inspect"])
def test_a_missing_path_is_one_line_naming_it_once(jl, command):
    """A path that does not exist: exit 1, one line naming the path once, no traceback."""
    r = jl(command, "kernels/nope.cu")
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.count("kernels/nope.cu") == 1 and "no such file" in r.stderr, r.stderr


@pytest.mark.skipif(not toolchain.nvcc_path(), reason="needs nvcc")
def test_an_arch_nvcc_dropped_names_the_oldest_it_builds(jl):
    """--arch sm_70 with CUDA 13: says nvcc starts at sm_75 instead of nvcc's bare 'Unsupported gpu architecture'."""
    if "sm_70" in toolchain.nvcc_archs():
        pytest.skip("this nvcc still builds for sm_70")
    r = jl("build", "--compile-only", "--arch", "sm_70", "kernels/saxpy.cu")
    assert r.returncode == 1 and "builds for sm_75 and newer" in r.stderr and "fatal" not in r.stderr, r.stderr


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available() or not toolchain.nvcc_path(), reason="the no-GPU path; needs nvcc")
def test_check_without_a_gpu_runs_a_kernel_only_snippet_on_the_emulator(tmp_path):
    """`jitlab check X.cu` without a GPU: a kernel-only snippet is checked on the CPU emulator, said once."""
    r = jitlab_process("check", "kernels/saxpy.cu", cache=tmp_path / "cache")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "CPU emulator" in r.stdout, r.stdout
    assert (r.stdout + r.stderr).count("kernel-only .cu snippets run on the CPU emulator") == 1, r.stdout + r.stderr


@pytest.mark.skipif(torch.cuda.is_available() or not toolchain.nvcc_path(), reason="the no-GPU path; needs nvcc")
def test_check_for_cuda_without_a_gpu_says_needs_a_gpu_not_fail(jl):
    """`jitlab check X.cu --device cuda` without a GPU: one line, no GPU found, how to get one, and that it
    compiles with its registers."""
    r = jl("check", "kernels/saxpy.cu", "--device", "cuda")
    assert r.returncode == 1 and "FAIL" not in r.stdout + r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "no CUDA GPU found" in r.stderr and "T4 GPU" in r.stderr and "compiles for sm_75 (saxpy:" in r.stderr
    assert "`jitlab check kernels/saxpy.cu --device cpu`" in r.stderr


@pytest.mark.slow
def test_check_on_the_cpu_emulator_from_a_shell(jl):
    """`jitlab check X.cu --device cpu` checks a kernel-only snippet on the CPU emulator, with no GPU, and says so."""
    r = jl("check", "kernels/saxpy.cu", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout and "CPU emulator" in r.stdout, r.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="the no-GPU path")
@pytest.mark.parametrize("command, tool", [("sanitize", "compute-sanitizer"), ("profile", "Nsight Compute")])
def test_gpu_tools_without_a_gpu_say_where_they_run(jl, command, tool):
    """sanitize and profile without a GPU name the tool, where it runs, and what works here instead."""
    r = jl(command, "kernels/saxpy.cu")
    assert r.returncode == 1 and f"{tool}" in r.stderr and "torch sees none here" in r.stderr
    assert "jitlab inspect" in r.stderr and "compile_only=True" not in r.stderr


@pytest.mark.skipif(not toolchain.nvcc_path(), reason="needs nvcc")
def test_inspect_a_virtual_arch_says_what_to_use(jl):
    """--arch compute_90 explains that a virtual arch has no machine code and names sm_90 or --ptx."""
    r = jl("inspect", "kernels/saxpy.cu", "--arch", "compute_90")
    assert r.returncode == 1 and "virtual arch" in r.stderr and "use sm_90" in r.stderr and "--ptx" in r.stderr
    r = jl("inspect", "kernels/saxpy.cu", "--arch", "compute_90", "--ptx")
    assert r.returncode == 0 and "// PTX [compute_90]" in r.stdout and ".entry" in r.stdout


def test_inspect_a_cpp_snippet_says_it_runs_on_the_cpu(jl):
    """inspect on a .cpp says it shows CUDA kernels' resources and that C++ builds and runs on the CPU."""
    r = jl("inspect", "kernels/add2_cpu.cpp")
    assert r.returncode == 1 and "this snippet is C++" in r.stderr and "compile-only" not in r.stderr


def test_a_cpp_build_is_not_called_nvcc(jl):
    """`jitlab build X.cpp` and repr(module) say c++, not nvcc."""
    import jitlab

    m = jitlab.load(KERNELS / "add2_cpu.cpp")
    assert "(kernel, c++," in repr(m) and "nvcc" not in repr(m).splitlines()[0]


def test_a_compile_error_says_where_its_full_log_is(jl, tmp_path):
    """The command names the file holding the compiler's whole output (a terminal has no err.log), and it holds it."""
    bad = tmp_path / "bad.cpp"
    bad.write_text("void f(float* y) { y[0] = undefined_name; }\n")
    r = jl("build", str(bad))
    assert r.returncode == 1 and "undefined_name" in r.stderr and "this error's .log" not in r.stderr
    saved = jl.cache / "logs" / "bad.cpp.log"
    assert f"(the full compiler output: {saved})" in r.stderr and "undefined_name" in saved.read_text()
