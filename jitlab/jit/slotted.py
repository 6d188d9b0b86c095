"""Load a torch-style NVRTC build: its module imported once, its slots filled from each new CUBIN.

A build of :mod:`jitlab.jit.engines.nvrtc_torch` is a CUBIN beside a module (``.so``) that a kernel edit
leaves unchanged. Loading imports the module (once per process: its name is the module entry's), then
hands the CUBIN for this GPU to the module's ``jitlab_slots_load``, which loads it with
``cudaLibraryLoadData`` and points every slot at its kernel (``cudaLibraryGetKernel``) or variable
(``cudaLibraryGetGlobal``), all or none. After an edit the same module's slots point at the new kernels,
so a function object taken from the module before runs the new code. A library loaded before stays
loaded (a kernel launched from it may still run); its CUBIN's bytes are kept alive with it. An operator
snippet's library is registered (:func:`jitlab.jit.oplib.activate`) rather than imported, and filled the
same way, while no call through ``torch.ops`` runs.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
import threading
from pathlib import Path

from jitlab.errors import JitlabError

_lock = threading.Lock()
_images: list = []              # every CUBIN handed to the runtime, kept for the process's life
_filled: dict[str, str] = {}    # module path → SHA-256 of the CUBIN its slots hold


def fill(library: Path, cubin: bytes, lowered: dict[str, str]) -> bool:
    """Point the module's slots at the kernels and variables of ``cubin`` (a no-op if they already are).

    Args:
        library: The module's ``.so`` (already imported, or loadable).
        cubin: The CUBIN for this GPU.
        lowered: Each slot's NVRTC name expression → its symbol in the CUBIN.

    Returns:
        ``True`` when the slots were filled now.

    Raises:
        JitlabError: The CUBIN could not be loaded or lacks a slot's symbol (with the runtime's reason).
    """
    digest = hashlib.sha256(cubin).hexdigest()
    with _lock:
        if _filled.get(str(library)) == digest:
            return False
        lib = ctypes.CDLL(str(library))  # the imported module's own handle: its slot table
        names = expressions(lib)
        missing = [e for e in names if e not in lowered]
        if missing:
            raise JitlabError(f"jitlab: {library.name} has a slot for {missing[0]}, which the CUBIN's names lack; "
                              f"delete {library.parent} and load again")
        array = (ctypes.c_char_p * max(len(names), 1))(*[lowered[e].encode() for e in names])
        image = ctypes.create_string_buffer(cubin, len(cubin))
        message = ctypes.create_string_buffer(1024)
        lib.jitlab_slots_load.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p), ctypes.c_char_p, ctypes.c_size_t]
        rc = lib.jitlab_slots_load(image, array, message, len(message))
        if rc != 0:
            raise JitlabError(f"jitlab: the kernels of {library.name} could not be loaded: "
                              f"{message.value.decode(errors='replace')} (CUDA error {rc})")
        _images.append(image)
        _filled[str(library)] = digest
        return True


def expressions(lib: ctypes.CDLL) -> list[str]:
    """The module's slots, in its table's order, by NVRTC name expression."""
    lib.jitlab_slots_expression.restype = ctypes.c_char_p
    lib.jitlab_slots_expression.argtypes = [ctypes.c_int]
    return [lib.jitlab_slots_expression(i).decode() for i in range(lib.jitlab_slots_count())]


def runnable_cubin(built: list[str], device: str) -> str | None:
    """Which of the archs a build holds CUBINs for runs on a GPU of arch ``device`` (``"sm_90"``), as the
    driver chooses from a fatbinary: the device's own arch first; then an arch-specific one of the same
    compute capability (``sm_90a`` runs only there, e.g. under ``TORCH_CUDA_ARCH_LIST=9.0a``); then the
    newest plain or family (``f``) CUBIN of the same major version and no newer minor (``sm_80`` runs on
    ``sm_86``). None when no CUBIN runs there (a PTX arch is no CUBIN)."""
    dev = re.fullmatch(r"sm_(\d+)[af]?", device)
    if dev is None:
        return None
    cc = int(dev.group(1))

    def rank(arch: str) -> tuple[int, int] | None:
        m = re.fullmatch(r"sm_(\d+)([af]?)", arch)
        if m is None:
            return None
        n, suffix = int(m.group(1)), m.group(2)
        if arch == device:
            return (3, n)
        if n == cc and suffix == "a":
            return (2, n)
        if suffix != "a" and n // 10 == cc // 10 and n <= cc:
            return (1, n)
        return None

    fits = [(r, a) for a in built if (r := rank(a)) is not None]
    return max(fits)[1] if fits else None
