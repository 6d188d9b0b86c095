"""What NVML says of this machine's GPUs, without the CUDA driver: no ``cuInit``, no context.

A new process's cache hit needs the GPU's compute capability for its key, and asking the CUDA driver
(``cuInit``) takes 0.1-0.2 s on an H100/H200 box: most of the hit. NVML (``libnvidia-ml``, the driver's
management library, which torch's ``device_count`` asks too) answers in milliseconds. It numbers every GPU
of the machine in its own order, not the ones ``CUDA_VISIBLE_DEVICES`` shows in CUDA's, so a per-GPU answer
is taken from it only where all the machine's GPUs agree.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Callable, TypeVar

#: The library NVML is (the driver installs it).
LIBRARY = "libnvidia-ml.so.1"
T = TypeVar("T")


def each_gpu(ask: Callable[[ctypes.CDLL, ctypes.c_void_p], T | None]) -> list[T] | None:
    """``ask(nvml, handle)`` of every GPU NVML sees, in its order; ``None`` where NVML cannot say (no library,
    no GPU, a call that fails, or ``ask`` answering ``None``)."""
    try:
        nvml = ctypes.CDLL(LIBRARY)
        if nvml.nvmlInit_v2() != 0:
            return None
    except (OSError, AttributeError):  # no libnvidia-ml, or one without these functions
        return None
    try:
        count, answers = ctypes.c_uint(), []
        if nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) != 0 or not count.value:
            return None
        for i in range(count.value):
            handle = ctypes.c_void_p()
            if nvml.nvmlDeviceGetHandleByIndex_v2(ctypes.c_uint(i), ctypes.byref(handle)) != 0:
                return None
            if (answer := ask(nvml, handle)) is None:
                return None
            answers.append(answer)
        return answers
    except AttributeError:
        return None
    finally:
        nvml.nvmlShutdown()


def memory_gib(nvml: ctypes.CDLL, handle: ctypes.c_void_p) -> float | None:
    """A GPU's memory in GiB (``nvmlDeviceGetMemoryInfo``)."""
    class Memory(ctypes.Structure):  # nvmlMemory_t
        _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]

    memory = Memory()
    return None if nvml.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) else memory.total / 2**30


def capability(nvml: ctypes.CDLL, handle: ctypes.c_void_p) -> tuple[int, int] | None:
    """A GPU's compute capability (``nvmlDeviceGetCudaComputeCapability``)."""
    major, minor = ctypes.c_int(), ctypes.c_int()
    if nvml.nvmlDeviceGetCudaComputeCapability(handle, ctypes.byref(major), ctypes.byref(minor)):
        return None
    return major.value, minor.value


@functools.cache
def shared_capability() -> tuple[int, int] | None:
    """The compute capability all the machine's GPUs have, so the one any visible GPU has; ``None`` where
    NVML cannot say or the GPUs differ (then only the CUDA driver knows which is device 0)."""
    found = each_gpu(capability)
    return found[0] if found and len(set(found)) == 1 else None
