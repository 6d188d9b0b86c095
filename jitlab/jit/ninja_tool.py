"""ninja, which torch's ``load_inline`` runs by name: found on ``PATH`` or inside the ``ninja`` wheel.

Colab has no ninja until jitlab's install brings the wheel, and a virtual environment's ``bin`` is
not always on a Jupyter kernel's ``PATH``; only ``load_inline`` builds need it (NVRTC and the split
torch-style builds drive their compilers themselves).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from jitlab.errors import ToolchainError


def ninja_path() -> str | None:
    """ninja: on ``PATH``, else the binary inside the ``ninja`` wheel (a virtual environment whose
    ``bin`` is not on ``PATH``, a Jupyter kernel started without it); ``None`` if neither has one."""
    found = shutil.which("ninja")
    if found:
        return found
    try:
        import ninja  # lazy: only asked when PATH has no ninja
    except ImportError:
        return None
    exe = Path(getattr(ninja, "BIN_DIR", "")) / "ninja"
    return str(exe) if exe.is_file() and os.access(exe, os.X_OK) else None


def ensure_ninja() -> str:
    """ninja's path; when only the wheel has one, its folder is put first on ``PATH`` (torch's
    ``load_inline`` runs ``ninja`` by name, in this process and in its children).

    Raises:
        ToolchainError: No ninja anywhere, naming ``pip install ninja``.
    """
    found = ninja_path()
    if found is None:
        raise ToolchainError("ninja not found (on PATH or as the `ninja` package): `pip install ninja` "
                             "(torch's load_inline builds with it)")
    if shutil.which("ninja") is None:
        os.environ["PATH"] = os.pathsep.join([str(Path(found).parent), *filter(None, [os.environ.get("PATH")])])
    return found
