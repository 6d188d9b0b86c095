"""torch's headers as jitlab's units see them: light scalar types for device units, CUDA headers on a CPU torch.

**Light scalar types.** A device unit that instantiates a kernel template for ``c10::Half`` or
``c10::BFloat16`` (``AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, ...)``) includes
``c10/util/Half.h``/``BFloat16.h``; their one host-only member, ``operator<<``, makes them include
``<ostream>``, which nvcc parses three times (cudafe++, cicc, the host compiler): 1.34 s of CPU for
the unit instead of 0.82 s (sm_90, 2 cores). :func:`light_scalar_dir` is a folder, searched before
torch's, holding copies of ``torch/headeronly/util/Half.h`` and ``BFloat16.h`` in which ``<ostream>``
is ``<iosfwd>`` and ``operator<<`` is declared, not defined. The types, and every function a kernel
can call, are torch's own text; a device unit cannot stream a ``c10::Half`` (its host code is blanked).

**CUDA headers on a CPU torch.** A CPU build of torch ships ``c10/cuda`` and ``ATen/cuda`` headers
that cannot compile (``c10/cuda/impl/cuda_cmake_macros.h`` is generated only by CUDA builds, and
``ATen/cuda/CUDAContext.h`` needs cuSPARSE's headers). :func:`check_cuda_includes` preprocesses each
such header a snippet includes, before anything compiles (~0.1 s, only on a CPU torch), and says in
one line, at the user's line, why it cannot compile here.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import threading
from pathlib import Path

from jitlab import config
from jitlab.errors import CompileError, Diagnostic
from jitlab.jit import cache, diagnostics, toolchain

LIGHT_TYPES = ("Half", "BFloat16")
_CUDA_TORCH_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*[<"]((?:c10|ATen)/cuda/[^>"]+)[>"]', re.MULTILINE)
_MISSING = re.compile(r"fatal error: ([^:\s]+): No such file or directory")


def _torch_include() -> Path:
    import torch  # lazy: torch costs 2 s

    return Path(torch.__file__).parent / "include"


def light_text(name: str, text: str) -> str | None:
    """torch's ``Half.h``/``BFloat16.h`` without ``<ostream>``, or ``None`` where its text is not as expected."""
    body = r"\s*\{\s*out << \(float\)value;\s*return out;\s*\}"
    head = rf"(inline std::ostream& operator<<\(std::ostream& out, const {name}& value\))"
    light, n = re.subn(head + body, r"\1;", text)
    if n != 1 or text.count("#include <ostream>") != 1:
        return None
    light = light.replace("#include <ostream>", "#include <iosfwd>")
    return None if "<ostream>" in light else light


def light_scalar_dir() -> Path | None:
    """A folder of light copies of torch's ``Half.h``/``BFloat16.h``, to pass with ``-I`` before torch's.

    Made once per torch install (named by a hash of the originals) beside the precompiled headers,
    each file written atomically; checked on every use (two small files), so a removed one is made
    again. ``None`` when neither header can be made light (torch's text changed): the unit then
    includes torch's own, slower and the same.
    """
    util = _torch_include() / "torch" / "headeronly" / "util"
    lights = {}
    for name in LIGHT_TYPES:
        original = util / f"{name}.h"
        light = light_text(name, original.read_text()) if original.is_file() else None
        if light is not None:
            lights[name] = light
    if not lights:
        return None
    key = cache.build_key({"format": config.FORMAT_VERSION, "light": lights})
    root = config.pch_dir() / f"light-scalars-{key}"
    folder = root / "torch" / "headeronly" / "util"
    for name, light in lights.items():
        target = folder / f"{name}.h"
        if not target.is_file() or target.read_text() != light:
            folder.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{name}.h.{os.getpid()}.{threading.get_ident()}")  # units compile in threads
            tmp.write_text(light)
            os.replace(tmp, target)
    return root


def cuda_torch_includes(text: str) -> list[tuple[int, int, str]]:
    """``(line, column, header)`` of each ``c10/cuda/…`` or ``ATen/cuda/…`` header ``text`` includes."""
    return [(text.count("\n", 0, m.start()) + 1, m.start(1) - text.rfind("\n", 0, m.start(1)) - 1, m.group(1))
            for m in _CUDA_TORCH_INCLUDE.finditer(text)]


@functools.lru_cache(maxsize=None)
def missing_for(header: str, flags: tuple[str, ...]) -> str:
    """The file that ``#include <header>`` cannot find with these host flags, or ``""`` if it preprocesses."""
    cmd = [toolchain.require_tool(toolchain.cxx_path(), "c++"), "-x", "c++", "-E", "-o", os.devnull, "-", *flags]
    proc = subprocess.run(cmd, input=f"#include <{header}>\n", capture_output=True, text=True)
    m = _MISSING.search(proc.stderr)
    return m.group(1) if proc.returncode != 0 and m else ""


def check_cuda_includes(sources: dict[str, str], flags: tuple[str, ...]) -> None:
    """On a CPU build of torch, refuse a snippet that includes torch's CUDA headers, before compiling.

    Args:
        sources: The user's files by path.
        flags: Host compiler flags with torch's and CUDA's include folders.

    Raises:
        CompileError: At the user's ``#include`` line, naming the header and what to do.
    """
    import torch  # lazy: torch costs 2 s

    if torch.version.cuda is not None:
        return
    for path, text in sources.items():
        for line, column, header in cuda_torch_includes(text):
            missing = missing_for(header, flags)
            if not missing:
                continue
            message = (f"includes <{header}>, but the installed torch ({torch.__version__}) is a CPU build without "
                       f"its CUDA headers ({missing} is missing): compile it with a CUDA build of torch, or on a "
                       f"GPU machine")
            d = Diagnostic(path, line, column + 1, "error", message)
            raise CompileError(summary=f"jitlab: {diagnostics.short_path(path)} cannot compile with this torch",
                               diagnostics=[d], log=f"{d.location()}: error: {message}",
                               excerpt=diagnostics.render(d, sources))
