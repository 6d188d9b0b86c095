"""The shipped kernels' host-side tables agree with their device code (CPU: nvcc's PTX, no GPU)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jitlab.jit import toolchain
from jitlab.judge import refs
from jitlab.tools import inspect

KERNELS = Path(__file__).resolve().parent.parent / "kernels"


@pytest.mark.slow
@pytest.mark.skipif(toolchain.nvcc_path() is None, reason="needs nvcc")
@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_86", "sm_90", "sm_120"])
def test_hgemm_version3_tile_is_the_one_its_launch_sizes(arch):
    """hgemm.cu picks version 3's k depth and stages per arch with #if; hgemm.ref.py's v3_tile picks them
    again for the launch's shared_mem. Both must agree, or the kernel reads past what was given."""
    ptx = inspect.ptx(KERNELS / "hgemm.cu", arch=arch)
    found = re.search(r"\.b8 hgemm3_tile\[8\] = \{([^}]*)\}", ptx)  # two ints as bytes, trailing zeros left out
    assert found, "hgemm3_tile is missing from the PTX"
    data = bytes(int(w) for w in found.group(1).split(",")).ljust(8, b"\0")
    tile = (int.from_bytes(data[:4], "little"), int.from_bytes(data[4:], "little"))
    ref = refs.load(KERNELS / "hgemm.ref.py")
    assert tile == ref.v3_tile_for((int(arch[3:-1]), int(arch[-1]))), (arch, tile)
    if arch in inspect.ARCH_LIMITS:  # and it fits the arch's shared memory per block
        assert ref.v3_smem_bytes(*tile) <= inspect.arch_limits(arch)["smem_per_block"]
