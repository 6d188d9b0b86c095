"""Missing or mismatched build tools are found before a build starts, and the error names the fix.

Each test points PATH at a folder of symlinks to the real tools it wants present, so the tools it
leaves out are really missing; the toolchain's cached look-ups are cleared around every test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils import cpp_extension

import jitlab
from jitlab.jit import gpus, nvml, toolchain, torch_install
from jitlab.jit.flags import default_host_flags

# The cached functions themselves (a test may replace the module attribute with a lambda).
CACHED = [toolchain._nvcc_path, toolchain._nvcc_version, toolchain._cxx_path, toolchain._cxx_version,
          toolchain._runtime_ldflags, toolchain._cuda_home]
REAL = {name: shutil.which(name) for name in ("c++", "g++", "nvcc", "ninja")}


def _clear():
    for f in CACHED:
        f.cache_clear()


@pytest.fixture
def fresh_toolchain(monkeypatch):
    """No CXX override, no CUDA_HOME, and the toolchain look-ups forgotten before and after."""
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setattr(cpp_extension, "CUDA_HOME", None)
    monkeypatch.setattr(jitlab.jit.toolchain, "DEFAULT_CUDA_HOME", str(Path(__file__).parent / "no-cuda-here"))
    _clear()
    yield
    _clear()


@pytest.fixture
def path_with(tmp_path, monkeypatch, fresh_toolchain):
    """path_with("c++", "nvcc") → PATH is a folder holding only symlinks to those real tools."""

    def _path_with(*tools: str) -> Path:
        d = tmp_path / "bin"
        d.mkdir(exist_ok=True)
        for t in tools:
            if REAL[t] is None:
                pytest.skip(f"needs {t}")
            (d / t).symlink_to(REAL[t])
        monkeypatch.setenv("PATH", str(d))
        _clear()
        return d

    return _path_with


@pytest.fixture
def no_ninja_wheel(monkeypatch):
    """The ``ninja`` package cannot be imported (as on a machine that never installed it)."""
    monkeypatch.setitem(sys.modules, "ninja", None)


def test_missing_ninja_names_pip_install(path_with, no_ninja_wheel):
    """Compilers present, ninja absent: the error says `pip install ninja`."""
    path_with("c++", "g++", "nvcc")
    with pytest.raises(jitlab.ToolchainError, match="pip install ninja"):
        toolchain.require_tools(cuda=False)


def test_missing_ninja_is_caught_before_building(path_with, no_ninja_wheel, cache, write):
    """jitlab.build without ninja fails at the check: no build folder is made."""
    path_with("c++", "g++", "nvcc")
    p = write("s.cpp", "void f(float* y, int n) { for (int i = 0; i < n; ++i) y[i] = 1; }\n")
    with pytest.raises(jitlab.ToolchainError, match="ninja"):
        jitlab.build(p)
    assert not cache.exists() or not any(c.is_dir() for c in cache.iterdir())


def test_missing_cxx_names_how_to_install(path_with, monkeypatch):
    """$CXX naming nothing and no c++ on PATH: the error says how to install g++."""
    path_with("ninja", "nvcc")
    monkeypatch.setenv("CXX", "no-such-compiler-jitlab")
    _clear()
    with pytest.raises(jitlab.ToolchainError, match=r"(?s)no C\+\+ compiler.*apt-get install g\+\+"):
        toolchain.require_tools(cuda=False)


def test_missing_nvcc_for_compile_only(path_with):
    """A CUDA compile-only build with no nvcc anywhere names nvcc and CUDA_HOME."""
    path_with("c++", "g++", "ninja")
    assert toolchain.nvcc_path() is None
    with pytest.raises(jitlab.ToolchainError, match=r"(?s)nvcc not found.*CUDA_HOME"):
        toolchain.require_tools(cuda=True, compile_only=True)


@pytest.mark.skipif(torch.version.cuda is not None, reason="needs a CPU build of torch")
def test_cpu_torch_cannot_build_cuda_to_run(path_with):
    """A full CUDA build on a CPU torch says so and names --compile-only."""
    path_with("c++", "g++", "ninja", "nvcc")
    with pytest.raises(jitlab.ToolchainError, match=r"(?s)CPU build.*--compile-only"):
        toolchain.require_tools(cuda=True, compile_only=False)


def test_cuda_major_mismatch_names_both_versions(path_with, monkeypatch):
    """nvcc 13 with a torch built for CUDA 12 is refused, naming both versions."""
    path_with("c++", "g++", "ninja", "nvcc")
    monkeypatch.setattr(torch_install, "cuda_version", lambda: "12.4")
    monkeypatch.setattr(toolchain, "nvcc_version", lambda: "13.0.88")
    with pytest.raises(jitlab.ToolchainError, match=r"(?s)13\.0\.88.*12\.4"):
        toolchain.require_tools(cuda=True, compile_only=False)


def test_matching_cuda_major_passes(path_with, monkeypatch):
    """The same major version (different minors) passes the check."""
    path_with("c++", "g++", "ninja", "nvcc")
    monkeypatch.setattr(torch_install, "cuda_version", lambda: "13.1")
    monkeypatch.setattr(toolchain, "nvcc_version", lambda: "13.0.88")
    toolchain.require_tools(cuda=True, compile_only=False)


def test_compile_only_needs_no_ninja(path_with):
    """A compile-only CUDA build needs nvcc and a compiler, not ninja."""
    path_with("c++", "g++", "nvcc")
    toolchain.require_tools(cuda=True, compile_only=True)


STATIC_ONLY_GXX = """#!/bin/sh
# A g++ installed without a shared libstdc++ (only libstdc++.a), like a hand-built one under /opt:
# it cannot find libstdc++.so and links the static library into every extension.
for a in "$@"; do
  if [ "$a" = "-print-file-name=libstdc++.so" ]; then echo libstdc++.so; exit 0; fi
