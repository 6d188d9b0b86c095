"""What compiled objects need and define, by name: ``nm`` and ``c++filt`` over object files.

``undefined_symbols`` lists what an object uses but does not define (a host unit's launches of kernel
templates, the device variables it names); ``instantiations`` turns the kernel templates among them
into explicit instantiations for the device unit; ``local_symbols`` lists what an object keeps
file-local, which :mod:`jitlab.jit.engines.linker` makes global for the host units; ``demangle`` gives the
C++ names all of these are matched by.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def undefined_symbols(obj: Path) -> list[str]:
    """The symbols an object uses but does not define (mangled)."""
    proc = subprocess.run(["nm", "-u", "-P", str(obj)], capture_output=True, text=True)
    return sorted({line.split()[0] for line in proc.stdout.splitlines() if line.strip()})


def demangle(symbols: list[str]) -> list[str]:
    """C++ names of mangled symbols (``c++filt``), in order; a name it cannot read is kept as is."""
    if not symbols:
        return []
    filt = shutil.which("c++filt")
    if not filt:
        return list(symbols)
    proc = subprocess.run([filt], input="\n".join(symbols) + "\n", capture_output=True, text=True)
    out = proc.stdout.splitlines()
    return out if len(out) == len(symbols) else list(symbols)


def instantiations(templates: frozenset[str], undefined: list[str]) -> str:
    """Explicit instantiations of the kernel templates that host objects name.

    ``void scale<float, 4>(float const*, float*, int)`` (what a host unit's launch of
    ``scale<scalar_t, 4>`` left undefined) becomes
    ``template __global__ void scale<float, 4>(float const*, float*, int);``.
    """
    lines = []
    for name in sorted(set(demangle(sorted(set(undefined))))):
        head, _, rest = name.partition("<")
        qual = head.removeprefix("void ").strip()
        if not name.startswith("void ") or qual not in templates or "(anonymous namespace)" in name:
            continue
        depth, end = 1, None
        for i, ch in enumerate(rest):
            depth += {"<": 1, ">": -1}.get(ch, 0)
            if depth == 0:
                end = i
                break
        if end is None or not rest[end + 1:].startswith("("):
            continue
        lines.append(f"template __global__ void {qual}<{rest[:end]}>{rest[end + 1:]};")
    return "\n".join(lines)


def local_symbols(obj: Path) -> set[str]:
    """The symbols an object defines file-local (text, bss, data, read-only data)."""
    proc = subprocess.run(["nm", "-P", "--defined-only", str(obj)], capture_output=True, text=True)
    out = set()
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[1] in ("t", "b", "d", "r"):
            out.add(parts[0])
    return out
