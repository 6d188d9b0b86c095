"""The shipped kernels' host-side tables agree with their device code (CPU: nvcc's PTX, no GPU)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from jitlab.jit import toolchain
from jitlab.tools import inspect

KERNELS = Path(__file__).resolve().parent.parent / "kernels"


def _ref(name: str):
    spec = importlib.util.spec_from_file_location(f"test_kernels_{name}", KERNELS / f"{name}.ref.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(toolchain.nvcc_path() is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_120"])
def test_hgemm_version3_tile_is_the_one_its_launch_sizes(arch):
    """hgemm.cu picks version 3's k depth and stages per arch with #if; hgemm.ref.py's v3_tile picks them
    again for the launch's shared_mem. Both must agree, or the kernel reads past what was given."""
    ptx = inspect.ptx(KERNELS / "hgemm.cu", arch=arch)
    found = re.search(r"hgemm3_tile\[\d+\] = \{([^}]*)\}", ptx)
    assert found, "hgemm3_tile is missing from the PTX"
    words = [int(w) for w in found.group(1).split(",")]
    tile = (words[0], words[1]) if len(words) == 2 else (words[0], words[4])  # .u32 pair, or 8 bytes of .b8
    ref = _ref("hgemm")
    cap = (int(arch[3:-1]), int(arch[-1]))
    assert tile == ref.v3_tile_for(cap), (arch, tile)
    assert ref.v3_smem_bytes(*tile) <= {"sm_75": 64, "sm_86": 99, "sm_120": 99}.get(arch, 163) * 1024
