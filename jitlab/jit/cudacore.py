"""NVIDIA's ``cuda.core`` across its two APIs: 1.x (``cuda.core``) and the pre-1.0 one Colab ships.

Colab's GPU image (2026-08) preinstalls cuda-core 0.3.2, and its numba-cuda requires
``cuda-core<1.0``: upgrading it would break numba's CUDA target there, so jitlab takes either. The
pre-1.0 releases keep the same classes under ``cuda.core.experimental`` and have no public
``ObjectCode.symbol_mapping``; this module is the one place that knows.
"""

from __future__ import annotations

import importlib


def module():
    """The module holding ``Program``, ``ProgramOptions``, ``ObjectCode`` and ``Device``.

    Raises:
        ImportError: cuda-core (or the cuda-bindings it needs) is not installed.
    """
    core = importlib.import_module("cuda.core")
    if hasattr(core, "Program"):
        return core
    return importlib.import_module("cuda.core.experimental")  # cuda-core < 1.0


def symbol_mapping(obj) -> dict:
    """An ``ObjectCode``'s name expression → lowered (mangled) symbol, as NVRTC reported them."""
    found = getattr(obj, "symbol_mapping", None)
    if found is None:
        found = getattr(obj, "_sym_map", None) or {}  # cuda-core < 1.0 keeps it under this name
    return dict(found)