done
exec {real} -static-libstdc++ "$@"
"""
OSTREAM = """#include <sstream>
#include <string>
int digits(long long v) { std::ostringstream s; s << v; return (int)s.str().size(); }
"""


def _needed(so: Path) -> list[str]:
    import subprocess

    out = subprocess.run(["readelf", "-d", str(so)], capture_output=True, text=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


@pytest.mark.slow
def test_compiler_without_shared_libstdcxx_links_the_loaded_one(tmp_path, cache, monkeypatch, fresh_toolchain):
    """With such a g++, extensions link the libstdc++.so.6 this process has loaded, so they share
    its C++ runtime: an integer written to an ostream inside one works (with a static copy it
    segfaults on some machines), and the key says so."""
    import os
    import subprocess
    import sys

    gxx = tmp_path / "bin" / "g++"
    gxx.parent.mkdir()
    gxx.write_text(STATIC_ONLY_GXX.format(real=shutil.which("g++")))
    gxx.chmod(0o755)
    snippet = tmp_path / "fmt.cpp"
    snippet.write_text(OSTREAM)
    plain_key = jitlab.build(snippet).name
    monkeypatch.setenv("CXX", str(gxx))
    _clear()
    flags = toolchain.runtime_ldflags()
    assert len(flags) == 1 and Path(flags[0]).name.startswith("libstdc++.so") and Path(flags[0]).is_file()
    b = jitlab.build(snippet)
    assert b.name != plain_key and "libstdc++.so.6" in _needed(b.artifact)
    code = f"import jitlab; m = jitlab.load({str(snippet)!r}); print(m.digits(1234567))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "7"


@pytest.mark.slow
def test_the_loaded_runtime_is_the_same_before_and_after_torch_is_imported(tmp_path, monkeypatch):
    """With such a g++, a process that keys a build before importing torch (``jitlab check`` does) loads the C++
    runtime as torch's import would: the link input and the whole fingerprint are the same after ``import torch``
    (a worker keys its builds after it, and found none of the batch's builds when they differed)."""
    gxx = tmp_path / "bin" / "g++"
    gxx.parent.mkdir()
    gxx.write_text(STATIC_ONLY_GXX.format(real=shutil.which("g++")))
    gxx.chmod(0o755)
    monkeypatch.setenv("CXX", str(gxx))
    monkeypatch.setenv("JITLAB_CACHE_DIR", str(tmp_path / "cache"))
    code = ("import sys, warnings; warnings.simplefilter('error'); from jitlab.jit import toolchain as t; "
            "before = (t.runtime_ldflags(), t.fingerprint(False)); assert 'torch' not in sys.modules; import torch; "
            "t._runtime_ldflags.cache_clear(); print(before[0] == t.runtime_ldflags() != [], before[1] == t.fingerprint(False))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.split() == ["True", "True"], out.stderr[-2000:]


def test_usual_compiler_needs_no_extra_link_input():
    """The usual g++ (with its shared libstdc++) needs no extra link input: runtime_ldflags() is empty."""
    assert toolchain.runtime_ldflags() == []


def test_ninja_wheel_off_path_is_found_and_put_on_path(path_with):
    """ninja only inside the installed wheel (its venv's bin not on PATH): found, and its folder put on PATH."""
    ninja = pytest.importorskip("ninja")
    d = path_with("c++", "g++")
    assert shutil.which("ninja") is None
    toolchain.require_tools(cuda=False)
    assert shutil.which("ninja") == str(Path(ninja.BIN_DIR) / "ninja")
    assert os.environ["PATH"].split(os.pathsep)[-1] == str(d)


def test_split_build_check_needs_no_ninja(path_with, no_ninja_wheel):
    """A torch-style split build drives the compilers itself: its check passes with no ninja anywhere."""
    path_with("c++", "g++", "nvcc")
    toolchain.require_tools(cuda=False, ninja=False)
    with pytest.raises(jitlab.ToolchainError, match="pip install ninja"):
        toolchain.require_tools(cuda=False, ninja=True)


def test_a_gpu_is_looked_for_once_per_visible_devices_without_initialising_cuda(cache, monkeypatch):
    """Whether there is a GPU is asked of torch.cuda.device_count (NVML), never of is_available (which
    initialises the CUDA driver: up to 0.18 s a call on a GPU machine), once per CUDA_VISIBLE_DEVICES."""
    counts = {"0": 1, "": 0}
    asked = []

    def device_count():
        asked.append(os.environ.get("CUDA_VISIBLE_DEVICES"))
        return counts[os.environ["CUDA_VISIBLE_DEVICES"]]

    def is_available():
        raise AssertionError("torch.cuda.is_available() initialises CUDA")

    monkeypatch.setattr(torch.cuda, "device_count", device_count)
    monkeypatch.setattr(torch.cuda, "is_available", is_available)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    toolchain._gpus_seen.cache_clear()
    try:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
        assert toolchain.gpu_available() and toolchain.gpu_available()
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
        assert not toolchain.gpu_available() and not toolchain.gpu_available()
        assert asked == ["0", ""]
    finally:
        toolchain._gpus_seen.cache_clear()


def test_the_arch_comes_from_nvml_when_every_gpu_agrees(cache, monkeypatch):
    """A cache hit's arch is asked of NVML (milliseconds), not of the CUDA driver (``cuInit``: 0.1-0.2 s on an
    H200, most of a new process's hit); where the machine's GPUs differ, or NVML cannot say, of the driver,
    which knows which GPU is device 0."""
    import ctypes

    from conftest import FakeNvml

    fakes = {"same": FakeNvml(caps=[(8, 9), (8, 9)]), "mixed": FakeNvml(caps=[(7, 5), (9, 0)])}
    which = {"now": "same"}
    real_cdll = ctypes.CDLL
    monkeypatch.setattr(ctypes, "CDLL", lambda name, *a, **k: fakes[which["now"]] if name == nvml.LIBRARY
                        else real_cdll(name, *a, **k))
    monkeypatch.setattr(toolchain, "gpu_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    monkeypatch.setattr(toolchain, "_driver_capability", lambda: (9, 0))
    monkeypatch.setattr(gpus, "DRIVER", cache / "no-driver")  # nothing remembered: NVML asked each time
    forget = lambda: (nvml.shared_capability.cache_clear(), toolchain._gpus_seen.cache_clear())
    try:
        forget()
        assert toolchain.current_arch() == "sm_89" and fakes["same"].shut
        forget()
        which["now"] = "mixed"
        assert nvml.shared_capability() is None and toolchain.current_arch() == "sm_90"  # the driver's device 0
    finally:
        forget()


def test_the_gpus_are_remembered_while_the_machine_is_unchanged(cache, tmp_path, monkeypatch):
    """How many GPUs torch sees and the capability they share are asked once (NVML: ~16 ms of a new process's
    cache hit on an H200 box) and read from the cache's answers file after; a new boot, a new GPU device file
    or another CUDA_VISIBLE_DEVICES asks again, and without NVIDIA's driver nothing is remembered."""
    cache.mkdir()
    boot, driver, dev = tmp_path / "boot_id", tmp_path / "version", tmp_path / "dev"
    boot.write_text("one\n")
    driver.write_text("NVRM version: 580.95\n")
    dev.mkdir()
    for name in ("nvidia0", "nvidiactl", "null"):
        (dev / name).touch()
    monkeypatch.setattr(gpus, "BOOT", boot)
    monkeypatch.setattr(gpus, "DRIVER", driver)
    monkeypatch.setattr(gpus, "DEVICES", dev)
    asked = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: asked.append(1) or 2)
    monkeypatch.setattr(nvml, "shared_capability", lambda: (9, 0))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    both = {"count": 2, "capability": [9, 0]}
    assert gpus.seen() == both and gpus.seen() == both and len(asked) == 1
    assert json.loads(json.loads((cache / ".versions").read_text())["gpus (remembered)"])["answer"] == both
    (dev / "null2").touch()
    assert gpus.seen() == both and len(asked) == 1  # not an NVIDIA device file
    (dev / "nvidia1").touch()
    assert gpus.seen() == both and gpus.seen() == both and len(asked) == 2
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert gpus.seen() == both and len(asked) == 3
    boot.write_text("two\n")
    assert gpus.seen() == both and len(asked) == 4
    driver.unlink()
    assert gpus.seen() == both and gpus.seen() == both and len(asked) == 6


@pytest.mark.gpu
def test_nvmls_compute_capability_is_the_gpus():
    """On a GPU machine NVML's answer is the one torch gets from CUDA for device 0."""
    caps = nvml.each_gpu(nvml.capability)
    assert caps and torch.cuda.get_device_capability() in caps
    assert nvml.shared_capability() == (caps[0] if len(set(caps)) == 1 else None)


def test_torchs_install_read_from_its_files_is_what_torch_says():
    """Version, CUDA version, C++ ABI, include and library folders, read from torch's files (no import: a
    fresh interpreter reading them has no torch loaded after), are torch's own answers: a build's flags and
    key are the same before and after ``import torch``."""
    assert torch_install.version() == torch.__version__
    assert torch_install.cuda_version() == torch.version.cuda
    assert torch_install.cxx11_abi() == bool(torch._C._GLIBCXX_USE_CXX11_ABI)
    assert torch_install.include_paths() == cpp_extension.include_paths("cpu")
    assert torch_install.init_file() == torch.__file__
    assert torch_install.lib_dir() == Path(cpp_extension.TORCH_LIB_PATH)
    code = ("import sys; from jitlab.jit import flags, toolchain, torch_install as t; "
            "print(t.version(), t.cuda_version(), t.cxx11_abi(), len(flags.default_host_flags(False).cxx), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == [torch.__version__, str(torch.version.cuda), str(bool(torch._C._GLIBCXX_USE_CXX11_ABI)),
                   str(len(default_host_flags(False).cxx)), "False"]
