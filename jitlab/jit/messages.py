"""The error messages of kernel-only calls, each written once: jitlab's Python wrappers (:mod:`.launch`)
format them with ``str.format``, and ``jitlab export`` turns the same texts into the C++ wrappers of an
exported package (literal text between the C++ expressions of the fields).

A field is a plain ``{name}`` (no conversion, no format spec), so both sides fill it the same way.
The fields of an argument's messages: ``fn`` (the function), ``i`` (the argument's number, from 1),
``name`` and ``ctype`` (the parameter's name and C type).
"""

from __future__ import annotations

WHERE = "{fn}(): argument {i} `{name}` ({ctype})"

# ---- a tensor for a pointer parameter -------------------------------------------------------------
NOT_A_TENSOR = WHERE + " takes a tensor, got {got}"
DTYPE = WHERE + " takes a {want} tensor, got {got}; convert with `.to(torch.{want})`"
NOT_CUDA = WHERE + " takes a CUDA tensor, got one on {device}; move it with `.cuda()`"
NOT_CPU = WHERE + " takes a CPU tensor (this is a C++ snippet), got one on {device}; use `.cpu()`"
#: A sparse (or other non-strided) tensor: its values and indices are separate arrays, no one buffer to point at.
NOT_DENSE = (WHERE + " takes a dense tensor, got a {layout} one, whose values and indices live in separate "
             "arrays (no one buffer a pointer could walk); pass `.to_dense()`")
NOT_CONTIGUOUS = (WHERE + " takes a contiguous tensor, got a view with strides {strides}; pass `.contiguous()` "
                  "(and copy results back if it is an output)")
#: A conjugate or negative view (``kind`` conj or neg): its memory holds the values before the lazy op.
LAZY_VIEW = (WHERE + " got a tensor whose {kind} bit is set (`.is_{kind}()`): torch applies the {kind} lazily, so "
             "its memory holds the values before it, which is what the code would read; pass `.resolve_{kind}()`")
EMPTY = (WHERE + " got an empty tensor (shape {shape}), which has no memory: the {what} would get a NULL pointer "
         "and crash on the first element it touches; pass a tensor with the elements the call reads or writes, or "
         "skip the call when there is nothing to do")
OTHER_DEVICE = WHERE + " is on {device} but earlier tensors are on {first}: put every tensor on one GPU"
#: How to write into a tensor autograd is recording (the end of every such message).
GRAD_FIX = "pass `.detach()` (the same memory, outside autograd) or call inside `with torch.no_grad():`"
WRITTEN_LEAF = (WHERE + " is written (non-const pointer) but is a leaf tensor that requires grad, which no in-place "
                "write may change while autograd records; " + GRAD_FIX + ", or declare it `const` if it is an input")

# ---- a number for a scalar parameter ------------------------------------------------------------
INT_RANGE = WHERE + " must be in [{lo}, {hi}], got {value}; use a wider C type (int64_t) in the snippet"

# ---- a kernel's launch configuration ------------------------------------------------------------
NO_CONFIG = "{fn}() is a kernel: pass the launch configuration, e.g. `{fn}(..., grid=(n + 255) // 256, block=256)`"
BAD_DIMS = "{fn}(): {what}={value}: give a positive int or a tuple of 1 to 3 positive ints"
SHARED_MEM = ("{fn}(): shared_mem={value}: give the dynamic shared memory per block in bytes, an int from 0 "
              "(the default) up to the GPU's limit (past 48 KiB jitlab opts the kernel in)")

# ---- failures -----------------------------------------------------------------------------------
LAUNCH_FAILED = "{fn}<<<grid={grid}, block={block}, shared_mem={shared_mem}>>> failed: {error}: {text}{hint}"
HOST_EXCEPTION = "{fn}() raised a C++ exception: {what}"
HOST_CUDA_ERROR = "{fn}() left a CUDA error: {error}: {text}"
#: A failed launch's message ends with a hint for these errors (runtime and driver API names).
CONFIG_ERRORS = ("cudaErrorInvalidConfiguration", "cudaErrorInvalidValue", "CUDA_ERROR_INVALID_VALUE")
CONFIG_HINT = ("; check the launch configuration: a block has at most 1024 threads (x*y*z), grid.y and grid.z at "
               "most 65535, shared_mem at most the GPU's limit")
STICKY_ERRORS = ("cudaErrorIllegalAddress", "cudaErrorLaunchFailure", "cudaErrorAssert",
                 "CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_ASSERT")
STICKY_HINT = "; this error is sticky: the CUDA context is unusable until the process restarts"


def launch_hint(error: str) -> str:
    """The hint that ends :data:`LAUNCH_FAILED` for the CUDA error named ``error`` (``""`` for none)."""
    if error in CONFIG_ERRORS:
        return CONFIG_HINT
    return STICKY_HINT if error in STICKY_ERRORS else ""
