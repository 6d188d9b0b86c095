"""Builds for Colab's T4 (sm_75) hold SASS for sm_75, never PTX alone, on both engines.

Colab's T4 driver (550, CUDA 12.4 class) is older than its toolkit (12.8): PTX the newer toolkit
writes does not load there, CUBIN for sm_75 does. These tests compile without a GPU and read the
binaries back with ``cuobjdump``, so what is checked is what the driver would be handed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from torch.utils import cpp_extension

import jitlab
from jitlab.jit import builder, toolchain
from jitlab.jit.flags import Options, compile_flags, object_flags

ROOT = Path(__file__).resolve().parent.parent
KERNELS = ROOT / "kernels"


@pytest.fixture(scope="module")
def cuobjdump() -> str:
    tool = toolchain.find_cuda_tool("cuobjdump")
    assert tool, "cuobjdump not found: `pip install nvidia-cuda-cuobjdump` (part of the test extra)"
    return tool


def _listing(cuobjdump: str, path: Path) -> tuple[str, str]:
    """cuobjdump's ELF list and PTX list of one binary (each empty when there is none)."""
    elf = subprocess.run([cuobjdump, "--list-elf", str(path)], capture_output=True, text=True, check=True).stdout
    ptx = subprocess.run([cuobjdump, "--list-ptx", str(path)], capture_output=True, text=True, check=True).stdout
    return elf, ptx


def test_nvrtc_build_is_a_cubin_with_sm75_sass(cache, cuobjdump):
    """NVRTC's build of a kernel-only snippet for sm_75 is one CUBIN holding sm_75 code and no PTX."""
    b = jitlab.build(KERNELS / "saxpy.cu", compile_only=True, arch=["sm_75"], engine="nvrtc")
    assert b.manifest.engine == "nvrtc"
    cubins = sorted(b.folder.glob("*.cubin"))
    assert [c.name for c in cubins] == ["saxpy.sm_75.cubin"]
    elf, ptx = _listing(cuobjdump, cubins[0])
    assert "sm_75" in elf and ptx.strip() == ""
    sass = subprocess.run([cuobjdump, "-sass", str(cubins[0])], capture_output=True, text=True, check=True).stdout
    assert "code for sm_75" in sass and "saxpy" in sass


@pytest.mark.slow
def test_nvcc_build_embeds_sm75_sass_and_no_ptx(cache, cuobjdump):
    """nvcc's build (a snippet with a host launcher, which NVRTC cannot take) embeds sm_75 SASS and no PTX."""
    b = jitlab.build(KERNELS / "add2.cu", compile_only=True, arch=["sm_75"])
    assert b.manifest.engine == "nvcc"
    elf, ptx = _listing(cuobjdump, b.folder / b.manifest.artifact)
    assert "sm_75" in elf, elf
    assert ptx.strip() == "", f"PTX embedded: {ptx}"


def test_every_nvcc_path_asks_for_sass_only():
    """load_inline's, the split build's and programs' nvcc flags for sm_75 name SASS (code=sm_75), no PTX,
    and torch adds no arch flags of its own beside them."""
    opts = Options(arch=["sm_75"])
    plan, archs, _ = builder.prepare([KERNELS / "add2.cu"], opts)
    _, cuda = compile_flags(plan, archs, opts)
    assert "-gencode=arch=compute_75,code=sm_75" in cuda
    assert not [f for f in cuda if "code=compute" in f]
    assert cpp_extension._get_cuda_arch_flags(cuda) == []  # torch keeps out once an arch flag is there
    split, archs, _ = builder.prepare([KERNELS / "square_matrix.cu"], opts)
    nvcc = object_flags(split, archs, opts).nvcc
    assert "-gencode=arch=compute_75,code=sm_75" in nvcc and not [f for f in nvcc if "code=compute" in f]
    assert toolchain.gencode_flags(["sm_75"]) == ["-gencode=arch=compute_75,code=sm_75"]
