"""Python code jitlab generates (a kernel's launcher, a function's straight-line wrapper), compiled once a process.

A build's wrappers are generated from its functions' signatures; an edit of a kernel's body keeps the signature,
so the same text comes back at every reload, and compiling it again (~0.75 ms a wrapper) is most of what a
kernel-only edit spends in Python besides NVRTC. The code object is immutable: each ``exec`` of it in a fresh
namespace still makes new functions bound to that build.
"""

from __future__ import annotations

import functools
from types import CodeType


@functools.lru_cache(maxsize=512)
def compiled(source: str, filename: str) -> CodeType:
    """``compile(source, filename, "exec")``, once per distinct text; this module's ``from __future__`` imports
    are not inherited, so annotations in the text are evaluated (a function's signature shows ``torch.Tensor``)."""
    return compile(source, filename, "exec", dont_inherit=True)
