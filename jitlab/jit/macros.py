"""Kernels a macro defines, which jitlab cannot see.

jitlab reads a snippet's kernels from its text as written (tree-sitter, before the preprocessor), so
``#define MAKE(name) __global__ void name(float* y) {...}`` then ``MAKE(k1)`` defines a kernel the
build never finds. Expanding macros would take the preprocessor with the build's flags and headers on
every parse; instead the messages that say a kernel is missing name the macro and the fix.
"""

from __future__ import annotations

import re

from jitlab.jit.parse import SourceFile

# `#define NAME...` with its continuation lines.
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)((?:\\\n|[^\n])*)", re.MULTILINE)


def kernel_macros(files: list[SourceFile]) -> list[str]:
    """``NAME (file:line)`` for each ``#define`` whose body declares a ``__global__`` function, in the
    files or in the headers they include (``#include "..."``) from their own folders."""
    texts = [(f.path, f.text) for f in files]
    headers = dict.fromkeys(f.path.parent / inc for f in files for inc in f.local_includes)
    texts += [(h, h.read_text(errors="replace")) for h in headers if h.is_file()]
    return [f"{m.group(1)} ({path.name}:{text.count(chr(10), 0, m.start()) + 1})"
            for path, text in texts for m in _DEFINE.finditer(text) if re.search(r"\b__global__\b", m.group(2))]


def hint(files: list[SourceFile]) -> str:
    """A sentence for a "kernel not found" message when a macro defines kernels, else ``""``."""
    found = kernel_macros(files)
    if not found:
        return ""
    return (f"; the macro {', '.join(found)} defines kernels, which jitlab does not see (it reads the snippet "
            f"before the preprocessor): write each kernel out, or let the macro define a __device__ function "
            f"and call it from a written kernel, e.g. `__global__ void k1(float* y) {{ k1_body(y); }}`")
