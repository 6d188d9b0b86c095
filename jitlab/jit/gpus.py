"""How many GPUs torch sees here and the compute capability they share, remembered from one boot's first ask.

Every build asks whether there is a GPU (the CPU-or-GPU choice) and a cache hit needs the GPU's arch for its
key. torch's ``device_count`` asks NVML (~16 ms on an H200 box, a quarter of a new process's cache hit) and the
capability asks NVML again. Both answers hold until the machine changes: they are remembered in the cache
(:func:`answers.remembered`, the ``.versions`` file) with the boot, NVIDIA's driver, the GPU device files,
``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER`` and torch's build, and asked again when any of these differs.
Without NVIDIA's driver (no ``/proc/driver/nvidia``) nothing is remembered: torch answers at once there.
"""

from __future__ import annotations

import os
from pathlib import Path

from jitlab.jit import answers, nvml

#: What the answers depend on, read on every ask (each a read of a small kernel file).
BOOT = Path("/proc/sys/kernel/random/boot_id")
DRIVER = Path("/proc/driver/nvidia/version")
DEVICES = Path("/dev")


def seen() -> dict:
    """``{"count": torch.cuda.device_count(), "capability": [major, minor] or None}``: the capability all the
    machine's GPUs share (:func:`nvml.shared_capability`), ``None`` where they differ or NVML cannot say."""
    return answers.remembered("gpus", _probe, _check)


def _probe() -> dict:
    import torch

    return {"count": torch.cuda.device_count(), "capability": nvml.shared_capability()}


def _check(_answer) -> list | None:
    import torch

    try:
        machine = [BOOT.read_text().strip(), DRIVER.read_text(),
                   sorted(n for n in os.listdir(DEVICES) if n.startswith("nvidia"))]
    except OSError:  # not Linux, or no NVIDIA driver: torch's answer is quick, nothing to remember
        return None
    steer = [os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")]
    return [*machine, *steer, torch.__version__, torch.version.cuda]
