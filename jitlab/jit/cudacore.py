"""NVIDIA's ``cuda.core`` across its two APIs: 1.x (``cuda.core``) and the pre-1.0 one Colab ships.

Colab's GPU image (2026-08) preinstalls cuda-core 0.3.2, and its numba-cuda requires
``cuda-core<1.0``: upgrading it would break numba's CUDA target there, so jitlab takes either. The
pre-1.0 releases keep the same classes under ``cuda.core.experimental`` and have no public
``ObjectCode.symbol_mapping``; this module is the one place that knows.
"""

from __future__ import annotations

import importlib
import threading

_lock = threading.Lock()
_found = None


def module():
    """The module holding ``Program``, ``ProgramOptions``, ``ObjectCode`` and ``Device``.

    Found once per process under a lock: cuda-core imports its CUDA-major submodule lazily, and two
    threads making their first NVRTC build at once could see it half made ("cannot import name
    'Program' from 'cuda.core.cu13'").

    Raises:
        ImportError: cuda-core (or the cuda-bindings it needs) is not installed.
    """
    global _found
    if _found is None:
        with _lock:
            if _found is None:
                core = importlib.import_module("cuda.core")
                if hasattr(core, "Program"):
                    _found = core
                else:
                    _found = importlib.import_module("cuda.core.experimental")  # cuda-core < 1.0
                _found.Program, _found.ProgramOptions  # noqa: B018  (the lazy parts, made under the lock)
    return _found


def symbol_mapping(obj) -> dict:
    """An ``ObjectCode``'s name expression → lowered (mangled) symbol, as NVRTC reported them."""
    found = getattr(obj, "symbol_mapping", None)
    if found is None:
        found = getattr(obj, "_sym_map", None) or {}  # cuda-core < 1.0 keeps it under this name
    return dict(found)
